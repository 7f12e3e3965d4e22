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
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

const (
	// s6Accelerator is the TPU of S6's pools and slices: v5p, 4 chips per host.
	s6Accelerator = "tpu-v5p-slice"
	// s6Pools is how many node pools of one slice's size S6's cluster has: the nodeSelector-only
	// Pods may spread over all of them, the operator's slices must each keep to one.
	s6Pools = 3
	// s6Clients create each slice's Pods concurrently: creation is not what S6 measures.
	s6Clients = 8
	// ungateWidth is how many scheduling gates S6 removes at once: as many as the API server
	// takes, so that the removal paces the nodeSelector-only Pods as little as it can.
	ungateWidth = 64
	// s6Gate holds a slice's Pods back from the scheduler until all of them exist.
	s6Gate = "bench.tpu.ray.io/hold"
)

// s6Timeout bounds the wait for one slice to be bound and Ready, and for Pods to be gone
// (-s6-timeout).
var s6Timeout = 15 * time.Minute

// placementRun is what S6 measured for one slice: from its release (s6Release) until the last Pod
// was bound (spec.nodeName) and the last Ready, the scheduler's CPU time until the last bind, how
// long the release took, and the node pools its Pods landed in. A slice not bound and Ready
// within s6Timeout is timedOut: bind and ready are then s6Timeout (a lower bound), bound and
// readyPods how many of its Pods were, and schedCPU the scheduler's until the timeout.
type placementRun struct {
	pods        int
	create      time.Duration
	ungate      time.Duration
	bind, ready time.Duration
	schedCPU    time.Duration
	pools       int
	timedOut    bool
	bound       int
	readyPods   int
}

func (r placementRun) podsPerSecond() float64 { return float64(r.bound) / max(r.bind.Seconds(), 1e-9) }

// s6Topology returns the v5p topology of a slice of hosts 4-chip hosts: three dimensions, each a
// multiple of 4, as close to a cube as they go (64 hosts: 4x8x8, 1,024: 16x16x16, 2,240: 16x20x28).
func s6Topology(hosts int32) (string, error) {
	chips := 4 * int(hosts)
	best := ""
	bestSpread := 0
	for a := 4; a*a*a <= chips; a += 4 {
		for b := a; a*b*b <= chips; b += 4 {
			if chips%(a*b) != 0 {
				continue
			}
			c := chips / (a * b)
			if c%4 != 0 {
				continue
			}
			if spread := c - a; best == "" || spread < bestSpread {
				best, bestSpread = fmt.Sprintf("%dx%dx%d", a, b, c), spread
			}
		}
	}
	if best == "" {
		return "", fmt.Errorf("no v5p topology of %d hosts (4 chips each, every dimension a multiple of 4)", hosts)
	}
	return best, nil
}

// withSlicePlacement sets the operator instances' --slice-placement.
func withSlicePlacement(placement tpuv1alpha1.SlicePlacement) func(*operator.Options) {
	return func(o *operator.Options) { o.SlicePlacement = placement }
}

// s6Release is how S6 holds a slice's Pods back until all of them exist, and releases them.
type s6Release int

const (
	// releaseByBench: the bench creates the Pods with s6Gate and removes it with ungateWidth
	// concurrent patches; times count from the first removal.
	releaseByBench s6Release = iota
	// releaseByOperator: the operator's webhook gates the Pods (ChosenDomain) and its reconciler
	// releases them onto the pool it chose; times count from the creation of the last Pod, the
	// earliest the operator may release.
	releaseByOperator
)

// placement runs S6 for each slice size and returns its BENCH lines, two per size.
func (b *bench) placement(ctx context.Context, opts placementOptions) ([]string, error) {
	var lines []string
	for _, hosts := range opts.hosts {
		l, err := b.placementSize(ctx, hosts, opts)
		if err != nil {
			return nil, fmt.Errorf("S6 hosts=%d: %w", hosts, err)
		}
		lines = append(lines, l...)
	}
	return lines, nil
}

