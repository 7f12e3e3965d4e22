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
	"context"
	"fmt"
	"maps"
	"slices"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/health"
	"github.com/ray-tpu/tpu-slice-operator/internal/slicectrl"
)

// Slice health (docs/spec.md §11): the reconciler observes where each host's Pod runs and whether
// it is Ready, and writes it, with the Scheduled, Placed, Ready and Degraded conditions, in the same
// status update as the claims. It never deletes, evicts or cordons anything for it.

// nodeHandler enqueues, for a TPU Node that appeared, went or changed in what health reads, the
// slices of the Pods bound to it, a bind settle later (coalesced with the other events of that
// second: a node pool under maintenance changes every Node at once).
func (r *TPUSliceAssignmentReconciler) nodeHandler() handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q queue) {
			r.add(q, r.nodeToSlices(ctx, e.Object), false)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q queue) {
			if nodeChanged(e.ObjectOld, e.ObjectNew) {
				r.add(q, r.nodeToSlices(ctx, e.ObjectNew), false)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q queue) {
			r.add(q, r.nodeToSlices(ctx, e.Object), false)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q queue) {
			r.add(q, r.nodeToSlices(ctx, e.Object), false)
		},
	}
}

// nodeChanged reports whether a Node update changed what slice health reads: its labels, taints, unschedulable flag, deletion, its Ready condition's status (not its
// heartbeat), or its allocatable TPU chips.
func nodeChanged(oldObj, newObj client.Object) bool {
	before, ok1 := oldObj.(*corev1.Node)
	after, ok2 := newObj.(*corev1.Node)
	if !ok1 || !ok2 {
		return true
	}
	return !maps.Equal(before.Labels, after.Labels) || before.Spec.Unschedulable != after.Spec.Unschedulable ||
		(before.DeletionTimestamp == nil) != (after.DeletionTimestamp == nil) ||
		!slices.EqualFunc(before.Spec.Taints, after.Spec.Taints, func(a, b corev1.Taint) bool { return a.Key == b.Key && a.Effect == b.Effect && a.Value == b.Value }) ||
		slicectrl.NodeReadyStatus(before) != slicectrl.NodeReadyStatus(after) ||
		!before.Status.Allocatable.Name(constants.TPUResourceName, resource.DecimalSI).Equal(*after.Status.Allocatable.Name(constants.TPUResourceName, resource.DecimalSI))
}

// nodeToSlices maps a Node to the slices its Pods name.
func (r *TPUSliceAssignmentReconciler) nodeToSlices(ctx context.Context, obj client.Object) []reconcile.Request {
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.MatchingFields{slicectrl.NodeNameIndex: obj.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing Pods of Node", "node", obj.GetName())
		return nil
	}
	seen := map[reconcile.Request]bool{}
	var reqs []reconcile.Request
	for i := range pods.Items {
		for _, req := range slicectrl.PodToSlices(&pods.Items[i]) {
			if !seen[req] {
				seen[req] = true
				reqs = append(reqs, req)
			}
		}
	}
	return reqs
}

// health evaluates the slice's health for the claims it is about to hold, reading each host's Node
// from the TPU Node cache.
func (r *TPUSliceAssignmentReconciler) health(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment,
	claims []tpuv1alpha1.WorkerClaim, pods []corev1.Pod) (health.Result, error) {
	byUID := make(map[types.UID]*corev1.Pod, len(pods))
	for i := range pods {
		byUID[pods[i].UID] = &pods[i]
	}
	nodes := map[string]*corev1.Node{}
	for _, c := range claims {
		pod := byUID[c.PodUID]
		if c.PodUID == "" || pod == nil || pod.Spec.NodeName == "" {
			continue
		}
		if _, done := nodes[pod.Spec.NodeName]; done {
			continue
		}
		node := &corev1.Node{}
		switch err := r.client.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node); {
		case apierrors.IsNotFound(err):
			node = nil
		case err != nil:
			return health.Result{}, fmt.Errorf("reading Node %s of slice %s: %w", pod.Spec.NodeName, slice.Name, err)
		}
		nodes[pod.Spec.NodeName] = node
	}
	return health.Evaluate(health.Input{Slice: slice, Claims: claims, Pods: pods, Node: func(name string) (*corev1.Node, bool) {
		n := nodes[name]
		return n, n != nil
	}}), nil
}

// applyHealth writes the health result into status and reports whether status changed.
func applyHealth(status *tpuv1alpha1.TPUSliceAssignmentStatus, res health.Result) bool {
	changed := false
	if status.Hosts.String() != res.Hosts.String() {
		status.Hosts = res.Hosts
		changed = true
	}
	for _, cond := range []metav1.Condition{res.Scheduled, res.Placed, res.Ready, res.Degraded} {
		if apimeta.SetStatusCondition(&status.Conditions, cond) {
			changed = true
		}
	}
	return changed
}

