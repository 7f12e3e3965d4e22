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
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	placementctrl "github.com/ray-tpu/tpu-slice-operator/controllers/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tombstones"
)

// The Reconcile tests run the reconciler on the fake client: one store stands for the API server
// (the reconciler's live reads and every write), seen by the reconciler's cached reads through
// the operator's label-selected Pod cache (testutil.WorkerPodCache). The clock is the test's.

// newReconcileTestReconciler is the reconciler under test: reads through cache, live reads through
// live, the defaults' pending TTL and bind settle, the test's clock.
func newReconcileTestReconciler(cache client.Client, live client.Reader, events *testutil.EventRecorder,
	deleted *tombstones.Tombstones, clock clock.PassiveClock) *TPUSliceAssignmentReconciler {
	return &TPUSliceAssignmentReconciler{
		client: cache, reader: live, recorder: events, tombstones: deleted,
		pendingTTL: DefaultPendingTTL, bindSettleTime: DefaultBindSettle, clock: clock, metrics: metrics.New(), seen: newObservations(DefaultBindSettle),
	}
}

// storedMalformed makes the slices of c read as if their stored status held lines that do not
// parse, besides the claims stored, until a write changes their resourceVersion rv (the fake
// client cannot store such a status: it refuses to encode it).
func storedMalformed(c client.WithWatch, lines []string, rv string) client.WithWatch {
	return interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if s, ok := obj.(*tpuv1alpha1.TPUSliceAssignment); ok && s.ResourceVersion == rv {
				s.Status.MalformedLines = slices.Clone(lines)
			}
			return nil
		},
	})
}

// failOnce returns interceptor funcs whose first status update and first slice deletion fail with
// err; the later ones reach the store.
func failOnce(err error) interceptor.Funcs {
	var updates, deletes atomic.Int32
	return interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if updates.Add(1) == 1 {
				return err
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if _, ok := obj.(*tpuv1alpha1.TPUSliceAssignment); ok && deletes.Add(1) == 1 {
				return err
			}
			return c.Delete(ctx, obj, opts...)
		},
	}
}

// failRayClusterGets returns interceptor funcs whose reads of a RayCluster fail with err.
func failRayClusterGets(err error) interceptor.Funcs {
	return interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*rayv1.RayCluster); ok {
				return err
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}
}

// reconcileSlice is replica of group tpu of RayCluster rc (UID uid-rc), 4 hosts, labeled as the
// webhook creates it; no claims yet.
func reconcileSlice(replica int32) *testutil.SliceWrapper {
	return testutil.MakeSlice(naming.SliceName("rc", "tpu", replica), releaseNamespace, "rc", "uid-rc", "tpu", replica, 4).
		SelectorLabels().Label(rayutils.RayClusterLabelKey, "rc")
}

// reconcileCluster is RayCluster rc (UID uid), whose group tpu asks for 2 slices of 4 hosts.
func reconcileCluster(uid types.UID) *testutil.RayClusterWrapper {
	return testutil.MakeRayCluster("rc", releaseNamespace).UID(uid).TPUGroup("tpu", "tpu-v4-podslice", "2x2x4", 4, 4, 2)
}

// reconcileRound is one Reconcile of the slice, at the test clock's t0+at, and what it returns; or,
// with onlySeen, the slice as the process's informer delivers it then, with no Reconcile (a replica
// not yet the leader).
type reconcileRound struct {
	at       time.Duration
	want     ctrl.Result
	wantErr  bool
	onlySeen bool
	// deleted, with onlySeen, delivers the slice's deletion instead.
	deleted bool
}

// reconcileOnce is a single Reconcile at t0.
func reconcileOnce(want ctrl.Result) []reconcileRound { return []reconcileRound{{want: want}} }

// reconcileSettled is the first Reconcile of a slice whose bookkeeping waits for the bind settle
// (docs/spec.md §8), then the one a settle later, returning want.
func reconcileSettled(want ctrl.Result) []reconcileRound {
	return []reconcileRound{{want: ctrl.Result{RequeueAfter: DefaultBindSettle}}, {at: DefaultBindSettle, want: want}}
}

// chosenDomain returns a copy of slice placed by a chosen domain on the node-pool key.
func chosenDomain(slice *testutil.SliceWrapper) *testutil.SliceWrapper {
	return (&testutil.SliceWrapper{TPUSliceAssignment: *slice.Obj().DeepCopy()}).Placement(tpuv1alpha1.PlacementChosenDomain, constants.NodePoolTopologyKey)
}

