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

package lifecycle_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

const (
	testNamespace = "ml"
	testCluster   = "rc"
	testGroup     = "tpu"
	testSlice     = "rc-tpu-0"
	testHosts     = 4
	ttl           = 30 * time.Second

	clusterUID types.UID = "uid-rc"
)

var (
	// now is the reconciler's clock in every test.
	now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	// longAgo is when the bound claims of these tests were made.
	longAgo = now.Add(-time.Hour)
)

// makeSlice starts replica 0 of the test group, four hosts.
func makeSlice() *testutil.SliceWrapper {
	return testutil.MakeSlice(testSlice, testNamespace, testCluster, clusterUID, testGroup, 0, testHosts)
}

// workerPod is a created, Running worker Pod of the test slice whose spec carries worker ID id
// (v4 2x2x4, 4 chips: 4 hosts), created at longAgo, with the webhook's claim-token annotation
// (none when token is empty) and its labels; its UID is uid-<name>.
func workerPod(name, token string, id int32) *testutil.PodWrapper {
	p := testutil.MakeWorkerPod(testNamespace, testCluster, clusterUID, testGroup).
		Named(name).
		UID(types.UID("uid-"+name)).
		TPU(4).Topology("tpu-v4-podslice", "2x2x4").
		TPUIdentity(testGroup, 0, id).
		Label(tpuv1alpha1.SliceLabel, testSlice).
		Label(tpuv1alpha1.WorkerIDLabel, strconv.Itoa(int(id))).
		Created(longAgo).
		Phase(corev1.PodRunning)
	if token != "" {
		p.Annotation(tpuv1alpha1.ClaimTokenAnnotation, token)
	}
	return p
}

// claim is a claim of the test slice, bound to Pod pod (UID uid-<pod>) unless pod is empty.
func claim(id int32, token, pod string) tpuv1alpha1.WorkerClaim {
	c := tpuv1alpha1.WorkerClaim{WorkerID: id, Token: token}
	if pod != "" {
		c.PodName, c.PodUID = pod, types.UID("uid-"+pod)
	}
	return c
}

// notClaimed is the Claimed condition of a slice of metadata.generation 0 with a host not bound to a Pod.
func notClaimed(msg string) metav1.Condition {
	return metav1.Condition{Type: tpuv1alpha1.ConditionClaimed, Status: metav1.ConditionFalse, Reason: tpuv1alpha1.ReasonHostsMissing, Message: msg}
}

// noConflict is the Conflict condition of a slice whose live Pods' identities are all recorded.
var noConflict = metav1.Condition{Type: tpuv1alpha1.ConditionConflict, Status: metav1.ConditionFalse,
	Reason: tpuv1alpha1.ReasonNoConflict, Message: "every live Pod's TPU identity is recorded"}

// pods returns the Pods as Decide receives them, from a List.
func pods(ps ...*corev1.Pod) []corev1.Pod {
	out := make([]corev1.Pod, len(ps))
	for i, p := range ps {
		out[i] = *p
	}
	return out
}

// view is what Decide gets: the slice, its Pods, the tokens whose Pods were seen deleted and, on
// the observer's clock, how long each pending claim has been seen (0 when not listed).
func view(slice *tpuv1alpha1.TPUSliceAssignment, ps []corev1.Pod, ages map[string]time.Duration, gone ...string) lifecycle.View {
	return lifecycle.View{Slice: slice, Pods: ps,
		Gone:       func(token string) bool { return slices.Contains(gone, token) },
		PendingFor: func(c tpuv1alpha1.WorkerClaim) time.Duration { return ages[c.Token] },
	}
}

