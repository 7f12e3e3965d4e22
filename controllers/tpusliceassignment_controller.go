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
	"slices"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/gate"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/slicectrl"
	"github.com/ray-tpu/tpu-slice-operator/internal/tombstones"
)

// +kubebuilder:rbac:groups=tpu.ray.io,resources=tpusliceassignments,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=tpu.ray.io,resources=tpusliceassignments/status,verbs=get;update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=ray.io,resources=rayclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// conflictRequeueDelay is how soon a slice is reconciled again after a write lost a conflict.
const conflictRequeueDelay = 50 * time.Millisecond

// TPUSliceAssignmentReconciler keeps one TPUSliceAssignment's claims equal to the live Pods that
// hold its worker IDs (docs/spec.md §8).
type TPUSliceAssignmentReconciler struct {
	client     client.Client
	reader     client.Reader
	recorder   recorder.EventRecorder
	tombstones *tombstones.Tombstones
	pendingTTL time.Duration
	// bindSettleTime is how long a slice must go without new claims before its claims are bound.
	bindSettleTime time.Duration
	clock          clock.PassiveClock
	metrics        *metrics.Metrics
	// seen is what this reconciler observed of each slice, on its own clock.
	seen *observations
	// assemblyTimeout is how long the gated Pods of a ChosenDomain slice wait for the rest of its
	// Pods (assembled: the bookkeeping of a slice all of whose Pods are there need not wait).
	assemblyTimeout time.Duration
	// verifiedHostLists are the host lists ConfigMaps found to be their slice's (hostlists.go).
	verifiedHostLists verifiedConfigMaps
}

// NewTPUSliceAssignmentReconciler returns a reconciler reading through mgr's cache and, to confirm
// what it removes, its API reader.
func NewTPUSliceAssignmentReconciler(mgr ctrl.Manager, opts Options) *TPUSliceAssignmentReconciler {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.Default
	}
	return &TPUSliceAssignmentReconciler{
		client:         mgr.GetClient(),
		reader:         mgr.GetAPIReader(),
		recorder:       mgr.GetEventRecorder("tpu-slice-operator"),
		tombstones:     opts.Tombstones,
		pendingTTL:     opts.PendingTTL,
		bindSettleTime: opts.BindSettle,
		clock:          opts.Clock,
		metrics:        opts.Metrics,
		seen:           newObservations(opts.BindSettle),

		assemblyTimeout: opts.AssemblyTimeout,
	}
}