// gated returns copies of pods behind the operator's scheduling gate.
func gated(pods []*testutil.PodWrapper) []*testutil.PodWrapper {
	out := make([]*testutil.PodWrapper, 0, len(pods))
	for _, p := range pods {
		out = append(out, (&testutil.PodWrapper{Pod: *p.Obj().DeepCopy()}).SchedulingGate(tpuv1alpha1.PlacementSchedulingGate))
	}
	return out
}

// noFitRecheck is how often placement (controllers/placement) looks again at a slice no domain
// fits without any event.
const noFitRecheck = 30 * time.Second

// TestReconcile runs Reconcile on one slice per path of docs/spec.md §8 and checks what it leaves in
// the API server: the slice's claims and conditions, the Pods deleted, the Events recorded, and
// what each pass asks of the queue. Where a path leads to placement (§12), the placement
// reconciler then runs on the slice as its watch of the slice would run it.
func TestReconcile(t *testing.T) {
	conflict := apierrors.NewConflict(tpuv1alpha1.GroupVersion.WithResource("tpusliceassignments").GroupResource(),
		naming.SliceName("rc", "tpu", 0),
		errors.New("the object has been modified"))
	p := releasePod("p", "t-p", 0)
	// q is created after p.
	q := func(token string, id int32) *testutil.PodWrapper { return releasePod("q", token, id).Created(t0) }
	workers := []*testutil.PodWrapper{releasePod("w-0", "t-w-0", 0), releasePod("w-1", "t-w-1", 1),
		releasePod("w-2", "t-w-2", 2), releasePod("w-3", "t-w-3", 3)}
	allPending := reconcileSlice(0)
	for _, c := range testutil.Bound(4, "w") {
		allPending.Claim(c.WorkerID, c.Token, "", "")
	}
	boundP := func() *testutil.SliceWrapper { return reconcileSlice(0).Claim(0, "t-p", "p", "uid-p") }
	pendingP := func() *testutil.SliceWrapper { return reconcileSlice(0).Claim(0, "t-p", "", "") }
	claimP := tpuv1alpha1.WorkerClaim{WorkerID: 0, Token: "t-p", PodName: "p", PodUID: "uid-p"}
	cond := func(condType string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: condType, Status: status, Reason: reason}
	}
	event := func(regarding, eventType, reason string) testutil.Event {
		return testutil.Event{Regarding: releaseNamespace + "/" + regarding, Type: eventType, Reason: reason}
	}
	const normal, warning = corev1.EventTypeNormal, corev1.EventTypeWarning

	cases := map[string]struct {
		rc *testutil.RayClusterWrapper // nil: no RayCluster
		// slice is the stored slice reconciled (nil: none stored); replica names the request.
		slice   *testutil.SliceWrapper
		replica int32
		pods    []*testutil.PodWrapper
		// left are the Pods the informer saw leave its view (their tombstones).
		left []*testutil.PodWrapper
		// malformed are stored lines of the slice that do not parse, until it is written.
		malformed []string
		// faults act on the reconciler's cached reads and its writes; liveFaults on its live reads.
		faults, liveFaults interceptor.Funcs
		rounds             []reconcileRound
		// place are the rounds of the placement reconciler (controllers/placement) on the slice,
		// after rounds: the placement Events are recorded after the claim reconciler's.
		place      []reconcileRound
		wantGone   bool
		wantClaims []tpuv1alpha1.WorkerClaim
		// wantConditions are compared by type, status and reason; other types are not checked.
		wantConditions []metav1.Condition
		wantDeleted    []string
		wantEvents     []testutil.Event
		// wantClusterLabel, when set, is the slice's ray.io/cluster label.
		wantClusterLabel string
		// wantPlacement and wantKey are the kept slice's spec.placement and spec.affinityTopologyKey.
		wantPlacement tpuv1alpha1.SlicePlacement
		wantKey       string
		// wantDomain is the kept slice's status.domain.
		wantDomain string
	}{
		// Slice re-created, RayCluster generations.
		"§8 late Pods: slice gone, a live Pod it admitted holds an ID of it: re-created, claim repaired": {
			rc: reconcileCluster("uid-rc"), pods: []*testutil.PodWrapper{releasePod("p", "t-p", 2)},
			rounds:     reconcileOnce(ctrl.Result{}),
			wantClaims: []tpuv1alpha1.WorkerClaim{{WorkerID: 2, Token: "t-p", PodName: "p", PodUID: "uid-p"}},
			wantEvents: []testutil.Event{event("p", warning, tpuv1alpha1.ReasonTPUClaimRepaired)},
		},
		"§8, §12 slice gone, a live Pod of it waits behind the operator's gate: re-created ChosenDomain on the node-pool key, or it would wait for good": {
			rc: reconcileCluster("uid-rc"), pods: []*testutil.PodWrapper{releasePod("p", "t-p", 2).SchedulingGate(tpuv1alpha1.PlacementSchedulingGate)},
			rounds: reconcileOnce(ctrl.Result{}),
			// No Node in the store: no domain fits the re-created slice, which placement says.
			place:         reconcileOnce(ctrl.Result{RequeueAfter: noFitRecheck}),
			wantClaims:    []tpuv1alpha1.WorkerClaim{{WorkerID: 2, Token: "t-p", PodName: "p", PodUID: "uid-p"}},
			wantEvents:    []testutil.Event{event("p", warning, tpuv1alpha1.ReasonTPUClaimRepaired), event("rc", warning, tpuv1alpha1.ReasonTPUSliceNoDomain)},
			wantPlacement: tpuv1alpha1.PlacementChosenDomain, wantKey: constants.NodePoolTopologyKey,
		},
		"§8, §12 a running Pod of a ChosenDomain slice hidden from the cache by a label edit: the slice keeps its domain": {
			rc: reconcileCluster("uid-rc"),
			slice: reconcileSlice(0).Placement(tpuv1alpha1.PlacementChosenDomain, constants.NodePoolTopologyKey).Domain("pool-a").
				Claim(0, "t-p", "p", "uid-p"),
			pods: []*testutil.PodWrapper{releasePod("p", "t-p", 0).NodeSelector(constants.NodePoolTopologyKey, "pool-a").
				NodeName("pool-a-0").WithoutLabel(rayutils.RayNodeGroupLabelKey)},
			rounds: reconcileSettled(ctrl.Result{RequeueAfter: DefaultPendingTTL}),
			// Placement's cache shows no Pod of the slice either: a live read finds it running.
			place:      []reconcileRound{{at: DefaultBindSettle}},
			wantClaims: []tpuv1alpha1.WorkerClaim{claimP},
			// Its Node is not in the store: health says so, which is not what this case checks.
			wantEvents:    []testutil.Event{event("rc", warning, tpuv1alpha1.ReasonTPUSliceNotPlaced), event("rc", warning, tpuv1alpha1.ReasonTPUSliceDegraded)},
			wantPlacement: tpuv1alpha1.PlacementChosenDomain, wantKey: constants.NodePoolTopologyKey, wantDomain: "pool-a",
		},
		"§0 slice gone, its only Pod of an older RayCluster generation (same name, other UID): not re-created": {
			rc: reconcileCluster("uid-rc-2"), pods: []*testutil.PodWrapper{p},
			rounds: reconcileOnce(ctrl.Result{}), wantGone: true,
		},
		"§8 removed slices: RayCluster re-created under its name (new UID): the old generation's slice deleted, its Pods left (I6)": {
			rc: reconcileCluster("uid-rc-2"), slice: boundP(), pods: []*testutil.PodWrapper{p},
			rounds: reconcileOnce(ctrl.Result{}), wantGone: true,
			wantEvents: []testutil.Event{event("rc", normal, tpuv1alpha1.ReasonTPUSliceRemoved)},
		},
		"§8 removed slices: RayCluster deleted: its slice deleted with its claims, its Pods left (I6)": {
			slice: boundP(), pods: []*testutil.PodWrapper{p},
			rounds: reconcileOnce(ctrl.Result{}), wantGone: true,
		},
		"§8 a RayCluster the cache has not seen yet is read live: slice kept": {
			rc: reconcileCluster("uid-rc"), slice: boundP(), pods: []*testutil.PodWrapper{p},
			faults: failRayClusterGets(apierrors.NewNotFound(rayv1.Resource("rayclusters"), "rc")),
			rounds: reconcileSettled(ctrl.Result{}), wantClaims: []tpuv1alpha1.WorkerClaim{claimP},
		},
		"§8 a RayCluster missing from the cache whose live read fails: error, slice kept": {
			rc: reconcileCluster("uid-rc"), slice: boundP(), pods: []*testutil.PodWrapper{p},
			faults:     failRayClusterGets(apierrors.NewNotFound(rayv1.Resource("rayclusters"), "rc")),
			liveFaults: failRayClusterGets(apierrors.NewServiceUnavailable("etcd leader changed")),
			rounds:     []reconcileRound{{wantErr: true}}, wantClaims: []tpuv1alpha1.WorkerClaim{claimP},
		},

		// The ray.io/cluster label, binding.
		"§7 slice created before the ray.io/cluster label: labeled, nothing else written on that pass": {
			rc: reconcileCluster("uid-rc"), pods: []*testutil.PodWrapper{p},
			slice: testutil.MakeSlice(naming.SliceName("rc", "tpu", 0), releaseNamespace, "rc", "uid-rc", "tpu", 0, 4).
				SelectorLabels().Claim(0, "t-p", "", ""),
			rounds:     reconcileOnce(ctrl.Result{}),
			wantClaims: []tpuv1alpha1.WorkerClaim(pendingP().Obj().Status.Claims), wantClusterLabel: "rc",
		},
		"§8 binding follows the spec: pending claims bound to their Pods once the slice settles, Claimed": {
			rc: reconcileCluster("uid-rc"), slice: allPending, pods: workers,
			rounds:         reconcileSettled(ctrl.Result{}),
			wantClaims:     testutil.Bound(4, "w"),
			wantConditions: []metav1.Condition{cond(tpuv1alpha1.ConditionClaimed, metav1.ConditionTrue, tpuv1alpha1.ReasonAllHostsBound)},
			wantEvents: []testutil.Event{
				event("w-0", normal, tpuv1alpha1.ReasonTPUWorkerIDAssigned), event("w-1", normal, tpuv1alpha1.ReasonTPUWorkerIDAssigned),
				event("w-2", normal, tpuv1alpha1.ReasonTPUWorkerIDAssigned), event("w-3", normal, tpuv1alpha1.ReasonTPUWorkerIDAssigned),
			},
		},
		"§8, §12 a ChosenDomain slice whose every ID a live gated Pod holds: bound and placed at once, no bind settle": {
			rc: reconcileCluster("uid-rc"), slice: chosenDomain(allPending), pods: gated(workers),
			rounds: reconcileOnce(ctrl.Result{}),
			// No Node in the store: no domain fits, which is not what this case checks.
			place:      reconcileOnce(ctrl.Result{RequeueAfter: noFitRecheck}),
			wantClaims: testutil.Bound(4, "w"),
			wantEvents: []testutil.Event{
				event("w-0", normal, tpuv1alpha1.ReasonTPUWorkerIDAssigned), event("w-1", normal, tpuv1alpha1.ReasonTPUWorkerIDAssigned),
				event("w-2", normal, tpuv1alpha1.ReasonTPUWorkerIDAssigned), event("w-3", normal, tpuv1alpha1.ReasonTPUWorkerIDAssigned),
				event("rc", warning, tpuv1alpha1.ReasonTPUSliceNoDomain),
			},
			wantPlacement: tpuv1alpha1.PlacementChosenDomain, wantKey: constants.NodePoolTopologyKey,
		},
		"§12 a slice the webhook placed by inter-pod affinity while the operator chooses domains (--slice-placement unset: the default): one Warning": {
			rc:            reconcileCluster("uid-rc"),
			slice:         reconcileSlice(0).Placement(tpuv1alpha1.PlacementInterPodAffinity, constants.NodePoolTopologyKey).Claim(0, "t-p", "", ""),
			pods:          []*testutil.PodWrapper{p},
			rounds:        reconcileSettled(ctrl.Result{}),
			place:         []reconcileRound{{at: DefaultBindSettle}, {at: 2 * DefaultBindSettle}},
			wantClaims:    []tpuv1alpha1.WorkerClaim{claimP},
			wantEvents:    []testutil.Event{event("p", normal, tpuv1alpha1.ReasonTPUWorkerIDAssigned), event("rc", warning, tpuv1alpha1.ReasonTPUSliceInterPodAffinity)},
			wantPlacement: tpuv1alpha1.PlacementInterPodAffinity, wantKey: constants.NodePoolTopologyKey,
		},
		"§8, §12 a ChosenDomain slice still missing a Pod waits for the bind settle": {
			rc: reconcileCluster("uid-rc"), slice: chosenDomain(allPending), pods: gated(workers[:3]),
			rounds:        []reconcileRound{{want: ctrl.Result{RequeueAfter: DefaultBindSettle}}},
			wantClaims:    allPending.Obj().Status.Claims,
			wantPlacement: tpuv1alpha1.PlacementChosenDomain, wantKey: constants.NodePoolTopologyKey,
		},
		"§8 a Pod's token annotation edited (a patch): its pending claim still bound to it by its spec": {
			rc: reconcileCluster("uid-rc"), slice: pendingP(), pods: []*testutil.PodWrapper{releasePod("p", "edited", 0)},
			rounds:     reconcileSettled(ctrl.Result{}),
			wantClaims: []tpuv1alpha1.WorkerClaim{claimP},
			wantConditions: []metav1.Condition{
				cond(tpuv1alpha1.ConditionClaimed, metav1.ConditionFalse, tpuv1alpha1.ReasonHostsMissing),
				cond(tpuv1alpha1.ConditionConflict, metav1.ConditionFalse, tpuv1alpha1.ReasonNoConflict),
			},
			wantEvents: []testutil.Event{event("p", normal, tpuv1alpha1.ReasonTPUWorkerIDAssigned)},
		},

		// Conditional writes.
		"§8 conditional writes: the status update loses a conflict: requeued soon, nothing released or recorded": {
			rc: reconcileCluster("uid-rc"), slice: boundP(), left: []*testutil.PodWrapper{p},
			faults:     failOnce(conflict),
			rounds:     reconcileOnce(ctrl.Result{RequeueAfter: conflictRequeueDelay}),
			wantClaims: []tpuv1alpha1.WorkerClaim{claimP},
		},
		"§8 conditional writes: after a lost conflict the next pass decides again and releases": {
			rc: reconcileCluster("uid-rc"), slice: boundP(), left: []*testutil.PodWrapper{p},
			faults:     failOnce(conflict),
			rounds:     []reconcileRound{{want: ctrl.Result{RequeueAfter: conflictRequeueDelay}}, {at: conflictRequeueDelay, want: ctrl.Result{}}},
			wantEvents: []testutil.Event{event("rc", normal, tpuv1alpha1.ReasonTPUClaimReleased)},
		},
		"a status update that fails otherwise is an error (the queue backs off), nothing recorded": {
			rc: reconcileCluster("uid-rc"), slice: boundP(), left: []*testutil.PodWrapper{p},
			faults: failOnce(apierrors.NewInternalError(errors.New("etcd timeout"))),
			rounds: []reconcileRound{{wantErr: true}}, wantClaims: []tpuv1alpha1.WorkerClaim{claimP},
		},
		"§8 conditional writes: a slice deletion that loses a conflict (a claim made since) is no error, slice kept": {
			slice: boundP(), faults: failOnce(conflict),
			rounds: reconcileOnce(ctrl.Result{}), wantClaims: []tpuv1alpha1.WorkerClaim{claimP},
		},

		// Two live Pods at one worker ID.
		"§8 late Pods, I1: a second Pod it admitted at a held ID is deleted, with an Event on it": {
			rc: reconcileCluster("uid-rc"), slice: boundP(), pods: []*testutil.PodWrapper{p, q("t-q", 0)},
			rounds:      reconcileOnce(ctrl.Result{}),
			wantClaims:  []tpuv1alpha1.WorkerClaim{claimP},
			wantDeleted: []string{"q"},
			wantEvents:  []testutil.Event{event("q", warning, tpuv1alpha1.ReasonTPUWorkerIDTaken)},
		},
		"§8 late Pods: two Pods it admitted at one unrecorded ID: the older recorded, the later deleted": {
			rc: reconcileCluster("uid-rc"), slice: reconcileSlice(0), pods: []*testutil.PodWrapper{q("t-q", 0), p},
			rounds:      reconcileOnce(ctrl.Result{}),
			wantClaims:  []tpuv1alpha1.WorkerClaim{claimP},
			wantDeleted: []string{"q"},
			wantEvents: []testutil.Event{
				event("p", warning, tpuv1alpha1.ReasonTPUClaimRepaired), event("q", warning, tpuv1alpha1.ReasonTPUWorkerIDTaken),
			},
		},
		"§8, I6: a Pod without a claim token at a held ID is reported (Conflict) and left running": {
			rc: reconcileCluster("uid-rc"), slice: boundP(), pods: []*testutil.PodWrapper{p, q("", 0)},
			rounds:         reconcileSettled(ctrl.Result{}),
			wantClaims:     []tpuv1alpha1.WorkerClaim{claimP},
			wantConditions: []metav1.Condition{cond(tpuv1alpha1.ConditionConflict, metav1.ConditionTrue, tpuv1alpha1.ReasonIdentityConflict)},
			wantEvents:     []testutil.Event{event("q", warning, tpuv1alpha1.ReasonTPUIdentityConflict)},
		},

		// Empty slices and the replica count.
		"§8 removed slices: an empty slice above the group's replica count is deleted": {
			rc: reconcileCluster("uid-rc"), slice: reconcileSlice(2), replica: 2,
			rounds: reconcileSettled(ctrl.Result{}), wantGone: true,
			wantEvents: []testutil.Event{event("rc", normal, tpuv1alpha1.ReasonTPUSliceRemoved)},
		},
		"an empty slice within the replica count is kept": {
			rc: reconcileCluster("uid-rc"), slice: reconcileSlice(1), replica: 1,
			rounds: reconcileSettled(ctrl.Result{}),
		},
		"§10: a slice above the replica count that holds a claim is kept": {
			rc: reconcileCluster("uid-rc"), slice: reconcileSlice(2).Claim(0, "t-p", "p", "uid-p"), replica: 2,
			pods:       []*testutil.PodWrapper{releasePod("p", "t-p", 0).TPUIdentity("tpu", 2, 0)},
			rounds:     reconcileSettled(ctrl.Result{}),
			wantClaims: []tpuv1alpha1.WorkerClaim{claimP},
		},

		// Releases: only on the Pod's own fate, read by name.
		"§8 release of bound claims: its Pod deleted (NotFound by name): released at once": {
			rc: reconcileCluster("uid-rc"), slice: boundP(), left: []*testutil.PodWrapper{p},
			rounds:     reconcileOnce(ctrl.Result{}),
			wantEvents: []testutil.Event{event("rc", normal, tpuv1alpha1.ReasonTPUClaimReleased)},
		},
		"§8 bound claim, its Pod only out of the label-selected view: read by name, kept, looked at again a TTL later": {
			rc: reconcileCluster("uid-rc"), slice: boundP(), pods: []*testutil.PodWrapper{p.Clone().WithoutLabel(rayutils.RayNodeGroupLabelKey)},
			left:       []*testutil.PodWrapper{p},
			rounds:     reconcileSettled(ctrl.Result{RequeueAfter: DefaultPendingTTL}),
			wantClaims: []tpuv1alpha1.WorkerClaim{claimP},
		},
		"§8 bound claim, its Pod Failed: released": {
			rc: reconcileCluster("uid-rc"), slice: boundP(), pods: []*testutil.PodWrapper{p.Clone().Phase(corev1.PodFailed)},
			rounds:     reconcileOnce(ctrl.Result{}),
			wantEvents: []testutil.Event{event("rc", normal, tpuv1alpha1.ReasonTPUClaimReleased)},
		},
		"§8 pending claim, its Pod seen and deleted (tombstone, NotFound by name): released at once": {
			rc: reconcileCluster("uid-rc"), slice: pendingP(), left: []*testutil.PodWrapper{p},
			rounds:     reconcileOnce(ctrl.Result{}),
			wantEvents: []testutil.Event{event("rc", normal, tpuv1alpha1.ReasonTPUClaimReleased)},
		},
		"§8 pending claim, its Pod only out of the view (tombstone, present by name): bound, not released": {
			rc: reconcileCluster("uid-rc"), slice: pendingP(), pods: []*testutil.PodWrapper{p.Clone().WithoutLabel(rayutils.RayNodeGroupLabelKey)},
			left:       []*testutil.PodWrapper{p},
			rounds:     reconcileSettled(ctrl.Result{RequeueAfter: DefaultPendingTTL}),
			wantClaims: []tpuv1alpha1.WorkerClaim{claimP},
			wantEvents: []testutil.Event{event("p", normal, tpuv1alpha1.ReasonTPUWorkerIDAssigned)},
		},
		"§8 release of pending claims: its Pod never appears: kept for the pending TTL, then released": {
			rc: reconcileCluster("uid-rc"), slice: pendingP(),
			rounds: []reconcileRound{
				{want: ctrl.Result{RequeueAfter: DefaultBindSettle}},
				{at: DefaultBindSettle, want: ctrl.Result{RequeueAfter: DefaultPendingTTL - DefaultBindSettle}},
				{at: DefaultPendingTTL - time.Millisecond, want: ctrl.Result{RequeueAfter: time.Millisecond}},
				{at: DefaultPendingTTL, want: ctrl.Result{}},
			},
			wantEvents: []testutil.Event{event("rc", normal, tpuv1alpha1.ReasonTPUClaimReleased)},
		},
		"§3.5 pending claim first seen by this replica before it led: released a pending TTL after that, not after its first Reconcile": {
			rc: reconcileCluster("uid-rc"), slice: pendingP(),
			rounds: []reconcileRound{
				{onlySeen: true},
				{at: DefaultPendingTTL - time.Second, want: ctrl.Result{RequeueAfter: time.Second}},
				{at: DefaultPendingTTL, want: ctrl.Result{}},
			},
			wantEvents: []testutil.Event{event("rc", normal, tpuv1alpha1.ReasonTPUClaimReleased)},
		},
		"§3.5 a slice deleted and seen again: its pending claim's TTL starts over": {
			rc: reconcileCluster("uid-rc"), slice: pendingP(),
			rounds: []reconcileRound{
				{onlySeen: true},
				{at: DefaultPendingTTL - time.Second, onlySeen: true, deleted: true},
				{at: DefaultPendingTTL - time.Second, onlySeen: true},
				{at: DefaultPendingTTL, want: ctrl.Result{RequeueAfter: DefaultPendingTTL - time.Second}},
			},
			wantClaims: []tpuv1alpha1.WorkerClaim(pendingP().Obj().Status.Claims),
		},
		"§8 pending claim past its TTL, its Pod running outside the view unseen (a restart): found by the namespace scan, bound": {
			rc: reconcileCluster("uid-rc"), slice: pendingP(),
			pods: []*testutil.PodWrapper{p.Clone().WithoutLabel(rayutils.RayNodeGroupLabelKey).WithoutLabel(rayutils.RayClusterLabelKey)},
			rounds: []reconcileRound{
				{want: ctrl.Result{RequeueAfter: DefaultBindSettle}},
				{at: DefaultBindSettle, want: ctrl.Result{RequeueAfter: DefaultPendingTTL - DefaultBindSettle}},
				{at: DefaultPendingTTL, want: ctrl.Result{RequeueAfter: DefaultPendingTTL}},
			},
			wantClaims: []tpuv1alpha1.WorkerClaim{claimP},
			wantEvents: []testutil.Event{event("p", normal, tpuv1alpha1.ReasonTPUWorkerIDAssigned)},
		},

		// Malformed stored lines.
		"§8 one malformed slice stops nothing: its bad line waits the pending TTL, then the claims are rebuilt from the live Pods": {
			rc: reconcileCluster("uid-rc"), slice: reconcileSlice(0).Claim(1, "t-w-1", "w-1", "uid-w-1"),
			malformed: []string{`0 t-p p uid-p extra`},
			pods:      []*testutil.PodWrapper{p, workers[1]},
			rounds: []reconcileRound{
				{want: ctrl.Result{RequeueAfter: DefaultPendingTTL}},
				{at: DefaultPendingTTL, want: ctrl.Result{}},
			},
			wantClaims: []tpuv1alpha1.WorkerClaim{claimP, testutil.Bound(4, "w")[1]},
			wantConditions: []metav1.Condition{
				cond(tpuv1alpha1.ConditionMalformed, metav1.ConditionFalse, tpuv1alpha1.ReasonMalformedLinesDropped),
			},
			wantEvents: []testutil.Event{
				event("rc", warning, tpuv1alpha1.ReasonTPUSliceMalformed), event("p", warning, tpuv1alpha1.ReasonTPUClaimRepaired),
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var objs []client.Object
			if tc.rc != nil {
				objs = append(objs, tc.rc.Obj().DeepCopy())
			}
			if tc.slice != nil {
				objs = append(objs, tc.slice.Obj().DeepCopy())
			}
			for _, pod := range tc.pods {
				objs = append(objs, pod.Clone().Obj())
			}
			store := testutil.NewClientBuilder().WithObjects(objs...).Build()
			key := types.NamespacedName{Namespace: releaseNamespace, Name: naming.SliceName("rc", "tpu", tc.replica)}
			stored := store
			if len(tc.malformed) > 0 {
				seeded := &tpuv1alpha1.TPUSliceAssignment{}
				if err := store.Get(t.Context(), key, seeded); err != nil {
					t.Fatal(err)
				}
				stored = storedMalformed(store, tc.malformed, seeded.ResourceVersion)
			}
			deleted := tombstones.New(0)
			for _, pod := range tc.left {
				deleted.Record(pod.Obj())
			}
			events := &testutil.EventRecorder{}
			clock := clocktesting.NewFakePassiveClock(t0)
			r := newReconcileTestReconciler(interceptor.NewClient(testutil.WorkerPodCache(stored), tc.faults),
				interceptor.NewClient(stored, tc.liveFaults), events, deleted, clock)

			for i, rd := range tc.rounds {
				clock.SetTime(t0.Add(rd.at))
				if rd.onlySeen {
					seen := &tpuv1alpha1.TPUSliceAssignment{}
					if err := store.Get(t.Context(), key, seen); err != nil {
						t.Fatal(err)
					}
					if rd.deleted {
						r.observer().OnDelete(toolscache.DeletedFinalStateUnknown{Key: key.String(), Obj: seen})
					} else {
						r.observer().OnUpdate(nil, seen)
					}
					continue
				}
				got, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: key})
				if gotErr := err != nil; gotErr != rd.wantErr {
					t.Fatalf("Reconcile() #%d at t0+%v error = %v, want error %v", i+1, rd.at, err, rd.wantErr)
				}
				if got != rd.want {
					t.Errorf("Reconcile() #%d at t0+%v = %+v, want %+v", i+1, rd.at, got, rd.want)
				}
			}
			placer := placementctrl.New(interceptor.NewClient(testutil.WorkerPodCache(stored), tc.faults), interceptor.NewClient(stored, tc.liveFaults),
				events, placementctrl.Options{Tombstones: deleted, BindSettle: DefaultBindSettle, LeaseNamespace: "tpu-system",
					Clock: clock, Metrics: metrics.New()})
			for i, rd := range tc.place {
				clock.SetTime(t0.Add(rd.at))
				got, err := placer.Reconcile(t.Context(), ctrl.Request{NamespacedName: key})
				if gotErr := err != nil; gotErr != rd.wantErr {
					t.Fatalf("placement Reconcile() #%d at t0+%v error = %v, want error %v", i+1, rd.at, err, rd.wantErr)
				}
				if got != rd.want {
					t.Errorf("placement Reconcile() #%d at t0+%v = %+v, want %+v", i+1, rd.at, got, rd.want)
				}
			}

			slice := &tpuv1alpha1.TPUSliceAssignment{}
			switch err := store.Get(t.Context(), key, slice); {
			case apierrors.IsNotFound(err):
				if !tc.wantGone {
					t.Errorf("slice %s deleted, want it kept", key.Name)
				}
			case err != nil:
				t.Fatal(err)
			case tc.wantGone:
				t.Errorf("slice %s kept, want it deleted", key.Name)
			default:
				if diff := cmp.Diff(tc.wantClaims, []tpuv1alpha1.WorkerClaim(slice.Status.Claims), cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("claims (-want,+got):\n%s", diff)
				}
				if slice.Spec.Placement != tc.wantPlacement || slice.Spec.AffinityTopologyKey != tc.wantKey {
					t.Errorf("spec placement %q on key %q, want %q on %q", slice.Spec.Placement, slice.Spec.AffinityTopologyKey, tc.wantPlacement, tc.wantKey)
				}
				if slice.Status.Domain != tc.wantDomain {
					t.Errorf("status.domain %q, want %q", slice.Status.Domain, tc.wantDomain)
				}
				var gotConditions []metav1.Condition
				for _, want := range tc.wantConditions {
					for _, c := range slice.Status.Conditions {
						if c.Type == want.Type {
							gotConditions = append(gotConditions, c)
						}
					}
				}
				if diff := cmp.Diff(tc.wantConditions, gotConditions,
					cmpopts.IgnoreFields(metav1.Condition{}, "Message", "LastTransitionTime", "ObservedGeneration")); diff != "" {
					t.Errorf("conditions (-want,+got):\n%s", diff)
				}
				if tc.wantClusterLabel != "" && slice.Labels[rayutils.RayClusterLabelKey] != tc.wantClusterLabel {
					t.Errorf("slice label %s = %q, want %q", rayutils.RayClusterLabelKey, slice.Labels[rayutils.RayClusterLabelKey], tc.wantClusterLabel)
				}
			}

			var pods corev1.PodList
			if err := store.List(t.Context(), &pods); err != nil {
				t.Fatal(err)
			}
			var gotDeleted []string
			for _, pod := range tc.pods {
				if !slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool { return p.UID == pod.ObjectMeta.UID }) {
					gotDeleted = append(gotDeleted, pod.Name)
				}
			}
			if diff := cmp.Diff(tc.wantDeleted, gotDeleted, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Pods deleted (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantEvents, events.Recorded(), cmpopts.EquateEmpty(),
				cmpopts.IgnoreFields(testutil.Event{}, "Note")); diff != "" {
				t.Errorf("Events (-want,+got):\n%s", diff)
			}
		})
	}
}
