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
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	rtmetrics "runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/controllers"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/gate"
	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// S9 measures what one Node event costs the reconcilers while slices wait for a domain (issue 43,
// docs/spec.md §12 "No fit"): 5,000 TPU Nodes in GKE node pools of six shapes, every Node busy
// with another workload's Pod, and 300 ChosenDomain slices of those shapes whose gated Pods no
// pool has room for (DomainChosen False, NoDomainFits). For each kind of Node event it counts the
// reconciles the event triggers and the process CPU they take until the reconcilers are idle
// again, through the production reconcilers (one operator instance, controllers.Setup via
// operator.Setup, the manager's caches): the placement reconciler (controllers/placement), which
// the Node event wakes, and the claim reconciler, which a slice write of placement's wakes
// (s9Controllers), twice in the same run:
//
//   - after: the Node change alone, woken as the placement Node handler wakes slices now
//     (placementChanged, then waitingSlicesFor: the waiting slices of the Node's key and
//     accelerator);
//   - before (the baseline): the same change, and every waiting slice woken with it, as the Node
//     handler did before c1998b9 for every change its nodeChanged saw (labels, any taint, cordon,
//     deletion, Ready status, allocatable chips; never a heartbeat). The bench wakes them through
//     the placement reconciler's own queue: it deletes a placeholder domain Lease, whose handler
//     wakes every waiting slice (waitingSlices, the call the old Node handler made).
//
// It also reads the 5,000 cached Nodes as a choice reads them (client.UnsafeDisableDeepCopy),
// against a deep-copying read and the informer's store.
const (
	// s9ChipsPerHost: every S9 Node is a 4-chip TPU host, as in every multi-host pool of S9's shapes.
	s9ChipsPerHost = 4
	// s9Replicas is the most slices (replicas of its one worker group) one RayCluster of S9 has.
	s9Replicas = 10
	// s9Quiet is how long the reconcilers must be idle (no reconcile finished, running or queued)
	// for a wave of reconciles to be over: longer than the bind settle, by which a woken slice, and
	// a slice whose status a reconcile wrote, is reconciled later.
	s9Quiet = controllers.DefaultBindSettle + 500*time.Millisecond
	// s9Due is when, after an event, the slices it woke are reconciled at the earliest (the bind
	// settle) and a little more: every wave is measured at least this long.
	s9Due = controllers.DefaultBindSettle + 200*time.Millisecond
	// s9Recheck is how often a slice no domain fits is reconciled without any event (the
	// placement reconciler's noFitRecheck).
	s9Recheck = 30 * time.Second
	// s9Poll is how often a wave reads the reconcilers' metrics.
	s9Poll = 100 * time.Millisecond
	// s9Timeout bounds each wait of S9: for its slices to wait, and for a wave to end.
	s9Timeout = 15 * time.Minute
	// s9Label is the label the label event changes.
	s9Label = "example.com/maintenance-window"
	// s9AllKey and s9AllDomain are a topology key no slice uses and its one domain, which every S9
	// Node carries: the domain of the wake-all Lease (wakeAll).
	s9AllKey    = "bench.tpu.ray.io/s9-all"
	s9AllDomain = "all"
	// s9Attempts is how many times S9 measures a round of one event at most, until none of its
	// waves met the waiting slices' rechecks.
	s9Attempts = 5
	// s9ReadRepeats is how many times each Node read is repeated.
	s9ReadRepeats = 40
)

// s9Shape is one shape of GKE TPU node pool in S9's cluster, and the slices of that shape waiting
// for a pool.
type s9Shape struct {
	// name starts the pools' names: s9-<name>-<NNN>.
	name        string
	accelerator string
	topology    string
	pools       int
	// waiting slices are keyed on the node pool (the default), subblockWaiting ones on the GCE
	// sub-block (the ray.io/tpu-affinity-topology-key annotation; each pool is one sub-block).
	waiting, subblockWaiting int
}

// s9Shapes: 5,000 Nodes and 300 waiting slices at scale 1.
var s9Shapes = []s9Shape{
	{name: "v6e-8x8", accelerator: "tpu-v6e-slice", topology: "8x8", pools: 100, waiting: 80},
	{name: "v6e-4x4", accelerator: "tpu-v6e-slice", topology: "4x4", pools: 200, waiting: 60},
	{name: "v5p-4x4x4", accelerator: "tpu-v5p-slice", topology: "4x4x4", pools: 80, waiting: 40, subblockWaiting: 20},
	{name: "v5p-2x2x4", accelerator: "tpu-v5p-slice", topology: "2x2x4", pools: 100, waiting: 30},
	{name: "v5e-4x4", accelerator: "tpu-v5-lite-podslice", topology: "4x4", pools: 150, waiting: 40},
	{name: "tpu7x-2x2x4", accelerator: "tpu7x", topology: "2x2x4", pools: 80, waiting: 30},
}

// hosts is the Nodes of one pool of the shape, and the hosts of one of its slices.
func (s s9Shape) hosts() int32 {
	t, err := topology.ParseTopology(s.topology)
	if err != nil {
		panic(fmt.Sprintf("S9 shape %s: %v", s.name, err))
	}
	return int32(t.Chips() / s9ChipsPerHost) //nolint:gosec // at most 16 hosts.
}

