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
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/gate"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// TestPlacementFitsAsTheSchedulerDoes runs the placement Reconcile on a gated ChosenDomain slice of 4 hosts
// with two pools of 4 Nodes, pool-a (the one chosen when both fit: the smaller name) and pool-b,
// and checks where its Pods are released (docs/spec.md §12, "The choice"): a domain fits only if
// kube-scheduler would bind every Pod there, counting every Pod bound to its Nodes whatever
// created it, and the Pods' own node affinity and requests.
func TestPlacementFitsAsTheSchedulerDoes(t *testing.T) {
	worker := func(id int32) *testutil.PodWrapper {
		return releasePod("w-"+strconv.Itoa(int(id)), "t-w-"+strconv.Itoa(int(id)), id).
			SchedulingGate(tpuv1alpha1.PlacementSchedulingGate).Phase(corev1.PodPending)
	}
	zoneA := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-a"}}}}}}}}
	job := func(node string, requests corev1.ResourceList) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "job-" + node, Namespace: "batch", UID: types.UID("uid-job-" + node)},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "img",
				Resources: corev1.ResourceRequirements{Requests: requests, Limits: requests}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		}
	}
	cases := map[string]struct {
		// edit changes every worker Pod.
		edit func(*testutil.PodWrapper)
		// others are Pods of no slice (a Job's), bound to Nodes.
		others []*corev1.Pod
		// zone puts pool-a in zone-b and pool-b in zone-a.
		zone       bool
		wantDomain string
	}{
		"nothing else on the Nodes: pool-a": {wantDomain: "pool-a"},
		"a Job's Pod, not KubeRay's, uses the chips of one Node of pool-a: pool-b": {
			others:     []*corev1.Pod{job("a-2", corev1.ResourceList{constants.TPUResourceName: resource.MustParse("4")})},
			wantDomain: "pool-b",
		},
		"a Job's Pod takes the CPU of one Node of pool-a that the workers request: pool-b": {
			edit: func(w *testutil.PodWrapper) {
				w.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("8")
			},
			others:     []*corev1.Pod{job("a-1", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("175")})},
			wantDomain: "pool-b",
		},
		"the workers require zone-a, where only pool-b is: pool-b": {
			edit:       func(w *testutil.PodWrapper) { w.Spec.Affinity = zoneA.DeepCopy() },
			zone:       true,
			wantDomain: "pool-b",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			objs := make([]client.Object, 0, 14+len(tc.others))
			objs = append(objs, reconcileCluster().Obj().DeepCopy(),
				chosenDomain(reconcileSlice(0).Claims(testutil.Bound(4, "w")...)).Obj().DeepCopy())
			for _, pool := range []string{"a", "b"} {
				for i := range 4 {
					n := testutil.MakeNode(pool+"-"+strconv.Itoa(i)).TPU("tpu-v4-podslice", "2x2x4", "pool-"+pool).TPUCapacity(4).Ready(true)
					if tc.zone {
						zone := map[string]string{"a": "zone-b", "b": "zone-a"}[pool]
						n.Labels[corev1.LabelTopologyZone] = zone
					}
					objs = append(objs, n.Obj())
				}
			}
			for id := range int32(4) {
				w := worker(id)
				if tc.edit != nil {
					tc.edit(w)
				}
				objs = append(objs, w.Obj())
			}
			for _, p := range tc.others {
				objs = append(objs, p.DeepCopy())
			}
			store := testutil.NewClientBuilder().WithObjects(objs...).Build()
			pods := reconcileReleaseSliceWith(t, testutil.WorkerPodCache(store), store, &testutil.EventRecorder{}, trackerOf(t, store))
			for i := range pods.Items {
				p := &pods.Items[i]
				if p.Namespace != releaseNamespace {
					continue
				}
				if got := p.Spec.NodeSelector[constants.NodePoolTopologyKey]; got != tc.wantDomain {
					t.Errorf("Pod %s released onto %q (gates %v), want %q", p.Name, got, p.Spec.SchedulingGates, tc.wantDomain)
				}
				for _, o := range tc.others {
					if gate.PinnedNode(p) == o.Spec.NodeName {
						t.Errorf("Pod %s pinned to Node %s, which Pod %s/%s takes", p.Name, o.Spec.NodeName, o.Namespace, o.Name)
					}
				}
			}
		})
	}
}

