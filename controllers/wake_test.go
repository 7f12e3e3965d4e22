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
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
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
	r := &TPUSliceAssignmentReconciler{client: c}
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
	r := &TPUSliceAssignmentReconciler{client: c, bindSettleTime: -1}
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