// placementSize runs S6 for one slice size on a fresh local cluster of s6Pools pools of hosts
// Nodes each: two slices of Pods with only their nodeSelectors (no webhook registered), the
// second next to the first; then, once they are gone, the same two slices through the operator
// with opts.placement. It stops the cluster and deletes its Nodes before it returns.
func (b *bench) placementSize(ctx context.Context, hosts int32, opts placementOptions) (_ []string, err error) {
	topo, err := s6Topology(hosts)
	if err != nil {
		return nil, err
	}
	pools := make([]localcluster.Pool, s6Pools)
	for i := range pools {
		pools[i] = localcluster.Pool{Name: fmt.Sprintf("s6-%d-%c", hosts, 'a'+i), Accelerator: s6Accelerator, Topology: topo}
	}
	nodes, err := localcluster.Nodes(pools)
	if err != nil {
		return nil, err
	}
	started := time.Now()
	// The cluster starts without Nodes; S6 creates them concurrently, which is much faster than
	// Start's one at a time for thousands of them.
	cluster, err := localcluster.Start(ctx, b.env.Env, localcluster.Options{SchedulerQPS: opts.schedulerQPS})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, b.removeCluster(ctx, cluster, nodes)) }()
	if err := b.createNodes(ctx, cluster, nodes); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "S6-%d: %d pools of %d Nodes (v5p %s) Ready in %.1f s\n", hosts, s6Pools, hosts, topo, time.Since(started).Seconds())

	s := scenario{name: "S6", clients: s6Clients, slices: 1, hosts: hosts, topology: topo, accelerator: s6Accelerator}
	saved, err := b.unregisterPodWebhook(ctx)
	if err != nil {
		return nil, err
	}
	poolOf := make(map[string]string, len(nodes))
	for _, n := range nodes {
		poolOf[n.Name] = n.Labels[constants.NodePoolTopologyKey]
	}
	base, err := b.placeSlices(ctx, cluster, poolOf, s, "base", releaseByBench)
	if err != nil {
		return nil, err
	}
	instances, err := b.startInstances(ctx, forwarding, withSlicePlacement(opts.placement))
	if err != nil {
		return nil, err
	}
	defer stopAll(instances)
	if err := b.registerPodWebhook(ctx, saved); err != nil {
		return nil, err
	}
	b.env.ServeWebhooksFrom(instances...)
	defer b.env.ServeWebhooksFrom(b.validator)
	release := releaseByBench
	if opts.placement == tpuv1alpha1.PlacementChosenDomain {
		release = releaseByOperator
	}
	ours, err := b.placeSlices(ctx, cluster, poolOf, s, "", release)
	if err != nil {
		return nil, err
	}
	lines := make([]string, len(ours))
	for i := range ours {
		lines[i] = placementLine(hosts, i+1, opts.placement, ours[i], base[i])
	}
	return lines, nil
}

// placeSlices places two slices of s, released as release says, the second next to the first,
// then deletes their Pods and waits until they are gone.
func (b *bench) placeSlices(ctx context.Context, cluster *localcluster.Cluster, poolOf map[string]string, s scenario, prefix string, release s6Release) ([]placementRun, error) {
	what := "through the operator"
	if prefix != "" {
		what = "nodeSelectors only"
	}
	var runs []placementRun
	var namespaces []string
	for slice := 1; slice <= 2; slice++ {
		r, ns, err := b.placeSlice(ctx, cluster, poolOf, s, prefix, release)
		if ns != "" {
			namespaces = append(namespaces, ns)
		}
		if err != nil {
			return nil, errors.Join(err, b.deletePods(ctx, namespaces))
		}
		if r.timedOut {
			fmt.Fprintf(os.Stderr, "S6-%d: slice %d, %s: created in %.1f s, ungated in %.1f s; NOT all bound and Ready after %s: %d of %d bound, %d Ready; scheduler CPU %.2f s; %d pools\n",
				s.hosts, slice, what, r.create.Seconds(), r.ungate.Seconds(), s6Timeout, r.bound, r.pods, r.readyPods, r.schedCPU.Seconds(), r.pools)
		} else {
			fmt.Fprintf(os.Stderr, "S6-%d: slice %d, %s: created in %.1f s, ungated in %.1f s; all bound after %.2f s (%.0f Pods/s), all Ready after %.2f s; scheduler CPU %.2f s; %d pools\n",
				s.hosts, slice, what, r.create.Seconds(), r.ungate.Seconds(), r.bind.Seconds(), r.podsPerSecond(), r.ready.Seconds(), r.schedCPU.Seconds(), r.pools)
		}
		runs = append(runs, r)
	}
	return runs, b.deletePods(ctx, namespaces)
}