// scaled is n scaled for -s9-scale, at least 1 unless n is 0.
func scaled(n int, scale float64) int {
	if n == 0 {
		return 0
	}
	return max(1, int(math.Round(float64(n)*scale)))
}

// s9Pools returns the node pools of the shapes at scale.
func s9Pools(scale float64) []localcluster.Pool {
	var pools []localcluster.Pool
	for _, s := range s9Shapes {
		for i := range scaled(s.pools, scale) {
			pools = append(pools, localcluster.Pool{Name: s9PoolName(s.name, i), Accelerator: s.accelerator,
				Topology: s.topology, ChipsPerHost: s9ChipsPerHost})
		}
	}
	return pools
}

func s9PoolName(shape string, i int) string { return fmt.Sprintf("s9-%s-%03d", shape, i) }

// nodeEvent is one kind of Node change S9 measures, made to one Node of a pool of shape.
type nodeEvent struct {
	name  string
	shape string
	// oldWakesAll: the Node handler before c1998b9 woke every waiting slice on this change;
	// wakes: the Node handler wakes waiting slices on it now (placementChanged).
	oldWakesAll, wakes bool
	// apply makes the change (seq numbers the changes, for a new label value each time); revert,
	// when set, undoes it after the wave is measured.
	apply  func(ctx context.Context, c client.Client, node string, seq int) error
	revert func(ctx context.Context, c client.Client, node string) error
}

// s9Controllers are the controller names of the reconcilers S9 measures, the label of their
// metrics: placement, which the Node events and the Lease wake, and the claim reconciler, which a
// slice write of placement's wakes.
var s9Controllers = []string{"placement", "tpusliceassignment"}

// errSaturated is a wave that never ends: the waiting slices' rechecks alone keep the reconciler
// busy, because the process gets too little CPU.
var errSaturated = errors.New("the reconciler never idles")

// autoscalerTaint is the taint the cluster autoscaler puts on scale-down candidates.
const autoscalerTaint = "DeletionCandidateOfClusterAutoscaler"

var s9Events = []nodeEvent{
	{name: "label", shape: "v6e-8x8", oldWakesAll: true, wakes: true,
		apply: func(ctx context.Context, c client.Client, node string, seq int) error {
			return framework.UpdateNode(ctx, c, node, func(n *corev1.Node) { n.Labels[s9Label] = "w" + strconv.Itoa(seq) }, false)
		}},
	{name: "prefer-no-schedule", shape: "v5e-4x4", oldWakesAll: true,
		apply: func(ctx context.Context, c client.Client, node string, _ int) error {
			return framework.UpdateNode(ctx, c, node, func(n *corev1.Node) {
				n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: autoscalerTaint,
					Value: strconv.FormatInt(time.Now().Unix(), 10), Effect: corev1.TaintEffectPreferNoSchedule})
			}, false)
		},
		revert: func(ctx context.Context, c client.Client, node string) error {
			return framework.UpdateNode(ctx, c, node, func(n *corev1.Node) {
				n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == autoscalerTaint })
			}, false)
		}},
	{name: "heartbeat", shape: "tpu7x-2x2x4",
		apply: func(ctx context.Context, c client.Client, node string, _ int) error {
			return framework.UpdateNode(ctx, c, node, func(n *corev1.Node) {
				for i := range n.Status.Conditions {
					n.Status.Conditions[i].LastHeartbeatTime = metav1.Now()
				}
			}, true)
		}},
	{name: "not-ready", shape: "v5p-4x4x4", oldWakesAll: true, wakes: true,
		apply: func(ctx context.Context, c client.Client, node string, _ int) error {
			return framework.SetNodeReady(ctx, c, node, false)
		},
		revert: func(ctx context.Context, c client.Client, node string) error {
			return framework.SetNodeReady(ctx, c, node, true)
		}},
}

// s9Node is the Node an event of shape changes: host 1 (after) or 2 (before) of the shape's middle
// pool. Two Nodes, so that the before wave follows the after wave at once, with no revert between.
func s9Node(shape string, scale float64, before bool) string {
	host := 1
	if before {
		host = 2
	}
	for _, s := range s9Shapes {
		if s.name == shape {
			return fmt.Sprintf("%s-%d", s9PoolName(shape, scaled(s.pools, scale)/2), host)
		}
	}
	panic("S9: no shape " + shape)
}

// nodeEventOptions configure S9.
type nodeEventOptions struct {
	rounds int
	// scale multiplies the pools and the waiting slices of every shape (1: 5,000 Nodes, 300 slices).
	scale float64
}

// s9World is S9's cluster: the Nodes, the busy Pods, the waiting slices and the operator instance
// whose reconciler is measured.
type s9World struct {
	c     client.Client
	inst  *framework.Instance
	nodes []*corev1.Node
	// namespaces hold the busy Pods and the RayClusters, Pods and slices of the waiting slices.
	namespaces []string
	// lease is the wake-all domain Lease, whose deletion wakes every waiting slice (wakeAll).
	lease *coordinationv1.Lease
	// waiting are the waiting slices, read once all of them waited.
	waiting []tpuv1alpha1.TPUSliceAssignment
	// writes counts the slice updates the instance's cache saw.
	writes atomic.Int64
	// lastWakeAll is when the last wave that woke every waiting slice started.
	lastWakeAll time.Time
}

