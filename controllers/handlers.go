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

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/slicectrl"
)

type queue = slicectrl.Queue

// add enqueues reqs. Events are urgent when they may free a worker ID: a Pod deleted, terminating
// or finished, or a claim removed. Those are reconciled at once. The others only add bookkeeping
// (a new claim, a new Pod whose claim is bound after the bind settle anyway): they are reconciled
// a bind settle later, coalesced by the work queue (slicectrl.Enqueue).
func (r *TPUSliceAssignmentReconciler) add(q queue, reqs []reconcile.Request, urgent bool) {
	slicectrl.Enqueue(q, reqs, urgent, r.bindSettleTime)
}

// sliceHandler enqueues a slice on its own events.
func (r *TPUSliceAssignmentReconciler) sliceHandler() handler.EventHandler {
	self := func(obj client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(obj)}}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q queue) { r.add(q, self(e.Object), false) },
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q queue) {
			// A status write of placement (status.domain, DomainChosen) lands here too: the health
			// write that follows derives Scheduled's reason from it (docs/spec.md §11).
			r.add(q, self(e.ObjectNew), !onlyAddsClaims(e.ObjectOld, e.ObjectNew))
		},
		DeleteFunc:  func(_ context.Context, e event.DeleteEvent, q queue) { r.add(q, self(e.Object), true) },
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

// podHandler enqueues the slices a Pod event concerns (slicectrl.PodToSlices) and, for a deletion,
// records the Pod's tombstone first, so that the reconcile it triggers looks the Pod up by name at
// once and releases its pending claim if it is gone (the informer's other handler that records
// tombstones for the webhook runs in no fixed order with this one). A deletion here may only be
// the Pod leaving the label selector.
func (r *TPUSliceAssignmentReconciler) podHandler() handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q queue) {
			reqs := slicectrl.PodToSlices(e.Object)
			for _, req := range reqs {
				r.seen.podCreated(req.NamespacedName, r.clock.Now())
			}
			r.add(q, reqs, false)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q queue) {
			urgent := slicectrl.StoppedLiving(e.ObjectOld, e.ObjectNew)
			r.add(q, slicectrl.PodToSlices(e.ObjectOld), urgent)
			r.add(q, slicectrl.PodToSlices(e.ObjectNew), urgent)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q queue) {
			if pod, ok := e.Object.(*corev1.Pod); ok && r.tombstones != nil {
				r.tombstones.Record(pod)
			}
			r.add(q, slicectrl.PodToSlices(e.Object), true)
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q queue) {
			r.add(q, slicectrl.PodToSlices(e.Object), true)
		},
	}
}