// SetupWithManager watches slices, the TPU worker Pods (handlers.go), the TPU Nodes they run on
// (health.go), RayClusters and the host lists ConfigMaps (hostlists.go). Placement watches its own
// (controllers/placement).
func (r *TPUSliceAssignmentReconciler) SetupWithManager(mgr ctrl.Manager, workers int) error {
	// Every replica watches the slices from its start, leader or not, so a replica that becomes the
	// leader times the pending TTL from when it first saw each claim, not from its election.
	informer, err := mgr.GetCache().GetInformer(context.Background(), &tpuv1alpha1.TPUSliceAssignment{})
	if err != nil {
		return fmt.Errorf("getting the slice informer: %w", err)
	}
	if _, err := informer.AddEventHandler(r.observer()); err != nil {
		return fmt.Errorf("watching slices: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("tpusliceassignment").
		Watches(&tpuv1alpha1.TPUSliceAssignment{}, r.sliceHandler()).
		Watches(&corev1.Pod{}, r.podHandler()).
		Watches(&corev1.Node{}, r.nodeHandler()).
		Watches(&rayv1.RayCluster{}, handler.EnqueueRequestsFromMapFunc(r.rayClusterToSlices)).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(configMapToSlice)).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(r)
}

func (r *TPUSliceAssignmentReconciler) rayClusterToSlices(ctx context.Context, obj client.Object) []reconcile.Request {
	var list tpuv1alpha1.TPUSliceAssignmentList
	if err := r.client.List(ctx, &list, client.InNamespace(obj.GetNamespace()),
		client.MatchingLabels{tpuv1alpha1.ClusterLabel: naming.LabelValue(obj.GetName())}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing slices of RayCluster", "rayCluster", klog.KObj(obj))
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// Reconcile brings one slice's claims in line with the Pods that hold its worker IDs, writes its
// health, re-creates a slice that live Pods still hold IDs of, and removes the slice when its
// RayCluster UID is gone or it is an empty replica above the group's count. Placing a ChosenDomain
// slice is the placement reconciler's (controllers/placement).
func (r *TPUSliceAssignmentReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	slice := &tpuv1alpha1.TPUSliceAssignment{}
	if err := r.client.Get(ctx, req.NamespacedName, slice); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		r.seen.forget(req.NamespacedName)
		if slice, err = r.recreate(ctx, req.NamespacedName); slice == nil || err != nil {
			return ctrl.Result{}, err
		}
	}
	if slice.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	rc, err := r.rayCluster(ctx, slice.Namespace, slice.Spec.RayClusterName, slice.Spec.RayClusterUID)
	if err != nil {
		return ctrl.Result{}, err
	}
	if rc == nil || rc.UID != slice.Spec.RayClusterUID {
		return ctrl.Result{}, r.deleteSlice(ctx, slice, rc, "its RayCluster with UID "+string(slice.Spec.RayClusterUID)+" no longer exists")
	}
	// A slice with malformed lines is repaired only once they have been seen for the pending TTL
	// (docs/spec.md §8): a bad line may have been the claim of a Pod whose create is still in
	// flight, which no read can find before it commits, and the allocator hands out no ID of the
	// group meanwhile. Found by the model test: a pending claim's line overwritten, the repair at
	// once, its ID handed out again, then the late create committed.
	if malformed := len(slice.Status.MalformedLines) > 0; malformed {
		if wait := r.pendingTTL - r.seen.malformedFor(req.NamespacedName, true, r.clock.Now()); wait > 0 {
			ctrl.LoggerFrom(ctx).Info("Slice holds stored lines that do not parse; repairing them from the live Pods once creates in flight have landed",
				"slice", klog.KObj(slice), "lines", slice.Status.MalformedLines, "after", wait)
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	} else {
		r.seen.malformedFor(req.NamespacedName, false, r.clock.Now())
	}
	// A slice with malformed lines cannot be encoded for the label's patch: it is repaired first,
	// and the repair's update event labels it.
	if len(slice.Status.MalformedLines) == 0 {
		if labeled, err := r.labelCluster(ctx, slice); labeled || err != nil {
			return ctrl.Result{}, err // the label's update event reconciles the slice again
		}
	}
	slice, pods, d, err := r.decide(ctx, slice)
	if err != nil || slice == nil {
		return ctrl.Result{}, err
	}
	// Never waits for the bind settle: a Pod that references a missing ConfigMap cannot start.
	hostListsConfigMaps, err := r.ensureHostLists(ctx, slice, pods)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wait := r.bindSettle(req.NamespacedName, d); wait > 0 && !r.assembled(slice, pods) {
		// Claims are still arriving: writing now would make the next claim's write conflict.
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	updated, requeue, err := r.write(ctx, rc, slice, pods, d, hostListsConfigMaps)
	if err != nil || requeue > 0 {
		return ctrl.Result{RequeueAfter: requeue}, err
	}
	if err := r.deleteDuplicates(ctx, slice, d); err != nil {
		return ctrl.Result{}, err
	}
	if len(updated.Status.Claims) == 0 && slice.Spec.ReplicaIndex >= replicas(rc, slice.Spec.GroupName) {
		return ctrl.Result{}, r.deleteSlice(ctx, updated, rc, "it is empty and above the worker group's replica count")
	}
	return ctrl.Result{RequeueAfter: d.RequeueAfter}, nil
}

// decide makes the slice's decision on the cache and, when it would release, add or delete
// anything, again on a live read, whose resourceVersion the write is then conditioned on: a claim
// made since cannot be removed. It returns the slice the decision was made on (nil when it is
// gone) and the Pods it was made on.
func (r *TPUSliceAssignmentReconciler) decide(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment) (*tpuv1alpha1.TPUSliceAssignment, []corev1.Pod, lifecycle.Decision, error) {
	pods, err := slicectrl.CachedPods(ctx, r.client, slice)
	if err != nil {
		return nil, nil, lifecycle.Decision{}, err
	}
	d := lifecycle.Decide(r.view(slice, pods, r.tombstoned(slice.Namespace)), r.pendingTTL)
	if !d.Destructive {
		return slice, pods, d, nil
	}
	live := &tpuv1alpha1.TPUSliceAssignment{}
	if err := r.reader.Get(ctx, client.ObjectKeyFromObject(slice), live); err != nil {
		return nil, nil, lifecycle.Decision{}, client.IgnoreNotFound(err)
	}
	lv, err := slicectrl.LivePods(ctx, r.reader, r.tombstones, live)
	if err != nil {
		return nil, nil, lifecycle.Decision{}, err
	}
	gone := func(token string) bool { return lv.Gone[token] }
	d = lifecycle.Decide(r.view(live, lv.Pods, gone), r.pendingTTL)
	outside := lv.Outside
	if expires(d) || len(live.Status.MalformedLines) > 0 {
		// A pending claim whose Pod was never seen is about to expire, or the repair of malformed
		// lines is about to rebuild the claims from the live Pods: a Pod may be running outside
		// KubeRay's labels (isolated before this process saw it, or before a restart lost the
		// tombstone), holding an ID named only by a lost or malformed line. Only a scan of the
		// namespace by spec identity can tell; it is made only here. Found by the model test: an
		// isolated Pod whose claim line was overwritten lost its ID in the repair.
		unlisted, err := r.unlistedPods(ctx, live, lv.Pods)
		if err != nil {
			return nil, nil, lifecycle.Decision{}, err
		}
		if len(unlisted) > 0 {
			lv.Pods = append(lv.Pods, unlisted...)
			for i := range unlisted {
				if lifecycle.PodLive(&unlisted[i]) {
					outside++
				}
			}
			d = lifecycle.Decide(r.view(live, lv.Pods, gone), r.pendingTTL)
		}
	}
	if outside > 0 && (d.RequeueAfter == 0 || d.RequeueAfter > r.pendingTTL) {
		// No informer event tells of the fate of a Pod outside the label selector: look again.
		d.RequeueAfter = r.pendingTTL
	}
	return live, lv.Pods, d, nil
}

// expires reports whether the decision releases a pending claim for its TTL.
func expires(d lifecycle.Decision) bool {
	return slices.ContainsFunc(d.Released, func(rel lifecycle.Release) bool { return rel.Reason == lifecycle.ReasonPendingExpired })
}

// tombstoned reports whether the Pod informer saw the Pod carrying token leave: deleted, or only
// out of the label selector. On the cached pass that is enough to look again live; the live pass
// releases only what a read by name confirms (slicectrl.LivePods).
func (r *TPUSliceAssignmentReconciler) tombstoned(namespace string) func(token string) bool {
	return func(token string) bool {
		_, ok := r.tombstones.Lookup(namespace, token)
		return ok
	}
}

// labelCluster adds KubeRay's ray.io/cluster label to a slice created before the operator set it
// (claims.NewSlice), so that `kubectl wait tpusliceassignment -l ray.io/cluster=<c>` finds it.
// Nothing the operator decides reads the label. It reports whether it patched the slice.
func (r *TPUSliceAssignmentReconciler) labelCluster(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment) (bool, error) {
	value := naming.LabelValue(slice.Spec.RayClusterName)
	if slice.Labels[rayutils.RayClusterLabelKey] == value {
		return false, nil
	}
	patch := client.MergeFrom(slice.DeepCopy())
	labeled := slice.DeepCopy()
	if labeled.Labels == nil {
		labeled.Labels = map[string]string{}
	}
	labeled.Labels[rayutils.RayClusterLabelKey] = value
	if err := r.client.Patch(ctx, labeled, patch, client.FieldOwner(constants.FieldManager)); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return true, nil
}

func (r *TPUSliceAssignmentReconciler) view(slice *tpuv1alpha1.TPUSliceAssignment, pods []corev1.Pod, gone func(token string) bool) lifecycle.View {
	now := r.clock.Now()
	pendingFor := r.seen.observe(client.ObjectKeyFromObject(slice), slice, now)
	return lifecycle.View{Slice: slice, Pods: pods, Gone: gone, PendingFor: pendingFor}
}

// write applies the decision and the slice's health (docs/spec.md §11) to its status in one
// update, conditional on the resourceVersion the decision was made on, and records what changed.
// A lost conflict asks to decide again on fresh data.
func (r *TPUSliceAssignmentReconciler) write(ctx context.Context, rc *rayv1.RayCluster, slice *tpuv1alpha1.TPUSliceAssignment,
	pods []corev1.Pod, d lifecycle.Decision, hostListsConfigMaps []string) (*tpuv1alpha1.TPUSliceAssignment, time.Duration, error) {
	updated := slice.DeepCopy()
	changed := lifecycle.ApplyStatus(&updated.Status, d)
	if !slices.Equal(updated.Status.HostListsConfigMaps, hostListsConfigMaps) {
		updated.Status.HostListsConfigMaps, changed = hostListsConfigMaps, true
	}
	res, err := r.health(ctx, slice, updated.Status.Claims, pods)
	if err != nil {
		return nil, 0, err
	}
	if !applyHealth(&updated.Status, res) && !changed {
		return updated, 0, nil
	}
	if err := r.client.Status().Update(ctx, updated, client.FieldOwner(constants.FieldManager)); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil, conflictRequeueDelay, nil
		}
		return nil, 0, fmt.Errorf("updating claims of slice %s: %w", slice.Name, err)
	}
	if len(d.MalformedLines) > 0 {
		ctrl.LoggerFrom(ctx).Info("Dropped stored lines of slice that do not parse and rebuilt its claims from the live Pods",
			"slice", klog.KObj(slice), "lines", d.MalformedLines)
	}
	r.recordChanges(rc, slice, d)
	r.recordHealth(ctx, rc, slice, updated)
	return updated, 0, nil
}

// deleteDuplicates deletes the Pods this operator admitted whose worker ID another live Pod of the
// slice holds, each conditional on its UID.
func (r *TPUSliceAssignmentReconciler) deleteDuplicates(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment, d lifecycle.Decision) error {
	for _, dup := range d.Duplicates {
		r.recorder.Eventf(dup.Pod, slice, corev1.EventTypeWarning, tpuv1alpha1.ReasonTPUWorkerIDTaken, "Delete",
			noteTPUWorkerIDTaken, dup.WorkerID, slice.Name, dup.Holder)
		uid := dup.Pod.UID
		if err := r.client.Delete(ctx, dup.Pod, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting duplicate TPU worker Pod %s: %w", dup.Pod.Name, err)
		}
		r.metrics.PodsDeleted.Inc()
		ctrl.LoggerFrom(ctx).Info("Deleted TPU worker Pod whose ID another live Pod holds", "pod", klog.KObj(dup.Pod),
			"workerID", dup.WorkerID, "holder", dup.Holder)
	}
	return nil
}

// bindSettle returns how long to wait before a bookkeeping write (binding claims, the conditions
// and counts): while a slice is still receiving claims or Pods (its claims changed, or a Pod of it
// was created, as this reconciler saw them, less than BindSettle ago), every such write would land
// between two admissions and make the next claim's write conflict. So it waits for the burst to
// end and writes once, or once every settleCapFactor settles while it goes on. Releases, repairs
// and deletions never wait. Both ends of the wait are this process's clock.
func (r *TPUSliceAssignmentReconciler) bindSettle(key types.NamespacedName, d lifecycle.Decision) time.Duration {
	if r.bindSettleTime <= 0 || d.Destructive {
		return 0
	}
	return r.seen.settleWait(key, r.clock.Now())
}

// assembled reports whether slice is a ChosenDomain slice not yet released whose every worker ID
// a live gated Pod of it holds (gate.Assemble without the timeout): no claim of it is still to
// come, so its bookkeeping need not wait for the bind settle while its Pods go to the placement
// reconciler (docs/spec.md §8, §12). Its cost is O(Pods), only while the slice has all its claims.
func (r *TPUSliceAssignmentReconciler) assembled(slice *tpuv1alpha1.TPUSliceAssignment, pods []corev1.Pod) bool {
	if slice.Spec.Placement != tpuv1alpha1.PlacementChosenDomain || slice.Status.Domain != "" ||
		int32(len(slice.Status.Claims)) != slice.Spec.Hosts { //nolint:gosec // claims <= hosts <= 2,400.
		return false
	}
	asm := gate.Assemble(slice.Spec.Hosts, slicectrl.Of(slice, pods), r.clock.Now(), r.assemblyTimeout)
	return asm.Ready && !asm.TimedOut
}

func (r *TPUSliceAssignmentReconciler) recordChanges(rc *rayv1.RayCluster, slice *tpuv1alpha1.TPUSliceAssignment, d lifecycle.Decision) {
	if len(d.MalformedLines) > 0 {
		r.recorder.Eventf(rc, slice, corev1.EventTypeWarning, tpuv1alpha1.ReasonTPUSliceMalformed, "Repair",
			"%s", slicectrl.BoundedNote(fmt.Sprintf(noteTPUSliceMalformed, slice.Name, d.Malformed.Message)))
	}
	if len(d.Adopted) > 0 {
		r.metrics.ClaimsAdopted.WithLabelValues(metrics.AdoptedByReconciler).Add(float64(len(d.Adopted)))
	}
	for _, rel := range d.Released {
		r.metrics.ClaimsReleased.WithLabelValues(rel.Reason).Inc()
	}
	for _, e := range claimEvents(rc, slice, d) {
		r.recorder.Eventf(e.regarding, slice, e.eventType, e.reason, e.action, "%s", e.note)
	}
	if conflictChanged(slice, d) {
		for _, c := range d.Conflicts {
			r.recorder.Eventf(c.Pod, slice, corev1.EventTypeWarning, tpuv1alpha1.ReasonTPUIdentityConflict, "Adopt",
				noteTPUIdentityConflict, c.WorkerID, slice.Name, c.Why)
		}
	}
}

// conflictChanged reports whether the decision's Conflict condition says something new: its Events
// are recorded once per change, not on every reconcile.
func conflictChanged(slice *tpuv1alpha1.TPUSliceAssignment, d lifecycle.Decision) bool {
	for _, c := range slice.Status.Conditions {
		if c.Type == tpuv1alpha1.ConditionConflict {
			return c.Message != d.Conflict.Message
		}
	}
	return len(d.Conflicts) > 0
}

// rayCluster returns the RayCluster name, or nil when it does not exist. A missing answer, or one
// of another UID than uid, from the cache is confirmed by a live read before anything is deleted.
func (r *TPUSliceAssignmentReconciler) rayCluster(ctx context.Context, namespace, name string, uid types.UID) (*rayv1.RayCluster, error) {
	return slicectrl.RayCluster(ctx, r.client, r.reader, namespace, name, uid)
}

// deleteSlice deletes the slice conditional on the resourceVersion the decision was made on.
func (r *TPUSliceAssignmentReconciler) deleteSlice(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment, rc *rayv1.RayCluster, why string) error {
	rv, uid := slice.ResourceVersion, slice.UID
	if err := r.client.Delete(ctx, slice, client.Preconditions{UID: &uid, ResourceVersion: &rv}); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil // changed or gone since the read; a newer event reconciles it again.
		}
		return fmt.Errorf("deleting slice %s: %w", slice.Name, err)
	}
	r.seen.forget(client.ObjectKeyFromObject(slice))
	ctrl.LoggerFrom(ctx).Info("Deleted TPUSliceAssignment", "slice", klog.KObj(slice), "reason", why)
	if rc != nil {
		r.recorder.Eventf(rc, slice, corev1.EventTypeNormal, tpuv1alpha1.ReasonTPUSliceRemoved, "Delete", noteTPUSliceRemoved, slice.Name, why)
	}
	return nil
}

func replicas(rc *rayv1.RayCluster, group string) int32 {
	n, _ := claims.DesiredReplicas(rc, group)
	return n
}
