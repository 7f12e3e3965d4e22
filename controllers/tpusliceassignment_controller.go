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
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
)

// +kubebuilder:rbac:groups=tpu.ray.io,resources=tpusliceassignments,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=tpu.ray.io,resources=tpusliceassignments/status,verbs=get;update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=ray.io,resources=rayclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// conflictRequeueDelay is how soon a slice is reconciled again after a write lost a conflict.
const conflictRequeueDelay = 50 * time.Millisecond

// SliceReconciler keeps one TPUSliceAssignment's claims equal to its live Pods.
type SliceReconciler struct {
	client     client.Client
	reader     client.Reader
	recorder   recorder.EventRecorder
	pendingTTL time.Duration
	// bindSettleTime is how long a slice must go without new claims before its claims are bound.
	bindSettleTime time.Duration
	now            func() time.Time
}

// NewSliceReconciler returns a reconciler reading through mgr's cache and, to confirm a release,
// its API reader.
func NewSliceReconciler(mgr ctrl.Manager, opts Options) *SliceReconciler {
	return &SliceReconciler{
		client:         mgr.GetClient(),
		reader:         mgr.GetAPIReader(),
		recorder:       mgr.GetEventRecorder("tpu-slice-operator"),
		pendingTTL:     opts.PendingTTL,
		bindSettleTime: opts.BindSettle,
		now:            time.Now,
	}
}

// SetupWithManager watches slices, the TPU worker Pods that carry a slice label and RayClusters.
func (r *SliceReconciler) SetupWithManager(mgr ctrl.Manager, workers int) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("tpusliceassignment").
		For(&tpuv1alpha1.TPUSliceAssignment{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToSlice)).
		Watches(&rayv1.RayCluster{}, handler.EnqueueRequestsFromMapFunc(r.rayClusterToSlices)).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(r)
}

func podToSlice(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[constants.SliceLabel]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}

func (r *SliceReconciler) rayClusterToSlices(ctx context.Context, obj client.Object) []reconcile.Request {
	var list tpuv1alpha1.TPUSliceAssignmentList
	if err := r.client.List(ctx, &list, client.InNamespace(obj.GetNamespace()),
		client.MatchingLabels{constants.ClusterLabel: naming.LabelValue(obj.GetName())}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing slices of RayCluster", "rayCluster", klog.KObj(obj))
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// Reconcile brings one slice's claims in line with its Pods and removes the slice when its
// RayCluster generation is gone or it is an empty replica above the group's count.
func (r *SliceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	slice := &tpuv1alpha1.TPUSliceAssignment{}
	if err := r.client.Get(ctx, req.NamespacedName, slice); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if slice.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}

	rc, err := r.rayCluster(ctx, slice)
	if err != nil {
		return ctrl.Result{}, err
	}
	if rc == nil || rc.UID != slice.Spec.RayClusterUID {
		return ctrl.Result{}, r.deleteSlice(ctx, slice, rc, "its RayCluster generation "+string(slice.Spec.RayClusterUID)+" no longer exists")
	}

	pods, err := r.slicePods(ctx, r.client, slice)
	if err != nil {
		return ctrl.Result{}, err
	}
	d := lifecycle.Decide(slice, pods, r.now(), r.pendingTTL)
	if d.Destructive {
		// Releases and deletions are decided on live data, and the status write below is
		// conditioned on the live resourceVersion: a claim made since cannot be removed.
		if err := r.reader.Get(ctx, req.NamespacedName, slice); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		if pods, err = r.slicePods(ctx, r.reader, slice); err != nil {
			return ctrl.Result{}, err
		}
		d = lifecycle.Decide(slice, pods, r.now(), r.pendingTTL)
	}

	if wait := r.bindSettle(slice, d); wait > 0 {
		// Claims are still arriving: writing now would make the next claim's write conflict.
		return ctrl.Result{RequeueAfter: wait}, nil
	}

	updated := slice.DeepCopy()
	if lifecycle.ApplyStatus(&updated.Status, d) {
		if err := r.client.Status().Update(ctx, updated); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				// A claim or release landed since the read: decide again on fresh data.
				return ctrl.Result{RequeueAfter: conflictRequeueDelay}, nil
			}
			return ctrl.Result{}, fmt.Errorf("updating claims of slice %s: %w", slice.Name, err)
		}
		r.recordChanges(rc, slice, d)
	}
	for _, dup := range d.Duplicates {
		r.recorder.Eventf(dup.Pod, slice, corev1.EventTypeWarning, ReasonDuplicateWorkerDeleted, "Delete",
			noteDuplicateWorkerDeleted, dup.WorkerID, slice.Name, dup.Holder)
		uid := dup.Pod.UID
		if err := r.client.Delete(ctx, dup.Pod, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("deleting duplicate TPU worker Pod %s: %w", dup.Pod.Name, err)
		}
		log.Info("Deleted late TPU worker Pod whose ID another Pod holds", "pod", klog.KObj(dup.Pod), "workerID", dup.WorkerID, "holder", dup.Holder)
	}

	if len(updated.Status.Claims) == 0 && slice.Spec.ReplicaIndex >= replicas(rc, slice.Spec.GroupName) {
		return ctrl.Result{}, r.deleteSlice(ctx, updated, rc, "it is empty and above the worker group's replica count")
	}
	return ctrl.Result{RequeueAfter: d.RequeueAfter}, nil
}