// TestPlacementPriority: of two slices waiting for a domain, the one whose Pods have the higher
// priority takes the only pool that frees, whichever is reconciled first (docs/spec.md §12,
// "Priority"): the lower one leaves it, naming the other, and is placed once another pool fits.
func TestPlacementPriority(t *testing.T) {
	const poolKey = constants.NodePoolTopologyKey
	// repelHigh is a Pod of another kind bound in pool-a whose required anti-affinity excludes the
	// higher-priority slice's Pods: that slice can never take pool-a, so the lower one must.
	repelHigh := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "repel", Namespace: "batch", UID: "uid-repel"},
		Spec: corev1.PodSpec{NodeName: "a-0", Containers: []corev1.Container{{Name: "main", Image: "img"}},
			Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey: poolKey, Namespaces: []string{releaseNamespace},
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "high"}},
			}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	replica := func(r int32, prefix string, priority int32) []client.Object {
		out := make([]client.Object, 0, 4)
		for id := range int32(4) {
			name := prefix + "-" + strconv.Itoa(int(id))
			out = append(out, testutil.MakeWorkerPod(releaseNamespace, "rc", "uid-rc", "tpu").Named(name).UID(types.UID("uid-"+name)).
				TPU(4).Topology("tpu-v4-podslice", "2x2x4").TPUIdentity("tpu", r, id).
				Annotation(tpuv1alpha1.ClaimTokenAnnotation, "t-"+name).Created(t0.Add(-time.Minute)).
				SchedulingGate(tpuv1alpha1.PlacementSchedulingGate).Phase(corev1.PodPending).Priority(priority).Label("team", prefix).Obj())
		}
		return out
	}
	waitingSince := func(s *testutil.SliceWrapper) client.Object {
		obj := s.Obj().DeepCopy()
		obj.Status.Conditions = append(obj.Status.Conditions, metav1.Condition{Type: tpuv1alpha1.ConditionDomainChosen,
			Status: metav1.ConditionFalse, Reason: tpuv1alpha1.ReasonNoDomainFits, Message: "no domain", LastTransitionTime: metav1.NewTime(t0)})
		return obj
	}
	cases := map[string]struct {
		others   []client.Object
		wantHigh string // the pool the higher-priority slice's Pods are released onto, "" for gated
		wantLow  string
	}{
		"pool-a fits both: the higher-priority slice takes it, the lower one leaves it": {wantHigh: "pool-a"},
		"pool-a excludes the higher-priority slice's Pods: the lower one takes it": {
			others: []client.Object{repelHigh}, wantLow: "pool-a",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			low, high := reconcileSlice(0), reconcileSlice(1)
			objs := make([]client.Object, 0, 15)
			objs = append(objs, reconcileCluster().Obj().DeepCopy(),
				waitingSince(chosenDomain(low.Claims(testutil.Bound(4, "low")...))),
				waitingSince(chosenDomain(high.Claims(testutil.Bound(4, "high")...))))
			for i := range 4 {
				objs = append(objs, testutil.MakeNode("a-"+strconv.Itoa(i)).TPU("tpu-v4-podslice", "2x2x4", "pool-a").TPUCapacity(4).Ready(true).Obj())
			}
			objs = append(objs, replica(0, "low", 10)...)
			objs = append(objs, replica(1, "high", 1000)...)
			for _, o := range tc.others {
				objs = append(objs, o.DeepCopyObject().(client.Object))
			}
			store := testutil.NewClientBuilder().WithObjects(objs...).Build()
			clock := clocktesting.NewFakePassiveClock(t0)
			r := newTestReconciler(testutil.WorkerPodCache(store), store, &testutil.EventRecorder{}, clock)
			r.bound = trackerOf(t, store)
			reconcile := func(name string) {
				t.Helper()
				for _, at := range []time.Duration{0, bindSettle} {
					clock.SetTime(t0.Add(at))
					if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: releaseNamespace, Name: name}}); err != nil {
						t.Fatalf("Reconcile %s: %v", name, err)
					}
				}
			}
			domains := func() map[string]string {
				var pods corev1.PodList
				if err := store.List(t.Context(), &pods); err != nil {
					t.Fatal(err)
				}
				out := map[string]string{}
				for _, p := range pods.Items {
					out[p.Name] = p.Spec.NodeSelector[poolKey]
				}
				return out
			}
			// The lower-priority slice is reconciled first.
			reconcile(low.Obj().Name)
			var s tpuv1alpha1.TPUSliceAssignment
			if err := store.Get(t.Context(), types.NamespacedName{Namespace: releaseNamespace, Name: low.Obj().Name}, &s); err != nil {
				t.Fatal(err)
			}
			if c := apimeta.FindStatusCondition(s.Status.Conditions, tpuv1alpha1.ConditionDomainChosen); tc.wantLow == "" && (c == nil ||
				c.Reason != tpuv1alpha1.ReasonNoDomainFits || !strings.Contains(c.Message, "higher priority")) {
				t.Errorf("the lower-priority slice's DomainChosen = %+v, want NoDomainFits naming the higher-priority slice", c)
			}
			reconcile(high.Obj().Name)
			got := domains()
			for id := range 4 {
				if d := got["high-"+strconv.Itoa(id)]; d != tc.wantHigh {
					t.Errorf("high-%d released onto %q, want %q", id, d, tc.wantHigh)
				}
				if d := got["low-"+strconv.Itoa(id)]; d != tc.wantLow {
					t.Errorf("low-%d released onto %q, want %q", id, d, tc.wantLow)
				}
			}

		})
	}
}

