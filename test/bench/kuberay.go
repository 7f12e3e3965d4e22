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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/localenv"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// KubeRay's manager talks to the API server with these client limits: ray-operator v1.6.2's main
// sets the rest config's QPS and burst from its --qps and --burst flags, whose defaults are
// configapi.DefaultQPS and configapi.DefaultBurst. S7 runs KubeRay's controller with the same.
const (
	kubeRayQPS   = 100
	kubeRayBurst = 200
)

// s7Timeout is how long S7 waits for KubeRay to create one replica's Pods.
const s7Timeout = 15 * time.Minute

// replicaRun is one S7 run: how long after the RayCluster was applied its worker Pods all existed.
type replicaRun struct {
	// created is the time from the apply to the first moment hosts worker Pods were live (the
	// timeout if that never happened).
	created time.Duration
	// live is the number of live worker Pods then; creates counts every worker Pod created, so more
	// than live when KubeRay deleted an incomplete replica and created it again.
	live, creates int
	timedOut      bool
	// gaps are the pauses between worker Pods seen one after another.
	gaps gapStats
	// server is where the run's Pod creates spent their time, as the API server and the
	// operator's handler measured it.
	server serverTimes
}

// gapStats describe the pauses of a run: the time from the apply to the first worker Pod seen,
// and between each worker Pod seen and the next, by a watch. A pause that the creates' mean does
// not explain is a stall: what it follows says where to look.
type gapStats struct {
	first time.Duration
	// largest is the longest pause between two worker Pods, after the largestAfter-th.
	largest      time.Duration
	largestAfter int
	// long counts the pauses of at least longGap; longTotal is their sum.
	long      int
	longTotal time.Duration
}

// longGap is the pause gapStats counts as long: five times the 10 ms KubeRay's client limit
// spaces its creates by.
const longGap = 50 * time.Millisecond

// gapsOf returns the pauses of a run applied at start whose worker Pods were seen at times seen,
// in order.
func gapsOf(start time.Time, seen []time.Time) gapStats {
	var g gapStats
	if len(seen) == 0 {
		return g
	}
	g.first = seen[0].Sub(start)
	for i := 1; i < len(seen); i++ {
		d := seen[i].Sub(seen[i-1])
		if d > g.largest {
			g.largest, g.largestAfter = d, i
		}
		if d >= longGap {
			g.long++
			g.longTotal += d
		}
	}
	return g
}

func (g gapStats) String() string {
	return fmt.Sprintf("first worker Pod %.0f ms after the apply, largest pause %.0f ms after the %d-th, %d pauses of %v or more, %.0f ms in all",
		ms(g.first), ms(g.largest), g.largestAfter, g.long, longGap, ms(g.longTotal))
}

// replicaResult is what S7 measured for one replica size.
type replicaResult struct {
	hosts     int32
	run, base replicaRun
	// floor is the payload floor: the replica through a stand-in webhook that only injects the
	// identity.
	floor replicaRun
	// placement is the slice's spec.placement: ChosenDomain when the Pods were admitted gated.
	placement  tpuv1alpha1.SlicePlacement
	duplicates int
	// stored and floorStored are what the webhook run's and the payload floor's Pods take as
	// stored.
	stored, floorStored storedBytes
}

// kubeRayReplicas runs S7 for each replica size: KubeRay's RayCluster controller, in-process with
// KubeRay's own client limits and RayMultiHostIndexing on, creates a RayCluster's one multi-host
// replica, with no Pod webhook and then through the operator's instances. It returns the BENCH
// lines.
func (b *bench) kubeRayReplicas(ctx context.Context, sizes []int32) ([]string, error) {
	was, err := localenv.SetMultiHostIndexing(true)
	if err != nil {
		return nil, err
	}
	defer func() { _, _ = localenv.SetMultiHostIndexing(was) }()
	cfg := rest.CopyConfig(b.env.Config)
	cfg.QPS, cfg.Burst = kubeRayQPS, kubeRayBurst
	stop, err := localenv.StartKubeRay(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = stop() }()
	// KubeRay's caches sync before its first reconcile: not part of any run.
	if err := b.kubeRayWarmUp(ctx); err != nil {
		return nil, fmt.Errorf("S7: %w", err)
	}
	var lines []string
	for _, hosts := range sizes {
		rounds := make([]replicaResult, 0, s7Rounds)
		for round := range s7Rounds {
			r, err := b.kubeRayReplica(ctx, hosts, round)
			if err != nil {
				return nil, fmt.Errorf("S7-%d round %d: %w", hosts, round+1, err)
			}
			r.report(round)
			rounds = append(rounds, r)
		}
		lines = append(lines, roundsLine(rounds))
	}
	return lines, nil
}

