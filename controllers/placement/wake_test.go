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

package placement

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/gate"
	"github.com/ray-tpu/tpu-slice-operator/internal/slicectrl"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// TestPlacementChanged: a Node update wakes the slices waiting for a domain only when it changes
// what the chooser reads (docs/spec.md §12, "No fit"): not a heartbeat, not a PreferNoSchedule
// taint (the cluster autoscaler's mark on scale-down candidates).
func TestPlacementChanged(t *testing.T) {
	base := testutil.MakeNode("n").TPU("tpu-v6e-slice", "4x4", "pool-a").TPUCapacity(4).Ready(true).Obj()
	cases := map[string]struct {
		edit func(*corev1.Node)
		want bool
	}{
		"a heartbeat": {edit: func(n *corev1.Node) {
			n.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
		}},
		"a PreferNoSchedule taint": {edit: func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "DeletionCandidateOfClusterAutoscaler", Effect: corev1.TaintEffectPreferNoSchedule})
		}},
		"a NoSchedule taint": {edit: func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "x", Effect: corev1.TaintEffectNoSchedule})
		}, want: true},
		"a label":   {edit: func(n *corev1.Node) { n.Labels["x"] = "y" }, want: true},
		"cordoned":  {edit: func(n *corev1.Node) { n.Spec.Unschedulable = true }, want: true},
		"not Ready": {edit: func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }, want: true},
		"allocatable memory": {edit: func(n *corev1.Node) {
			n.Status.Allocatable[corev1.ResourceMemory] = resource.MustParse("1Gi")
		}, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			after := base.DeepCopy()
			tc.edit(after)
			if got := placementChanged(base, after); got != tc.want {
				t.Errorf("placementChanged = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestWaitingSlicesFor: a Node event wakes only the waiting slices of its key and accelerator.
func TestWaitingSlicesFor(t *testing.T) {
	waiting := func(name, key, accelerator string) client.Object {
		s := testutil.MakeSlice(name, "ml", "rc", "uid-rc", "tpu", 0, 4).Placement(tpuv1alpha1.PlacementChosenDomain, key).Obj()
		s.Spec.Accelerator = accelerator
		s.Status.Conditions = []metav1.Condition{{Type: tpuv1alpha1.ConditionDomainChosen, Status: metav1.ConditionFalse,
			Reason: tpuv1alpha1.ReasonNoDomainFits, LastTransitionTime: metav1.Now()}}
		return s
	}
	// placed is a slice in domain whose Pods are all bound (scheduled) or not.
	placed := func(name, domain string, scheduled bool) client.Object {
		s := testutil.MakeSlice(name, "ml", "rc", "uid-rc", "tpu", 0, 4).Placement(tpuv1alpha1.PlacementChosenDomain, constants.NodePoolTopologyKey).Obj()
		s.Spec.Accelerator = "tpu-v6e-slice"
		s.Status.Domain = domain
		s.Status.Conditions = []metav1.Condition{{Type: tpuv1alpha1.ConditionDomainChosen, Status: metav1.ConditionTrue,
			Reason: tpuv1alpha1.ReasonPodsBound, LastTransitionTime: metav1.Now()}}
		if scheduled {
			s.Status.Conditions = append(s.Status.Conditions, metav1.Condition{Type: tpuv1alpha1.ConditionScheduled, Status: metav1.ConditionTrue,
				Reason: tpuv1alpha1.ReasonAllHostsScheduled, LastTransitionTime: metav1.Now()})
		}
		return s
	}
	c := testutil.NewClientBuilder().WithObjects(
		waiting("v6e-pool", constants.NodePoolTopologyKey, "tpu-v6e-slice"),
		waiting("v5p-pool", constants.NodePoolTopologyKey, "tpu-v5p-slice"),
		waiting("v6e-subblock", constants.GCETopologySubblockKey, "tpu-v6e-slice"),
		waiting("any-pool", constants.NodePoolTopologyKey, ""),
		// A slice in pool-a with a Pod not bound (one may wait gated for a free Node there) is
		// woken; one in pool-a whose Pods are all bound, and one in pool-b, are not.
		placed("in-pool-a", "pool-a", false),
		placed("in-pool-a-scheduled", "pool-a", true),
		placed("in-pool-b", "pool-b", false),
	).Build()
	r := &Reconciler{client: c}
	node := testutil.MakeNode("n").TPU("tpu-v6e-slice", "4x4", "pool-a").Obj()
	woken := r.waitingSlicesFor(t.Context(), node)
	got := make([]string, 0, len(woken))
	for _, req := range woken {
		got = append(got, req.Name)
	}
	if diff := cmp.Diff([]string{"any-pool", "in-pool-a", "v6e-pool"}, got); diff != "" {
		t.Errorf("slices woken by a v6e Node of pool-a (-want,+got):\n%s", diff)
	}
	if n := len(r.waitingSlicesFor(t.Context())); n != 4 {
		t.Errorf("waitingSlices woke %d slices, want all 4", n)
	}
}

// TestBoundPodHandler: a Pod of any kind that leaves a TPU Node wakes the waiting slices of that
// Node's key and accelerator; one that leaves a Node the TPU Node cache does not hold wakes none.
func TestBoundPodHandler(t *testing.T) {
	s := testutil.MakeSlice("waiting", "ml", "rc", "uid-rc", "tpu", 0, 4).Placement(tpuv1alpha1.PlacementChosenDomain, constants.NodePoolTopologyKey).Obj()
	s.Spec.Accelerator = "tpu-v6e-slice"
	s.Status.Conditions = []metav1.Condition{{Type: tpuv1alpha1.ConditionDomainChosen, Status: metav1.ConditionFalse,
		Reason: tpuv1alpha1.ReasonNoDomainFits, LastTransitionTime: metav1.Now()}}
	c := testutil.NewClientBuilder().WithObjects(s, testutil.MakeNode("tpu-1").TPU("tpu-v6e-slice", "4x4", "pool-a").Obj()).Build()
	r := &Reconciler{client: c, settle: -1}
	job := func(node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "batch"}, Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	for node, want := range map[string]int{"tpu-1": 1, "cpu-1": 0} {
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		r.boundPodHandler().Delete(t.Context(), event.DeleteEvent{Object: job(node)}, q)
		done := job(node)
		done.Status.Phase = corev1.PodSucceeded
		r.boundPodHandler().Update(t.Context(), event.UpdateEvent{ObjectOld: job(node), ObjectNew: done}, q)
		if q.Len() != want {
			t.Errorf("a Pod leaving Node %s woke %d slices, want %d", node, q.Len(), want)
		}
		q.ShutDown()
	}
}

// TestPodHandler: a Pod that binds (or is created bound) to a Node enqueues, besides its own
// slice, the slices of the unbound Pods pinned to that Node, which its chips may strand
// (docs/spec.md §12, "Stranded Pods"); a Pod that stays bound enqueues no pinned Pod's slice. A
// Node that changes what placement reads, or goes, enqueues the slices of the Pods pinned to it;
// a heartbeat enqueues nothing.
func TestPodHandler(t *testing.T) {
	pod := func(name, slice, node string, ready bool) *corev1.Pod {
		return testutil.MakePod(name, "ns").Label(tpuv1alpha1.SliceLabel, slice).NodeName(node).Ready(ready).Obj()
	}
	// The operator's cache indexes Pods by their Node, bound or pinned (the API server's field
	// selector, which testutil.NewClientBuilder indexes, knows only bound ones).
	c := fake.NewClientBuilder().WithScheme(testutil.Scheme()).WithIndex(&corev1.Pod{}, slicectrl.NodeNameIndex, slicectrl.NodeNameIndexValue).
		WithObjects(pod("a-0", "a", "n1", true), testutil.MakePod("d-0", "ns").Label(tpuv1alpha1.SliceLabel, "d").PinnedTo("n3").Obj()).Build()
	r := &Reconciler{client: c, settle: -1, clock: clock.RealClock{}, bursts: newBursts(0)}
	drain := func(q queue) []string {
		var got []string
		for q.Len() > 0 {
			req, _ := q.Get()
			got = append(got, req.Name)
			q.Done(req)
		}
		slices.Sort(got)
		return got
	}
	cases := map[string]struct {
		fire func(q queue)
		want []string
	}{
		// d-0 is pinned to n3 and waits for its chips.
		"a Pod bound to a Node another slice's Pod is pinned to": {want: []string{"d", "e"}, fire: func(q queue) {
			r.podHandler().Update(t.Context(), event.UpdateEvent{ObjectOld: pod("e-0", "e", "", false), ObjectNew: pod("e-0", "e", "n3", false)}, q)
		}},
		"a Pod created bound to a Node another slice's Pod is pinned to": {want: []string{"d", "e"}, fire: func(q queue) {
			r.podHandler().Create(t.Context(), event.CreateEvent{Object: pod("e-0", "e", "n3", false)}, q)
		}},
		"a Pod that stays bound enqueues no pinned Pod's slice": {want: []string{"e"}, fire: func(q queue) {
			r.podHandler().Update(t.Context(), event.UpdateEvent{ObjectOld: pod("e-0", "e", "n3", false), ObjectNew: pod("e-0", "e", "n3", true)}, q)
		}},
		"the Node a Pod is pinned to deleted": {want: []string{"d"}, fire: func(q queue) {
			r.nodeHandler().Delete(t.Context(), event.DeleteEvent{Object: testutil.MakeNode("n3").Obj()}, q)
		}},
		"the Node a Pod is pinned to cordoned": {want: []string{"d"}, fire: func(q queue) {
			cordoned := testutil.MakeNode("n3").Ready(true).Obj()
			cordoned.Spec.Unschedulable = true
			r.nodeHandler().Update(t.Context(), event.UpdateEvent{ObjectOld: testutil.MakeNode("n3").Ready(true).Obj(), ObjectNew: cordoned}, q)
		}},
		"a Node a Pod is bound to, not pinned, deleted": {fire: func(q queue) {
			r.nodeHandler().Delete(t.Context(), event.DeleteEvent{Object: testutil.MakeNode("n1").Obj()}, q)
		}},
		"a Node's heartbeat": {fire: func(q queue) {
			beat := testutil.MakeNode("n3").Ready(true).Obj()
			beat.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
			r.nodeHandler().Update(t.Context(), event.UpdateEvent{ObjectOld: testutil.MakeNode("n3").Ready(true).Obj(), ObjectNew: beat}, q)
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			tc.fire(q)
			if diff := cmp.Diff(tc.want, drain(q), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("enqueued slices (-want,+got):\n%s", diff)
			}
		})
	}
}

// waitingSlice is a ChosenDomain slice of key and accelerator that no domain fitted.
func waitingSlice(name, key, accelerator string) *tpuv1alpha1.TPUSliceAssignment {
	s := testutil.MakeSlice(name, "ml", "rc", "uid-rc", "tpu", 0, 4).Placement(tpuv1alpha1.PlacementChosenDomain, key).Obj()
	s.UID = types.UID("uid-" + name)
	s.Spec.Accelerator = accelerator
	s.Status.Conditions = []metav1.Condition{{Type: tpuv1alpha1.ConditionDomainChosen, Status: metav1.ConditionFalse,
		Reason: tpuv1alpha1.ReasonNoDomainFits, LastTransitionTime: metav1.Now()}}
	return s
}

// names returns the names of reqs, sorted.
func names(reqs []reconcile.Request) []string {
	out := make([]string, 0, len(reqs))
	for _, req := range reqs {
		out = append(out, req.Name)
	}
	slices.Sort(out)
	return out
}

// TestWaitingSlicesForCandidates: a Node event wakes a waiting slice only when its Pods could use
// the Node, by the slice's last choice (the nodeSelector's topology, their required node
// affinity), not every slice of the Node's key and accelerator (docs/spec.md §12, "No fit"); a
// slice not chosen since the start, or a new slice of the name, is woken by every Node of its key
// and accelerator.
func TestWaitingSlicesForCandidates(t *testing.T) {
	pool := constants.NodePoolTopologyKey
	selector := func(topology string) map[string]string {
		return map[string]string{constants.AcceleratorNodeSelectorKey: "tpu-v6e-slice", constants.TopologyNodeSelectorKey: topology}
	}
	notPoolA := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: pool, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"pool-a"}}}}}}
	slicesOf := map[string]*tpuv1alpha1.TPUSliceAssignment{}
	for _, name := range []string{"v6e-4x4", "v6e-8x8", "unknown", "recreated", "not-pool-a"} {
		slicesOf[name] = waitingSlice(name, pool, "tpu-v6e-slice")
	}
	c := testutil.NewClientBuilder().WithObjects(slicesOf["v6e-4x4"], slicesOf["v6e-8x8"], slicesOf["unknown"], slicesOf["recreated"], slicesOf["not-pool-a"]).Build()
	r := &Reconciler{client: c}
	r.candidates.remember(slicesOf["v6e-4x4"], selector("4x4"), nil)
	r.candidates.remember(slicesOf["v6e-8x8"], selector("8x8"), nil)
	r.candidates.remember(slicesOf["not-pool-a"], selector("4x4"), notPoolA)
	old := slicesOf["recreated"].DeepCopy()
	old.UID = "uid-before"
	r.candidates.remember(old, selector("8x8"), nil)

	node := testutil.MakeNode("n").TPU("tpu-v6e-slice", "4x4", "pool-a").Obj()
	if diff := cmp.Diff([]string{"recreated", "unknown", "v6e-4x4"}, names(r.waitingSlicesFor(t.Context(), node))); diff != "" {
		t.Errorf("slices woken by a v6e 4x4 Node of pool-a (-want,+got):\n%s", diff)
	}
	// A label change that makes the Node one the 8x8 slice can use wakes it: the old or the new
	// Node may be a candidate.
	relabelled := node.DeepCopy()
	relabelled.Labels[constants.TopologyNodeSelectorKey] = "8x8"
	if diff := cmp.Diff([]string{"recreated", "unknown", "v6e-4x4", "v6e-8x8"}, names(r.waitingSlicesFor(t.Context(), node, relabelled))); diff != "" {
		t.Errorf("slices woken by a Node relabelled from 4x4 to 8x8 (-want,+got):\n%s", diff)
	}
	// The slice that went is forgotten with its filter when its reconcile finds it gone.
	if err := c.Delete(t.Context(), slicesOf["v6e-8x8"]); err != nil {
		t.Fatal(err)
	}
	r.bursts = newBursts(0)
	if _, err := r.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(slicesOf["v6e-8x8"])}); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.candidates.m.Load(client.ObjectKeyFromObject(slicesOf["v6e-8x8"])); ok {
		t.Error("the candidates of a deleted slice are still remembered")
	}
}