// TestChoiceNarrowsWakeUps: a slice that chose and found no fit is woken afterwards only by the
// Nodes its gated Pods could use (their accelerator and topology), as its choice read them
// (docs/spec.md §12, "No fit"): a Node of another topology of its key and accelerator does not.
func TestChoiceNarrowsWakeUps(t *testing.T) {
	objs := make([]client.Object, 0, 9)
	objs = append(objs, reconcileCluster().Obj().DeepCopy(), chosenDomain(reconcileSlice(0).Claims(testutil.Bound(4, "w")...)).Obj())
	for id := range int32(4) {
		objs = append(objs, releasePod("w-"+strconv.Itoa(int(id)), "t-w-"+strconv.Itoa(int(id)), id).
			SchedulingGate(tpuv1alpha1.PlacementSchedulingGate).Phase(corev1.PodPending).Obj())
	}
	// Three Nodes of the Pods' 2x2x4 in pool-a: no domain fits 4 hosts.
	for i := range 3 {
		objs = append(objs, testutil.MakeNode("a-"+strconv.Itoa(i)).TPU("tpu-v4-podslice", "2x2x4", "pool-a").TPUCapacity(4).Ready(true).Obj())
	}
	store := testutil.NewClientBuilder().WithObjects(objs...).Build()
	clock := clocktesting.NewFakePassiveClock(t0)
	r := newTestReconciler(testutil.WorkerPodCache(store), store, &testutil.EventRecorder{}, clock)
	r.bound = trackerOf(t, store)
	for _, at := range []time.Duration{0, bindSettle} {
		clock.SetTime(t0.Add(at))
		if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: releaseNamespace, Name: releaseSlice}}); err != nil {
			t.Fatalf("Reconcile: %v", err)
		}
	}
	var s tpuv1alpha1.TPUSliceAssignment
	if err := store.Get(t.Context(), types.NamespacedName{Namespace: releaseNamespace, Name: releaseSlice}, &s); err != nil {
		t.Fatal(err)
	}
	if c := apimeta.FindStatusCondition(s.Status.Conditions, tpuv1alpha1.ConditionDomainChosen); c == nil || c.Reason != tpuv1alpha1.ReasonNoDomainFits {
		t.Fatalf("DomainChosen = %+v, want NoDomainFits", c)
	}
	for node, want := range map[*corev1.Node]int{
		testutil.MakeNode("a-3").TPU("tpu-v4-podslice", "2x2x4", "pool-a").Obj(): 1,
		testutil.MakeNode("z-0").TPU("tpu-v4-podslice", "2x2x2", "pool-z").Obj(): 0,
	} {
		if got := len(r.waitingSlicesFor(t.Context(), node)); got != want {
			t.Errorf("Node %s (topology %s) woke %d slices, want %d", node.Name, node.Labels[constants.TopologyNodeSelectorKey], got, want)
		}
	}
}