// placeSlice creates the Pods of one slice of s in a fresh namespace, as KubeRay would, held back
// until all exist and released as release says, and measures how the scheduler places them. It
// returns the namespace, also on most errors.
func (b *bench) placeSlice(ctx context.Context, cluster *localcluster.Cluster, poolOf map[string]string, s scenario, prefix string, release s6Release) (placementRun, string, error) {
	r := placementRun{pods: s.pods()}
	rc, err := b.rayCluster(ctx, prefix, s)
	if err != nil {
		return r, "", err
	}
	schedCPU := func() (time.Duration, error) { return cluster.CPUTime("kube-scheduler") }
	var w *placementWatch
	if release == releaseByOperator {
		// The operator may release the slice as soon as its last Pod exists: the watch must be
		// running by then, and starts the clock when it sees that Pod.
		if w, err = watchPlacement(ctx, b.env.Config, rc.Namespace, r.pods, poolOf, schedCPU, true); err != nil {
			return r, rc.Namespace, err
		}
		defer w.stop()
	}
	pods := make([]*corev1.Pod, r.pods)
	_, wall, failures := b.createPods(ctx, r.pods, s.clients, func(i int) *corev1.Pod {
		pods[i] = testutil.WorkerPodFor(rc, "tpu").Obj()
		if release == releaseByBench {
			pods[i].Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: s6Gate}}
		}
		return pods[i]
	})
	r.create = wall
	if failures > 0 {
		return r, rc.Namespace, fmt.Errorf("%d of %d creates failed", failures, r.pods)
	}
	var cpu time.Duration
	if release == releaseByBench {
		if w, err = watchPlacement(ctx, b.env.Config, rc.Namespace, r.pods, poolOf, schedCPU, false); err != nil {
			return r, rc.Namespace, err
		}
		defer w.stop()
		if cpu, err = schedCPU(); err != nil {
			return r, rc.Namespace, err
		}
		start := time.Now()
		w.setStart(start)
		ungate := []byte(`[{"op":"remove","path":"/spec/schedulingGates"}]`)
		if err := framework.Parallel(len(pods), ungateWidth, func(i int) error {
			return b.c.Patch(ctx, pods[i], client.RawPatch(types.JSONPatchType, ungate))
		}); err != nil {
			return r, rc.Namespace, fmt.Errorf("removing the scheduling gates: %w", err)
		}
		r.ungate = time.Since(start)
	}
	if err := w.wait(ctx, s6Timeout); err != nil {
		if ctx.Err() != nil {
			return r, rc.Namespace, err
		}
		// A slice that does not place in time is a result, not a failure of the bench: its row
		// says how far it got.
		fmt.Fprintf(os.Stderr, "S6-%d: %v: see %s/kube-scheduler.log and the Pods' FailedScheduling events\n", s.hosts, err, cluster.Dir)
		r.timedOut = true
		r.bound, r.readyPods = w.progress()
	}
	if release == releaseByOperator {
		cpu, r.ungate = w.created()
	}
	r.bind, r.ready, r.schedCPU, r.pools = w.result(cpu)
	if r.timedOut {
		r.bind, r.ready = s6Timeout, s6Timeout
		// Until the timeout, not the last bind: there may have been none.
		now, err := schedCPU()
		if err != nil {
			return r, rc.Namespace, err
		}
		r.schedCPU = now - cpu
	} else {
		r.bound, r.readyPods = r.pods, r.pods
	}
	return r, rc.Namespace, w.cpuErr
}

// placementLine prints one size and slice of S6 as a table row and returns its BENCH line: the
// issue's fields first, against base (the nodeSelector-only slice at the same position).
func placementLine(hosts int32, slice int, placement tpuv1alpha1.SlicePlacement, r, base placementRun) string {
	bindRatio, cpuRatio := ratio(r.bind, base.bind), ratio(r.schedCPU, base.schedCPU)
	fmt.Printf("S6 %5d hosts, slice %d, %s: bind %7.2f s (nodeSelector only %7.2f s, ratio %5.2f), Ready %7.2f s (%7.2f s), %6.0f Pods/s (%6.0f), scheduler CPU %7.2f s (%7.2f s, ratio %5.2f), pools %d (%d)\n",
		hosts, slice, placement, r.bind.Seconds(), base.bind.Seconds(), bindRatio, r.ready.Seconds(), base.ready.Seconds(),
		r.podsPerSecond(), base.podsPerSecond(), r.schedCPU.Seconds(), base.schedCPU.Seconds(), cpuRatio, r.pools, base.pools)
	return fmt.Sprintf("BENCH S6 hosts=%d slice=%d placement=%s bind_s=%.2f ready_s=%.2f bind_ratio=%.2f sched_cpu_ratio=%.2f pools=%d pods_per_s=%.0f sched_cpu_s=%.2f ungate_s=%.2f base_bind_s=%.2f base_ready_s=%.2f base_sched_cpu_s=%.2f base_ungate_s=%.2f base_pools=%d"+
		" timed_out=%d bound=%d base_timed_out=%d base_bound=%d",
		hosts, slice, placement, r.bind.Seconds(), r.ready.Seconds(), bindRatio, cpuRatio, r.pools, r.podsPerSecond(),
		r.schedCPU.Seconds(), r.ungate.Seconds(), base.bind.Seconds(), base.ready.Seconds(), base.schedCPU.Seconds(), base.ungate.Seconds(), base.pools,
		b2i(r.timedOut), r.bound, b2i(base.timedOut), base.bound)
}

