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
// reads its memory with many Pods around. S6 runs the real kube-scheduler, kube-controller-manager
// and kwok TPU node pools (internal/localcluster) and measures how the scheduler places slices of
// the operator's Pods against the same Pods with only their nodeSelectors. S7 runs KubeRay's own
// RayCluster controller in-process and times how long it takes to create one multi-host replica's
// Pods through the operator's webhook, against the same replica with no Pod webhook. S9 counts the
// reconciles and the CPU one Node event costs with 5,000 TPU Nodes and 300 slices waiting for a
// domain, against the same event with every waiting slice woken, as before issue 43.
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
	"maps"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

var (
	profileDir     string
	showSlowest    int
	instanceCount  int
	withReconciler bool
	forwarding     bool
	outDir         string
	plotBefore     string
	// hostListsAbove is every operator instance's --host-lists-configmap-above (0: the default).
	hostListsAbove int32
	// reservationWindow is every operator instance's reservation window (0: the operator's
	// default, negative: off).
	reservationWindow time.Duration
	// pendingTTL is every operator instance's --pending-claim-ttl (0: the operator's default).
	pendingTTL time.Duration
	// s7Rounds is how many times S7 measures each replica size.
	s7Rounds = 5
	// s5Rounds is how many times S5 measures each slice size.
	s5Rounds = 3
)