// nodeEvents runs S9 and returns its BENCH lines.
func (b *bench) nodeEvents(ctx context.Context, opts nodeEventOptions) (_ []string, err error) {
	w, err := b.s9Cluster(ctx, opts.scale)
	if w != nil {
		defer func() { err = errors.Join(err, b.removeS9(ctx, w)) }()
	}
	if err != nil {
		return nil, err
	}
	fmt.Printf("\nS9: %d TPU Nodes, %d slices waiting for a domain; %d rounds of each Node event\n", len(w.nodes), len(w.waiting), opts.rounds)
	// The first wave wakes every waiting slice: the reconciles of their creation are over, and
	// their 30 s rechecks are due together. A wave with no event follows at once.
	first, err := w.sync(ctx)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "S9: every waiting slice woken: %d reconciles, %.1f s of CPU, %.1f s\n", first.reconciles, first.cpu.Seconds(), first.took.Seconds())
	idle, err := w.wave(ctx, func() error { return nil })
	if err != nil {
		return nil, err
	}
	var rows [][]string
	results := make([][]s9Round, len(s9Events))
	seq := 0
	for round := range opts.rounds {
		for i, ev := range s9Events {
			r, err := w.cleanRound(ctx, ev, opts.scale, &seq, round == 0)
			if err != nil {
				return nil, fmt.Errorf("S9 %s: %w", ev.name, err)
			}
			for _, m := range []struct {
				wave   s9Wave
				before bool
			}{{r.after, false}, {r.before, true}} {
				fmt.Fprintf(os.Stderr, "S9 round %d %s %s: %d reconciles, %.0f ms of CPU, %.1f MiB, %d writes, %.1f s\n",
					round+1, ev.name, handlerName(m.before), m.wave.reconciles, ms(m.wave.cpu), mib(m.wave.allocBytes), m.wave.writes, m.wave.took.Seconds())
				rows = append(rows, m.wave.csv(round, ev.name, m.before))
			}
			results[i] = append(results[i], r)
		}
	}
	if err := writeNodeEventsCSV(filepath.Join(outDir, "node-events.csv"), rows); err != nil {
		return nil, err
	}
	read, err := w.nodeReads(ctx)
	if err != nil {
		return nil, err
	}
	return w.report(results, idle, read, opts), nil
}

// s9Round is one round of one event: the wave after and the wave before.
type s9Round struct {
	after, before s9Wave
	// overlaps counts the waves that may have met the 30 s rechecks; retries the rounds measured
	// again before this one, because a wave of theirs did or never ended.
	overlaps, retries int
}

func (r s9Round) cpuRatio() float64 { return ratio(r.after.cpu, r.before.cpu) }

