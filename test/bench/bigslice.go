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

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// S5 runs one slice per topology, TPU v5p with 4 chips per Pod: 16x16x16 is 1,024 hosts, 16x20x28
// (the largest v5p slice) 2,240.
const s5Accelerator = "tpu-v5p-slice"

// flatWindow is how many Pods at each end of a slice S5's flatness compares.
const flatWindow = 64

// bigResult is what S5 measured for one slice size.
type bigResult struct {
	hosts              int32
	pods, denials      int
	wall, baselineWall time.Duration
	lat                []time.Duration
	allocStats
	duplicates  int
	statusBytes int
	// stored is what the slice's Pods and ConfigMaps take as stored, once every claim is bound.
	stored storedBytes
	// write1 and writeH are the floors: one status write of a slice holding 1 and hosts claims.
	write1, writeH writeStats
	admission      floor
	// payload is the same Pods created with the identity already injected, no webhook.
	payload floor
	// injection is the same Pods through a stand-in webhook that injects the identity, no claim.
	injection floor
	// health is S5-health: the same slice's Pods bound and readied after the webhook run.
	health healthResult
	// namespace and baseNamespace hold the webhook run's and the baseline's Pods.
	namespace, baseNamespace string
	// firstServer and lastServer are where the first and the last flatWindow creates of the
	// webhook run spent their time.
	firstServer, lastServer serverTimes
}

// bigScenario is S5 for one topology: one slice, one Pod at a time, as KubeRay creates a group.
func bigScenario(topo string) (scenario, error) {
	t, err := topology.ParseTopology(topo)
	if err != nil {
		return scenario{}, err
	}
	hosts, err := topology.Hosts(t, 4)
	if err != nil {
		return scenario{}, err
	}
	return scenario{
		name: fmt.Sprintf("S5-%d", hosts), description: fmt.Sprintf("big slice: 1 client, 1 slice x %d hosts (v5p %s)", hosts, topo),
		clients: 1, slices: 1, hosts: hosts, topology: topo, accelerator: s5Accelerator, floor: noFloor,
	}, nil
}

// bigSlices runs S5 for each topology, s5Rounds rounds each, and returns its BENCH lines (floor
// first, then S5 and S5-health, per size, of the round with the median ratio) and the per-Pod
// latencies of that round's webhook run by slice size. Every round but the last removes its
// slice, so that each round runs on the same cluster; the last round's slice stays for S5-restart.
func (b *bench) bigSlices(ctx context.Context, topologies []string) ([]string, map[int32][]time.Duration, error) {
	var lines []string
	lat := map[int32][]time.Duration{}
	defer func() { b.noProfiles = false }()
	for _, topo := range topologies {
		s, err := bigScenario(topo)
		if err != nil {
			return nil, nil, err
		}
		rounds := make([]bigResult, 0, s5Rounds)
		for round := range s5Rounds {
			b.noProfiles = round > 0
			r, err := b.bigSlice(ctx, s)
			if err != nil {
				return nil, nil, fmt.Errorf("%s round %d: %w", s.name, round+1, err)
			}
			fmt.Fprintf(os.Stderr, "%s round %d:\n", s.name, round+1)
			_ = r.report()
			if round < s5Rounds-1 {
				if err := b.removeBigSlice(ctx, r); err != nil {
					return nil, nil, fmt.Errorf("%s round %d: %w", s.name, round+1, err)
				}
			}
			rounds = append(rounds, r)
		}
		m := medianRound(rounds, (*bigResult).ratio)
		lines = append(lines, m.benchLinesOfRounds(rounds)...)
		lat[m.hosts] = m.lat
	}
	return lines, lat, nil
}

// benchLinesOfRounds returns r's BENCH lines, r being the median of rounds: S5's line ends with the
// number of rounds and every round's ratio, flatness and injection floor, in the order they ran;
// its duplicates are the sum over every round.
func (r bigResult) benchLinesOfRounds(rounds []bigResult) []string {
	ratios := make([]string, len(rounds))
	flatness := make([]string, len(rounds))
	injection := make([]string, len(rounds))
	r.duplicates = 0
	for i, x := range rounds {
		ratios[i] = fmt.Sprintf("%.2f", x.ratio())
		flatness[i] = fmt.Sprintf("%.2f", x.flatness())
		injection[i] = fmt.Sprintf("%.2f", ratio(x.injection.wall, x.baselineWall))
		r.duplicates += x.duplicates
	}
	lines := r.benchLines()
	lines[1] += fmt.Sprintf(" rounds=%d round_ratios=%s round_flatness=%s round_injection_ratios=%s", len(rounds),
		strings.Join(ratios, ","), strings.Join(flatness, ","), strings.Join(injection, ","))
	return append(lines, r.health.line())
}