// b2i is 1 for true, 0 for false: a BENCH field.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// deletePods deletes every Pod of the namespaces at once (grace period 0: no wait for kwok to
// confirm, which takes minutes for thousands of Pods on a loaded machine), waits until they are
// gone and deletes the namespaces. The API server keeps deleting after it cuts a slow collection
// delete off; the delete is sent again while Pods remain.
func (b *bench) deletePods(ctx context.Context, namespaces []string) error {
	deadline := time.Now().Add(s6Timeout)
	for _, ns := range namespaces {
		var sent time.Time
		for {
			if time.Since(sent) > 30*time.Second {
				if err := b.c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0)); err != nil {
					fmt.Fprintf(os.Stderr, "deleting the Pods of %s (sent again in 30 s while any remain): %v\n", ns, err)
				}
				sent = time.Now()
			}
			var pods metav1.PartialObjectMetadataList
			pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
			if err := b.c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
				return err
			}
			if len(pods.Items) == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d Pods of namespace %s still there %s after their deletion", len(pods.Items), ns, s6Timeout)
			}
			time.Sleep(time.Second)
		}
		if err := b.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}
	return nil
}

// createNodes creates the Nodes, 16 at a time, and waits until every one is Ready without the
// not-ready taint.
func (b *bench) createNodes(ctx context.Context, cluster *localcluster.Cluster, nodes []*corev1.Node) error {
	if err := framework.Parallel(len(nodes), 16, func(i int) error {
		return b.c.Create(ctx, nodes[i].DeepCopy())
	}); err != nil {
		return err
	}
	deadline := time.Now().Add(s6Timeout)
	for {
		if err := cluster.Exited(); err != nil {
			return err
		}
		var list corev1.NodeList
		if err := b.c.List(ctx, &list); err != nil {
			return err
		}
		ready := 0
		for i := range list.Items {
			if localcluster.Ready(&list.Items[i]) {
				ready++
			}
		}
		if ready >= len(nodes) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d Nodes Ready after %s", ready, len(nodes), s6Timeout)
		}
		time.Sleep(time.Second)
	}
}

// removeCluster stops the cluster's components and deletes the Nodes, so that the next size and
// the other scenarios run on the bare control plane again.
func (b *bench) removeCluster(ctx context.Context, cluster *localcluster.Cluster, nodes []*corev1.Node) error {
	err := cluster.Stop()
	return errors.Join(err, framework.Parallel(len(nodes), 16, func(i int) error {
		return client.IgnoreNotFound(b.c.Delete(ctx, nodes[i]))
	}))
}

// placementWatch follows the Pods of one namespace through a watch (protobuf, each Pod trimmed to
// its Node, scheduling gates and Ready condition) and records when each was first seen, released
// (without gates), bound and Ready.
type placementWatch struct {
	want int
	// poolOf maps each Node to its node pool.
	poolOf map[string]string
	// schedCPU reads the scheduler's CPU time the moment the last Pod is seen bound (and, with
	// startOnCreate, seen created).
	schedCPU func() (time.Duration, error)
	// startOnCreate starts the clock when the last Pod is first seen (instead of setStart).
	startOnCreate bool
	cancel        context.CancelFunc

	mu           sync.Mutex
	start        time.Time
	seen         map[string]bool
	released     map[string]bool
	nodes        map[string]string
	ready        map[string]bool
	lastReleased time.Time
	lastBound    time.Time
	lastReady    time.Time
	cpuAtStart   time.Duration
	cpuAtBind    time.Duration
	cpuErr       error
	allBound     chan struct{}
	allReady     chan struct{}
}