// roundsLine is S7's BENCH line for one size measured in rounds: the line of the round whose ratio
// is the median (the upper one of an even count), with the duplicates and timeouts of every round,
// and every round's ratio and payload floor ratio in the order they ran. The machine moves one run
// of S7 by 0.2-0.3 (docs/performance.md); the median of rounds, each against its own baseline,
// says what one run cannot.
func roundsLine(rounds []replicaResult) string {
	ratios := make([]string, len(rounds))
	floors := make([]string, len(rounds))
	for i, r := range rounds {
		ratios[i] = fmt.Sprintf("%.2f", r.ratio())
		floors[i] = fmt.Sprintf("%.2f", ratio(r.floor.created, r.base.created))
	}
	m := medianRound(rounds, (*replicaResult).ratio)
	m.duplicates = 0
	for _, r := range rounds {
		m.duplicates += r.duplicates
		m.run.timedOut = m.run.timedOut || r.run.timedOut
		m.base.timedOut = m.base.timedOut || r.base.timedOut
		m.floor.timedOut = m.floor.timedOut || r.floor.timedOut
	}
	return fmt.Sprintf("%s rounds=%d round_ratios=%s round_floor_ratios=%s", replicaLine(m), len(rounds),
		strings.Join(ratios, ","), strings.Join(floors, ","))
}

// ratio is the round's webhook run over its baseline.
func (r replicaResult) ratio() float64 { return ratio(r.run.created, r.base.created) }

// kubeRayWarmUp applies a RayCluster with one CPU worker and waits for KubeRay to create it, then
// removes it.
func (b *bench) kubeRayWarmUp(ctx context.Context) error {
	ns, err := b.namespace(ctx, "warmup-s7")
	if err != nil {
		return err
	}
	rc := testutil.MakeRayCluster("warmup", ns).CPUGroup("cpu", 1).Obj()
	run, err := b.applyAndCount(ctx, rc, 1, time.Minute)
	if err != nil {
		return err
	}
	if run.timedOut {
		return errors.New("KubeRay did not create a warm-up worker Pod within a minute")
	}
	return b.removeReplica(ctx, rc)
}

// kubeRayReplica measures one replica size: the baseline with no Pod webhook registered, the
// payload floor, then the same RayCluster through fresh operator instances (the reconciler in the
// first, as in production) with --slice-placement=ChosenDomain. One TPU Node of the slice's shape
// exists during the webhook run, so that the slice is placed by a chosen domain and its Pods are
// admitted gated; one Node is no domain for the whole slice, so they stay gated.
func (b *bench) kubeRayReplica(ctx context.Context, hosts int32, round int) (replicaResult, error) {
	r := replicaResult{hosts: hosts}
	topo, err := s6Topology(hosts)
	if err != nil {
		return r, err
	}
	saved, err := b.unregisterPodWebhook(ctx)
	if err != nil {
		return r, err
	}
	base, err := b.replicaCluster(ctx, "base-s7", hosts, topo)
	if err != nil {
		return r, err
	}
	if r.base, err = b.applyAndCount(ctx, base, int(hosts), s7Timeout); err != nil {
		return r, err
	}
	// Gone before the instances start: their reconciler would adopt Pods that bypassed admission.
	if err := b.removeReplica(ctx, base); err != nil {
		return r, err
	}
	if err := b.registerPodWebhook(ctx, saved); err != nil {
		return r, err
	}
	if err := b.kubeRayPayloadFloor(ctx, hosts, topo, round, &r); err != nil {
		return r, err
	}
	node := testutil.MakeNode("bench-s7").TPU(s5Accelerator, topo, "bench-s7-pool").Obj()
	if err := b.c.Create(ctx, node); err != nil {
		return r, err
	}
	defer func() { _ = b.c.Delete(ctx, node) }()
	instances, err := b.startInstances(ctx, forwarding, withSlicePlacement(tpuv1alpha1.PlacementChosenDomain))
	if err != nil {
		return r, err
	}
	defer stopAll(instances)
	b.env.ServeWebhooksFrom(instances...)
	defer b.env.ServeWebhooksFrom(b.validator)
	rc, err := b.replicaCluster(ctx, "s7", hosts, topo)
	if err != nil {
		return r, err
	}
	stopProfile := b.profileRound(ctx, fmt.Sprintf("S7-%d", hosts), round)
	r.run, err = b.applyAndCount(ctx, rc, int(hosts), s7Timeout, instances...)
	stopProfile()
	if err != nil {
		return r, err
	}
	if err := b.inspectReplica(ctx, rc, &r); err != nil {
		return r, err
	}
	return r, b.removeReplica(ctx, rc)
}

