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
	"slices"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
)

type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// Events are urgent when they may free a worker ID: a Pod deleted, terminating or finished, or a
// claim removed. Those are reconciled at once. The others only add bookkeeping (a new claim, a new
// Pod whose claim is bound after the bind settle anyway), and during a burst there is one per
// admission: they are reconciled a bind settle later, coalesced by the work queue, so that a
// 2,240-host slice created Pod by Pod costs a handful of reconciles instead of one per Pod, each of
// which reads every claim and Pod of the slice.
func (r *TPUSliceAssignmentReconciler) add(q queue, reqs []reconcile.Request, urgent bool) {
	for _, req := range reqs {
		if urgent || r.bindSettleTime <= 0 {
			q.Add(req)
		} else {
			q.AddAfter(req, r.bindSettleTime)
		}
	}
}

// sliceHandler enqueues a slice on its own events.
func (r *TPUSliceAssignmentReconciler) sliceHandler() handler.EventHandler {
	self := func(obj client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(obj)}}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q queue) { r.add(q, self(e.Object), false) },
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q queue) {
			r.add(q, self(e.ObjectNew), !onlyAddsClaims(e.ObjectOld, e.ObjectNew))
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q queue) {
			// The slice's reconcile gives its domain back; the slices waiting for one look again.
			r.add(q, self(e.Object), true)
			r.add(q, r.waitingSlices(ctx), false)
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q queue) { r.add(q, self(e.Object), true) },
	}
}

// onlyAddsClaims reports whether a slice update only appended claims (the webhook's writes).
func onlyAddsClaims(oldObj, newObj client.Object) bool {
	before, ok1 := oldObj.(*tpuv1alpha1.TPUSliceAssignment)
	after, ok2 := newObj.(*tpuv1alpha1.TPUSliceAssignment)
	if !ok1 || !ok2 {
		return false
	}
	kept := make(map[tpuv1alpha1.WorkerClaim]bool, len(after.Status.Claims))
	for _, c := range after.Status.Claims {
		kept[c] = true
	}
	for _, c := range before.Status.Claims {
		if !kept[c] {
			return false
		}
	}
	return true
}

// podHandler enqueues the slices a Pod event concerns (podToSlices) and, for a deletion, records
// the Pod's tombstone first, so that the reconcile it triggers looks the Pod up by name at once and
// releases its pending claim if it is gone (the informer's other handler that records tombstones
// for the webhook runs in no fixed order with this one). A deletion here may only be the Pod
// leaving the label selector.
func (r *TPUSliceAssignmentReconciler) podHandler() handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q queue) {
			reqs := podToSlices(ctx, e.Object)
			for _, req := range reqs {
				r.seen.podCreated(req.NamespacedName, r.clock.Now())
			}
			r.add(q, reqs, false)
			if pod, ok := e.Object.(*corev1.Pod); ok && pod.Spec.NodeName != "" {
				r.add(q, r.pinnedToSlices(ctx, pod), false) // created bound, past the scheduler
			}
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q queue) {
			urgent := stoppedLiving(e.ObjectOld, e.ObjectNew)
			r.add(q, podToSlices(ctx, e.ObjectOld), urgent)
			r.add(q, podToSlices(ctx, e.ObjectNew), urgent)
			before, ok1 := e.ObjectOld.(*corev1.Pod)
			after, ok2 := e.ObjectNew.(*corev1.Pod)
			if ok1 && ok2 && before.Spec.NodeName == "" && after.Spec.NodeName != "" {
				r.add(q, r.pinnedToSlices(ctx, after), false)
			}
			if urgent && e.ObjectNew.(*corev1.Pod).Spec.NodeName != "" { //nolint:forcetypeassert // stoppedLiving checked it.
				r.add(q, r.waitingSlices(ctx), false) // its chips are free again
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q queue) {
			pod, ok := e.Object.(*corev1.Pod)
			if ok && r.tombstones != nil {
				r.tombstones.Record(pod)
			}
			r.add(q, podToSlices(ctx, e.Object), true)
			if ok && pod.Spec.NodeName != "" {
				r.add(q, r.waitingSlices(ctx), false) // its chips are free again
			}
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q queue) { r.add(q, podToSlices(ctx, e.Object), true) },
	}
}