// s9Cluster creates S9's Nodes and busy Pods, starts the operator instance and creates the
// waiting slices' Pods through its webhook, and returns once every slice waits for a domain. A
// non-nil world is returned with any error after the Nodes exist, for removeS9.
func (b *bench) s9Cluster(ctx context.Context, scale float64) (*s9World, error) {
	w := &s9World{c: b.c}
	start := time.Now()
	nodes, err := localcluster.Nodes(s9Pools(scale))
	if err != nil {
		return nil, err
	}
	for i, n := range nodes {
		// A status as large as GKE's (its images, conditions and addresses), Ready.
		gke := (&testutil.NodeWrapper{Node: *n}).GKEStatus().Obj()
		gke.Annotations = nil              // no kwok here
		gke.Labels[s9AllKey] = s9AllDomain // the wake-all Lease's domain (wakeAll)
		nodes[i] = gke
	}
	w.nodes = nodes
	if err := framework.Parallel(len(nodes), 16, func(i int) error { return framework.CreateNode(ctx, b.c, nodes[i].DeepCopy()) }); err != nil {
		return w, fmt.Errorf("creating the Nodes: %w", err)
	}
	// Every Node is busy: one Pod of another workload bound to it takes its chips.
	busy, err := b.namespace(ctx, "s9-busy")
	if err != nil {
		return w, err
	}
	w.namespaces = append(w.namespaces, busy)
	if err := b.fillObjects(ctx, len(nodes), func(i int) client.Object {
		return testutil.MakePod(fmt.Sprintf("busy-%05d", i), busy).Label("app", "busy").TPU(s9ChipsPerHost).BoundTo(nodes[i].Name).Obj()
	}); err != nil {
		return w, fmt.Errorf("creating the busy Pods: %w", err)
	}
	fmt.Fprintf(os.Stderr, "S9: %d Nodes and their busy Pods created in %.0f s\n", len(nodes), time.Since(start).Seconds())

	leaseNS, err := b.namespace(ctx, "s9-operator")
	if err != nil {
		return w, err
	}
	w.namespaces = append(w.namespaces, leaseNS)
	w.inst, err = b.env.StartInstance(ctx, instanceOptions(0, false, func(o *operator.Options) {
		o.SlicePlacement = tpuv1alpha1.PlacementChosenDomain
		o.Controllers.PlacementNamespace = leaseNS
	}))
	if err != nil {
		return w, err
	}
	b.env.ServeWebhooksFrom(w.inst)
	if err := w.countWrites(ctx); err != nil {
		return w, err
	}
	w.lease = gate.NewLease(leaseNS, s9AllKey, s9AllDomain, gate.Holder{Namespace: leaseNS, Name: "s9-wake-all", UID: "s9-wake-all"})

	start = time.Now()
	var pods []*rayv1.RayCluster // the RayCluster of each Pod to create
	want := 0
	for _, s := range s9Shapes {
		for _, g := range []struct {
			key    string
			slices int
		}{{constants.NodePoolTopologyKey, s.waiting}, {constants.GCETopologySubblockKey, s.subblockWaiting}} {
			n := scaled(g.slices, scale)
			if n == 0 {
				continue
			}
			ns, err := b.namespace(ctx, "s9-"+s.name)
			if err != nil {
				return w, err
			}
			w.namespaces = append(w.namespaces, ns)
			for i := 0; n > 0; i++ {
				replicas := min(n, s9Replicas)
				n -= replicas
				rc := testutil.MakeRayCluster(fmt.Sprintf("%s-%d", s.name, i), ns).
					TPUGroup("tpu", s.accelerator, s.topology, s9ChipsPerHost, s.hosts(), int32(replicas)).ManagedByMultiKueue() //nolint:gosec // at most 10.
				if g.key != constants.NodePoolTopologyKey {
					rc.GroupAnnotation(0, constants.AffinityTopologyKeyAnnotation, g.key)
				}
				if err := b.c.Create(ctx, rc.Obj()); err != nil {
					return w, err
				}
				for range replicas * int(s.hosts()) {
					pods = append(pods, rc.Obj())
				}
				want += replicas
			}
		}
	}
	time.Sleep(500 * time.Millisecond) // the instance's caches see the RayClusters
	if err := framework.Parallel(len(pods), 16, func(i int) error {
		_, _, err := framework.CreateRetrying(ctx, b.c, testutil.WorkerPodFor(pods[i], "tpu").Obj(), time.Minute)
		return err
	}); err != nil {
		return w, fmt.Errorf("creating the worker Pods: %w", err)
	}
	fmt.Fprintf(os.Stderr, "S9: %d worker Pods of %d slices created in %.0f s\n", len(pods), want, time.Since(start).Seconds())
	if w.waiting, err = w.waitAllWaiting(ctx, want); err != nil {
		return w, err
	}
	fmt.Fprintf(os.Stderr, "S9: every slice waits for a domain %.0f s after the first Pod\n", time.Since(start).Seconds())
	return w, nil
}

// countWrites counts the slice updates the instance's cache sees: each is a write.
func (w *s9World) countWrites(ctx context.Context) error {
	inf, err := w.inst.Manager.GetCache().GetInformer(ctx, &tpuv1alpha1.TPUSliceAssignment{})
	if err != nil {
		return err
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(before, after any) {
		o, ok1 := before.(client.Object)
		n, ok2 := after.(client.Object)
		if ok1 && ok2 && o.GetResourceVersion() != n.GetResourceVersion() {
			w.writes.Add(1)
		}
	}})
	return err
}

// waitAllWaiting waits until want ChosenDomain slices of S9 wait for a domain (DomainChosen False,
// NoDomainFits) and returns them; a slice that found a domain, or was placed otherwise, fails S9:
// the busy Pods should leave none a pool.
func (w *s9World) waitAllWaiting(ctx context.Context, want int) ([]tpuv1alpha1.TPUSliceAssignment, error) {
	deadline := time.Now().Add(s9Timeout)
	for {
		var waiting []tpuv1alpha1.TPUSliceAssignment
		for _, ns := range w.namespaces {
			var list tpuv1alpha1.TPUSliceAssignmentList
			if err := w.c.List(ctx, &list, client.InNamespace(ns)); err != nil {
				return nil, err
			}
			for i := range list.Items {
				s := &list.Items[i]
				if s.Spec.Placement != tpuv1alpha1.PlacementChosenDomain {
					return nil, fmt.Errorf("slice %s/%s is placed with %q, not %s", s.Namespace, s.Name, s.Spec.Placement, tpuv1alpha1.PlacementChosenDomain)
				}
				c := apimeta.FindStatusCondition(s.Status.Conditions, tpuv1alpha1.ConditionDomainChosen)
				switch {
				case c != nil && c.Status == metav1.ConditionTrue:
					return nil, fmt.Errorf("slice %s/%s found a domain (%s): S9's busy Pods leave it room", s.Namespace, s.Name, c.Message)
				case c != nil && c.Reason == tpuv1alpha1.ReasonNoDomainFits:
					waiting = append(waiting, *s)
				}
			}
		}
		if len(waiting) >= want {
			return waiting, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d slices wait for a domain after %s", len(waiting), want, s9Timeout)
		}
		if err := sleepCtx(ctx, 2*time.Second); err != nil {
			return nil, err
		}
	}
}