// kubeRayPayloadFloor times the same replica through a stand-in for the webhook, behind the same
// proxy as the operator's instances (framework.Env.ServeStandIn), that injects into each worker Pod
// the identity KubeRay's index labels name (injectPayload), with no claim and no API call: the
// admission round trip, the patch and the Pods' size, which no webhook that injects this payload
// avoids.
func (b *bench) kubeRayPayloadFloor(ctx context.Context, hosts int32, topo string, round int, r *replicaResult) error {
	rc, err := b.replicaCluster(ctx, "floor-s7", hosts, topo)
	if err != nil {
		return err
	}
	var failed atomic.Int64
	stop, err := b.env.ServeStandIn(func(pod *corev1.Pod) {
		if pod.Labels[rayutils.RayNodeTypeLabelKey] != string(rayv1.WorkerNode) {
			return // the head
		}
		replica, err1 := strconv.ParseInt(pod.Labels[rayutils.RayWorkerReplicaIndexKey], 10, 32)
		host, err2 := strconv.ParseInt(pod.Labels[rayutils.RayHostIndexKey], 10, 32)
		if errors.Join(err1, err2) != nil || injectPayload(pod, rc.Name, int32(replica), int32(host)) != nil {
			failed.Add(1)
		}
	})
	if err != nil {
		return err
	}
	stopProfile := b.profileRound(ctx, fmt.Sprintf("S7-%d-floor", hosts), round)
	r.floor, err = b.applyAndCount(ctx, rc, int(hosts), s7Timeout)
	stopProfile()
	if err := errors.Join(err, stop()); err != nil {
		return err
	}
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("payload floor: %d worker Pods without KubeRay's index labels or a TPU topology", n)
	}
	if r.floorStored, err = b.sliceStored(ctx, rc.Namespace, naming.SliceName(rc.Name, "tpu", 0)); err != nil {
		return err
	}
	// Gone before the instances start: the Pods name a slice that does not exist.
	return b.removeReplica(ctx, rc)
}

// replicaCluster returns, in a fresh namespace, a RayCluster of one worker group "tpu" of one
// replica of hosts v5p hosts of 4 chips, which KubeRay reconciles (not managed by MultiKueue).
func (b *bench) replicaCluster(ctx context.Context, prefix string, hosts int32, topo string) (*rayv1.RayCluster, error) {
	ns, err := b.namespace(ctx, prefix)
	if err != nil {
		return nil, err
	}
	return testutil.MakeRayCluster("bench", ns).TPUGroup("tpu", s5Accelerator, topo, 4, hosts, 1).Obj(), nil
}

// applyAndCount creates rc and times how long it takes until want of its worker Pods are live,
// watching their metadata only, and where the creates spent their time (serverTimes), the claims'
// in the given instances.
func (b *bench) applyAndCount(ctx context.Context, rc *rayv1.RayCluster, want int, timeout time.Duration, instances ...*framework.Instance) (replicaRun, error) {
	w, err := watchWorkers(ctx, b.env.Config, rc.Namespace, rc.Name, want)
	if err != nil {
		return replicaRun{}, err
	}
	defer w.stop()
	before, err := sampleServerTimes(ctx, b.env.Config, instances)
	if err != nil {
		return replicaRun{}, err
	}
	start := time.Now()
	if err := b.c.Create(ctx, rc); err != nil {
		return replicaRun{}, err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-w.counter.done:
	case <-timer.C:
	case <-ctx.Done():
		return replicaRun{}, ctx.Err()
	}
	run := w.counter.result(start, timeout)
	after, err := sampleServerTimes(ctx, b.env.Config, instances)
	if err != nil {
		return replicaRun{}, err
	}
	run.server = after.minus(before)
	return run, nil
}

// inspectReplica reads the webhook run's outcome into r: duplicate worker IDs among the live Pods
// (I1), the slice's placement and what the slice takes as stored.
func (b *bench) inspectReplica(ctx context.Context, rc *rayv1.RayCluster, r *replicaResult) error {
	if _, err := framework.CheckAdmitted(ctx, b.c, rc.Namespace); err != nil {
		r.duplicates = strings.Count(err.Error(), "I1:")
		fmt.Fprintln(os.Stderr, err)
	}
	name := naming.SliceName(rc.Name, "tpu", 0)
	var slice tpuv1alpha1.TPUSliceAssignment
	if err := b.c.Get(ctx, client.ObjectKey{Namespace: rc.Namespace, Name: name}, &slice); err != nil {
		return err
	}
	r.placement = slice.Spec.Placement
	var err error
	if r.stored, err = b.sliceStored(ctx, rc.Namespace, name); err != nil {
		return err
	}
	if r.stored.perPod() > inlineSuspect {
		b.explainInline(ctx, &slice)
	}
	return nil
}