func main() {
	only := flag.String("scenarios", "S1,S2,S3,S4,S5,S6,S7,S8,S9", "Comma-separated scenarios to run (S6 needs CLUSTER_ASSETS: `make cluster-tools`).")
	s7 := flag.String("s7-hosts", "1024", "Comma-separated sizes (4-chip v5p hosts) of the one replica KubeRay creates in S7.")
	flag.IntVar(&s7Rounds, "s7-rounds", s7Rounds, "Rounds of S7 per size, each its baseline, payload floor and webhook run in turn; the BENCH line gives the round of the median ratio and every round's ratios.")
	s6 := flag.String("s6-hosts", "64,1024,2240", "Comma-separated slice sizes (4-chip v5p hosts) S6 places, each on a cluster of 3 pools of that many Nodes.")
	s6Placement := flag.String("s6-placement", string(tpuv1alpha1.PlacementChosenDomain), "How the operator instances of S6 keep a slice in one pool (--slice-placement): ChosenDomain (gated, released onto a chosen pool) or InterPodAffinity (today's terms, for the number before).")
	s6QPS := flag.Int("s6-scheduler-qps", 0, "kube-scheduler's client QPS in S6 (burst twice that); 0 for the local cluster's default, 1000 (the scheduler's own default, 50, caps binds at about 50 per second).")
	s5 := flag.String("s5-topologies", "16x16x16,16x20x28", "Comma-separated v5p topologies of S5's slices, 4 chips per Pod (1,024 and 2,240 hosts).")
	flag.IntVar(&s5Rounds, "s5-rounds", s5Rounds, "Rounds of S5 per size, each its baseline, floors and webhook run in turn; the BENCH lines give the round of the median ratio and every round's ratio and flatness.")
	s9 := nodeEventOptions{rounds: 3, scale: 1}
	flag.IntVar(&s9.rounds, "s9-rounds", s9.rounds, "Rounds of S9: each measures every Node event after and before; the BENCH lines give the round of the median CPU ratio and every round's ratio.")
	flag.Float64Var(&s9.scale, "s9-scale", s9.scale, "Scales S9's node pools and waiting slices (1: 5,000 TPU Nodes, 300 slices); smaller while you develop.")
	s4TPU := flag.Int("s4-tpu-pods", 2000, "TPU worker Pods in S4.")
	s4Other := flag.Int("s4-other-pods", 10000, "Non-TPU Pods in S4.")
	s4Nodes := flag.Int("s4-tpu-nodes", 5000, "TPU Nodes in S4 (GKE's labels and a status as large as GKE's), next to a fifth as many Nodes without TPUs.")
	flag.DurationVar(&s6Timeout, "s6-timeout", s6Timeout, "How long S6 waits for one slice to be bound and Ready, for its Nodes to be Ready and for its Pods to be gone (the second 2,240-host slice with inter-pod terms takes longer than the default).")
	flag.IntVar(&instanceCount, "instances", 3, "Webhook instances serving S1-S3.")
	flag.BoolVar(&withReconciler, "reconciler", true, "Run the reconciler in the first instance, as in production.")
	flag.BoolVar(&forwarding, "forwarding", true, "Forward claims to the replica that owns their worker group, as in production; the concurrent scenarios also run without it for comparison.")
	flag.IntVar(&showSlowest, "show-slowest", 0, "Print the N slowest creates of each scenario's webhook run, with their position in the run.")
	flag.Func("host-lists-configmap-above", "The operator instances' --host-lists-configmap-above (default: the operator's, 64 hosts); -1 keeps every Pod's host lists inline, for the number before issue 22.", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n == 0 || n < -1 {
			return errors.New("must be a positive number of hosts, or -1")
		}
		hostListsAbove = int32(n)
		return nil
	})
	flag.Func("claim-reservation-window", "The operator instances' --claim-reservation-window (default: the operator's, 2s with forwarding and off without it); 0 makes every claim write its own, for the number before reservations (docs/spec.md §3.5).", func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return errors.New("must be a duration, 0 or more")
		}
		reservationWindow = d
		if d == 0 {
			reservationWindow = -1
		}
		return nil
	})
	flag.DurationVar(&pendingTTL, "pending-claim-ttl", 0, "The operator instances' --pending-claim-ttl (0: the operator's default, 38s); a longer TTL leaves room for a longer --claim-reservation-window.")
	flag.StringVar(&profileDir, "profile-dir", "", "Write CPU profiles of the bench process and the API server during each scenario's webhook run, and S7's payload floor, here.")
	flag.StringVar(&outDir, "out-dir", "bin/bench", "Write the per-Pod latencies of S1 and S5 (latency.csv) and their plot by position in the slice (latency.svg) here.")
	flag.StringVar(&plotBefore, "plot-before", "", "A latency.csv of an earlier run to overlay on the plot, dashed.")
	flag.BoolVar(&probeReps, "probe-representations", false, "Also run the representation probe: resourceVersion-checked writes of the claims in several encodings, on throwaway CRDs (table in <out-dir>/representations.md).")
	flag.StringVar(&probeSizes, "probe-sizes", "1,64,1024,2240", "Claims per object the representation probe measures; the largest also with watchers and a CPU profile.")
	flag.DurationVar(&probeBudget, "probe-budget", 3*time.Second, "How long the probe writes each encoding at each size (at least 20 writes).")
	flag.DurationVar(&probeProfile, "probe-profile", 10*time.Second, "Length of the API server CPU profiles the probe takes of (a) and (c) at the largest size; 0 for none.")
	logFile := flag.String("log-file", "", "Write the operator instances' and KubeRay's logs (JSON) here; none by default.")
	flag.Parse()
	logTo := io.Discard
	if *logFile != "" {
		f, err := os.Create(*logFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -log-file:", err)
			os.Exit(2)
		}
		defer f.Close()
		logTo = f
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logTo)))
	s6Hosts, err := parseHosts(*s6)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: -s6-hosts:", err)
		os.Exit(2)
	}
	s7Hosts, err := parseHosts(*s7)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: -s7-hosts:", err)
		os.Exit(2)
	}
	if s7Rounds < 1 || s5Rounds < 1 || s9.rounds < 1 {
		fmt.Fprintln(os.Stderr, "bench: -s5-rounds, -s7-rounds and -s9-rounds: at least 1")
		os.Exit(2)
	}
	if s9.scale <= 0 || s9.scale > 1 {
		fmt.Fprintln(os.Stderr, "bench: -s9-scale: more than 0, at most 1")
		os.Exit(2)
	}
	placement := tpuv1alpha1.SlicePlacement(*s6Placement)
	if placement != tpuv1alpha1.PlacementChosenDomain && placement != tpuv1alpha1.PlacementInterPodAffinity {
		fmt.Fprintf(os.Stderr, "bench: -s6-placement: %q is neither %s nor %s\n", *s6Placement, tpuv1alpha1.PlacementChosenDomain, tpuv1alpha1.PlacementInterPodAffinity)
		os.Exit(2)
	}
	if err := run(strings.Split(*only, ","), strings.Split(*s5, ","), memoryLoad{tpuPods: *s4TPU, otherPods: *s4Other, tpuNodes: *s4Nodes},
		placementOptions{hosts: s6Hosts, schedulerQPS: *s6QPS, placement: placement}, s7Hosts, s9); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// placementOptions configure S6.