// bindSettle returns how long to wait before a bookkeeping write (binding claims, the Ready
// condition and its counts): while a slice is still receiving claims (its newest claim, or, before
// the first, its creation, is younger than BindSettle), every such write would land between two
// admissions and make the next claim's write conflict. So it waits for the burst to end and writes
// once. Releases and repairs never wait.
func (r *SliceReconciler) bindSettle(slice *tpuv1alpha1.TPUSliceAssignment, d lifecycle.Decision) time.Duration {
	if r.bindSettleTime <= 0 || d.Destructive {
		return 0
	}
	newest := slice.CreationTimestamp.Time
	for _, c := range slice.Status.Claims {
		if c.ClaimedAt.After(newest) {
			newest = c.ClaimedAt.Time
		}
	}
	// claimedAt has second precision: count from the end of its second.
	if wait := newest.Add(time.Second + r.bindSettleTime).Sub(r.now()); wait > 0 {
		return wait
	}
	return 0
}

func (r *SliceReconciler) recordChanges(rc *rayv1.RayCluster, slice *tpuv1alpha1.TPUSliceAssignment, d lifecycle.Decision) {
	for _, c := range d.Bound {
		pod := &corev1.Pod{}
		pod.Name, pod.Namespace, pod.UID = c.PodName, slice.Namespace, c.PodUID
		r.recorder.Eventf(pod, slice, corev1.EventTypeNormal, ReasonWorkerIDAssigned, "Bind",
			noteWorkerIDAssigned, c.WorkerID, slice.Name, slice.Spec.ReplicaIndex)
	}
	for _, c := range d.Repaired {
		pod := &corev1.Pod{}
		pod.Name, pod.Namespace, pod.UID = c.PodName, slice.Namespace, c.PodUID
		r.recorder.Eventf(pod, slice, corev1.EventTypeWarning, ReasonClaimRepaired, "Claim",
			noteClaimRepaired, c.WorkerID, slice.Name)
	}
	for _, rel := range d.Released {
		metrics.ClaimsReleased.WithLabelValues(rel.Reason).Inc()
		r.recorder.Eventf(rc, slice, corev1.EventTypeNormal, ReasonClaimReleased, "Release",
			noteClaimReleased, rel.Claim.WorkerID, slice.Name, rel.Reason)
	}
}

// rayCluster returns the slice's RayCluster, or nil when it does not exist. A missing or
// different-UID answer from the cache is confirmed by a live read before anything is deleted.
func (r *SliceReconciler) rayCluster(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment) (*rayv1.RayCluster, error) {
	key := types.NamespacedName{Namespace: slice.Namespace, Name: slice.Spec.RayClusterName}
	rc := &rayv1.RayCluster{}
	err := r.client.Get(ctx, key, rc)
	if err == nil && rc.UID == slice.Spec.RayClusterUID {
		return rc, nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	if err := r.reader.Get(ctx, key, rc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return rc, nil
}

// slicePods lists the Pods labeled with the slice.
func (r *SliceReconciler) slicePods(ctx context.Context, reader client.Reader, slice *tpuv1alpha1.TPUSliceAssignment) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := reader.List(ctx, &pods, client.InNamespace(slice.Namespace), client.MatchingLabels{constants.SliceLabel: slice.Name}); err != nil {
		return nil, fmt.Errorf("listing Pods of slice %s: %w", slice.Name, err)
	}
	return pods.Items, nil
}

// deleteSlice deletes the slice conditional on the resourceVersion the decision was made on.
func (r *SliceReconciler) deleteSlice(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment, rc *rayv1.RayCluster, why string) error {
	rv, uid := slice.ResourceVersion, slice.UID
	if err := r.client.Delete(ctx, slice, client.Preconditions{UID: &uid, ResourceVersion: &rv}); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil // changed or gone since the read; a newer event reconciles it again.
		}
		return fmt.Errorf("deleting slice %s: %w", slice.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Deleted TPUSliceAssignment", "slice", klog.KObj(slice), "reason", why)
	if rc != nil {
		r.recorder.Eventf(rc, slice, corev1.EventTypeNormal, ReasonStaleSliceRemoved, "Delete", noteStaleSliceRemoved, slice.Name, why)
	}
	return nil
}

func replicas(rc *rayv1.RayCluster, group string) int32 {
	n, _ := claims.DesiredReplicas(rc, group)
	return n
}