// inlineSuspect is a stored size per Pod above which a replica's Pods carry their host lists
// inline (a 1,024-host Pod that references the ConfigMap stores about 7 KiB, one with the lists
// inline about 150 KiB).
const inlineSuspect = 32 << 10

// explainInline prints what may have kept the admissions from the slice's host lists ConfigMap
// (docs/spec.md §4: a Pod gets the lists inline when the ConfigMap cannot be written or one of its
// name is not the slice's): the slice's UID and creation, and each ConfigMap labeled with the
// slice, with its owner.
func (b *bench) explainInline(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment) {
	fmt.Fprintf(os.Stderr, "S7: the Pods carry their host lists inline; slice %s UID %s created %s\n",
		slice.Name, slice.UID, slice.CreationTimestamp.Format(time.RFC3339))
	var cms corev1.ConfigMapList
	if err := b.c.List(ctx, &cms, client.InNamespace(slice.Namespace), client.MatchingLabels{tpuv1alpha1.SliceLabel: slice.Name}); err != nil {
		fmt.Fprintln(os.Stderr, "S7: listing the slice's ConfigMaps:", err)
		return
	}
	for i := range cms.Items {
		cm := &cms.Items[i]
		owner := "none"
		if ref := metav1.GetControllerOfNoCopy(cm); ref != nil {
			owner = string(ref.UID)
		}
		fmt.Fprintf(os.Stderr, "S7: ConfigMap %s owner %s created %s immutable %t keys %d\n", cm.Name, owner,
			cm.CreationTimestamp.Format(time.RFC3339), cm.Immutable != nil && *cm.Immutable, len(cm.Data))
	}
}

// removeReplica deletes rc (KubeRay then leaves its Pods alone), and then its Pods, slices and
// ConfigMaps: envtest has no garbage collector. Pods that were never bound go at once. It returns
// once two lists of the namespace half a second apart find no Pod, so that a reconcile of
// KubeRay's that still saw rc leaves none behind.
func (b *bench) removeReplica(ctx context.Context, rc *rayv1.RayCluster) error {
	in := client.InNamespace(rc.Namespace)
	if err := client.IgnoreNotFound(b.c.Delete(ctx, rc)); err != nil {
		return err
	}
	empty := 0
	for deadline := time.Now().Add(time.Minute); empty < 2; time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the Pods of %s/%s are still there a minute after it was deleted", rc.Namespace, rc.Name)
		}
		var pods metav1.PartialObjectMetadataList
		pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
		if err := b.c.List(ctx, &pods, in); err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			empty++
			continue
		}
		empty = 0
		if err := b.c.DeleteAllOf(ctx, &corev1.Pod{}, in); err != nil {
			return err
		}
	}
	return errors.Join(
		b.c.DeleteAllOf(ctx, &tpuv1alpha1.TPUSliceAssignment{}, in),
		b.c.DeleteAllOf(ctx, &corev1.ConfigMap{}, in, client.HasLabels{tpuv1alpha1.SliceLabel}),
	)
}

// workerCounter counts the live and created worker Pods of one RayCluster from watch events, and
// records when want of them were first live.
type workerCounter struct {
	want int
	done chan struct{}

	mu      sync.Mutex
	live    map[string]bool
	creates int
	reached time.Time
	// seen are the times worker Pods were first seen, until want were live.
	seen []time.Time
}

func newWorkerCounter(want int) *workerCounter {
	return &workerCounter{want: want, done: make(chan struct{}), live: map[string]bool{}}
}

// added records a Pod seen for the first time.
func (c *workerCounter) added(name string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live[name] {
		return
	}
	c.live[name] = true
	c.creates++
	if c.reached.IsZero() {
		c.seen = append(c.seen, now)
	}
	if len(c.live) >= c.want && c.reached.IsZero() {
		c.reached = now
		close(c.done)
	}
}

// deleted records a Pod gone.
func (c *workerCounter) deleted(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.live, name)
}

// result returns the run as timed from start; a run that never reached want took timeout.
func (c *workerCounter) result(start time.Time, timeout time.Duration) replicaRun {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := replicaRun{live: len(c.live), creates: c.creates, created: timeout, timedOut: c.reached.IsZero(), gaps: gapsOf(start, c.seen)}
	if !r.timedOut {
		r.created = c.reached.Sub(start)
	}
	return r
}