func TestDecide(t *testing.T) {
	lateFree := workerPod("late", "t-late", 2).Obj()
	// A Pod of a deleted RayCluster of the same name: same identity, another owner UID.
	ofDeletedCluster := workerPod("old", "t-old", 2).Obj()
	ofDeletedCluster.OwnerReferences[0].UID = "uid-deleted-cluster"
	lateHeld := workerPod("late", "t-late", 1).Obj()
	firstLate := workerPod("late-1", "t-late-1", 3).Created(longAgo.Add(time.Second)).Obj()
	secondLate := workerPod("late-2", "t-late-2", 3).Created(longAgo.Add(2 * time.Second)).Obj()
	copied := workerPod("copy", "t1", 1).Created(longAgo.Add(time.Minute)).Obj()
	preExisting := workerPod("pre", "", 1).Obj()
	outside := workerPod("outside", "", 7).Obj()
	otherHosts := workerPod("one-host", "", 0).Topology("tpu-v4-podslice", "2x2x1").Obj()
	noIdentity := testutil.MakeWorkerPod(testNamespace, testCluster, clusterUID, testGroup).Named("plain").UID("uid-plain").
		TPU(4).Topology("tpu-v4-podslice", "2x2x4").Label(tpuv1alpha1.SliceLabel, testSlice).Label(tpuv1alpha1.WorkerIDLabel, "0").
		Annotation(tpuv1alpha1.ClaimTokenAnnotation, "t-plain").Phase(corev1.PodRunning).Obj()
	stripped := workerPod("w0", "t0", 0).WithoutLabel(tpuv1alpha1.SliceLabel).WithoutLabel(tpuv1alpha1.WorkerIDLabel).Obj()
	delete(stripped.Annotations, tpuv1alpha1.ClaimTokenAnnotation)

	cases := map[string]struct {
		slice *tpuv1alpha1.TPUSliceAssignment
		pods  []corev1.Pod
		// gone are the tokens whose Pods were seen deleted; ages how long pending claims were seen.
		gone []string
		ages map[string]time.Duration
		want lifecycle.Decision
	}{
		"a pending claim whose Pod is live is bound to it": {
			slice: makeSlice().Claim(1, "t1", "", "").Obj(),
			pods:  pods(workerPod("w1", "t1", 1).Obj()),
			want: lifecycle.Decision{
				Claims:  []tpuv1alpha1.WorkerClaim{claim(1, "t1", "w1")},
				Changed: true,
				Bound:   []tpuv1alpha1.WorkerClaim{claim(1, "t1", "w1")},
				Claimed: notClaimed("1 of 4 hosts bound to a Pod, 1 claimed"),
			},
		},
		"a pending Pod (not yet running) binds its claim too": {
			slice: makeSlice().Claim(1, "t1", "", "").Obj(),
			pods:  pods(workerPod("w1", "t1", 1).Phase(corev1.PodPending).Obj()),
			want: lifecycle.Decision{
				Claims:  []tpuv1alpha1.WorkerClaim{claim(1, "t1", "w1")},
				Changed: true,
				Bound:   []tpuv1alpha1.WorkerClaim{claim(1, "t1", "w1")},
				Claimed: notClaimed("1 of 4 hosts bound to a Pod, 1 claimed"),
			},
		},
		"a bound claim whose Pod is live is kept": {
			slice: makeSlice().Claim(0, "t0", "w0", "uid-w0").Obj(),
			pods:  pods(workerPod("w0", "t0", 0).Obj()),
			want: lifecycle.Decision{
				Claims:  []tpuv1alpha1.WorkerClaim{claim(0, "t0", "w0")},
				Claimed: notClaimed("1 of 4 hosts bound to a Pod, 1 claimed"),
			},
		},
		"a bound claim is kept when the Pod's labels and claim token are removed": {
			slice: makeSlice().Claim(0, "t0", "w0", "uid-w0").Obj(),
			pods:  pods(stripped),
			want: lifecycle.Decision{
				Claims:  []tpuv1alpha1.WorkerClaim{claim(0, "t0", "w0")},
				Claimed: notClaimed("1 of 4 hosts bound to a Pod, 1 claimed"),
			},
		},
		"a bound claim whose Pod is gone is released": {
			slice: makeSlice().Claim(0, "t0", "w0", "uid-w0").Obj(),
			want: lifecycle.Decision{
				Changed:     true,
				Released:    []lifecycle.Release{{Claim: claim(0, "t0", "w0"), Reason: lifecycle.ReasonPodGone}},
				Destructive: true,
				Claimed:     notClaimed("0 of 4 hosts bound to a Pod, 0 claimed"),
			},
		},
		"a bound claim whose Pod was replaced by one of the same name is released, and the new Pod's ID recorded": {
			slice: makeSlice().Claim(0, "t0", "w0", "uid-w0").Obj(),
			pods:  pods(workerPod("w0", "t0", 0).UID("uid-w0-new").Obj()),
			want: lifecycle.Decision{
				Claims:      []tpuv1alpha1.WorkerClaim{{WorkerID: 0, Token: "t0", PodName: "w0", PodUID: "uid-w0-new"}},
				Changed:     true,
				Released:    []lifecycle.Release{{Claim: claim(0, "t0", "w0"), Reason: lifecycle.ReasonPodGone}},
				Repaired:    []tpuv1alpha1.WorkerClaim{{WorkerID: 0, Token: "t0", PodName: "w0", PodUID: "uid-w0-new"}},
				Destructive: true,
				Claimed:     notClaimed("1 of 4 hosts bound to a Pod, 1 claimed"),
			},
		},
		"a bound claim whose Pod is terminating is released": {
			slice: makeSlice().Claim(0, "t0", "w0", "uid-w0").Obj(),
			pods:  pods(workerPod("w0", "t0", 0).Terminating().Obj()),
			want: lifecycle.Decision{
				Changed:     true,
				Released:    []lifecycle.Release{{Claim: claim(0, "t0", "w0"), Reason: lifecycle.ReasonPodTerminating}},
				Destructive: true,
				Claimed:     notClaimed("0 of 4 hosts bound to a Pod, 0 claimed"),
			},
		},
		"bound claims whose Pods failed or succeeded are released": {
			slice: makeSlice().
				Claim(0, "t0", "w0", "uid-w0").
				Claim(1, "t1", "w1", "uid-w1").Obj(),
			pods: pods(
				workerPod("w0", "t0", 0).Phase(corev1.PodFailed).Obj(),
				workerPod("w1", "t1", 1).Phase(corev1.PodSucceeded).Obj()),
			want: lifecycle.Decision{
				Changed: true,
				Released: []lifecycle.Release{
					{Claim: claim(0, "t0", "w0"), Reason: lifecycle.ReasonPodFinished},
					{Claim: claim(1, "t1", "w1"), Reason: lifecycle.ReasonPodFinished},
				},
				Destructive: true,
				Claimed:     notClaimed("0 of 4 hosts bound to a Pod, 0 claimed"),
			},
		},
		"pending claims younger than the TTL wait for the first TTL to run out": {
			ages: map[string]time.Duration{"t2": 10 * time.Second, "t3": 25 * time.Second},
			slice: makeSlice().
				Claim(2, "t2", "", "").
				Claim(3, "t3", "", "").Obj(),
			want: lifecycle.Decision{
				Claims: []tpuv1alpha1.WorkerClaim{
					claim(2, "t2", ""),
					claim(3, "t3", ""),
				},
				RequeueAfter: 5 * time.Second,
				Claimed:      notClaimed("0 of 4 hosts bound to a Pod, 2 claimed"),
			},
		},
		"a pending claim older than the TTL is released": {
			ages: map[string]time.Duration{"t2": ttl + time.Second, "t3": ttl},
			slice: makeSlice().
				Claim(2, "t2", "", "").
				Claim(3, "t3", "", "").Obj(),
			want: lifecycle.Decision{
				Changed: true,
				Released: []lifecycle.Release{
					{Claim: claim(2, "t2", ""), Reason: lifecycle.ReasonPendingExpired},
					{Claim: claim(3, "t3", ""), Reason: lifecycle.ReasonPendingExpired},
				},
				Destructive: true,
				Claimed:     notClaimed("0 of 4 hosts bound to a Pod, 0 claimed"),
			},
		},
		"a pending claim whose Pod was seen and then deleted is released at once": {
			ages:  map[string]time.Duration{"t2": time.Second, "t3": time.Second},
			slice: makeSlice().Claim(2, "t2", "", "").Claim(3, "t3", "", "").Obj(),
			gone:  []string{"t2"},
			want: lifecycle.Decision{
				Claims:       []tpuv1alpha1.WorkerClaim{claim(3, "t3", "")},
				Changed:      true,
				Released:     []lifecycle.Release{{Claim: claim(2, "t2", ""), Reason: lifecycle.ReasonPodGone}},
				Destructive:  true,
				RequeueAfter: ttl - time.Second,
				Claimed:      notClaimed("0 of 4 hosts bound to a Pod, 1 claimed"),
			},
		},
		"a pending claim past the TTL whose Pod has appeared is bound, not released": {
			ages:  map[string]time.Duration{"t2": 2 * ttl},
			slice: makeSlice().Claim(2, "t2", "", "").Obj(),
			pods:  pods(workerPod("w2", "t2", 2).Obj()),
			want: lifecycle.Decision{
				Claims:  []tpuv1alpha1.WorkerClaim{claim(2, "t2", "w2")},
				Changed: true,
				Bound:   []tpuv1alpha1.WorkerClaim{claim(2, "t2", "w2")},
				Claimed: notClaimed("1 of 4 hosts bound to a Pod, 1 claimed"),
			},
		},
		"a pending claim whose Pod lost its claim token is bound to the Pod its spec names": {
			slice: makeSlice().Claim(0, "t0", "", "").Obj(),
			pods:  pods(stripped),
			gone:  []string{"t0"},
			want: lifecycle.Decision{
				Claims:  []tpuv1alpha1.WorkerClaim{claim(0, "t0", "w0")},
				Changed: true,
				Bound:   []tpuv1alpha1.WorkerClaim{claim(0, "t0", "w0")},
				Claimed: notClaimed("1 of 4 hosts bound to a Pod, 1 claimed"),
			},
		},
		"a pending claim whose Pod's token was edited is bound to it, not a duplicate": {
			slice: makeSlice().Claim(1, "t1", "", "").Obj(),
			pods:  pods(workerPod("w1", "edited", 1).Obj()),
			want: lifecycle.Decision{
				Claims:  []tpuv1alpha1.WorkerClaim{claim(1, "t1", "w1")},
				Changed: true,
				Bound:   []tpuv1alpha1.WorkerClaim{claim(1, "t1", "w1")},
				Claimed: notClaimed("1 of 4 hosts bound to a Pod, 1 claimed"),
			},
		},
		"a pending claim whose Pod is already terminating is released": {
			slice: makeSlice().Claim(2, "t2", "", "").Obj(),
			pods:  pods(workerPod("w2", "t2", 2).Terminating().Obj()),
			want: lifecycle.Decision{
				Changed:     true,
				Released:    []lifecycle.Release{{Claim: claim(2, "t2", ""), Reason: lifecycle.ReasonPodTerminating}},
				Destructive: true,
				Claimed:     notClaimed("0 of 4 hosts bound to a Pod, 0 claimed"),
			},
		},
		"a pending claim whose Pod already failed is released as finished": {
			slice: makeSlice().Claim(2, "t2", "", "").Obj(),
			pods:  pods(workerPod("w2", "t2", 2).Phase(corev1.PodFailed).Obj()),
			want: lifecycle.Decision{
				Changed:     true,
				Released:    []lifecycle.Release{{Claim: claim(2, "t2", ""), Reason: lifecycle.ReasonPodFinished}},
				Destructive: true,
				Claimed:     notClaimed("0 of 4 hosts bound to a Pod, 0 claimed"),
			},
		},
		"a late Pod whose worker ID is free claims it again": {
			slice: makeSlice().Claim(0, "t0", "w0", "uid-w0").Obj(),
			pods:  pods(workerPod("w0", "t0", 0).Obj(), lateFree),
			want: lifecycle.Decision{
				Claims:      []tpuv1alpha1.WorkerClaim{claim(0, "t0", "w0"), claim(2, "t-late", "late")},
				Changed:     true,
				Repaired:    []tpuv1alpha1.WorkerClaim{claim(2, "t-late", "late")},
				Destructive: true,
				Claimed:     notClaimed("2 of 4 hosts bound to a Pod, 2 claimed"),
			},
		},
		"a Pod without a claim token whose worker ID is free is adopted": {
			slice: makeSlice().Obj(),
			pods:  pods(preExisting),
			want: lifecycle.Decision{
				Claims:      []tpuv1alpha1.WorkerClaim{claim(1, "uid-pre", "pre")},
				Changed:     true,
				Adopted:     []tpuv1alpha1.WorkerClaim{claim(1, "uid-pre", "pre")},
				Destructive: true,
				Claimed:     notClaimed("1 of 4 hosts bound to a Pod, 1 claimed"),
			},
		},
		"a Pod of a deleted RayCluster UID never takes an ID of the new one": {
			slice: makeSlice().Claim(0, "t0", "w0", "uid-w0").Obj(),
			pods:  pods(workerPod("w0", "t0", 0).Obj(), ofDeletedCluster),
			want: lifecycle.Decision{
				Claims:  []tpuv1alpha1.WorkerClaim{claim(0, "t0", "w0")},
				Claimed: notClaimed("1 of 4 hosts bound to a Pod, 1 claimed"),
			},
		},
		"a Pod whose spec carries no identity holds nothing, whatever its labels and token say": {
			ages:  map[string]time.Duration{"t-plain": time.Second},
			slice: makeSlice().Claim(0, "t-plain", "", "").Obj(),
			pods:  pods(noIdentity),
			want: lifecycle.Decision{
				Claims:       []tpuv1alpha1.WorkerClaim{claim(0, "t-plain", "")},
				RequeueAfter: ttl - time.Second,
				Claimed:      notClaimed("0 of 4 hosts bound to a Pod, 1 claimed"),
			},
		},
		"a late Pod takes the ID of a claim released in the same decision": {
			slice: makeSlice().Claim(2, "t2", "gone", "uid-gone").Obj(),
			pods:  pods(lateFree),
			want: lifecycle.Decision{
				Claims:      []tpuv1alpha1.WorkerClaim{claim(2, "t-late", "late")},
				Changed:     true,
				Released:    []lifecycle.Release{{Claim: claim(2, "t2", "gone"), Reason: lifecycle.ReasonPodGone}},
				Repaired:    []tpuv1alpha1.WorkerClaim{claim(2, "t-late", "late")},
				Destructive: true,
				Claimed:     notClaimed("1 of 4 hosts bound to a Pod, 1 claimed"),
			},
		},
		"a late Pod whose worker ID another live Pod holds is a duplicate": {
			slice: makeSlice().Claim(1, "t1", "w1", "uid-w1").Obj(),
			pods:  pods(workerPod("w1", "t1", 1).Obj(), lateHeld),
			want: lifecycle.Decision{
				Claims:      []tpuv1alpha1.WorkerClaim{claim(1, "t1", "w1")},
				Duplicates:  []lifecycle.Duplicate{{Pod: lateHeld, WorkerID: 1, Holder: "w1"}},
				Destructive: true,
				Claimed:     notClaimed("1 of 4 hosts bound to a Pod, 1 claimed"),
			},
		},
		"a late Pod whose worker ID a claim bound in the same decision holds is a duplicate": {
			slice: makeSlice().Claim(1, "t1", "", "").Obj(),
			pods:  pods(workerPod("w1", "t1", 1).Obj(), lateHeld),
			want: lifecycle.Decision{
				Claims:      []tpuv1alpha1.WorkerClaim{claim(1, "t1", "w1")},
				Changed:     true,
				Bound:       []tpuv1alpha1.WorkerClaim{claim(1, "t1", "w1")},
				Duplicates:  []lifecycle.Duplicate{{Pod: lateHeld, WorkerID: 1, Holder: "w1"}},
				Destructive: true,
				Claimed:     notClaimed("1 of 4 hosts bound to a Pod, 1 claimed"),
			},
		},
		"a live late Pod holds the ID a pending claim (no Pod yet) has: the claim is bound to it": {
			slice: makeSlice().Claim(1, "t1", "", "").Obj(),
			pods:  pods(lateHeld),
			want: lifecycle.Decision{
				Claims:  []tpuv1alpha1.WorkerClaim{claim(1, "t1", "late")},
				Changed: true,
				Bound:   []tpuv1alpha1.WorkerClaim{claim(1, "t1", "late")},
				Claimed: notClaimed("1 of 4 hosts bound to a Pod, 1 claimed"),
			},
		},
		"two live Pods carrying one claim's token: the first holds it, the copy is a duplicate": {
			slice: makeSlice().Claim(1, "t1", "", "").Obj(),
			pods:  pods(copied, workerPod("w1", "t1", 1).Obj()),
			want: lifecycle.Decision{
				Claims:      []tpuv1alpha1.WorkerClaim{claim(1, "t1", "w1")},
				Changed:     true,
				Bound:       []tpuv1alpha1.WorkerClaim{claim(1, "t1", "w1")},
				Duplicates:  []lifecycle.Duplicate{{Pod: copied, WorkerID: 1, Holder: "w1"}},
				Destructive: true,
				Claimed:     notClaimed("1 of 4 hosts bound to a Pod, 1 claimed"),
			},
		},
		"a Pod without a claim token whose worker ID another live Pod holds is reported, not deleted": {
			slice: makeSlice().Claim(1, "t1", "w1", "uid-w1").Obj(),
			pods:  pods(workerPod("w1", "t1", 1).Obj(), preExisting),
			want: lifecycle.Decision{
				Claims:    []tpuv1alpha1.WorkerClaim{claim(1, "t1", "w1")},
				Conflicts: []lifecycle.Conflict{{Pod: preExisting, WorkerID: 1, Why: "Pod w1 holds that worker ID"}},
				Claimed:   notClaimed("1 of 4 hosts bound to a Pod, 1 claimed"),
				Conflict: metav1.Condition{Type: tpuv1alpha1.ConditionConflict, Status: metav1.ConditionTrue, Reason: tpuv1alpha1.ReasonIdentityConflict,
					Message: "1 live Pods carry a TPU identity of this slice that it cannot record: Pod pre (worker ID 1: Pod w1 holds that worker ID); " +
						"they were not given it by this operator and are left running: delete the one that should go"},
			},
		},
		"Pods with an ID outside the slice or another topology are reported, never deleted or bound": {
			ages:  map[string]time.Duration{"t0": time.Second},
			slice: makeSlice().Claim(0, "t0", "", "").Obj(),
			pods:  pods(outside, otherHosts),
			want: lifecycle.Decision{
				Claims: []tpuv1alpha1.WorkerClaim{claim(0, "t0", "")},
				Conflicts: []lifecycle.Conflict{
					{Pod: otherHosts, WorkerID: 0, Why: "its topology gives 1 hosts, the slice has 4"},
					{Pod: outside, WorkerID: 7, Why: "worker ID 7 is outside a slice of 4 hosts"},
				},
				RequeueAfter: ttl - time.Second,
				Claimed:      notClaimed("0 of 4 hosts bound to a Pod, 1 claimed"),
				Conflict: metav1.Condition{Type: tpuv1alpha1.ConditionConflict, Status: metav1.ConditionTrue, Reason: tpuv1alpha1.ReasonIdentityConflict,
					Message: "2 live Pods carry a TPU identity of this slice that it cannot record: Pod one-host (worker ID 0: its topology gives 1 hosts, the slice has 4), " +
						"Pod outside (worker ID 7: worker ID 7 is outside a slice of 4 hosts); they were not given it by this operator and are left running: delete the one that should go"},
			},
		},
		"two late Pods with one ID: the first is repaired, the second is its duplicate": {
			slice: makeSlice().Obj(),
			pods:  pods(secondLate, firstLate),
			want: lifecycle.Decision{
				Claims:      []tpuv1alpha1.WorkerClaim{claim(3, "t-late-1", "late-1")},
				Changed:     true,
				Repaired:    []tpuv1alpha1.WorkerClaim{claim(3, "t-late-1", "late-1")},
				Duplicates:  []lifecycle.Duplicate{{Pod: secondLate, WorkerID: 3, Holder: "late-1"}},
				Destructive: true,
				Claimed:     notClaimed("1 of 4 hosts bound to a Pod, 1 claimed"),
			},
		},
		"terminated late Pods are ignored": {
			slice: makeSlice().Obj(),
			pods: pods(
				workerPod("terminating", "t-a", 0).Terminating().Obj(),
				workerPod("failed", "t-b", 1).Phase(corev1.PodFailed).Obj(),
				workerPod("succeeded", "t-c", 2).Phase(corev1.PodSucceeded).Obj()),
			want: lifecycle.Decision{
				Claimed: notClaimed("0 of 4 hosts bound to a Pod, 0 claimed"),
			},
		},
		"every host bound to a live Pod: Claimed, claims sorted by worker ID": {
			slice: func() *tpuv1alpha1.TPUSliceAssignment {
				s := makeSlice().
					Claim(3, "t3", "w3", "uid-w3").
					Claim(1, "t1", "w1", "uid-w1").
					Claim(0, "t0", "w0", "uid-w0").
					Claim(2, "t2", "", "").Obj()
				s.Generation = 7
				return s
			}(),
			pods: pods(
				workerPod("w0", "t0", 0).Obj(),
				workerPod("w1", "t1", 1).Obj(),
				workerPod("w2", "t2", 2).Obj(),
				workerPod("w3", "t3", 3).Obj()),
			want: lifecycle.Decision{
				Claims: []tpuv1alpha1.WorkerClaim{
					claim(0, "t0", "w0"),
					claim(1, "t1", "w1"),
					claim(2, "t2", "w2"),
					claim(3, "t3", "w3"),
				},
				Changed: true,
				Bound:   []tpuv1alpha1.WorkerClaim{claim(2, "t2", "w2")},
				Claimed: metav1.Condition{
					Type:               tpuv1alpha1.ConditionClaimed,
					Status:             metav1.ConditionTrue,
					ObservedGeneration: 7,
					Reason:             tpuv1alpha1.ReasonAllHostsBound,
					Message:            "4 of 4 hosts bound to a Pod, 4 claimed",
				},
				Conflict: func() metav1.Condition { c := noConflict; c.ObservedGeneration = 7; return c }(),
			},
		},
		"every host claimed but one Pod not seen yet: not Claimed": {
			ages: map[string]time.Duration{"t3": time.Second},
			slice: makeSlice().
				Claim(0, "t0", "w0", "uid-w0").
				Claim(1, "t1", "w1", "uid-w1").
				Claim(2, "t2", "w2", "uid-w2").
				Claim(3, "t3", "", "").Obj(),
			pods: pods(
				workerPod("w0", "t0", 0).Obj(),
				workerPod("w1", "t1", 1).Obj(),
				workerPod("w2", "t2", 2).Obj()),
			want: lifecycle.Decision{
				Claims: []tpuv1alpha1.WorkerClaim{
					claim(0, "t0", "w0"),
					claim(1, "t1", "w1"),
					claim(2, "t2", "w2"),
					claim(3, "t3", ""),
				},
				RequeueAfter: ttl - time.Second,
				Claimed:      notClaimed("3 of 4 hosts bound to a Pod, 4 claimed"),
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.want.Conflict.Type == "" {
				tc.want.Conflict = noConflict
			}
			wantSlice := tc.slice.DeepCopy()
			wantPods := make([]corev1.Pod, 0, len(tc.pods))
			for i := range tc.pods {
				wantPods = append(wantPods, *tc.pods[i].DeepCopy())
			}

			got := lifecycle.Decide(view(tc.slice, tc.pods, tc.ages, tc.gone...), ttl)

			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Decide() (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(wantSlice, tc.slice); diff != "" {
				t.Errorf("Decide() modified the slice (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(wantPods, tc.pods, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Decide() modified the Pods (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestDecidePendingForUsesTheObserversClock: the TTL counts from when the observer first saw the
// claim (PendingFor), not from claimedAt, which another machine's clock wrote.
func TestDecidePendingForUsesTheObserversClock(t *testing.T) {
	// claimedAt is an hour in the past (the webhook's clock is an hour behind), but the observer
	// saw the claim 5 s ago: it is kept.
	slice := makeSlice().Claim(2, "t2", "", "").Obj()
	got := lifecycle.Decide(view(slice, nil, map[string]time.Duration{"t2": 5 * time.Second}), ttl)
	if len(got.Released) != 0 || got.RequeueAfter != ttl-5*time.Second {
		t.Errorf("Decide() released %v, requeue after %v; want nothing released, requeue after %v", got.Released, got.RequeueAfter, ttl-5*time.Second)
	}
}

func TestApplyStatus(t *testing.T) {
	// claimedTrue and claimedFalse are as Decide returns them (no transition time); stored adds the
	// transition time a condition already in the status has.
	claimedTrue := metav1.Condition{Type: tpuv1alpha1.ConditionClaimed, Status: metav1.ConditionTrue, Reason: "AllHostsBound",
		Message: "1 of 1 hosts bound to a Pod, 1 claimed"}
	claimedFalse := metav1.Condition{Type: tpuv1alpha1.ConditionClaimed, Status: metav1.ConditionFalse, Reason: "HostsMissing",
		Message: "0 of 1 hosts bound to a Pod, 1 claimed"}
	stored := func(c metav1.Condition) []metav1.Condition {
		c.LastTransitionTime = metav1.NewTime(longAgo)
		return []metav1.Condition{c}
	}
	bound := claim(0, "t0", "w0")
	pendingClaim := claim(0, "t0", "")

	cases := map[string]struct {
		status      tpuv1alpha1.TPUSliceAssignmentStatus
		decision    lifecycle.Decision
		wantStatus  tpuv1alpha1.TPUSliceAssignmentStatus
		wantChanged bool
		// wantNewTransition: the Claimed condition changed status, so its transition time is now.
		wantNewTransition bool
	}{
		"nothing to change": {
			status:     tpuv1alpha1.TPUSliceAssignmentStatus{Claims: []tpuv1alpha1.WorkerClaim{bound}, Claimed: 1, Conditions: stored(claimedTrue)},
			decision:   lifecycle.Decision{Claims: []tpuv1alpha1.WorkerClaim{bound}, Claimed: claimedTrue},
			wantStatus: tpuv1alpha1.TPUSliceAssignmentStatus{Claims: []tpuv1alpha1.WorkerClaim{bound}, Claimed: 1, Conditions: stored(claimedTrue)},
		},
		"an unchanged decision leaves the claims as they are": {
			status: tpuv1alpha1.TPUSliceAssignmentStatus{
				Claims:  []tpuv1alpha1.WorkerClaim{claim(1, "t1", ""), pendingClaim},
				Claimed: 2, Conditions: stored(claimedFalse)},
			decision: lifecycle.Decision{Claims: []tpuv1alpha1.WorkerClaim{pendingClaim, claim(1, "t1", "")}, Claimed: claimedFalse},
			wantStatus: tpuv1alpha1.TPUSliceAssignmentStatus{
				Claims:  []tpuv1alpha1.WorkerClaim{claim(1, "t1", ""), pendingClaim},
				Claimed: 2, Conditions: stored(claimedFalse)},
		},
		"a stale claimed count is fixed": {
			status:      tpuv1alpha1.TPUSliceAssignmentStatus{Claims: []tpuv1alpha1.WorkerClaim{bound}, Claimed: 0, Conditions: stored(claimedTrue)},
			decision:    lifecycle.Decision{Claims: []tpuv1alpha1.WorkerClaim{bound}, Claimed: claimedTrue},
			wantStatus:  tpuv1alpha1.TPUSliceAssignmentStatus{Claims: []tpuv1alpha1.WorkerClaim{bound}, Claimed: 1, Conditions: stored(claimedTrue)},
			wantChanged: true,
		},
		"a changed decision replaces the claims and the count": {
			status: tpuv1alpha1.TPUSliceAssignmentStatus{
				Claims:  []tpuv1alpha1.WorkerClaim{bound, claim(1, "t1", "")},
				Claimed: 2, Conditions: stored(claimedTrue)},
			decision:    lifecycle.Decision{Changed: true, Claims: []tpuv1alpha1.WorkerClaim{bound}, Claimed: claimedTrue},
			wantStatus:  tpuv1alpha1.TPUSliceAssignmentStatus{Claims: []tpuv1alpha1.WorkerClaim{bound}, Claimed: 1, Conditions: stored(claimedTrue)},
			wantChanged: true,
		},
		"a release of the last claim empties the list": {
			status:            tpuv1alpha1.TPUSliceAssignmentStatus{Claims: []tpuv1alpha1.WorkerClaim{bound}, Claimed: 1, Conditions: stored(claimedTrue)},
			decision:          lifecycle.Decision{Changed: true, Claimed: claimedFalse},
			wantStatus:        tpuv1alpha1.TPUSliceAssignmentStatus{Claims: nil, Claimed: 0, Conditions: stored(claimedFalse)},
			wantChanged:       true,
			wantNewTransition: true,
		},
		"the first Claimed condition is added": {
			status:            tpuv1alpha1.TPUSliceAssignmentStatus{Claims: []tpuv1alpha1.WorkerClaim{pendingClaim}, Claimed: 1},
			decision:          lifecycle.Decision{Claims: []tpuv1alpha1.WorkerClaim{pendingClaim}, Claimed: claimedFalse},
			wantStatus:        tpuv1alpha1.TPUSliceAssignmentStatus{Claims: []tpuv1alpha1.WorkerClaim{pendingClaim}, Claimed: 1, Conditions: stored(claimedFalse)},
			wantChanged:       true,
			wantNewTransition: true,
		},
		"binding the last host turns Claimed True": {
			status:            tpuv1alpha1.TPUSliceAssignmentStatus{Claims: []tpuv1alpha1.WorkerClaim{pendingClaim}, Claimed: 1, Conditions: stored(claimedFalse)},
			decision:          lifecycle.Decision{Changed: true, Claims: []tpuv1alpha1.WorkerClaim{bound}, Claimed: claimedTrue},
			wantStatus:        tpuv1alpha1.TPUSliceAssignmentStatus{Claims: []tpuv1alpha1.WorkerClaim{bound}, Claimed: 1, Conditions: stored(claimedTrue)},
			wantChanged:       true,
			wantNewTransition: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			status := tc.status
			status.Conditions = append([]metav1.Condition(nil), tc.status.Conditions...)
			started := time.Now().Add(-time.Second)

			got := lifecycle.ApplyStatus(&status, tc.decision)

			if got != tc.wantChanged {
				t.Errorf("ApplyStatus() = %v, want %v", got, tc.wantChanged)
			}
			opts := cmp.Options{cmpopts.EquateEmpty()}
			if tc.wantNewTransition {
				opts = append(opts, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime"))
				if ltt := status.Conditions[0].LastTransitionTime; ltt.Time.Before(started) {
					t.Errorf("Claimed changed status but its LastTransitionTime is %v", ltt)
				}
			}
			if diff := cmp.Diff(tc.wantStatus, status, opts); diff != "" {
				t.Errorf("ApplyStatus() status (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestDecideApplyStatusConverges runs the reconciler's pure steps twice: the second pass finds
// nothing to do.
func TestDecideApplyStatusConverges(t *testing.T) {
	slice := makeSlice().
		Claim(0, "t0", "w0", "uid-w0").
		Claim(1, "t1", "", "").
		Claim(2, "t2", "gone", "uid-gone").
		Claim(3, "t3", "", "").Obj()
	slice.Status.Claimed = 0
	livePods := pods(
		workerPod("w0", "t0", 0).Obj(),
		workerPod("w1", "t1", 1).Obj(),
		workerPod("late", "t-late", 2).Obj())

	ages := map[string]time.Duration{"t1": 5 * time.Second, "t3": time.Minute}
	first := lifecycle.Decide(view(slice, livePods, ages), ttl)
	if !lifecycle.ApplyStatus(&slice.Status, first) {
		t.Fatal("first ApplyStatus() = false, want true")
	}
	wantStatus := tpuv1alpha1.TPUSliceAssignmentStatus{
		Claims: []tpuv1alpha1.WorkerClaim{
			claim(0, "t0", "w0"),
			claim(1, "t1", "w1"),
			claim(2, "t-late", "late"),
		},
		Claimed: 3,
		Conditions: []metav1.Condition{{
			Type: tpuv1alpha1.ConditionClaimed, Status: metav1.ConditionFalse, Reason: "HostsMissing",
			Message: "3 of 4 hosts bound to a Pod, 3 claimed",
		}, noConflict},
	}
	if diff := cmp.Diff(wantStatus, slice.Status, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")); diff != "" {
		t.Fatalf("status after the first pass (-want,+got):\n%s", diff)
	}
	afterFirst := slice.Status.DeepCopy()

	second := lifecycle.Decide(view(slice, livePods, ages), ttl)
	wantSecond := lifecycle.Decision{
		Claims:   wantStatus.Claims,
		Claimed:  wantStatus.Conditions[0],
		Conflict: noConflict,
	}
	if diff := cmp.Diff(wantSecond, second, cmpopts.EquateEmpty(), cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")); diff != "" {
		t.Errorf("second Decide() (-want,+got):\n%s", diff)
	}
	if lifecycle.ApplyStatus(&slice.Status, second) {
		t.Error("second ApplyStatus() = true, want false")
	}
	if diff := cmp.Diff(afterFirst, &slice.Status); diff != "" {
		t.Errorf("second ApplyStatus() changed the status (-want,+got):\n%s", diff)
	}
}

func TestPodLive(t *testing.T) {
	cases := map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"running":               {pod: workerPod("w", "t", 0).Obj(), want: true},
		"pending":               {pod: workerPod("w", "t", 0).Phase(corev1.PodPending).Obj(), want: true},
		"no phase yet":          {pod: workerPod("w", "t", 0).Phase("").Obj(), want: true},
		"unknown":               {pod: workerPod("w", "t", 0).Phase(corev1.PodUnknown).Obj(), want: true},
		"terminating":           {pod: workerPod("w", "t", 0).Terminating().Obj(), want: false},
		"failed":                {pod: workerPod("w", "t", 0).Phase(corev1.PodFailed).Obj(), want: false},
		"succeeded":             {pod: workerPod("w", "t", 0).Phase(corev1.PodSucceeded).Obj(), want: false},
		"terminating and ready": {pod: workerPod("w", "t", 0).Terminating().Phase(corev1.PodRunning).Obj(), want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := lifecycle.PodLive(tc.pod); got != tc.want {
				t.Errorf("PodLive() = %v, want %v", got, tc.want)
			}
		})
	}
}
