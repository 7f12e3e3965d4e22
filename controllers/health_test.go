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

package controllers

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/slicectrl"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

func TestHealthTransitions(t *testing.T) {
	c := func(t string, s metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: t, Status: s, Reason: "R", Message: "m"}
	}
	const (
		T, F, U = metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown
	)
	cases := map[string]struct {
		before, after []metav1.Condition
		want          []string
	}{
		"a new slice: every positive condition False, nothing to report": {
			after: []metav1.Condition{c("Scheduled", F), c("Placed", U), c("Ready", F), c("Degraded", F)},
		},
		"scheduled, placed and ready at once": {
			before: []metav1.Condition{c("Scheduled", F), c("Placed", U), c("Ready", F), c("Degraded", F)},
			after:  []metav1.Condition{c("Scheduled", T), c("Placed", T), c("Ready", T), c("Degraded", F)},
			want:   []string{tpuv1alpha1.ReasonTPUSliceScheduled, tpuv1alpha1.ReasonTPUSlicePlaced, tpuv1alpha1.ReasonTPUSliceReady},
		},
		"split at the first scheduled host": {
			before: []metav1.Condition{c("Placed", U)}, after: []metav1.Condition{c("Placed", F)},
			want: []string{tpuv1alpha1.ReasonTPUSliceNotPlaced},
		},
		"split after being placed": {
			before: []metav1.Condition{c("Placed", T)}, after: []metav1.Condition{c("Placed", F)},
			want: []string{tpuv1alpha1.ReasonTPUSliceNotPlaced},
		},
		"still split: reported once": {
			before: []metav1.Condition{c("Placed", F)}, after: []metav1.Condition{c("Placed", F)},
		},
		"a node lost: degraded, not ready, unscheduled": {
			before: []metav1.Condition{c("Scheduled", T), c("Ready", T), c("Degraded", F)},
			after:  []metav1.Condition{c("Scheduled", F), c("Ready", F), c("Degraded", T)},
			want:   []string{tpuv1alpha1.ReasonTPUSliceUnscheduled, tpuv1alpha1.ReasonTPUSliceNotReady, tpuv1alpha1.ReasonTPUSliceDegraded},
		},
		"recovered": {
			before: []metav1.Condition{c("Ready", F), c("Degraded", T)},
			after:  []metav1.Condition{c("Ready", T), c("Degraded", F)},
			want:   []string{tpuv1alpha1.ReasonTPUSliceReady, tpuv1alpha1.ReasonTPUSliceRecovered},
		},
		"a slice degraded from its first write (a cordoned node)": {
			after: []metav1.Condition{c("Degraded", T)}, want: []string{tpuv1alpha1.ReasonTPUSliceDegraded},
		},
		"messages change, statuses do not: nothing": {
			before: []metav1.Condition{c("Degraded", T), c("Ready", F)},
			after:  []metav1.Condition{{Type: "Degraded", Status: T, Reason: "R2", Message: "m2"}, {Type: "Ready", Status: F, Reason: "R", Message: "m3"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			trs := healthTransitions(tc.before, tc.after)
			got := make([]string, 0, len(trs))
			for _, tr := range trs {
				got = append(got, tr.reason)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("healthTransitions() reasons (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestNodeChanged(t *testing.T) {
	base := func() *testutil.NodeWrapper {
		return testutil.MakeNode("n").TPU("tpu-v6e-slice", "4x4", "pool-a").Ready(true)
	}
	heartbeat := base().Obj()
	heartbeat.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
	heartbeat.ResourceVersion = "2"
	relabeled := base().Obj()
	relabeled.Labels["cloud.google.com/gke-nodepool"] = "pool-b"
	cases := map[string]struct {
		after *corev1.Node
		want  bool
	}{
		"a heartbeat":    {after: heartbeat, want: false},
		"NotReady":       {after: base().Ready(false).Obj(), want: true},
		"tainted":        {after: base().Taint("cloud.google.com/impending-node-termination").Obj(), want: true},
		"cordoned":       {after: base().Unschedulable().Obj(), want: true},
		"being deleted":  {after: base().Deleting().Obj(), want: true},
		"another domain": {after: relabeled, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := nodeChanged(base().Obj(), tc.after); got != tc.want {
				t.Errorf("nodeChanged() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestHandlersEnqueueOnHealthChanges: a Pod bound to a node or turned Ready enqueues its slice; a
// Pod that binds (or is created bound) to a Node enqueues its own slice only (the slices of the
// unbound Pods pinned to it are placement's to wake: controllers/placement, TestPodHandler); a
// Node event enqueues the slices of the Pods bound to that Node (the spec.nodeName index), and a
// Node heartbeat enqueues nothing.
func TestHandlersEnqueueOnHealthChanges(t *testing.T) {
	pod := func(name, slice, node string, ready bool) *corev1.Pod {
		return testutil.MakePod(name, "ns").Label(tpuv1alpha1.SliceLabel, slice).NodeName(node).Ready(ready).Obj()
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithIndex(&corev1.Pod{}, slicectrl.NodeNameIndex, slicectrl.NodeNameIndexValue).
		WithObjects(pod("a-0", "a", "n1", true), pod("a-1", "a", "n1", true), pod("b-0", "b", "n1", true), pod("c-0", "c", "n2", true),
			testutil.MakePod("d-0", "ns").Label(tpuv1alpha1.SliceLabel, "d").PinnedTo("n3").Obj()).Build()
	r := &TPUSliceAssignmentReconciler{client: c, bindSettleTime: -1, clock: clock.RealClock{}, seen: newObservations(0)}
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
	newQueue := func() queue {
		return workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	}
	cases := map[string]struct {
		fire func(q queue)
		want []string
	}{
		"a Pod bound to a node": {want: []string{"a"}, fire: func(q queue) {
			r.podHandler().Update(t.Context(), event.UpdateEvent{ObjectOld: pod("a-0", "a", "", false), ObjectNew: pod("a-0", "a", "n1", false)}, q)
		}},
		"a Pod bound to a Node another slice's Pod is pinned to: only its own slice": {want: []string{"e"}, fire: func(q queue) {
			r.podHandler().Update(t.Context(), event.UpdateEvent{ObjectOld: pod("e-0", "e", "", false), ObjectNew: pod("e-0", "e", "n3", false)}, q)
		}},
		"a Pod created bound to a Node another slice's Pod is pinned to: only its own slice": {want: []string{"e"}, fire: func(q queue) {
			r.podHandler().Create(t.Context(), event.CreateEvent{Object: pod("e-0", "e", "n3", false)}, q)
		}},
		"a Pod turned Ready": {want: []string{"a"}, fire: func(q queue) {
			r.podHandler().Update(t.Context(), event.UpdateEvent{ObjectOld: pod("a-0", "a", "n1", false), ObjectNew: pod("a-0", "a", "n1", true)}, q)
		}},
		"a Node went NotReady": {want: []string{"a", "b"}, fire: func(q queue) {
			r.nodeHandler().Update(t.Context(), event.UpdateEvent{ObjectOld: testutil.MakeNode("n1").Ready(true).Obj(), ObjectNew: testutil.MakeNode("n1").Ready(false).Obj()}, q)
		}},
		"a Node deleted": {want: []string{"c"}, fire: func(q queue) {
			r.nodeHandler().Delete(t.Context(), event.DeleteEvent{Object: testutil.MakeNode("n2").Obj()}, q)
		}},
		"a Node's heartbeat": {fire: func(q queue) {
			beat := testutil.MakeNode("n1").Ready(true).Obj()
			beat.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
			r.nodeHandler().Update(t.Context(), event.UpdateEvent{ObjectOld: testutil.MakeNode("n1").Ready(true).Obj(), ObjectNew: beat}, q)
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			q := newQueue()
			defer q.ShutDown()
			tc.fire(q)
			if diff := cmp.Diff(tc.want, drain(q), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("enqueued slices (-want,+got):\n%s", diff)
			}
		})
	}
}