// TestLeaseHandler: a domain Lease that goes wakes the waiting slices a Node of its domain could
// change, of any key (a Lease of one key holds its domain's Nodes for every key); a Lease that is
// no domain Lease wakes none.
func TestLeaseHandler(t *testing.T) {
	c := testutil.NewClientBuilder().WithObjects(
		waitingSlice("v6e-pool", constants.NodePoolTopologyKey, "tpu-v6e-slice"),
		waitingSlice("v6e-subblock", constants.GCETopologySubblockKey, "tpu-v6e-slice"),
		waitingSlice("v5p-pool", constants.NodePoolTopologyKey, "tpu-v5p-slice"),
		testutil.MakeNode("a-0").TPU("tpu-v6e-slice", "4x4", "pool-a").GCE("block-1", "sb-1").Obj(),
		testutil.MakeNode("b-0").TPU("tpu-v5p-slice", "2x2x4", "pool-b").Obj(),
	).Build()
	r := &Reconciler{client: c, settle: -1}
	holder := gate.Holder{Namespace: "ml", Name: "other", UID: "uid-other"}
	cases := map[string]struct {
		lease *coordinationv1.Lease
		want  []string
	}{
		"pool-a's Lease": {lease: gate.NewLease("ops", constants.NodePoolTopologyKey, "pool-a", holder), want: []string{"v6e-pool", "v6e-subblock"}},
		"sub-block sb-1's Lease, whose Nodes are pool-a's": {
			lease: gate.NewLease("ops", constants.GCETopologySubblockKey, "sb-1", holder), want: []string{"v6e-pool", "v6e-subblock"}},
		"pool-b's Lease":                     {lease: gate.NewLease("ops", constants.NodePoolTopologyKey, "pool-b", holder), want: []string{"v5p-pool"}},
		"the Lease of a domain with no Node": {lease: gate.NewLease("ops", constants.NodePoolTopologyKey, "gone", holder)},
		"leader election's Lease":            {lease: &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "tpu-slice-operator", Namespace: "ops"}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			r.leaseHandler().Delete(t.Context(), event.DeleteEvent{Object: tc.lease}, q)
			var got []reconcile.Request
			for q.Len() > 0 {
				req, _ := q.Get()
				got = append(got, req)
				q.Done(req)
			}
			if diff := cmp.Diff(tc.want, names(got), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("slices woken (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestStoppedPodWakes: a worker Pod bound to a TPU Node that stops or goes wakes, besides its own
// slice, the waiting slices its Node could change, once: through the bound Pods' cache when it is
// watched (boundPodHandler), through the Pod handler when it is not; a slice that goes wakes
// only itself (its Lease and Pods wake the others as they go).
func TestStoppedPodWakes(t *testing.T) {
	c := testutil.NewClientBuilder().WithObjects(
		waitingSlice("v6e", constants.NodePoolTopologyKey, "tpu-v6e-slice"),
		waitingSlice("v5p", constants.NodePoolTopologyKey, "tpu-v5p-slice"),
		testutil.MakeNode("a-0").TPU("tpu-v6e-slice", "4x4", "pool-a").Obj(),
	).Build()
	worker := testutil.MakePod("w-0", "ml").Label(tpuv1alpha1.SliceLabel, "own").NodeName("a-0").Phase(corev1.PodRunning).Obj()
	for _, watched := range []bool{false, true} {
		r := &Reconciler{client: c, settle: -1, clock: clock.RealClock{}, bursts: newBursts(0)}
		want := []string{"own", "v6e"}
		if watched {
			r.boundCache = &informertest.FakeInformers{}
			want = []string{"own"}
		}
		failed := worker.DeepCopy()
		failed.Status.Phase = corev1.PodFailed
		for what, fire := range map[string]func(queue){
			"deletion": func(q queue) { r.podHandler().Delete(t.Context(), event.DeleteEvent{Object: worker}, q) },
			"failure": func(q queue) {
				r.podHandler().Update(t.Context(), event.UpdateEvent{ObjectOld: worker, ObjectNew: failed}, q)
			},
		} {
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			fire(q)
			var got []reconcile.Request
			for q.Len() > 0 {
				req, _ := q.Get()
				got = append(got, req)
				q.Done(req)
			}
			if diff := cmp.Diff(want, names(got)); diff != "" {
				t.Errorf("bound Pods' cache watched %t: slices woken by a worker Pod's %s (-want,+got):\n%s", watched, what, diff)
			}
			q.ShutDown()
		}
	}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	r := &Reconciler{client: c, settle: -1}
	r.sliceHandler().Delete(t.Context(), event.DeleteEvent{Object: waitingSlice("gone", constants.NodePoolTopologyKey, "tpu-v6e-slice")}, q)
	if q.Len() != 1 {
		t.Errorf("a slice that went woke %d slices, want itself only", q.Len())
	}
}