// wakeAll wakes every waiting slice through the placement reconciler's own queue, as the Node
// handler did before c1998b9 for every change it looked at: it creates and at once deletes a
// domain Lease of a key whose one domain holds every S9 Node (s9AllKey), and the deletion of a
// domain Lease wakes the waiting slices that a Node of its domain could change: all of them. The
// Lease's create wakes nothing; for the instant it exists, it holds every Node.
func (w *s9World) wakeAll(ctx context.Context) error {
	if err := w.c.Create(ctx, w.lease.DeepCopy()); err != nil {
		return fmt.Errorf("creating the wake-all Lease: %w", err)
	}
	if err := w.c.Delete(ctx, w.lease.DeepCopy()); err != nil {
		return fmt.Errorf("deleting the wake-all Lease: %w", err)
	}
	w.lastWakeAll = time.Now()
	return nil
}

// cleanRound measures a round of ev (event) until none of its waves met the waiting slices'
// rechecks or saturated the reconciler, s9Attempts times at most.
func (w *s9World) cleanRound(ctx context.Context, ev nodeEvent, scale float64, seq *int, profile bool) (s9Round, error) {
	for attempt := 1; ; attempt++ {
		r, err := w.event(ctx, ev, scale, seq, profile)
		switch {
		case err == nil && r.overlaps == 0:
			r.retries = attempt - 1
			return r, nil
		case err != nil && !errors.Is(err, errSaturated):
			return r, err
		case attempt == s9Attempts && err != nil:
			return r, err
		case attempt == s9Attempts:
			return r, fmt.Errorf("a wave met the waiting slices' rechecks in each of %d attempts: the process gets too little CPU here (the machine's load)", s9Attempts)
		}
		fmt.Fprintf(os.Stderr, "S9 %s: measuring the round again (attempt %d of %d failed: %v)\n", ev.name, attempt, s9Attempts, cmp.Or[error](err, errors.New("a wave met the rechecks")))
	}
}

// sync wakes every waiting slice, whatever the reconciler is doing, and waits until it is idle:
// from then on no slice's 30 s recheck is due for 30 s after the wave's first reconcile.
func (w *s9World) sync(ctx context.Context) (s9Wave, error) {
	return w.wave(ctx, func() error { return w.wakeAll(ctx) })
}

// event measures one round of ev: a sync, then at once the wave after (the change alone, on one
// Node of the shape's pool), then at once the wave before (the same change on another Node of the
// pool, and every waiting slice woken with it when the old handler did), each profiled when
// profile is set; then it undoes the changes, whatever happened. A measured wave must end before
// the rechecks of the last wave that woke every slice are due (a slice woken while it waits for
// its recheck is reconciled once); overlaps counts the waves that did not.
func (w *s9World) event(ctx context.Context, ev nodeEvent, scale float64, seq *int, profile bool) (_ s9Round, err error) {
	var r s9Round
	if ev.revert != nil {
		defer func() {
			for _, before := range []bool{false, true} {
				err = errors.Join(err, ev.revert(ctx, w.c, s9Node(ev.shape, scale, before)))
			}
		}()
	}
	if _, err := w.sync(ctx); err != nil {
		return r, err
	}
	for _, before := range []bool{false, true} {
		wakesAll := before && ev.oldWakesAll
		node := s9Node(ev.shape, scale, before)
		*seq++
		// The garbage of the wave before is collected outside the measured one.
		runtime.GC()
		var stop func()
		m, err := w.wave(ctx, func() error {
			stop = func() {}
			if profile {
				stop = profileS9(fmt.Sprintf("S9-%s-%s", ev.name, handlerName(before)))
			}
			if wakesAll {
				if err := w.wakeAll(ctx); err != nil {
					return err
				}
			}
			return ev.apply(ctx, w.c, node, *seq)
		})
		if stop != nil {
			stop()
		}
		if err != nil {
			return r, err
		}
		if due := w.lastWakeAll.Add(controllers.DefaultBindSettle + s9Recheck); m.end.After(due) {
			r.overlaps++
			fmt.Fprintf(os.Stderr, "S9 %s %s: the wave ended %.1f s after the waiting slices' rechecks were due; it may count some\n",
				ev.name, handlerName(before), m.end.Sub(due).Seconds())
		}
		if before {
			r.before = m
		} else {
			r.after = m
		}
	}
	return r, nil
}

// s9Sample is what the bench reads of the process and the reconciler at one moment.
type s9Sample struct {
	at  time.Time
	cpu time.Duration
	// allocBytes is every byte the process allocated so far.
	allocBytes uint64
	// reconciles counts the reconciles finished so far; busy is a reconcile running or queued.
	reconciles float64
	busy       bool
	writes     int64
}

func (w *s9World) sample() (s9Sample, error) {
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		return s9Sample{}, err
	}
	s := reconcilerState(families)
	s.at, s.cpu, s.allocBytes, s.writes = time.Now(), processCPU(), allocatedBytes(), w.writes.Load()
	return s, nil
}

