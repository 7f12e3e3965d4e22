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

package allocator

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tombstones"
)

// identityPod is a live worker Pod of the test group (KubeRay's labels, owner clusterUID) whose spec
// carries worker ID id of replica (v6e 4x4, 4 chips: 4 hosts), as the reference webhook or an
// earlier install left it, without this operator's claim token.
func identityPod(name string, replica, id int32) *testutil.PodWrapper {
	return testutil.MakeWorkerPod(testNS, clusterName, clusterUID, groupName).Named(name).UID(types.UID("uid-"+name)).
		TPU(4).Topology("tpu-v6e-slice", "4x4").TPUIdentity(groupName, replica, id).
		Created(earlier).Phase(corev1.PodRunning)
}

func adopted(id int32, pod string) tpuv1alpha1.WorkerClaim {
	return tpuv1alpha1.WorkerClaim{WorkerID: id, Token: "uid-" + pod, PodName: pod, PodUID: types.UID("uid-" + pod)}
}

// TestClaimAdoptsPodsThatCarryAnIdentity: Pods that got their identity before the operator ran
// (docs/spec.md §3.4) hold their IDs from the very first admission of their group, when no slice
// of the group exists yet.
func TestClaimAdoptsPodsThatCarryAnIdentity(t *testing.T) {
	c := newClient(t, interceptor.Funcs{},
		rayCluster(2),
		identityPod("ref-0-0", 0, 0).Obj(), identityPod("ref-0-1", 0, 1).Obj(), identityPod("ref-0-3", 0, 3).Obj(),
		identityPod("ref-1-0", 1, 0).Obj(),
		// Not adopted: finished, of another RayCluster UID, of another host count.
		identityPod("done", 0, 2).Phase(corev1.PodSucceeded).Obj(),
		func() *corev1.Pod {
			p := identityPod("old-uid", 0, 2).Obj()
			p.OwnerReferences[0].UID = oldUID
			return p
		}(),
		identityPod("other-topology", 0, 2).Topology("tpu-v6e-slice", "2x4").Obj(),
	)
	a := newAllocator(c, c, timeout)
	adoptedCount := a.m.ClaimsAdopted.WithLabelValues(metrics.AdoptedAtAdmission)
	before := metrics.Value(adoptedCount)
	got, err := a.Claim(t.Context(), request(4))
	if err != nil {
		t.Fatalf("Claim() error: %v", err)
	}
	if diff := cmp.Diff(Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 2, Token: got.Token}, got); diff != "" {
		t.Errorf("Claim() (-want,+got):\n%s", diff)
	}
	want := []tpuv1alpha1.TPUSliceAssignment{
		createdSlice(0, "", adopted(0, "ref-0-0"), adopted(1, "ref-0-1"), adopted(3, "ref-0-3"), claim(2, got.Token)),
		createdSlice(1, "", adopted(0, "ref-1-0")),
	}
	if diff := cmp.Diff(want, storedSlices(t, c), cmpSlices); diff != "" {
		t.Errorf("stored slices (-want,+got):\n%s", diff)
	}
	if got := metrics.Value(adoptedCount) - before; got != 4 {
		t.Errorf("claims_adopted_total{source=admission} grew by %v, want 4", got)
	}
	// The next claims of the group give the free IDs, and no Pod is adopted twice.
	for _, wantID := range []int32{1, 2, 3} {
		got, err := a.Claim(t.Context(), request(4))
		if err != nil || got.Replica != 1 || got.WorkerID != wantID {
			t.Errorf("next Claim() = replica %d ID %d, %v; want replica 1 ID %d", got.Replica, got.WorkerID, err, wantID)
		}
	}
	if got := metrics.Value(adoptedCount) - before; got != 4 {
		t.Errorf("claims_adopted_total{source=admission} after more claims grew by %v, want 4", got)
	}
}

// TestClaimAdoptionLeavesTakenIDsAlone: a Pod whose identity names an ID another claim holds is
// not recorded over it (the reconciler reports the conflict).
func TestClaimAdoptionLeavesTakenIDsAlone(t *testing.T) {
	held := existingSlice(0, clusterUID).Claim(0, "t-w", "w", "uid-w").Obj()
	c := newClient(t, interceptor.Funcs{}, held, identityPod("ref-0-0", 0, 0).Obj(), identityPod("ref-0-1", 0, 1).Obj())
	a := newAllocator(c, c, timeout)
	got, err := a.Claim(t.Context(), request(4))
	if err != nil || got.WorkerID != 2 {
		t.Fatalf("Claim() = ID %d, %v; want ID 2", got.WorkerID, err)
	}
	want := []tpuv1alpha1.TPUSliceAssignment{*existingSlice(0, clusterUID).
		Claim(0, "t-w", "w", "uid-w").Claim(1, "uid-ref-0-1", "ref-0-1", "uid-ref-0-1").Claim(2, got.Token, "", "").Obj()}
	if diff := cmp.Diff(want, storedSlices(t, c), cmpSlices); diff != "" {
		t.Errorf("stored slices (-want,+got):\n%s", diff)
	}
}