type placementOptions struct {
	hosts        []int32
	schedulerQPS int
	// placement is the operator instances' slice placement.
	placement tpuv1alpha1.SlicePlacement
}

func run(only, s5Topologies []string, s4 memoryLoad, s6 placementOptions, s7Hosts []int32, s9 nodeEventOptions) error {
	// Interrupted, the run stops what it started: the control plane, instances and S6's cluster.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	b, stop, err := start(ctx)
	if err != nil {
		return err
	}
	defer stop()
	// S6 runs first: the scheduler it starts would otherwise place the Pending Pods S1-S5 leave.
	var lines []string
	if slices.Contains(only, "S6") {
		if lines, err = b.placement(ctx, s6); err != nil {
			return err
		}
	}
	// S7 runs next, on a cluster with no Pods yet: KubeRay's controller caches every Pod.
	if slices.Contains(only, "S7") {
		more, err := b.kubeRayReplicas(ctx, s7Hosts)
		if err != nil {
			return err
		}
		lines = append(lines, more...)
	}
	// S9 runs next, and removes its Nodes, Pods and slices when it ends: its 5,000 TPU Nodes would
	// otherwise be S4's and S5's, and its reconciler has only S9's slices to wake.
	if slices.Contains(only, "S9") {
		more, err := b.nodeEvents(ctx, s9)
		if err != nil {
			return fmt.Errorf("S9: %w", err)
		}
		lines = append(lines, more...)
	}
	more, samples, err := b.runScenarios(ctx, only)
	if err != nil {
		return err
	}
	lines = append(lines, more...)
	// S4 runs before S5, whose slices stay: S4 measures its own load, S5-restart a replica
	// restarting next to the largest slices.
	if slices.Contains(only, "S4") {
		line, err := b.memory(ctx, s4)
		if err != nil {
			return fmt.Errorf("S4: %w", err)
		}
		lines = append(lines, line)
	}
	if slices.Contains(only, "S5") {
		big, lat, err := b.bigSlices(ctx, s5Topologies)
		if err != nil {
			return err
		}
		lines = append(lines, big...)
		pods := 0
		for _, hosts := range slices.Sorted(maps.Keys(lat)) {
			samples = append(samples, samplesOf(hosts, lat[hosts])...)
			pods += int(hosts)
		}
		line, err := b.restartMemory(ctx, pods)
		if err != nil {
			return err
		}
		lines = append(lines, line)
	}
	if slices.Contains(only, "S8") {
		line, err := b.failover(ctx)
		if err != nil {
			return fmt.Errorf("S8: %w", err)
		}
		lines = append(lines, line)
	}
	if probeReps {
		if err := b.probeRepresentations(ctx); err != nil {
			return fmt.Errorf("representation probe: %w", err)
		}
	}
	if len(samples) > 0 || plotBefore != "" {
		if err := writePlot(outDir, samples, plotBefore); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
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
	// noProfiles turns profile off: rounds after the first are not profiled.
	noProfiles bool
}

// start starts the control plane and the instance that serves the RayCluster webhook whenever no
// scenario's instances are registered; stop stops both.
func start(ctx context.Context) (b *bench, stop func(), err error) {
	env, err := framework.Start()
	if err != nil {
		return nil, nil, err
	}
	// Benchmarks send far more requests than the default client allows.
	env.Config.QPS, env.Config.Burst = 5000, 10000
	c, err := client.New(env.Config, client.Options{Scheme: operator.Scheme})
	if err != nil {
		_ = env.Stop()
		return nil, nil, err
	}
	validator, err := env.StartInstance(ctx, framework.InstanceOptions{Operator: operator.Options{DisableControllers: true}})
	if err != nil {
		_ = env.Stop()
		return nil, nil, err
	}
	env.ServeWebhooksFrom(validator)
	return &bench{env: env, c: c, validator: validator}, func() { _ = validator.Stop(); _ = env.Stop() }, nil
}

// runScenarios runs the scenarios S1-S3 named in only and returns their BENCH lines, and S1's
// per-Pod latencies for the plot.
func (b *bench) runScenarios(ctx context.Context, only []string) ([]string, []sample, error) {
	scenarios := []scenario{
		{name: "S1", description: "sequential like KubeRay: 1 client, 4 slices x 64 hosts (v6e 16x16)", clients: 1, slices: 4, hosts: 64, topology: "16x16", floor: writeFloor},
		{name: "S2", description: "concurrent: 16 clients, 1024 Pods across 16 slices, 3 webhook instances", clients: 16, slices: 16, hosts: 64, topology: "16x16", floor: groupCommitFloor},
		{name: "S3", description: "hot slice: 64 concurrent creates into one 64-host slice, 3 webhook instances", clients: 64, slices: 1, hosts: 64, topology: "16x16", floor: noFloor},
	}
	fmt.Printf("%-3s %6s %10s %10s %8s %9s %9s %7s %9s %9s %8s %9s %6s %5s\n",
		"", "pods", "wall_ms", "base_ms", "ratio", "p50_ms", "p99_ms", "p99_r", "att/pod", "conf/pod", "wr/pod", "lost/pod", "deny", "dup")
	var lines []string
	var samples []sample
	for _, s := range scenarios {
		if !slices.Contains(only, s.name) {
			continue
		}
		r, err := b.scenario(ctx, s)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", s.name, err)
		}
		lines = append(lines, r.print(s))
		if s.clients == 1 {
			samples = append(samples, samplesOf(s.hosts, r.lat)...)
		}
	}
	return lines, samples, nil
}