// reconcilerState reads the slice reconcilers' (s9Controllers) finished reconciles, running
// workers and queue depths from controller-runtime's metrics, summed.
func reconcilerState(families []*dto.MetricFamily) s9Sample {
	var s s9Sample
	for _, f := range families {
		var label string
		switch f.GetName() {
		case "controller_runtime_reconcile_total", "controller_runtime_active_workers":
			label = "controller"
		case "workqueue_depth":
			label = "name"
		default:
			continue
		}
		for _, m := range f.GetMetric() {
			if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
				return l.GetName() == label && slices.Contains(s9Controllers, l.GetValue())
			}) {
				continue
			}
			switch f.GetName() {
			case "controller_runtime_reconcile_total":
				s.reconciles += m.GetCounter().GetValue()
			default:
				s.busy = s.busy || m.GetGauge().GetValue() > 0
			}
		}
	}
	return s
}

// processCPU is the user and system CPU time the bench process used so far: the operator
// instances' reconcilers, caches and webhooks run in it.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// allocatedBytes is every heap byte the process allocated so far.
func allocatedBytes() uint64 {
	s := []rtmetrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}

// s9Wave is what one event cost: the reconciles it triggered, from the event until the last of
// them ended (at least s9Due after it), and what the process spent meanwhile.
type s9Wave struct {
	reconciles int
	writes     int64
	cpu        time.Duration
	allocBytes uint64
	// took is from the event to the end of its last reconcile (at least s9Due); end is then.
	took time.Duration
	end  time.Time
}

func (m s9Wave) csv(round int, event string, before bool) []string {
	return []string{strconv.Itoa(round + 1), event, handlerName(before), strconv.Itoa(m.reconciles), fmt.Sprintf("%.1f", ms(m.cpu)),
		strconv.FormatUint(m.allocBytes, 10), strconv.FormatInt(m.writes, 10), fmt.Sprintf("%.0f", ms(m.took))}
}

func handlerName(before bool) string {
	if before {
		return "before"
	}
	return "after"
}

// profileS9 starts, when -profile-dir is set, a CPU profile of this process (the reconciler's:
// the API server has no part in a waiting slice's reconcile), and returns the function that stops
// it: <name>-bench.pprof, with the heap profiles of everything allocated before and after,
// <name>-allocs-{0,1}.pprof, for pprof -diff_base.
func profileS9(name string) func() {
	if profileDir == "" {
		return func() {}
	}
	create := func(suffix string) *os.File {
		f, err := os.Create(filepath.Join(profileDir, name+suffix))
		if err != nil {
			fmt.Fprintln(os.Stderr, "profile:", err)
		}
		return f
	}
	writeAllocs := func(i int) {
		if f := create(fmt.Sprintf("-allocs-%d.pprof", i)); f != nil {
			_ = pprof.Lookup("allocs").WriteTo(f, 0)
			_ = f.Close()
		}
	}
	writeAllocs(0)
	cpu := create("-bench.pprof")
	if cpu != nil {
		_ = pprof.StartCPUProfile(cpu)
	}
	return func() {
		if cpu != nil {
			pprof.StopCPUProfile()
			_ = cpu.Close()
		}
		writeAllocs(1)
	}
}