// TestClaimAdoptsIntoTheSliceOfAnOlderGeneration: the RayCluster was re-created under its name
// and a Pod of the new generation was made by hand with worker ID 0 while the old generation's
// slice (the same name) was still stored. The Pod is adopted into the slice that replaces the old
// one, and the first claim of the new generation does not get its ID (I1).
func TestClaimAdoptsIntoTheSliceOfAnOlderGeneration(t *testing.T) {
	old := existingSlice(0, oldUID).Claim(0, "t-old", "old-w", "uid-old-w").Claim(1, "t-old-1", "", "").Obj()
	c := newClient(t, interceptor.Funcs{}, rayCluster(1), old, identityPod("ref-0-0", 0, 0).Obj())
	a := newAllocator(c, c, timeout)
	got, err := a.Claim(t.Context(), request(4))
	if err != nil {
		t.Fatalf("Claim() error: %v", err)
	}
	if got.WorkerID == 0 {
		t.Fatalf("Claim() = ID 0, which Pod ref-0-0 of this generation holds by its spec")
	}
	want := []tpuv1alpha1.TPUSliceAssignment{createdSlice(0, "", adopted(0, "ref-0-0"), claim(got.WorkerID, got.Token))}
	if diff := cmp.Diff(want, storedSlices(t, c), cmpSlices); diff != "" {
		t.Errorf("stored slices (-want,+got):\n%s", diff)
	}
}

// TestClaimTakesOverAPendingClaimWhosePodWasSeenGone: fast release (docs/spec.md §8). A pending
// claim whose Pod was seen and then deleted is taken over at once, without waiting for the TTL; one
// whose Pod was never seen is not.
func TestClaimTakesOverAPendingClaimWhosePodWasSeenGone(t *testing.T) {
	full := existingSlice(0, clusterUID).
		Claim(0, "t-w-0-0", "w-0-0", "uid-w-0-0").
		Claim(1, "t-w-0-1", "w-0-1", "uid-w-0-1").
		Claim(2, "deleted-soon", "", "").
		Claim(3, "in-flight", "", "").Obj()
	deletions := tombstones.New(time.Minute)
	deleted := identityPod("quick", 0, 2).Annotation(tpuv1alpha1.ClaimTokenAnnotation, "deleted-soon").Obj()
	deletions.Record(deleted)
	c := newClient(t, interceptor.Funcs{}, full, livePod(0, 0).Obj(), livePod(0, 1).Obj())
	a := New(c, c, Options{Timeout: timeout, Tombstones: deletions, Metrics: metrics.New(),
		Clock: clocktesting.NewFakePassiveClock(now)})
	got, err := a.Claim(t.Context(), request(4))
	if err != nil {
		t.Fatalf("Claim() error: %v", err)
	}
	if got.WorkerID != 2 {
		t.Errorf("Claim() took ID %d, want 2 (the pending claim whose Pod was seen deleted)", got.WorkerID)
	}
	// Nothing else is reclaimable now: the in-flight claim stays.
	_, err = a.Claim(t.Context(), request(4))
	var denied *DeniedError
	if !errors.As(err, &denied) || !denied.Transient {
		t.Errorf("second Claim() error = %v, want a transient denial", err)
	}
}

// TestClaimDoesNotTakeOverAPendingClaimWhoseSeenPodLives: a tombstone is a hint: a Pod that left
// the cache because its labels changed looks deleted to the informer, so the live read decides.
func TestClaimDoesNotTakeOverAPendingClaimWhoseSeenPodLives(t *testing.T) {
	full := existingSlice(0, clusterUID).
		Claim(0, "t-w-0-0", "w-0-0", "uid-w-0-0").Claim(1, "t-w-0-1", "w-0-1", "uid-w-0-1").
		Claim(2, "t-w-0-2", "w-0-2", "uid-w-0-2").Claim(3, "relabelled", "", "").Obj()
	relabelled := identityPod("relabelled", 0, 3).Annotation(tpuv1alpha1.ClaimTokenAnnotation, "relabelled").Obj()
	deletions := tombstones.New(time.Minute)
	deletions.Record(relabelled)
	live := newClient(t, interceptor.Funcs{}, append(livePods(0), full, relabelled)...)
	cache := newClient(t, interceptor.Funcs{}, append(livePods(0), full)...) // the cache lost it
	a := New(staleCache(live, cache), live, Options{Timeout: timeout, Tombstones: deletions, Metrics: metrics.New()})
	_, err := a.Claim(t.Context(), request(4))
	var denied *DeniedError
	if !errors.As(err, &denied) || !denied.Transient {
		t.Errorf("Claim() error = %v, want a transient denial: the Pod is live", err)
	}
}

