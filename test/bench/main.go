/*
Copyright 2026 The tpu-slice-operator Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Command bench measures what the Pod webhook costs on the Pod creation path, against a real
// kube-apiserver (envtest). Each scenario creates the same Pods several times in one run: with no
// webhook registered (the baseline), through three independent operator instances, and as floors
// that bound what any design can reach here (one claim write per Pod without a webhook, group
// commit by a single in-process writer, the webhook called without claiming, and the webhook run
// through one instance). It reports latency, wall time, their ratios to the baseline, claim
// attempts, conflicts and API writes per Pod. S4 runs the manager binary as its own process and
// reads its memory with many Pods around.
//
// Run it with `make bench`; each scenario ends with one machine-readable BENCH line.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/localenv"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

var (
	profileDir     string
	showSlowest    int
	instanceCount  int
	withReconciler bool
	forwarding     bool
)

type scenario struct {
	name        string
	description string
	clients     int
	slices      int32
	hosts       int32
	topology    string
	// floor is the same-run floor that bounds the scenario's targets.
	floor floorKind
}

type floorKind int

const (
	// writeFloor: one claim write per Pod, no webhook (sequential scenarios).
	writeFloor floorKind = iota
	// groupCommitFloor: one in-process allocator shared by every client, no webhook.
	groupCommitFloor
	// noFloor: the targets are absolute.
	noFloor
)

type result struct {
	pods     int
	wall     time.Duration
	p50, p99 time.Duration
	denials  int
	allocStats
	duplicates     int
	baselineWall   time.Duration
	baselineP50    time.Duration
	baselineP99    time.Duration
	baselineErrors int
}

func main() {
	only := flag.String("scenarios", "S1,S2,S3,S4", "Comma-separated scenarios to run.")
	s4TPU := flag.Int("s4-tpu-pods", 2000, "TPU worker Pods in S4.")
	s4Other := flag.Int("s4-other-pods", 10000, "Non-TPU Pods in S4.")
	flag.IntVar(&instanceCount, "instances", 3, "Webhook instances serving S1-S3.")
	flag.BoolVar(&withReconciler, "reconciler", true, "Run the reconciler in the first instance, as in production.")
	flag.BoolVar(&forwarding, "forwarding", true, "Forward claims to the replica that owns their worker group, as in production; the concurrent scenarios also run without it for comparison.")
	flag.IntVar(&showSlowest, "show-slowest", 0, "Print the N slowest creates of each scenario's webhook run, with their position in the run.")
	flag.StringVar(&profileDir, "profile-dir", "", "Write CPU profiles of the bench process and the API server during each scenario's webhook run here.")
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	if err := run(strings.Split(*only, ","), *s4TPU, *s4Other); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(only []string, s4TPU, s4Other int) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, err := framework.Start()
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	// Benchmarks send far more requests than the default client allows.
	env.Config.QPS, env.Config.Burst = 5000, 10000
	c, err := client.New(env.Config, client.Options{Scheme: operator.Scheme})
	if err != nil {
		return err
	}
	// One instance serves the RayCluster webhook whenever no scenario's instances are registered.
	validator, err := env.StartInstance(ctx, framework.InstanceOptions{Operator: operator.Options{DisableControllers: true}})
	if err != nil {
		return err
	}
	defer func() { _ = validator.Stop() }()
	b := &bench{env: env, c: c, validator: validator}
	env.ServeWebhooksFrom(validator)

	scenarios := []scenario{
		{name: "S1", description: "sequential like KubeRay: 1 client, 4 slices x 64 hosts (v6e 16x16)", clients: 1, slices: 4, hosts: 64, topology: "16x16", floor: writeFloor},
		{name: "S2", description: "concurrent: 16 clients, 1024 Pods across 16 slices, 3 webhook instances", clients: 16, slices: 16, hosts: 64, topology: "16x16", floor: groupCommitFloor},
		{name: "S3", description: "hot slice: 64 concurrent creates into one 64-host slice, 3 webhook instances", clients: 64, slices: 1, hosts: 64, topology: "16x16", floor: noFloor},
	}
	fmt.Printf("%-3s %6s %10s %10s %8s %9s %9s %7s %9s %9s %8s %9s %6s %5s\n",
		"", "pods", "wall_ms", "base_ms", "ratio", "p50_ms", "p99_ms", "p99_r", "att/pod", "conf/pod", "wr/pod", "lost/pod", "deny", "dup")
	var lines []string
	for _, s := range scenarios {
		if !slices.Contains(only, s.name) {
			continue
		}
		r, err := b.scenario(ctx, s)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		n := float64(r.pods)
		fmt.Printf("%-3s %6d %10.0f %10.0f %8.2f %9.1f %9.1f %7.2f %9.2f %9.2f %8.2f %9.2f %6d %5d   %s\n",
			s.name, r.pods, ms(r.wall), ms(r.baselineWall), ratio(r.wall, r.baselineWall), ms(r.p50), ms(r.p99),
			ratio(r.p99, r.baselineP99), float64(r.attempts)/n, float64(r.conflicts)/n, float64(r.writes)/n,
			float64(r.lostWrites)/n, r.denials, r.duplicates, s.description)
		lines = append(lines, fmt.Sprintf("BENCH %s pods=%d ratio=%.2f p99_ratio=%.2f p99_ms=%.1f attempts_per_pod=%.2f writes_per_pod=%.2f denials=%d duplicates=%d",
			s.name, r.pods, ratio(r.wall, r.baselineWall), ratio(r.p99, r.baselineP99), ms(r.p99),
			float64(r.attempts)/n, float64(r.writes)/n, r.denials, r.duplicates))
	}
	if slices.Contains(only, "S4") {
		line, err := b.memory(ctx, s4TPU, s4Other)
		if err != nil {
			return fmt.Errorf("S4: %w", err)
		}
		lines = append(lines, line)
	}
	fmt.Println()
	for _, l := range lines {
		fmt.Println(l)
	}
	return nil
}

type bench struct {
	env       *framework.Env
	c         client.Client
	validator *framework.Instance
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return math.Inf(1)
	}
	return float64(a) / float64(b)
}

func (b *bench) namespace(ctx context.Context, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	return ns.Name, b.c.Create(ctx, ns)
}

// scenario measures the baseline and then the same creations through three webhook instances.
func (b *bench) scenario(ctx context.Context, s scenario) (result, error) {
	var r result
	n := int(s.slices * s.hosts)

	// Baseline: the same Pods, no webhook registered.
	saved, err := b.unregisterPodWebhook(ctx)
	if err != nil {
		return r, err
	}
	rc, err := b.rayCluster(ctx, "base", s)
	if err != nil {
		return r, err
	}
	lat, wall, errs := b.create(ctx, rc, n, s.clients)
	r.baselineWall, r.baselineErrors = wall, errs
	r.baselineP50, r.baselineP99 = percentile(lat, 50), percentile(lat, 99)
	var floors []floor
	if s.floor == writeFloor {
		// The floor of a design with one claim write per Pod: the same creates, each followed by a
		// direct claim write (no webhook, no conflicts) into slices as large as the real ones; and
		// the same with a status that always holds one claim, the cheapest status write there is.
		for _, grow := range []bool{true, false} {
			f, err := b.claimWriteFloor(ctx, rc, s, grow)
			if err != nil {
				return r, err
			}
			floors = append(floors, f)
		}
	}
	// Three fresh instances, each with its own client and cache, started after the baseline so that
	// the reconciler does not act on its Pods.
	instances, err := b.startInstances(ctx, forwarding)
	if err != nil {
		return r, err
	}
	defer stopAll(instances)
	if s.floor == groupCommitFloor {
		// The floor of group commit with a single writer: the same creates by the same clients, each
		// followed by a claim through one in-process allocator, no webhook.
		f, err := b.singleWriterFloor(ctx, instances[0].Allocator, s)
		if err != nil {
			return r, err
		}
		floors = append(floors, f)
	}
	if err := b.registerPodWebhook(ctx, saved); err != nil {
		return r, err
	}
	b.env.ServeWebhooksFrom(instances...)

	// The admission floor: the same creates of worker Pods without TPUs, which the webhook is
	// called for and answers without an API call. No webhook design can cost less per Pod.
	ns, err := b.namespace(ctx, "floor-"+strings.ToLower(s.name))
	if err != nil {
		return r, err
	}
	cpu := testutil.MakeRayCluster("bench", ns).CPUGroup("cpu", int32(n)).ManagedByMultiKueue().Obj()
	if err := b.c.Create(ctx, cpu); err != nil {
		return r, err
	}
	lat, wall, _ = b.createGroup(ctx, cpu, "cpu", n, s.clients)
	floors = append(floors, floor{name: "admission floor (webhook called, no claim)", wall: wall, p99: percentile(lat, 99)})

	if rc, err = b.rayCluster(ctx, "", s); err != nil {
		return r, err
	}
	stopProfile := b.profile(ctx, s.name)
	before := stats(instances)
	lat, r.wall, r.denials = b.create(ctx, rc, n, s.clients)
	if showSlowest > 0 {
		fmt.Fprintf(os.Stderr, "%s: slowest creates (position: ms): %s\n", s.name, slowest(lat, showSlowest))
	}
	stopProfile()
	r.pods = n - r.denials
	r.p50, r.p99 = percentile(lat, 50), percentile(lat, 99)
	r.allocStats = stats(instances).minus(before)
	if forwarding && len(instances) > 1 {
		fmt.Fprintf(os.Stderr, "%s: claims forwarded to their group's owner %.2f per Pod, claimed locally after a failed forward %.2f per Pod; a forwarded claim took %.1f ms, %.1f ms of them at the owner\n",
			s.name, r.perPod(r.forwarded, r.pods), r.perPod(r.fallbacks, r.pods),
			float64(r.forwardNanos)/float64(max(r.forwarded, 1))/1e6, float64(r.serveNanos)/float64(max(r.forwarded, 1))/1e6)
	}
	if err := b.check(ctx, rc.Namespace, r.pods, &r); err != nil {
		return r, err
	}

	if len(instances) > 1 && s.clients > 1 && !forwarding {
		// The same creates through one instance: what group commit gives when every claim of a
		// slice arrives at the same process, and so what the other instances' races cost.
		b.env.ServeWebhooksFrom(instances[0])
		if rc, err = b.rayCluster(ctx, "one", s); err != nil {
			return r, err
		}
		before := stats(instances[:1])
		lat, wall, denials := b.create(ctx, rc, n, s.clients)
		one := stats(instances[:1]).minus(before)
		var check result
		if err := b.check(ctx, rc.Namespace, n-denials, &check); err != nil {
			return r, err
		}
		fmt.Fprintf(os.Stderr, "%s: through one instance: ratio %.2f, p99 ratio %.2f, writes per Pod %.2f (lost to a conflict %.2f), attempts per Pod %.2f, denials %d, duplicates %d\n",
			s.name, ratio(wall, r.baselineWall), ratio(percentile(lat, 99), r.baselineP99),
			one.perPod(one.writes, n-denials), one.perPod(one.lostWrites, n-denials), one.perPod(one.attempts, n-denials), denials, check.duplicates)
		r.duplicates += check.duplicates
	}
	if len(instances) > 1 && s.clients > 1 && forwarding {
		// The same creates through as many instances that do not forward: each commits the claims
		// it receives, and they race for the same slices.
		stopAll(instances) // not to compete for the CPU
		plain, err := b.startInstances(ctx, false)
		if err != nil {
			return r, err
		}
		defer stopAll(plain)
		b.env.ServeWebhooksFrom(plain...)
		if rc, err = b.rayCluster(ctx, "plain", s); err != nil {
			return r, err
		}
		before := stats(plain)
		lat, wall, denials := b.create(ctx, rc, n, s.clients)
		st := stats(plain).minus(before)
		var check result
		if err := b.check(ctx, rc.Namespace, n-denials, &check); err != nil {
			return r, err
		}
		fmt.Fprintf(os.Stderr, "%s: through %d instances without forwarding: ratio %.2f, p99 ratio %.2f, writes per Pod %.2f (lost to a conflict %.2f), attempts per Pod %.2f, denials %d, duplicates %d\n",
			s.name, len(plain), ratio(wall, r.baselineWall), ratio(percentile(lat, 99), r.baselineP99),
			st.perPod(st.writes, n-denials), st.perPod(st.lostWrites, n-denials), st.perPod(st.attempts, n-denials), denials, check.duplicates)
		r.duplicates += check.duplicates
	}
	b.env.ServeWebhooksFrom(b.validator)

	for _, f := range floors {
		fmt.Fprintf(os.Stderr, "%s: %s: ratio %.2f, p99 ratio %.2f%s\n", s.name, f.name,
			ratio(f.wall, r.baselineWall), ratio(f.p99, r.baselineP99), f.extra)
	}
	var sum time.Duration
	for _, l := range lat {
		sum += l
	}
	fmt.Fprintf(os.Stderr, "%s: mean create %.1f ms, mean claim inside the webhook %.1f ms\n", s.name,
		ms(sum/time.Duration(max(len(lat), 1))), float64(r.claimNanos)/float64(max(r.pods, 1))/1e6)
	return r, nil
}

// rayCluster creates the scenario's RayCluster in a fresh namespace and lets the instances' caches
// see it, as they would in a running cluster.
func (b *bench) rayCluster(ctx context.Context, prefix string, s scenario) (*rayv1.RayCluster, error) {
	name := strings.ToLower(s.name)
	if prefix != "" {
		name = prefix + "-" + name
	}
	ns, err := b.namespace(ctx, name)
	if err != nil {
		return nil, err
	}
	rc := testutil.MakeRayCluster("bench", ns).TPUGroup("tpu", "tpu-v6e-slice", s.topology, 4, s.hosts, s.slices).ManagedByMultiKueue().Obj()
	if err := b.c.Create(ctx, rc); err != nil {
		return nil, err
	}
	time.Sleep(200 * time.Millisecond)
	return rc, nil
}

// check counts duplicate IDs among the live TPU worker Pods of namespace into r and requires as
// many of them as were admitted.
func (b *bench) check(ctx context.Context, namespace string, admitted int, r *result) error {
	report, err := framework.CheckAdmitted(ctx, b.c, namespace)
	if err != nil {
		r.duplicates = strings.Count(err.Error(), "I1:")
		fmt.Fprintln(os.Stderr, err)
	}
	if report.LivePods != admitted {
		return fmt.Errorf("%d Pods admitted but %d live TPU worker Pods found", admitted, report.LivePods)
	}
	return nil
}

// allocStats is a snapshot of allocator counters.
type allocStats struct {
	attempts, conflicts, writes, lostWrites, claimNanos int64
	// forwarded and fallbacks count claim forwarding (instances that forward); forwardNanos and
	// serveNanos are the time forwarded claims took at the caller and at the owner.
	forwarded, fallbacks, forwardNanos, serveNanos int64
}

func stats(instances []*framework.Instance) allocStats {
	var s allocStats
	for _, inst := range instances {
		st := &inst.Allocator.Stats
		s.attempts += st.Attempts.Load()
		s.conflicts += st.Conflicts.Load()
		s.writes += st.Writes.Load()
		s.lostWrites += st.LostWrites.Load()
		s.claimNanos += st.ClaimNanos.Load()
		if inst.Forwarding != nil {
			s.forwarded += inst.Forwarding.Forwarded.Load()
			s.fallbacks += inst.Forwarding.Fallbacks.Load()
			s.forwardNanos += inst.Forwarding.ForwardNanos.Load()
			s.serveNanos += inst.Forwarding.ServeNanos.Load()
		}
	}
	return s
}

// startInstances starts the scenario's webhook instances (the first runs the reconciler, if asked),
// forwarding claims or not.
func (b *bench) startInstances(ctx context.Context, forward bool) ([]*framework.Instance, error) {
	instances, err := b.env.StartInstances(ctx, instanceCount, func(i int) framework.InstanceOptions {
		return framework.InstanceOptions{
			Operator: operator.Options{DisableControllers: i > 0 || !withReconciler},
			Forward:  forward,
		}
	})
	if err != nil {
		return nil, err
	}
	return instances, nil
}

func stopAll(instances []*framework.Instance) {
	for _, inst := range instances {
		_ = inst.Stop()
	}
}

func (s allocStats) minus(o allocStats) allocStats {
	return allocStats{
		attempts: s.attempts - o.attempts, conflicts: s.conflicts - o.conflicts, writes: s.writes - o.writes,
		lostWrites: s.lostWrites - o.lostWrites, claimNanos: s.claimNanos - o.claimNanos,
		forwarded: s.forwarded - o.forwarded, fallbacks: s.fallbacks - o.fallbacks,
		forwardNanos: s.forwardNanos - o.forwardNanos, serveNanos: s.serveNanos - o.serveNanos,
	}
}

func (allocStats) perPod(v int64, pods int) float64 { return float64(v) / float64(max(pods, 1)) }

// floor is a same-run measurement that bounds what the webhook run can reach.
type floor struct {
	name      string
	wall, p99 time.Duration
	extra     string
}

// claimWriteFloor creates the scenario's Pods one at a time with no webhook and, after each, writes one
// claim to its slice's status with a resourceVersion-checked update, as a claim does. The first Pod
// of each slice also creates the slice, as the webhook does, and its latency includes that. With
// grow, the status accumulates the slice's claims as in the real run; without, it always holds one.
func (b *bench) claimWriteFloor(ctx context.Context, rc *rayv1.RayCluster, s scenario, grow bool) (floor, error) {
	f := floor{name: "floor of one claim write per Pod (no webhook)"}
	if !grow {
		f.name = "floor of one claim write per Pod with a one-claim status (no webhook)"
	}
	cluster := rc.Name + "-floor"
	if !grow {
		cluster += "-one"
	}
	var lat []time.Duration
	start := time.Now()
	for r := range s.slices {
		var slice *tpuv1alpha1.TPUSliceAssignment
		for id := range s.hosts {
			t := time.Now()
			if slice == nil {
				slice = claims.NewSlice(rc.Namespace, tpuv1alpha1.TPUSliceAssignmentSpec{
					RayClusterName: cluster, RayClusterUID: rc.UID, GroupName: "tpu", ReplicaIndex: r,
					Hosts: s.hosts, Topology: s.topology,
				})
				if err := b.c.Create(ctx, slice); err != nil {
					return f, err
				}
			}
			if err := b.c.Create(ctx, testutil.WorkerPodFor(rc, "tpu").Obj()); err != nil {
				return f, err
			}
			c := tpuv1alpha1.WorkerClaim{WorkerID: id, Token: allocator.NewToken(), ClaimedAt: metav1.Now()}
			if grow {
				slice.Status.Claims = append(slice.Status.Claims, c)
			} else {
				slice.Status.Claims = []tpuv1alpha1.WorkerClaim{c}
			}
			slice.Status.Claimed = int32(len(slice.Status.Claims)) //nolint:gosec // at most 64.
			if err := b.c.Status().Update(ctx, slice); err != nil {
				return f, err
			}
			lat = append(lat, time.Since(t))
		}
	}
	f.wall, f.p99 = time.Since(start), percentile(lat, 99)
	return f, nil
}

// singleWriterFloor creates the scenario's Pods with its clients and no webhook registered: each
// client claims a worker ID through alloc, one allocator shared by every client, applies it to the
// Pod as the webhook would and creates the Pod. That is group commit with a single writer, without
// the admission round trip and without other writers to conflict with.
func (b *bench) singleWriterFloor(ctx context.Context, alloc *allocator.Allocator, s scenario) (floor, error) {
	f := floor{name: "group-commit floor (one in-process allocator, no webhook)"}
	rc, err := b.rayCluster(ctx, "gc", s)
	if err != nil {
		return f, err
	}
	n := int(s.slices * s.hosts)
	req := allocator.Request{
		Namespace: rc.Namespace, ClusterName: rc.Name, ClusterUID: rc.UID, GroupName: "tpu",
		Hosts: s.hosts, Topology: s.topology, Accelerator: "tpu-v6e-slice",
	}
	before := alloc.Stats.Writes.Load()
	var next, failures atomic.Int64
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	for range s.clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				t := time.Now()
				if err := b.claimAndCreate(ctx, alloc, req, testutil.WorkerPodFor(rc, "tpu").Obj()); err != nil {
					failures.Add(1)
					continue
				}
				lat[i] = time.Since(t)
			}
		})
	}
	wg.Wait()
	f.wall = time.Since(start)
	if failed := failures.Load(); failed > 0 {
		return f, fmt.Errorf("group-commit floor: %d creates or claims failed", failed)
	}
	f.p99 = percentile(lat, 99)
	f.extra = fmt.Sprintf(", writes per Pod %.2f", float64(alloc.Stats.Writes.Load()-before)/float64(n))
	return f, nil
}

// claimAndCreate does in process what the webhook does in admission: it claims a worker ID for pod,
// applies the identity, and then creates the Pod.
func (b *bench) claimAndCreate(ctx context.Context, alloc *allocator.Allocator, req allocator.Request, pod *corev1.Pod) error {
	slice, err := topology.FromPod(pod.Annotations, &pod.Spec)
	if err != nil {
		return err
	}
	a, err := alloc.Claim(ctx, req)
	if err != nil {
		return err
	}
	tpuenv.Apply(pod, tpuenv.Identity{
		GroupName: req.GroupName, ReplicaIndex: a.Replica, WorkerID: a.WorkerID, Hosts: slice.Hosts,
		Subdomain: naming.HeadlessServiceName(req.ClusterName), SliceName: a.SliceName, ClaimToken: a.Token,
	}, slice.TPUContainers)
	return b.c.Create(ctx, pod)
}

// create makes n worker Pods of rc with the given number of concurrent clients, each one Pod at a
// time, and returns the latency of every successful create, the wall time and the failures.
func (b *bench) create(ctx context.Context, rc *rayv1.RayCluster, n, clients int) ([]time.Duration, time.Duration, int) {
	return b.createGroup(ctx, rc, rc.Spec.WorkerGroupSpecs[0].GroupName, n, clients)
}

// createGroup is create for the worker group named group.
func (b *bench) createGroup(ctx context.Context, rc *rayv1.RayCluster, group string, n, clients int) ([]time.Duration, time.Duration, int) {
	var next atomic.Int64
	var failures atomic.Int64
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				pod := testutil.WorkerPodFor(rc, group).Obj()
				t := time.Now()
				if err := b.c.Create(ctx, pod); err != nil {
					failures.Add(1)
					lat[i] = -1
					continue
				}
				lat[i] = time.Since(t)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	return slices.DeleteFunc(lat, func(d time.Duration) bool { return d < 0 }), wall, int(failures.Load())
}

// slowest lists the k longest latencies with their position in lat (the order the creates were
// started in, failures left out).
func slowest(lat []time.Duration, k int) string {
	idx := make([]int, len(lat))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(lat[b], lat[a]) })
	parts := make([]string, 0, k)
	for _, i := range idx[:min(k, len(idx))] {
		parts = append(parts, fmt.Sprintf("%d: %.1f", i, ms(lat[i])))
	}
	return strings.Join(parts, ", ")
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(float64(len(s))*float64(p)/100)) - 1
	return s[max(i, 0)]
}

// unregisterPodWebhook removes the Pod webhook so the baseline's creates skip it; it returns the
// configuration for registerPodWebhook.
func (b *bench) unregisterPodWebhook(ctx context.Context) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	var list admissionregistrationv1.MutatingWebhookConfigurationList
	if err := b.c.List(ctx, &list); err != nil {
		return nil, err
	}
	if len(list.Items) != 1 {
		return nil, fmt.Errorf("want one mutating webhook configuration, found %d", len(list.Items))
	}
	saved := list.Items[0].DeepCopy()
	if err := b.c.Delete(ctx, &list.Items[0]); err != nil {
		return nil, err
	}
	return saved, b.waitForWebhook(ctx, false)
}

func (b *bench) registerPodWebhook(ctx context.Context, saved *admissionregistrationv1.MutatingWebhookConfiguration) error {
	cfg := saved.DeepCopy()
	cfg.ResourceVersion, cfg.UID = "", ""
	if err := b.c.Create(ctx, cfg); err != nil {
		return err
	}
	return b.waitForWebhook(ctx, true)
}

// waitForWebhook waits until the API server has picked up the webhook configuration change: a dry
// run TPU worker Pod comes back mutated exactly when the webhook is registered.
func (b *bench) waitForWebhook(ctx context.Context, registered bool) error {
	ns, err := b.namespace(ctx, "probe")
	if err != nil {
		return err
	}
	rc := testutil.MakeRayCluster("probe", ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 1).ManagedByMultiKueue().Obj()
	if err := b.c.Create(ctx, rc); err != nil {
		return err
	}
	var probe []*framework.Instance
	if registered {
		inst, err := b.env.StartInstance(ctx, framework.InstanceOptions{Operator: operator.Options{DisableControllers: true}})
		if err != nil {
			return err
		}
		defer func() { _ = inst.Stop() }()
		probe = append(probe, inst)
		b.env.ServeWebhooksFrom(probe...)
		defer b.env.ServeWebhooksFrom(b.validator)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		pod := testutil.WorkerPodFor(rc, "tpu").Obj()
		err := b.c.Create(ctx, pod, client.DryRunAll)
		_, mutated := framework.WorkerEnv(pod, "TPU_WORKER_ID")
		if err == nil && mutated == registered {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the API server did not pick up the webhook change (registered=%t)", registered)
}

// memory runs the manager binary as its own process, fills the API server with non-TPU Pods and
// TPU worker Pods, and reads the manager's RSS and Go heap.
func (b *bench) memory(ctx context.Context, tpuPods, otherPods int) (string, error) {
	root := localenv.RootDir()
	bin := filepath.Join(root, "bin", "manager")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building the manager: %w", err)
	}
	kubeconfig, err := b.kubeconfig()
	if err != nil {
		return "", err
	}
	webhookPort, metricsPort := freePort(), freePort()
	wio := &b.env.Env.WebhookInstallOptions
	mgr := exec.CommandContext(ctx, bin, "--kubeconfig", kubeconfig,
		"--metrics-bind-address", "127.0.0.1:"+strconv.Itoa(metricsPort), "--metrics-secure=false",
		"--health-probe-bind-address", "127.0.0.1:0",
		"--webhook-port", strconv.Itoa(webhookPort), "--webhook-cert-path", wio.LocalServingCertDir)
	mgr.Stderr = io.Discard
	if err := mgr.Start(); err != nil {
		return "", err
	}
	defer func() { _ = mgr.Process.Kill(); _ = mgr.Wait() }()
	if err := waitHTTP(ctx, "http://127.0.0.1:"+strconv.Itoa(metricsPort)+"/metrics"); err != nil {
		return "", err
	}
	b.env.ServeWebhooksFrom(&framework.Instance{Addr: "127.0.0.1:" + strconv.Itoa(webhookPort)})

	time.Sleep(2 * time.Second)
	rssIdle, _ := rssMiB(mgr.Process.Pid)

	ns, err := b.namespace(ctx, "s4")
	if err != nil {
		return "", err
	}
	fmt.Printf("\nS4: creating %d non-TPU Pods and %d TPU worker Pods\n", otherPods, tpuPods)
	other := testutil.MakeRayCluster("cpu", ns).CPUGroup("cpu", 1).ManagedByMultiKueue().Obj()
	if err := b.c.Create(ctx, other); err != nil {
		return "", err
	}
	if err := b.fill(ctx, otherPods, func(int) *corev1.Pod {
		// Plain Pods of another workload, and CPU workers of a RayCluster.
		p := testutil.MakePod("", ns).GenerateName("web-").Label("app", "web").Obj()
		return p
	}); err != nil {
		return "", err
	}
	time.Sleep(2 * time.Second)
	rssOther, _ := rssMiB(mgr.Process.Pid)

	const hosts = 16
	rc := testutil.MakeRayCluster("tpu", ns).TPUGroup("tpu", "tpu-v6e-slice", "8x8", 4, hosts, int32((tpuPods+hosts-1)/hosts)).ManagedByMultiKueue().Obj()
	if err := b.c.Create(ctx, rc); err != nil {
		return "", err
	}
	time.Sleep(500 * time.Millisecond)
	if err := b.fill(ctx, tpuPods, func(int) *corev1.Pod { return testutil.WorkerPodFor(rc, "tpu").Obj() }); err != nil {
		return "", err
	}
	time.Sleep(3 * time.Second)
	rss, err := rssMiB(mgr.Process.Pid)
	if err != nil {
		return "", err
	}
	heap, err := heapMiB(ctx, metricsPort)
	if err != nil {
		return "", err
	}
	fmt.Printf("S4: manager RSS %.1f MiB idle, %.1f MiB with %d non-TPU Pods (%+.1f MiB), %.1f MiB with %d TPU Pods more; Go heap %.1f MiB\n",
		rssIdle, rssOther, otherPods, rssOther-rssIdle, rss, tpuPods, heap)
	return fmt.Sprintf("BENCH S4 pods=%d rss_mib=%.1f heap_mib=%.1f", otherPods+tpuPods, rss, heap), nil
}

// fill creates n Pods with 16 concurrent clients.
func (b *bench) fill(ctx context.Context, n int, pod func(int) *corev1.Pod) error {
	var next atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := b.c.Create(ctx, pod(i)); err != nil {
					firstErr.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (b *bench) kubeconfig() (string, error) {
	user, err := b.env.Env.AddUser(envtest.User{Name: "bench-manager", Groups: []string{"system:masters"}}, rest.CopyConfig(b.env.Config))
	if err != nil {
		return "", err
	}
	data, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp("", "bench-kubeconfig-")
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	_, err = f.Write(data)
	return f.Name(), err
}

func rssMiB(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kb / 1024, err
		}
	}
	return 0, errors.New("no VmRSS")
}

func heapMiB(ctx context.Context, port int) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(port)+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_alloc_bytes "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f / (1 << 20), err
		}
	}
	return 0, errors.New("no go_memstats_heap_alloc_bytes in the manager's metrics")
}

func waitHTTP(ctx context.Context, url string) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer within 60s", url)
}

func freePort() int {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// profile starts CPU profiles of this process and of the API server when -profile-dir is set, and
// returns the function that stops them and writes <dir>/<name>-{bench,apiserver}.pprof.
func (b *bench) profile(ctx context.Context, name string) func() {
	if profileDir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(profileDir, name+"-bench.pprof"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
		return func() {}
	}
	_ = pprof.StartCPUProfile(f)
	rc, err := rest.RESTClientFor(restConfigForRaw(b.env.Config))
	done := make(chan struct{})
	if err == nil {
		go func() {
			defer close(done)
			data, err := rc.Get().AbsPath("/debug/pprof/profile").Param("seconds", "8").DoRaw(ctx)
			if err != nil {
				fmt.Fprintln(os.Stderr, "apiserver profile:", err)
				return
			}
			_ = os.WriteFile(filepath.Join(profileDir, name+"-apiserver.pprof"), data, 0o600)
		}()
	} else {
		close(done)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		<-done
	}
}

func restConfigForRaw(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return c
}