// wave calls trigger and measures until the reconciler is idle: the reconciles and the process's
// CPU and allocations from just before trigger to the end of the last reconcile, or to s9Due
// after trigger if that is later.
func (w *s9World) wave(ctx context.Context, trigger func() error) (s9Wave, error) {
	start, err := w.sample()
	if err != nil {
		return s9Wave{}, err
	}
	if err := trigger(); err != nil {
		return s9Wave{}, err
	}
	triggered := time.Now()
	due := triggered.Add(s9Due)
	end, prev, lastActive, pastDue := start, start, triggered, false
	progress := triggered
	for {
		if time.Since(progress) > 30*time.Second {
			progress = time.Now()
			fmt.Fprintf(os.Stderr, "S9: a wave still running after %.0f s: %.0f reconciles, %.1f s of CPU so far\n",
				time.Since(triggered).Seconds(), prev.reconciles-start.reconciles, (prev.cpu - start.cpu).Seconds())
		}
		if err := sleepCtx(ctx, s9Poll); err != nil {
			return s9Wave{}, err
		}
		s, err := w.sample()
		if err != nil {
			return s9Wave{}, err
		}
		active := s.busy || s.reconciles != prev.reconciles
		prev = s
		if !pastDue && s.at.After(due) {
			pastDue = true
			end = s
		}
		if active {
			end, lastActive = s, s.at
		}
		if pastDue && s.at.Sub(lastActive) >= s9Quiet {
			break
		}
		if n := s.reconciles - start.reconciles; s.at.Sub(triggered) > 2*s9Recheck && n > 1.5*float64(len(w.waiting)) {
			// More reconciles than one per slice and its recheck: the rechecks alone keep it busy.
			return s9Wave{}, fmt.Errorf("%w: %.0f reconciles and %.1f s of CPU in the %.0f s since the event, "+
				"with %d slices each reconciled every %s; the process gets too little CPU here (the machine's load)",
				errSaturated, n, (s.cpu - start.cpu).Seconds(), s.at.Sub(triggered).Seconds(), len(w.waiting), s9Recheck)
		}
		if s.at.Sub(triggered) > s9Timeout {
			return s9Wave{}, fmt.Errorf("the reconciler is still busy %s after the event", s9Timeout)
		}
	}
	return s9Wave{
		reconciles: int(end.reconciles - start.reconciles), writes: end.writes - start.writes,
		cpu: end.cpu - start.cpu, allocBytes: end.allocBytes - start.allocBytes,
		took: end.at.Sub(triggered), end: end.at,
	}, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// s9Read is what one read of every cached TPU Node costs, per read.
type s9Read struct {
	cpu        time.Duration
	allocBytes float64
	items      int
}

// s9Reads are the reads of the cached Nodes S9 compares.
type s9Reads struct {
	// noCopy is the read a choice makes (client.UnsafeDisableDeepCopy), deepCopy the cache's
	// default read, indexer the informer's own store (pointers to the cached Nodes: the floor).
	noCopy, deepCopy, indexer s9Read
}

// nodeReads times reading every cached TPU Node from the instance's cache, the way a choice does
// and the two others, s9ReadRepeats times each, in a quiet moment of the reconciler.
func (w *s9World) nodeReads(ctx context.Context) (s9Reads, error) {
	var r s9Reads
	if _, err := w.sync(ctx); err != nil {
		return r, err
	}
	c := w.inst.Manager.GetClient()
	list := func(opts ...client.ListOption) func() (int, error) {
		return func() (int, error) {
			var nodes corev1.NodeList
			err := c.List(ctx, &nodes, opts...)
			return len(nodes.Items), err
		}
	}
	var err error
	if r.noCopy, err = timeRead(list(client.UnsafeDisableDeepCopy)); err != nil {
		return r, err
	}
	if r.deepCopy, err = timeRead(list()); err != nil {
		return r, err
	}
	inf, err := w.inst.Manager.GetCache().GetInformer(ctx, &corev1.Node{})
	if err != nil {
		return r, err
	}
	if sii, ok := inf.(toolscache.SharedIndexInformer); ok {
		if r.indexer, err = timeRead(func() (int, error) { return len(sii.GetIndexer().List()), nil }); err != nil {
			return r, err
		}
	}
	return r, nil
}

// timeRead runs read s9ReadRepeats times and returns the CPU and the bytes allocated per read.
func timeRead(read func() (int, error)) (s9Read, error) {
	runtime.GC()
	cpu, alloc := processCPU(), allocatedBytes()
	var items int
	for range s9ReadRepeats {
		n, err := read()
		if err != nil {
			return s9Read{}, err
		}
		items = n
	}
	return s9Read{cpu: (processCPU() - cpu) / s9ReadRepeats, allocBytes: float64(allocatedBytes()-alloc) / s9ReadRepeats, items: items}, nil
}

// s9Expected counts the waiting slices whose Pods could use node (it has a value of the slice's
// key, and the accelerator and topology the Pods select), and those an event on node wakes now:
// the same slices (the placement reconciler's candidates, by each slice's last choice; before,
// every slice of the Node's key and accelerator, whatever its topology).
func s9Expected(waiting []tpuv1alpha1.TPUSliceAssignment, node *corev1.Node) (woken, usable int) {
	for i := range waiting {
		s := &waiting[i]
		if node.Labels[s.Spec.AffinityTopologyKey] == "" ||
			(s.Spec.Accelerator != "" && node.Labels[constants.AcceleratorNodeSelectorKey] != s.Spec.Accelerator) ||
			node.Labels[constants.TopologyNodeSelectorKey] != s.Spec.Topology {
			continue
		}
		usable++
	}
	return usable, usable
}

// report prints S9's table and returns its BENCH lines: per event, the round with the median CPU
// ratio, and the reads.
func (w *s9World) report(results [][]s9Round, idle s9Wave, read s9Reads, opts nodeEventOptions) []string {
	nodes := map[string]*corev1.Node{}
	for _, n := range w.nodes {
		nodes[n.Name] = n
	}
	fmt.Printf("%-19s %-12s %7s %7s %9s %9s %7s %7s %7s %8s\n", "event", "node pool", "woken", "usable", "reconc_b", "reconc_a", "cpu_b", "cpu_a", "ratio", "writes_a")
	lines := make([]string, 0, len(s9Events)+1)
	var perReconcile []s9Wave
	for i, ev := range s9Events {
		woken, usable := s9Expected(w.waiting, nodes[s9Node(ev.shape, opts.scale, false)])
		if !ev.wakes {
			woken, usable = 0, 0
		}
		r := medianRound(results[i], (*s9Round).cpuRatio)
		retries := 0
		roundRatios := make([]string, 0, len(results[i]))
		for _, rr := range results[i] {
			retries += rr.retries
			roundRatios = append(roundRatios, fmt.Sprintf("%.3f", rr.cpuRatio()))
			if rr.after.reconciles != woken {
				fmt.Fprintf(os.Stderr, "S9 %s: %d reconciles after the event, %d slices expected woken\n", ev.name, rr.after.reconciles, woken)
			}
			if ev.oldWakesAll {
				perReconcile = append(perReconcile, rr.before)
			}
		}
		fmt.Printf("%-19s %-12s %7d %7d %9d %9d %7.0f %7.0f %7.3f %8d\n", ev.name, ev.shape, woken, usable,
			r.before.reconciles, r.after.reconciles, ms(r.before.cpu), ms(r.after.cpu), r.cpuRatio(), r.after.writes)
		lines = append(lines, fmt.Sprintf("BENCH S9 event=%s node_pool=%s nodes=%d waiting=%d woken=%d usable=%d reconciles=%d base_reconciles=%d "+
			"cpu_ms=%.1f base_cpu_ms=%.1f cpu_ratio=%.3f alloc_mib=%.1f base_alloc_mib=%.1f writes=%d base_writes=%d took_ms=%.0f base_took_ms=%.0f "+
			"idle_cpu_ms=%.1f retries=%d rounds=%d round_cpu_ratios=%s",
			ev.name, ev.shape, len(w.nodes), len(w.waiting), woken, usable, r.after.reconciles, r.before.reconciles,
			ms(r.after.cpu), ms(r.before.cpu), r.cpuRatio(), mib(r.after.allocBytes), mib(r.before.allocBytes), r.after.writes, r.before.writes,
			ms(r.after.took), ms(r.before.took), ms(idle.cpu), retries, len(results[i]), strings.Join(roundRatios, ",")))
	}
	var cpu time.Duration
	var alloc uint64
	n := 0
	for _, m := range perReconcile {
		cpu, alloc, n = cpu+m.cpu, alloc+m.allocBytes, n+m.reconciles
	}
	n = max(n, 1)
	fmt.Printf("S9: no event (%.1f s): %.1f ms of CPU. A waiting slice's reconcile (before waves): %.1f ms of CPU, %.2f MiB allocated\n",
		idle.took.Seconds(), ms(idle.cpu), ms(cpu)/float64(n), float64(alloc)/float64(n)/(1<<20))
	fmt.Printf("S9: reading %d cached TPU Nodes: as a choice does (no deep copy) %.2f ms, %.2f MiB; deep-copied %.2f ms, %.2f MiB; the informer's store %.3f ms, %.3f MiB\n",
		read.noCopy.items, ms(read.noCopy.cpu), read.noCopy.allocBytes/(1<<20), ms(read.deepCopy.cpu), read.deepCopy.allocBytes/(1<<20),
		ms(read.indexer.cpu), read.indexer.allocBytes/(1<<20))
	lines = append(lines, fmt.Sprintf("BENCH S9-read nodes=%d nocopy_ms=%.2f nocopy_mib=%.2f deepcopy_ms=%.2f deepcopy_mib=%.2f cpu_ratio=%.3f alloc_ratio=%.3f "+
		"indexer_ms=%.3f indexer_mib=%.3f reconcile_cpu_ms=%.1f reconcile_alloc_mib=%.2f",
		read.noCopy.items, ms(read.noCopy.cpu), read.noCopy.allocBytes/(1<<20), ms(read.deepCopy.cpu), read.deepCopy.allocBytes/(1<<20),
		ratio(read.noCopy.cpu, read.deepCopy.cpu), read.noCopy.allocBytes/max(read.deepCopy.allocBytes, 1),
		ms(read.indexer.cpu), read.indexer.allocBytes/(1<<20), ms(cpu)/float64(n), float64(alloc)/float64(n)/(1<<20)))
	return lines
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// writeNodeEventsCSV writes every measured wave, one per line.
func writeNodeEventsCSV(path string, rows [][]string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	cw := csv.NewWriter(f)
	_ = cw.Write([]string{"round", "event", "handler", "reconciles", "cpu_ms", "alloc_bytes", "writes", "took_ms"})
	_ = cw.WriteAll(rows)
	return errors.Join(cw.Error(), f.Close())
}

// removeS9 stops S9's instance and deletes its RayClusters, slices, Pods, namespaces and Nodes, so
// that the scenarios after it run on the bare control plane.
func (b *bench) removeS9(ctx context.Context, w *s9World) error {
	var errs []error
	if w.inst != nil {
		errs = append(errs, w.inst.Stop())
		b.env.ServeWebhooksFrom(b.validator)
	}
	if ctx.Err() != nil {
		return errors.Join(errs...) // interrupted: the control plane stops with everything in it
	}
	for _, ns := range w.namespaces {
		errs = append(errs, b.c.DeleteAllOf(ctx, &rayv1.RayCluster{}, client.InNamespace(ns)),
			b.c.DeleteAllOf(ctx, &tpuv1alpha1.TPUSliceAssignment{}, client.InNamespace(ns)),
			b.c.DeleteAllOf(ctx, &coordinationv1.Lease{}, client.InNamespace(ns)))
	}
	errs = append(errs, b.deletePods(ctx, w.namespaces))
	errs = append(errs, framework.Parallel(len(w.nodes), 16, func(i int) error {
		return client.IgnoreNotFound(b.c.Delete(ctx, w.nodes[i]))
	}))
	return errors.Join(errs...)
}