// TestClaimDoesNotTakeOverAPendingClaimThroughACopiedToken: docs/spec.md §8, I7. A claim-token
// annotation proves nothing: a Pod that carries a pending claim's token but whose spec names another
// place (a copied manifest, an edited annotation) does not stand for the claim, whether it lives,
// finished or was deleted. Found by the model-based test (controllers/model_test.go): the claim's
// own Pod, its annotation removed, ran on while its ID was handed out again.
func TestClaimDoesNotTakeOverAPendingClaimThroughACopiedToken(t *testing.T) {
	full := existingSlice(0, clusterUID).
		Claim(0, "t-w-0-0", "w-0-0", "uid-w-0-0").Claim(1, "t-w-0-1", "w-0-1", "uid-w-0-1").
		Claim(2, "t-w-0-2", "w-0-2", "uid-w-0-2").Claim(3, "t-own", "", "").Obj()
	// The claim's own Pod runs, its annotation removed by a user: the token finds it no more.
	own := identityPod("own", 0, 3).Obj()
	tests := map[string]struct {
		objs      []client.Object
		deletions func(*tombstones.Tombstones)
	}{
		"a finished copy in another slice carries the token": {
			objs: []client.Object{identityPod("copy", 1, 0).Annotation(tpuv1alpha1.ClaimTokenAnnotation, "t-own").Phase(corev1.PodFailed).Obj()},
		},
		"a finished Pod with the token and no identity": {
			objs: []client.Object{testutil.MakePod("bare", testNS).UID("uid-bare").Phase(corev1.PodSucceeded).
				Annotation(tpuv1alpha1.ClaimTokenAnnotation, "t-own").Obj()},
		},
		"a deleted copy of another ID left a tombstone": {
			deletions: func(g *tombstones.Tombstones) {
				g.Record(identityPod("copy", 0, 1).Annotation(tpuv1alpha1.ClaimTokenAnnotation, "t-own").Obj())
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			deletions := tombstones.New(time.Minute)
			if tc.deletions != nil {
				tc.deletions(deletions)
			}
			c := newClient(t, interceptor.Funcs{}, append(append(livePods(0, 3), full, own), tc.objs...)...)
			a := New(c, c, Options{Timeout: timeout, Tombstones: deletions, Metrics: metrics.New()})
			_, err := a.Claim(t.Context(), request(4))
			var denied *DeniedError
			if !errors.As(err, &denied) || !denied.Transient {
				t.Errorf("Claim() error = %v, want a transient denial: ID 3's Pod is live", err)
			}
			if diff := cmp.Diff([]tpuv1alpha1.TPUSliceAssignment{*full}, storedSlices(t, c), cmpSlices); diff != "" {
				t.Errorf("stored slices (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestClaimStaleClusterUID: docs/spec.md §10. A request naming the UID of a RayCluster that was
// deleted (its create still in flight, or a forwarded claim naming it) never replaces the live
// UID's slices, even when the cache still shows the old RayCluster.
func TestClaimStaleClusterUID(t *testing.T) {
	newGen := existingSlice(0, "rc-uid-3").Claim(0, "n0", "new-0", "uid-new-0").Obj()
	oldCluster := rayCluster(1)
	oldCluster.UID = clusterUID // the request's (deleted) UID
	newCluster := rayCluster(1)
	newCluster.UID = "rc-uid-3"
	cache := newClient(t, interceptor.Funcs{}, newGen, oldCluster)
	live := newClient(t, interceptor.Funcs{}, newGen, newCluster)
	a := newAllocator(staleCache(live, cache), live, timeout)
	_, err := a.Claim(t.Context(), request(4))
	want := &DeniedError{Message: "the Pod's owner, RayCluster team-a/rc with UID rc-uid-2, has been deleted (the cluster now has UID rc-uid-3): a create for the deleted RayCluster is refused"}
	if diff := cmp.Diff(want, err); diff != "" {
		t.Errorf("Claim() error (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff([]tpuv1alpha1.TPUSliceAssignment{*newGen}, storedSlices(t, live), cmpSlices); diff != "" {
		t.Errorf("stored slices (-want,+got):\n%s", diff)
	}
	// With a fresh cache the same request is refused before any planning.
	fresh := newClient(t, interceptor.Funcs{}, newGen, newCluster)
	if _, err := newAllocator(fresh, fresh, timeout).Claim(t.Context(), request(4)); err == nil || err.Error() != want.Message {
		t.Errorf("Claim() with a fresh cache: error %v, want %q", err, want.Message)
	}
}

// TestClaimReadsALiveClusterForAGroupTheCacheLacks: a group just added to the RayCluster is read
// live before the Pod is denied for naming a group that does not exist.
func TestClaimReadsALiveClusterForAGroupTheCacheLacks(t *testing.T) {
	stale := rayCluster(1)
	stale.Spec.WorkerGroupSpecs[0].GroupName = "cpu"
	cache := newClient(t, interceptor.Funcs{}, stale)
	live := newClient(t, interceptor.Funcs{}, rayCluster(1))
	if _, err := newAllocator(staleCache(live, cache), live, timeout).Claim(t.Context(), request(4)); err != nil {
		t.Errorf("Claim() error: %v", err)
	}
	gone := newClient(t, interceptor.Funcs{}, stale)
	_, err := newAllocator(gone, gone, timeout).Claim(t.Context(), request(4))
	if diff := cmp.Diff(&DeniedError{Message: `RayCluster rc has no worker group "tpu"`}, err); diff != "" {
		t.Errorf("Claim() error for a group that does not exist (-want,+got):\n%s", diff)
	}
}

// TestClaimOfAMissingRayCluster: a Pod whose RayCluster does not exist (deleted, or never created)
// is a permanent denial, after a live read.
func TestClaimOfAMissingRayCluster(t *testing.T) {
	c := testutil.NewClientBuilder().Build()
	_, err := newAllocator(c, c, timeout).Claim(t.Context(), request(4))
	want := &DeniedError{Message: "RayCluster team-a/rc of this TPU worker Pod does not exist"}
	if diff := cmp.Diff(want, err); diff != "" {
		t.Errorf("Claim() error (-want,+got):\n%s", diff)
	}
	if s := storedSlices(t, c); len(s) != 0 {
		t.Errorf("stored slices %+v, want none", s)
	}
}

// TestClaimBounds: docs/spec.md §10. Slices above the host limit are refused before anything is read.
func TestClaimBounds(t *testing.T) {
	c := newClient(t, interceptor.Funcs{})
	req := request(10_000)
	req.Topology = "20x20x100"
	_, err := newAllocator(c, c, timeout).Claim(t.Context(), req)
	want := &DeniedError{Message: "topology 20x20x100 gives a slice of 10000 hosts, more than this operator allows (--max-slice-hosts=2400)"}
	if diff := cmp.Diff(want, err); diff != "" {
		t.Errorf("Claim() error (-want,+got):\n%s", diff)
	}
}

// TestClaimNameCollision: a TPUSliceAssignment under the slice's name that belongs to another group
// is never shared, and the Pod is refused at once, not retried until the deadline.
func TestClaimNameCollision(t *testing.T) {
	squatter := testutil.MakeSlice(sliceName(0), testNS, "other-rc", "other-uid", "other-group", 3, 4).Obj()
	c := newClient(t, interceptor.Funcs{}, squatter)
	start := time.Now()
	_, err := newAllocator(c, c, 5*time.Second).Claim(t.Context(), request(4))
	want := &DeniedError{Message: "TPUSliceAssignment team-a/" + sliceName(0) + ", the name of replica 0 of RayCluster rc group tpu, is taken by replica 3 of RayCluster other-rc group other-group; rename the worker group or the RayCluster"}
	if diff := cmp.Diff(want, err); diff != "" {
		t.Errorf("Claim() error (-want,+got):\n%s", diff)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the collision was refused after %v, want at once", d)
	}
	if diff := cmp.Diff([]tpuv1alpha1.TPUSliceAssignment{*squatter}, storedSlices(t, c), cmpSlices); diff != "" {
		t.Errorf("stored slices (-want,+got):\n%s", diff)
	}
}

// TestClaimPermanentAPIErrors: an API error that cannot succeed on retry is a permanent denial at once.
func TestClaimPermanentAPIErrors(t *testing.T) {
	for name, refusal := range map[string]error{
		"413 too large": apierrors.NewRequestEntityTooLargeError("limit is 3145728"),
		"422 invalid":   apierrors.NewInvalid(tpuv1alpha1.GroupVersion.WithKind("TPUSliceAssignment").GroupKind(), "x", nil),
		"403 forbidden": apierrors.NewForbidden(sliceGVR, "x", errors.New("no")),
	} {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, interceptor.Funcs{
				SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
					return refusal
				},
			})
			start := time.Now()
			_, err := newAllocator(c, c, 5*time.Second).Claim(t.Context(), request(4))
			var denied *DeniedError
			if !errors.As(err, &denied) || denied.Transient {
				t.Errorf("Claim() error = %v, want a permanent denial", err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("refused after %v, want at once", d)
			}
		})
	}
	if code := apierrors.NewRequestEntityTooLargeError("x").Status().Code; code != http.StatusRequestEntityTooLarge {
		t.Fatalf("413 helper gives %d", code)
	}
}

// TestClaimHostsMismatch: docs/spec.md §10. A Pod whose topology gives another host count than its
// group's slice that holds live Pods is refused naming both counts, and the slice is left as it is.
func TestClaimHostsMismatch(t *testing.T) {
	four := fullSlice(0).Obj()
	// The group's template now gives 1 host, its old replica of 4 still runs.
	oneHost := rayClusterOf(1, 1)
	c := newClient(t, interceptor.Funcs{}, append(livePods(0), four, oneHost)...)
	req := request(1)
	req.Topology = "2x2"
	_, err := newAllocator(c, c, timeout).Claim(t.Context(), req)
	want := &DeniedError{Message: "this Pod's topology gives 1 hosts per slice, but replica 0 of its worker group is a slice of 4 hosts that still holds 4 claims of live or starting Pods; " +
		"delete the group's old replicas (or the RayCluster) before changing its topology, or keep the template's topology"}
	if diff := cmp.Diff(want, err); diff != "" {
		t.Errorf("Claim() error (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff([]tpuv1alpha1.TPUSliceAssignment{*four}, storedSlices(t, c), cmpSlices); diff != "" {
		t.Errorf("stored slices (-want,+got):\n%s", diff)
	}
	// Once its Pods are gone, the old slice is replaced by one of the new host count.
	gone := newClient(t, interceptor.Funcs{}, four, oneHost)
	got, err := newAllocator(gone, gone, timeout).Claim(t.Context(), req)
	if err != nil || got.WorkerID != 0 {
		t.Errorf("Claim() after the old Pods are gone = %+v, %v; want ID 0", got, err)
	}
	if s := storedSlices(t, gone); len(s) != 1 || s[0].Spec.Hosts != 1 {
		t.Errorf("stored slices = %+v, want one of 1 host", s)
	}
}

// TestReinvoked: a Pod that arrives carrying a claim token is returned unchanged only when it is the
// same admission coming back; any other token is a copy (docs/spec.md §8).
func TestReinvoked(t *testing.T) {
	slice := existingSlice(0, clusterUID).Claim(0, "bound", "w0", "uid-w0").Claim(1, "pending", "", "").
		Claim(2, "carried", "", "").Obj()
	carrier := testutil.MakePod("carrier", testNS).UID("uid-carrier").Phase(corev1.PodRunning).
		Annotation(tpuv1alpha1.ClaimTokenAnnotation, "carried").Obj()
	c := newClient(t, interceptor.Funcs{}, slice, carrier)
	cases := map[string]struct {
		slice, token string
		id           int32
		want         bool
	}{
		"a pending claim of this token on this ID that no live Pod carries: re-invocation": {slice: sliceName(0), token: "pending", id: 1, want: true},
		"a bound claim's token: a copy of a running Pod":                                   {slice: sliceName(0), token: "bound", id: 0},
		"a token the slice does not know: a copy or a template":                            {slice: sliceName(0), token: "dry-run", id: 1},
		"the token on another ID: a copy":                                                  {slice: sliceName(0), token: "pending", id: 3},
		"a token a live Pod already carries: a copy":                                       {slice: sliceName(0), token: "carried", id: 2},
		"a slice that does not exist: a copy":                                              {slice: sliceName(5), token: "pending", id: 1},
	}
	a := newAllocator(c, c, timeout)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := a.Reinvoked(t.Context(), testNS, tc.slice, tc.token, tc.id)
			if err != nil || got != tc.want {
				t.Errorf("Reinvoked() = %t, %v; want %t", got, err, tc.want)
			}
		})
	}
	t.Run("a claim the cache has not seen yet is read live", func(t *testing.T) {
		empty := newClient(t, interceptor.Funcs{})
		got, err := newAllocator(staleCache(c, empty), c, timeout).Reinvoked(t.Context(), testNS, sliceName(0), "pending", 1)
		if err != nil || !got {
			t.Errorf("Reinvoked() = %t, %v; want true", got, err)
		}
	})
}