// boundPodHandler enqueues, when a Pod bound to a TPU Node (any Pod: the bound Pods' cache) stops
// living or goes, the waiting slices that Node could change: what the Pod took of it is free
// again. A Pod on a Node that is not a TPU Node (not in the Node cache) wakes none.
func (r *TPUSliceAssignmentReconciler) boundPodHandler() handler.TypedEventHandler[client.Object, reconcile.Request] {
	freed := func(ctx context.Context, obj client.Object, q queue) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Spec.NodeName == "" {
			return
		}
		node := &corev1.Node{}
		if err := r.client.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node); err != nil {
			return // not a TPU Node, or gone: no domain gained room
		}
		r.add(q, r.waitingSlicesFor(ctx, node), false)
	}
	return handler.Funcs{
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q queue) {
			if stoppedLiving(e.ObjectOld, e.ObjectNew) {
				freed(ctx, e.ObjectNew, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q queue) { freed(ctx, e.Object, q) },
	}
}

// pinnedToSlices returns the slices of the other cached Pods that are unbound and pinned to the
// Node pod is bound to: a Pod that binds there may take the chips such a Pod waits for, and strand
// it (docs/spec.md §12, "Stranded Pods"), while nothing else of the pinned Pod's slice changes. A
// bind settle later is soon enough, and coalesces a pool's binds.
func (r *TPUSliceAssignmentReconciler) pinnedToSlices(ctx context.Context, pod *corev1.Pod) []reconcile.Request {
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.MatchingFields{NodeNameIndex: pod.Spec.NodeName}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing Pods pinned to Node", "node", pod.Spec.NodeName)
		return nil
	}
	var reqs []reconcile.Request
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Spec.NodeName == "" { // not pod itself, which is bound
			reqs = append(reqs, podToSlices(ctx, p)...)
		}
	}
	return reqs
}

// leaseHandler enqueues, when a domain Lease goes, the slices waiting for a domain.
func (r *TPUSliceAssignmentReconciler) leaseHandler() handler.EventHandler {
	return handler.Funcs{
		DeleteFunc: func(ctx context.Context, _ event.DeleteEvent, q queue) { r.add(q, r.waitingSlices(ctx), false) },
	}
}

// waitingSlices lists, from the cache, the ChosenDomain slices that no domain fitted when they
// last chose (DomainChosen False, NoDomainFits): a Pod, a slice or a Lease that went or changed
// may have made room for them.
func (r *TPUSliceAssignmentReconciler) waitingSlices(ctx context.Context) []reconcile.Request {
	return r.waitingSlicesFor(ctx)
}

// waitingSlicesFor is waitingSlices narrowed, when nodes are given, to the slices one of the Nodes
// could change (nodeCouldChange: a Node event wakes only the slices of its key and accelerator,
// not every waiting slice of the cluster).
func (r *TPUSliceAssignmentReconciler) waitingSlicesFor(ctx context.Context, nodes ...client.Object) []reconcile.Request {
	var list tpuv1alpha1.TPUSliceAssignmentList
	if err := r.client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing slices waiting for a domain")
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		s := &list.Items[i]
		if s.Spec.Placement != tpuv1alpha1.PlacementChosenDomain {
			continue
		}
		c := apimeta.FindStatusCondition(s.Status.Conditions, tpuv1alpha1.ConditionDomainChosen)
		if c == nil {
			continue
		}
		waiting := c.Status == metav1.ConditionFalse && c.Reason == tpuv1alpha1.ReasonNoDomainFits
		// A slice in a domain whose Pods are not all bound may hold a Pod gated for want of a
		// free Node there (release): a Node of that domain wakes it.
		held := c.Status == metav1.ConditionTrue && s.Status.Domain != "" && len(nodes) > 0 &&
			!apimeta.IsStatusConditionTrue(s.Status.Conditions, tpuv1alpha1.ConditionScheduled)
		if !waiting && !held {
			continue
		}
		if len(nodes) > 0 && !slices.ContainsFunc(nodes, func(n client.Object) bool {
			return nodeCouldChange(s, n) && (waiting || n.GetLabels()[s.Spec.AffinityTopologyKey] == s.Status.Domain)
		}) {
			continue
		}
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(s)})
	}
	return reqs
}

// stoppedLiving reports whether a Pod update made it terminating, Failed or Succeeded.
func stoppedLiving(oldObj, newObj client.Object) bool {
	before, ok1 := oldObj.(*corev1.Pod)
	after, ok2 := newObj.(*corev1.Pod)
	return ok1 && ok2 && lifecycle.PodLive(before) && !lifecycle.PodLive(after)
}

// podToSlices maps a Pod to the slice its spec identity names and, when it differs, the slice its
// label names (a hint: the reconcile of that slice finds out whether the Pod holds anything there).
func podToSlices(_ context.Context, obj client.Object) []reconcile.Request {
	var reqs []reconcile.Request
	add := func(name string) {
		if name != "" && (len(reqs) == 0 || reqs[0].Name != name) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}})
		}
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		if id, ok := identity.FromPod(pod); ok {
			add(id.SliceName())
		}
	}
	add(obj.GetLabels()[tpuv1alpha1.SliceLabel])
	return reqs
}