// workerWatch feeds a workerCounter from a metadata-only informer on a RayCluster's worker Pods.
type workerWatch struct {
	counter *workerCounter
	stop    context.CancelFunc
}

func watchWorkers(ctx context.Context, cfg *rest.Config, namespace, cluster string, want int) (*workerWatch, error) {
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	selector := labels.Set{rayutils.RayClusterLabelKey: cluster, rayutils.RayNodeTypeLabelKey: string(rayv1.WorkerNode)}.String()
	inf := metadatainformer.NewFilteredMetadataInformer(mc, corev1.SchemeGroupVersion.WithResource("pods"), namespace, 0,
		cache.Indexers{}, func(o *metav1.ListOptions) { o.LabelSelector = selector }).Informer()
	w := &workerWatch{counter: newWorkerCounter(want)}
	name := func(obj any) string {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			return m.Name
		}
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			_, n, _ := cache.SplitMetaNamespaceKey(d.Key)
			return n
		}
		return ""
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.counter.added(name(obj), time.Now()) },
		DeleteFunc: func(obj any) { w.counter.deleted(name(obj)) },
	}); err != nil {
		return nil, err
	}
	ctx, w.stop = context.WithCancel(ctx)
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		w.stop()
		return nil, errors.New("the worker Pod watch did not sync")
	}
	return w, nil
}

// report prints what one round of S7 measured for one size.
func (r replicaResult) report(round int) {
	fmt.Fprintf(os.Stderr, "S7-%d round %d: ratio %.2f, payload floor %.2f; KubeRay created the replica's %d worker Pods in %.2f s through the webhook (%d creates, placement %s), %.2f s with no webhook (%d creates), %.2f s through the payload floor's stand-in webhook; stored %.1f MiB of Pods, %d ConfigMaps %.1f KiB\n",
		r.hosts, round+1, r.ratio(), ratio(r.floor.created, r.base.created), r.run.live, r.run.created.Seconds(), r.run.creates, r.placement, r.base.created.Seconds(), r.base.creates,
		r.floor.created.Seconds(), float64(r.stored.podBytes)/(1<<20), r.stored.configMaps, float64(r.stored.configMapBytes)/1024)
	fmt.Fprintf(os.Stderr, "S7-%d round %d: through the webhook: %s; %s\n", r.hosts, round+1, r.run.gaps, r.run.server)
	fmt.Fprintf(os.Stderr, "S7-%d round %d: payload floor: %s; %s\n", r.hosts, round+1, r.floor.gaps, r.floor.server)
	fmt.Fprintf(os.Stderr, "S7-%d round %d: no webhook: %s; %s\n", r.hosts, round+1, r.base.gaps, r.base.server)
}

// replicaLine is S7's BENCH line.
func replicaLine(r replicaResult) string {
	return fmt.Sprintf("BENCH S7 hosts=%d created_s=%.2f base_created_s=%.2f ratio=%.2f pods_per_s=%.1f base_pods_per_s=%.1f"+
		" floor_created_s=%.2f floor_ratio=%.2f creates=%d base_creates=%d timed_out=%d base_timed_out=%d floor_timed_out=%d"+
		" placement=%s duplicates=%d %s %s"+
		" server_create_ms=%.2f floor_server_create_ms=%.2f base_server_create_ms=%.2f webhook_wait_ms=%.2f floor_webhook_wait_ms=%.2f"+
		" handler_ms=%.2f forward_ms=%.2f claim_ms=%.2f",
		r.hosts, r.run.created.Seconds(), r.base.created.Seconds(), ratio(r.run.created, r.base.created),
		r.run.podsPerSecond(), r.base.podsPerSecond(), r.floor.created.Seconds(), ratio(r.floor.created, r.base.created),
		r.run.creates, r.base.creates, b2i(r.run.timedOut), b2i(r.base.timedOut), b2i(r.floor.timedOut),
		r.placement, r.duplicates, r.stored.fields(""), r.floorStored.fields("floor_"),
		r.run.server.post.meanMS(), r.floor.server.post.meanMS(), r.base.server.post.meanMS(),
		r.run.server.webhook.meanMS(), r.floor.server.webhook.meanMS(),
		r.run.server.handler.meanMS(), r.run.server.forward.meanMS(), r.run.server.claim.meanMS())
}

// podsPerSecond is the live worker Pods per second of the run.
func (r replicaRun) podsPerSecond() float64 {
	if r.created <= 0 {
		return 0
	}
	return float64(r.live) / r.created.Seconds()
}