// transition is a health condition whose status a write changed, and the Event that reports it.
type transition struct {
	cond              metav1.Condition
	eventType, reason string
	note              string
}

// healthTransitions returns the transitions from the stored conditions before to after: a positive
// condition (Scheduled, Placed, Ready) turning True, or turning False from True (Placed: from
// anything but False); Degraded turning True, or False from True. A condition first written as
// False reports nothing: a slice starts unscheduled and not Ready.
func healthTransitions(before, after []metav1.Condition) []transition {
	type events struct{ up, down, upType, downType, upNote, downNote string }
	table := []struct {
		condType string
		events
	}{
		{tpuv1alpha1.ConditionScheduled, events{tpuv1alpha1.ReasonTPUSliceScheduled, tpuv1alpha1.ReasonTPUSliceUnscheduled,
			corev1.EventTypeNormal, corev1.EventTypeWarning, noteTPUSliceScheduled, noteTPUSliceUnscheduled}},
		{tpuv1alpha1.ConditionPlaced, events{tpuv1alpha1.ReasonTPUSlicePlaced, tpuv1alpha1.ReasonTPUSliceNotPlaced,
			corev1.EventTypeNormal, corev1.EventTypeWarning, noteTPUSlicePlaced, noteTPUSliceNotPlaced}},
		{tpuv1alpha1.ConditionReady, events{tpuv1alpha1.ReasonTPUSliceReady, tpuv1alpha1.ReasonTPUSliceNotReady,
			corev1.EventTypeNormal, corev1.EventTypeWarning, noteTPUSliceReady, noteTPUSliceNotReady}},
		{tpuv1alpha1.ConditionDegraded, events{tpuv1alpha1.ReasonTPUSliceDegraded, tpuv1alpha1.ReasonTPUSliceRecovered,
			corev1.EventTypeWarning, corev1.EventTypeNormal, noteTPUSliceDegraded, noteTPUSliceRecovered}},
	}
	var out []transition
	for _, row := range table {
		now := apimeta.FindStatusCondition(after, row.condType)
		if now == nil {
			continue
		}
		was := metav1.ConditionStatus("")
		if c := apimeta.FindStatusCondition(before, row.condType); c != nil {
			was = c.Status
		}
		switch {
		case now.Status == metav1.ConditionTrue && was != metav1.ConditionTrue:
			out = append(out, transition{cond: *now, eventType: row.upType, reason: row.up, note: row.upNote})
		case now.Status == metav1.ConditionFalse && was == metav1.ConditionTrue,
			now.Status == metav1.ConditionFalse && was != metav1.ConditionFalse && row.condType == tpuv1alpha1.ConditionPlaced:
			out = append(out, transition{cond: *now, eventType: row.downType, reason: row.down, note: row.downNote})
		}
	}
	return out
}

// maxNoteLength keeps an Event's note under the 1 KiB events.k8s.io accepts.
const maxNoteLength = 1000

// recordHealth records an Event on the RayCluster for each health transition the write made, and
// the health metrics: the time to the slice's first Ready, and Degraded transitions by reason.
func (r *TPUSliceAssignmentReconciler) recordHealth(ctx context.Context, rc *rayv1.RayCluster, before, after *tpuv1alpha1.TPUSliceAssignment) {
	for _, t := range healthTransitions(before.Status.Conditions, after.Status.Conditions) {
		note := fmt.Sprintf(t.note, after.Name, after.Spec.ReplicaIndex, t.cond.Message)
		if len(note) > maxNoteLength {
			note = note[:maxNoteLength-3] + "..."
		}
		r.recorder.Eventf(rc, after, t.eventType, t.reason, "Observe", "%s", note)
		ctrl.LoggerFrom(ctx).Info("Slice health changed", "slice", client.ObjectKeyFromObject(after), "condition", t.cond.Type,
			"status", t.cond.Status, "reason", t.cond.Reason, "message", t.cond.Message)
		switch {
		case t.reason == tpuv1alpha1.ReasonTPUSliceReady && !health.WasReady(before.Status.Conditions):
			r.metrics.SliceTimeToReady.Observe(r.clock.Since(after.CreationTimestamp.Time).Seconds())
		case t.reason == tpuv1alpha1.ReasonTPUSliceDegraded:
			r.metrics.SliceDegraded.WithLabelValues(t.cond.Reason).Inc()
		}
	}
}