// removeBigSlice deletes what a round of S5 leaves: its baseline's and webhook run's Pods (at once:
// S5-health bound them, and no kubelet will), its slice and the slice's ConfigMaps, and the Nodes
// S5-health bound the Pods to: left, they would make the next round's slice of the same topology
// placeable, and its Pods gated.
func (b *bench) removeBigSlice(ctx context.Context, r bigResult) error {
	var nodes metav1.PartialObjectMetadataList
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := b.c.List(ctx, &nodes); err != nil {
		return err
	}
	mine := slices.DeleteFunc(nodes.Items, func(n metav1.PartialObjectMetadata) bool {
		return !strings.HasPrefix(n.Name, healthNodePrefix(r.namespace))
	})
	errs := []error{framework.Parallel(len(mine), healthWidth, func(i int) error {
		return client.IgnoreNotFound(b.c.Delete(ctx, &mine[i]))
	})}
	for _, ns := range []string{r.baseNamespace, r.namespace} {
		in := client.InNamespace(ns)
		errs = append(errs,
			b.c.DeleteAllOf(ctx, &corev1.Pod{}, in, client.GracePeriodSeconds(0)),
			b.c.DeleteAllOf(ctx, &tpuv1alpha1.TPUSliceAssignment{}, in),
			b.c.DeleteAllOf(ctx, &corev1.ConfigMap{}, in, client.HasLabels{tpuv1alpha1.SliceLabel}))
	}
	return errors.Join(errs...)
}

// bigSlice measures, for one S5 slice size: the baseline (the same creates of Pods without TPUs, no
// webhook registered), the status-write floors, the admission floor, and the webhook run through
// fresh instances with claim forwarding as in production.
func (b *bench) bigSlice(ctx context.Context, s scenario) (bigResult, error) {
	r := bigResult{hosts: s.hosts}
	saved, err := b.unregisterPodWebhook(ctx)
	if err != nil {
		return r, err
	}
	if err := b.bigBaseline(ctx, s, &r); err != nil {
		return r, err
	}
	if err := b.registerPodWebhook(ctx, saved); err != nil {
		return r, err
	}
	if r.injection, err = b.injectionFloor(ctx, s); err != nil {
		return r, err
	}
	instances, err := b.startInstances(ctx, forwarding)
	if err != nil {
		return r, err
	}
	defer stopAll(instances)
	b.env.ServeWebhooksFrom(instances...)
	defer b.env.ServeWebhooksFrom(b.validator)
	if r.admission, err = b.admissionFloor(ctx, s); err != nil {
		return r, err
	}
	var run result
	if err := b.webhookRun(ctx, s, instances, &run); err != nil {
		return r, err
	}
	r.pods, r.denials, r.wall, r.lat, r.allocStats, r.duplicates = run.pods, run.denials, run.wall, run.lat, run.allocStats, run.duplicates
	r.namespace = run.namespace
	r.firstServer, r.lastServer = run.firstServer, run.lastServer
	name := naming.SliceName("bench", "tpu", 0)
	// Counted from here, after the webhook run, so that the watch does not weigh on S5's numbers.
	writes, err := framework.WatchSliceWrites(ctx, b.env.Config, run.namespace, name)
	if err != nil {
		return r, err
	}
	defer writes.Stop()
	if r.statusBytes, err = b.storedSize(ctx, run.namespace, name); err != nil {
		return r, err
	}
	// Before S5-health binds the Pods and writes their status: the Pods as admitted.
	if r.stored, err = b.sliceStored(ctx, run.namespace, name); err != nil {
		return r, err
	}
	r.health, err = b.sliceHealth(ctx, run.namespace, name, s, r.writes-r.lostWrites, writes)
	return r, err
}

// bigBaseline creates the scenario's Pods without TPUs, one at a time, with no webhook registered,
// and measures the status-write floors of a slice of the scenario's size.
func (b *bench) bigBaseline(ctx context.Context, s scenario, r *bigResult) error {
	ns, err := b.namespace(ctx, "base-"+strings.ToLower(s.name))
	if err != nil {
		return err
	}
	r.baseNamespace = ns
	n := s.pods()
	cpu := testutil.MakeRayCluster("bench", ns).CPUGroup("cpu", int32(n)).ManagedByMultiKueue().Obj()
	if err := b.c.Create(ctx, cpu); err != nil {
		return err
	}
	_, r.baselineWall, _ = b.createGroup(ctx, cpu, "cpu", n, s.clients)
	if r.payload, err = b.payloadFloor(ctx, s); err != nil {
		return err
	}
	if r.write1, err = b.statusWriteFloor(ctx, cpu, s, 1, 100); err != nil {
		return err
	}
	r.writeH, err = b.statusWriteFloor(ctx, cpu, s, s.hosts, 50)
	return err
}

// storedSize waits until the slice is Claimed (every claim bound, which the reconciler does once the
// slice has settled) and returns the length of its JSON as the API server serves it, managed
// fields included: CRDs are stored as JSON, so that is its size in etcd.
func (b *bench) storedSize(ctx context.Context, namespace, name string) (int, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		var slice tpuv1alpha1.TPUSliceAssignment
		if err := b.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &slice); err != nil {
			return 0, err
		}
		if apimeta.IsStatusConditionTrue(slice.Status.Conditions, tpuv1alpha1.ConditionClaimed) {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "slice %s/%s is not Claimed after 60s: measuring it as it is\n", namespace, name)
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	return b.objectSize(ctx, namespace, name)
}