// print writes the scenario's row of the table and returns its BENCH line.
func (r *result) print(s scenario) string {
	n := float64(r.pods)
	fmt.Printf("%-3s %6d %10.0f %10.0f %8.2f %9.1f %9.1f %7.2f %9.2f %9.2f %8.2f %9.2f %6d %5d   %s\n",
		s.name, r.pods, ms(r.wall), ms(r.baselineWall), ratio(r.wall, r.baselineWall), ms(r.p50), ms(r.p99),
		ratio(r.p99, r.baselineP99), float64(r.attempts)/n, float64(r.conflicts)/n, float64(r.writes)/n,
		float64(r.lostWrites)/n, r.denials, r.duplicates, s.description)
	return fmt.Sprintf("BENCH %s pods=%d ratio=%.2f p99_ratio=%.2f p99_ms=%.1f attempts_per_pod=%.2f writes_per_pod=%.2f denials=%d duplicates=%d",
		s.name, r.pods, ratio(r.wall, r.baselineWall), ratio(r.p99, r.baselineP99), ms(r.p99),
		float64(r.attempts)/n, float64(r.writes)/n, r.denials, r.duplicates)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return math.Inf(1)
	}
	return float64(a) / float64(b)
}

// medianRound returns the round of a scenario measured in rounds (S5, S7) whose ratio is the
// median: the upper one of an even count.
func medianRound[T any](rounds []T, ratio func(*T) float64) T {
	return slices.SortedStableFunc(slices.Values(rounds), func(a, b T) int { return cmp.Compare(ratio(&a), ratio(&b)) })[len(rounds)/2]
}

func (b *bench) namespace(ctx context.Context, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	return ns.Name, b.c.Create(ctx, ns)
}