func watchPlacement(ctx context.Context, cfg *rest.Config, ns string, want int, poolOf map[string]string, schedCPU func() (time.Duration, error), startOnCreate bool) (*placementWatch, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtimeProtobuf
	cfg.AcceptContentTypes = runtimeProtobuf
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	w := &placementWatch{
		want: want, poolOf: poolOf, schedCPU: schedCPU, startOnCreate: startOnCreate,
		seen: map[string]bool{}, released: map[string]bool{}, nodes: map[string]string{}, ready: map[string]bool{},
		allBound: make(chan struct{}), allReady: make(chan struct{}),
	}
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "pods", ns, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	if err := inf.SetTransform(trimToPlacement); err != nil {
		return nil, err
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.observe,
		UpdateFunc: func(_, obj any) { w.observe(obj) },
	}); err != nil {
		return nil, err
	}
	ctx, w.cancel = context.WithCancel(ctx)
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		w.cancel()
		return nil, errors.New("the Pod watch did not sync")
	}
	return w, nil
}

const runtimeProtobuf = "application/vnd.kubernetes.protobuf"

// trimToPlacement keeps of a Pod what S6 reads: its name, Node, scheduling gates and Ready
// condition.
func trimToPlacement(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	trimmed := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, ResourceVersion: pod.ResourceVersion},
		Spec:       corev1.PodSpec{NodeName: pod.Spec.NodeName, SchedulingGates: pod.Spec.SchedulingGates},
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			trimmed.Status.Conditions = []corev1.PodCondition{c}
		}
	}
	return trimmed, nil
}

func (w *placementWatch) setStart(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.start = t
}

func (w *placementWatch) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.seen[pod.Name] {
		w.seen[pod.Name] = true
		if w.startOnCreate && len(w.seen) == w.want {
			w.start = now
			w.cpuAtStart, w.cpuErr = w.schedCPU()
		}
	}
	if len(pod.Spec.SchedulingGates) == 0 && !w.released[pod.Name] {
		w.released[pod.Name] = true
		w.lastReleased = now
	}
	if pod.Spec.NodeName != "" && w.nodes[pod.Name] == "" {
		w.nodes[pod.Name] = pod.Spec.NodeName
		w.lastBound = now
		if len(w.nodes) == w.want {
			var err error
			if w.cpuAtBind, err = w.schedCPU(); w.cpuErr == nil {
				w.cpuErr = err
			}
			close(w.allBound)
		}
	}
	if len(pod.Status.Conditions) == 1 && pod.Status.Conditions[0].Status == corev1.ConditionTrue && !w.ready[pod.Name] {
		w.ready[pod.Name] = true
		w.lastReady = now
		if len(w.ready) == w.want {
			close(w.allReady)
		}
	}
}

// wait waits until every Pod has been seen bound and Ready.
func (w *placementWatch) wait(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, ch := range []chan struct{}{w.allBound, w.allReady} {
		select {
		case <-ch:
		case <-ctx.Done():
			w.mu.Lock()
			defer w.mu.Unlock()
			return fmt.Errorf("after %s, %d of %d Pods bound and %d Ready", timeout, len(w.nodes), w.want, len(w.ready))
		}
	}
	return nil
}

// created returns, for a watch that started its clock on the last Pod's creation, the scheduler's
// CPU time then, and how long after it the last Pod was released.
func (w *placementWatch) created() (cpu, released time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cpuAtStart, w.lastReleased.Sub(w.start)
}

// result returns the times from the start to the last bind and the last Ready, the scheduler's CPU
// time from cpuBefore to the last bind, and how many node pools the Pods' Nodes belong to.
func (w *placementWatch) result(cpuBefore time.Duration) (bind, ready, cpu time.Duration, pools int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	used := map[string]bool{}
	for _, node := range w.nodes {
		used[w.poolOf[node]] = true
	}
	return w.lastBound.Sub(w.start), w.lastReady.Sub(w.start), w.cpuAtBind - cpuBefore, len(used)
}

// progress returns how many of the Pods are bound and Ready now.
func (w *placementWatch) progress() (bound, ready int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.nodes), len(w.ready)
}

func (w *placementWatch) stop() { w.cancel() }

// parseHosts parses a comma-separated list of slice sizes.
func parseHosts(list string) ([]int32, error) {
	var sizes []int32
	for f := range strings.SplitSeq(list, ",") {
		var n int32
		if _, err := fmt.Sscanf(strings.TrimSpace(f), "%d", &n); err != nil || n <= 0 {
			return nil, fmt.Errorf("invalid slice size %q", f)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}