// objectSize returns the length of the slice's JSON as the API server serves it.
func (b *bench) objectSize(ctx context.Context, namespace, name string) (int, error) {
	rc, err := rest.RESTClientFor(restConfigForRaw(b.env.Config))
	if err != nil {
		return 0, err
	}
	gv := tpuv1alpha1.GroupVersion
	data, err := rc.Get().AbsPath("/apis", gv.Group, gv.Version, "namespaces", namespace, "tpusliceassignments", name).
		SetHeader("Accept", "application/json").DoRaw(ctx)
	return len(data), err
}

// report prints what S5 measured for one size and returns its BENCH lines: the floors, then S5,
// then S5-health.
func (r *bigResult) report() string {
	n := float64(max(r.pods, 1))
	first, last := r.firstLast()
	fmt.Fprintf(os.Stderr, "S5-%d: wall %.0f ms, baseline %.0f ms, mean create %.1f ms (first %d Pods %.1f ms, last %d Pods %.1f ms), p50 %.1f ms, denials %d\n",
		r.hosts, ms(r.wall), ms(r.baselineWall), ms(mean(r.lat)), len(first), ms(mean(first)), len(last), ms(mean(last)),
		ms(percentile(r.lat, 50)), r.denials)
	fmt.Fprintf(os.Stderr, "S5-%d: the first %d Pods: %s\n", r.hosts, len(first), r.firstServer)
	fmt.Fprintf(os.Stderr, "S5-%d: the last %d Pods: %s\n", r.hosts, len(last), r.lastServer)
	fmt.Fprintf(os.Stderr, "S5-%d: %s: ratio %.2f; claims forwarded %.2f per Pod, mean claim inside the webhook %.1f ms\n",
		r.hosts, r.admission.name, ratio(r.admission.wall, r.baselineWall), r.perPod(r.forwarded, r.pods),
		float64(r.claimNanos)/n/1e6)
	fmt.Fprintf(os.Stderr, "S5-%d: %s: ratio %.2f%s\n", r.hosts, r.payload.name, ratio(r.payload.wall, r.baselineWall), r.payload.extra)
	fmt.Fprintf(os.Stderr, "S5-%d: %s: ratio %.2f%s\n", r.hosts, r.injection.name, ratio(r.injection.wall, r.baselineWall), r.injection.extra)
	fmt.Fprintf(os.Stderr, "S5-%d: stored: %d Pods %.1f MiB, %d ConfigMaps %.1f KiB, %.1f KiB per Pod; payload floor %d Pods %.1f MiB\n",
		r.hosts, r.stored.pods, float64(r.stored.podBytes)/(1<<20), r.stored.configMaps, float64(r.stored.configMapBytes)/1024,
		float64(r.stored.perPod())/1024, r.payload.stored.pods, float64(r.payload.stored.podBytes)/(1<<20))
	return strings.Join(append(r.benchLines(), r.health.report()), "\n")
}

// firstLast returns the latencies of the slice's first and last flatWindow Pods.
func (r *bigResult) firstLast() (first, last []time.Duration) {
	return r.lat[:min(flatWindow, len(r.lat))], r.lat[max(len(r.lat)-flatWindow, 0):]
}

// ratio is the webhook run's wall time over the baseline's.
func (r *bigResult) ratio() float64 { return ratio(r.wall, r.baselineWall) }

// flatness is the mean create of the slice's last flatWindow Pods over that of its first.
func (r *bigResult) flatness() float64 {
	first, last := r.firstLast()
	return ratio(mean(last), mean(first))
}

// benchLines returns S5's BENCH lines for one size: the floors, then S5.
func (r *bigResult) benchLines() []string {
	n := float64(max(r.pods, 1))
	return []string{
		fmt.Sprintf("BENCH S5-floor hosts=%d write_1_ms=%.1f write_1_p99_ms=%.1f write_h_ms=%.1f write_h_p99_ms=%.1f payload_ratio=%.2f admission_ratio=%.2f injection_ratio=%.2f injection_flatness=%.2f %s",
			r.hosts, ms(r.write1.mean), ms(r.write1.p99), ms(r.writeH.mean), ms(r.writeH.p99),
			ratio(r.payload.wall, r.baselineWall), ratio(r.admission.wall, r.baselineWall),
			ratio(r.injection.wall, r.baselineWall), r.injection.flatness, r.payload.stored.fields("payload_")),
		fmt.Sprintf("BENCH S5 hosts=%d pods=%d ratio=%.2f flatness=%.2f p99_ms=%.1f status_kib=%.1f writes_per_pod=%.2f duplicates=%d %s",
			r.hosts, r.pods, r.ratio(), r.flatness(), ms(percentile(r.lat, 99)),
			float64(r.statusBytes)/1024, float64(r.writes)/n, r.duplicates, r.stored.fields("")),
	}
}
