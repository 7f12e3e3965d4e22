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

package claims_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

const (
	testNamespace = "ml"
	testCluster   = "rc"
	testGroup     = "tpu"

	clusterUID types.UID = "uid-current"
	oldUID     types.UID = "uid-deleted"
)

// makeSlice starts the slice of replica of the test group, of the current RayCluster UID.
func makeSlice(replica, hosts int32) *testutil.SliceWrapper {
	return testutil.MakeSlice(fmt.Sprintf("%s-%s-%d", testCluster, testGroup, replica), testNamespace,
		testCluster, clusterUID, testGroup, replica, hosts)
}

// pending is a claim as Plan returns it for a new request: no Pod, no time (the caller stamps it).
func pending(id int32, token string) tpuv1alpha1.WorkerClaim {
	return tpuv1alpha1.WorkerClaim{WorkerID: id, Token: token}
}

// existing is a claim already recorded in a slice by makeSlice(...).Claim(id, token, pod, uid).
func existing(id int32, token, pod string, uid types.UID) tpuv1alpha1.WorkerClaim {
	return tpuv1alpha1.WorkerClaim{WorkerID: id, Token: token, PodName: pod, PodUID: uid}
}

// full returns a slice of replica whose hosts IDs are all claimed by bound claims <prefix>-<id>.
func full(replica, hosts int32, prefix string) *tpuv1alpha1.TPUSliceAssignment {
	s := makeSlice(replica, hosts)
	for id := range hosts {
		name := fmt.Sprintf("%s-%d", prefix, id)
		s.Claim(id, name, "pod-"+name, types.UID("uid-"+name))
	}
	return s.Obj()
}

func placed(replica, id int32) claims.Outcome {
	return claims.Outcome{Slot: claims.Slot{Replica: replica, WorkerID: id}}
}

func takeover(replica, id int32, claim tpuv1alpha1.WorkerClaim) claims.Outcome {
	return claims.Outcome{Slot: claims.Slot{Replica: replica, WorkerID: id}, Takeover: &claim}
}

func fullOutcome(desired int32) claims.Outcome {
	const hosts = 2
	return claims.Outcome{Reason: claims.ReasonFull, Message: fmt.Sprintf(
		"all %d slices of %d hosts the worker group asks for are fully claimed; a claim of a Pod that was just created or deleted may still be settling",
		desired, hosts)}
}

// tokens returns gate-off requests t1..tn.
func tokens(n int) []claims.Request {
	reqs := make([]claims.Request, n)
	for i := range reqs {
		reqs[i].Token = fmt.Sprintf("t%d", i+1)
	}
	return reqs
}

// indexed returns a request carrying KubeRay's RayMultiHostIndexing labels; host < 0 omits the host index.
func indexed(token string, replica, host int32, replicaName string) claims.Request {
	r := claims.Request{Token: token, ReplicaIndex: ptr.To(replica), ReplicaName: replicaName}
	if host >= 0 {
		r.HostIndex = ptr.To(host)
	}
	return r
}

// fortyForgedIndexes returns single-host requests f0..f39 whose KubeRay labels name replicas 0..39
// and the outcomes of a group that asks for one replica: replica 0 is placed, no other.
func fortyForgedIndexes() ([]claims.Request, []claims.Outcome) {
	const n = 40
	reqs := make([]claims.Request, 0, n)
	outcomes := make([]claims.Outcome, 0, n)
	for r := range int32(n) {
		reqs = append(reqs, indexed(fmt.Sprintf("f%d", r), r, -1, ""))
		if r == 0 {
			outcomes = append(outcomes, placed(0, 0))
			continue
		}
		outcomes = append(outcomes, claims.Outcome{Reason: claims.ReasonBeyondDesired, Message: claims.BeyondDesiredMessage(r, 1)})
	}
	return reqs, outcomes
}

// reclaimableTokens returns a Reclaimable that accepts the claims of tokens: the caller's live
// check found their Pods gone (for a pending claim: seen, then gone).
func reclaimableTokens(_ *testing.T, tokens ...string) claims.Reclaimable {
	return func(_ int32, c *tpuv1alpha1.WorkerClaim) bool {
		return slices.Contains(tokens, c.Token)
	}
}

// claimsOf returns the claim lists of a plan's writes.
func claimsOf(writes map[int32]claims.Write) map[int32][]tpuv1alpha1.WorkerClaim {
	out := make(map[int32][]tpuv1alpha1.WorkerClaim, len(writes))
	for r, w := range writes {
		out[r] = w.Claims
	}
	return out
}

func sliceMap(ss ...*tpuv1alpha1.TPUSliceAssignment) claims.Slices {
	out := claims.Slices{}
	for _, s := range ss {
		out[s.Spec.ReplicaIndex] = s
	}
	return out
}

func TestPlanWithoutKubeRayIndexes(t *testing.T) {
	cases := map[string]struct {
		group         claims.Group
		current       claims.Slices
		reqs          []claims.Request
		reclaimTokens []string
		wantOutcomes  []claims.Outcome
		wantTouched   map[int32][]tpuv1alpha1.WorkerClaim
	}{
		"the first Pod of an empty group gets replica 0, worker 0": {
			group:        claims.Group{ClusterUID: clusterUID, Hosts: 4, DesiredReplicas: 2},
			reqs:         tokens(1),
			wantOutcomes: []claims.Outcome{placed(0, 0)},
			wantTouched:  map[int32][]tpuv1alpha1.WorkerClaim{0: {pending(0, "t1")}},
		},
		"requests of one call fill replica 0 host by host, then replica 1": {
			group:        claims.Group{ClusterUID: clusterUID, Hosts: 4, DesiredReplicas: 2},
			reqs:         tokens(6),
			wantOutcomes: []claims.Outcome{placed(0, 0), placed(0, 1), placed(0, 2), placed(0, 3), placed(1, 0), placed(1, 1)},
			wantTouched: map[int32][]tpuv1alpha1.WorkerClaim{
				0: {pending(0, "t1"), pending(1, "t2"), pending(2, "t3"), pending(3, "t4")},
				1: {pending(0, "t5"), pending(1, "t6")},
			},
		},
		"free IDs inside a slice are refilled lowest first": {
			group: claims.Group{ClusterUID: clusterUID, Hosts: 4, DesiredReplicas: 1},
			current: sliceMap(makeSlice(0, 4).
				Claim(0, "a", "pod-a", "uid-a").
				Claim(2, "b", "", "").Obj()),
			reqs:         tokens(2),
			wantOutcomes: []claims.Outcome{placed(0, 1), placed(0, 3)},
			wantTouched: map[int32][]tpuv1alpha1.WorkerClaim{
				0: {existing(0, "a", "pod-a", "uid-a"), existing(2, "b", "", ""), pending(1, "t1"), pending(3, "t2")},
			},
		},
		"a missing replica between full slices is refilled, not appended after them": {
			group:        claims.Group{ClusterUID: clusterUID, Hosts: 2, DesiredReplicas: 3},
			current:      sliceMap(full(0, 2, "r0"), full(2, 2, "r2")),
			reqs:         tokens(1),
			wantOutcomes: []claims.Outcome{placed(1, 0)},
			wantTouched:  map[int32][]tpuv1alpha1.WorkerClaim{1: {pending(0, "t1")}},
		},
		"a partly claimed replica 1 is finished before the missing replica 0 is opened": {
			group:        claims.Group{ClusterUID: clusterUID, Hosts: 2, DesiredReplicas: 2},
			current:      sliceMap(makeSlice(1, 2).Claim(0, "a", "pod-a", "uid-a").Obj()),
			reqs:         tokens(2),
			wantOutcomes: []claims.Outcome{placed(1, 1), placed(0, 0)},
			wantTouched: map[int32][]tpuv1alpha1.WorkerClaim{
				0: {pending(0, "t2")},
				1: {existing(0, "a", "pod-a", "uid-a"), pending(1, "t1")},
			},
		},
		"a partly claimed slice at or above the desired replica count is never chosen": {
			group: claims.Group{ClusterUID: clusterUID, Hosts: 2, DesiredReplicas: 2},
			current: sliceMap(full(0, 2, "r0"),
				makeSlice(2, 2).Claim(0, "a", "pod-a", "uid-a").Obj()),
			reqs:         tokens(3),
			wantOutcomes: []claims.Outcome{placed(1, 0), placed(1, 1), fullOutcome(2)},
			wantTouched:  map[int32][]tpuv1alpha1.WorkerClaim{1: {pending(0, "t1"), pending(1, "t2")}},
		},
		"every desired slice is full and a free slice beyond them exists: Full": {
			group:        claims.Group{ClusterUID: clusterUID, Hosts: 2, DesiredReplicas: 1},
			current:      sliceMap(full(0, 2, "r0"), makeSlice(1, 2).Obj()),
			reqs:         tokens(1),
			wantOutcomes: []claims.Outcome{fullOutcome(1)},
			wantTouched:  map[int32][]tpuv1alpha1.WorkerClaim{},
		},
		"every slice full and nothing reclaimable: Full": {
			group:        claims.Group{ClusterUID: clusterUID, Hosts: 2, DesiredReplicas: 2},
			current:      sliceMap(full(0, 2, "r0"), full(1, 2, "r1")),
			reqs:         tokens(1),
			wantOutcomes: []claims.Outcome{fullOutcome(2)},
			wantTouched:  map[int32][]tpuv1alpha1.WorkerClaim{},
		},
		"every slice full: the lowest reclaimable bound claim of the lowest slice is taken over": {
			group: claims.Group{ClusterUID: clusterUID, Hosts: 4, DesiredReplicas: 2},
			current: sliceMap(
				makeSlice(0, 4).
					Claim(3, "a3", "pod-a3", "uid-a3").
					Claim(0, "a0", "pod-a0", "uid-a0").
					Claim(2, "a2", "pod-a2", "uid-a2").
					Claim(1, "a1", "pod-a1", "uid-a1").Obj(),
				full(1, 4, "b")),
			reqs:          tokens(1),
			reclaimTokens: []string{"a3", "a2", "b-0"},
			wantOutcomes:  []claims.Outcome{takeover(0, 2, existing(2, "a2", "pod-a2", "uid-a2"))},
			wantTouched: map[int32][]tpuv1alpha1.WorkerClaim{
				0: {
					existing(3, "a3", "pod-a3", "uid-a3"),
					existing(0, "a0", "pod-a0", "uid-a0"),
					existing(1, "a1", "pod-a1", "uid-a1"),
					pending(2, "t1"),
				},
			},
		},
		"takeovers in one call use each reclaimable claim once, then the group is Full": {
			group:         claims.Group{ClusterUID: clusterUID, Hosts: 2, DesiredReplicas: 2},
			current:       sliceMap(full(0, 2, "r0"), full(1, 2, "r1")),
			reqs:          tokens(3),
			reclaimTokens: []string{"r1-1", "r0-0"},
			wantOutcomes: []claims.Outcome{
				takeover(0, 0, existing(0, "r0-0", "pod-r0-0", "uid-r0-0")),
				takeover(1, 1, existing(1, "r1-1", "pod-r1-1", "uid-r1-1")),
				fullOutcome(2),
			},
			wantTouched: map[int32][]tpuv1alpha1.WorkerClaim{
				0: {existing(1, "r0-1", "pod-r0-1", "uid-r0-1"), pending(0, "t1")},
				1: {existing(0, "r1-0", "pod-r1-0", "uid-r1-0"), pending(1, "t2")},
			},
		},
		"pending claims whose Pods may still be created are not taken over": {
			group: claims.Group{ClusterUID: clusterUID, Hosts: 2, DesiredReplicas: 1},
			current: sliceMap(makeSlice(0, 2).
				Claim(0, "p0", "", "").
				Claim(1, "p1", "", "").Obj()),
			reqs:          tokens(1),
			reclaimTokens: []string{},
			wantOutcomes:  []claims.Outcome{fullOutcome(1)},
			wantTouched:   map[int32][]tpuv1alpha1.WorkerClaim{},
		},
		"a pending claim whose Pod was seen and is gone is taken over, the lowest first": {
			group: claims.Group{ClusterUID: clusterUID, Hosts: 2, DesiredReplicas: 1},
			current: sliceMap(makeSlice(0, 2).
				Claim(0, "p0", "", "").
				Claim(1, "p1", "", "").Obj()),
			reqs:          tokens(1),
			reclaimTokens: []string{"p0", "p1"},
			wantOutcomes:  []claims.Outcome{takeover(0, 0, existing(0, "p0", "", ""))},
			wantTouched:   map[int32][]tpuv1alpha1.WorkerClaim{0: {existing(1, "p1", "", ""), pending(0, "t1")}},
		},
		"a slice of a deleted RayCluster UID counts as empty": {
			group: claims.Group{ClusterUID: clusterUID, Hosts: 2, DesiredReplicas: 1},
			current: sliceMap(testutil.MakeSlice("rc-tpu-0", testNamespace, testCluster, oldUID, testGroup, 0, 2).
				Claim(0, "old0", "pod-old0", "uid-old0").
				Claim(1, "old1", "pod-old1", "uid-old1").Obj()),
			reqs:         tokens(1),
			wantOutcomes: []claims.Outcome{placed(0, 0)},
			wantTouched:  map[int32][]tpuv1alpha1.WorkerClaim{0: {pending(0, "t1")}},
		},
		"a group that asks for no replicas: Full": {
			group: claims.Group{ClusterUID: clusterUID, Hosts: 4, DesiredReplicas: 0},
			reqs:  tokens(1),
			wantOutcomes: []claims.Outcome{{Reason: claims.ReasonFull,
				Message: "the worker group asks for no replicas (suspended or scaled to zero), so no slice may be opened"}},
			wantTouched: map[int32][]tpuv1alpha1.WorkerClaim{},
		},
		"a retried request whose claim was committed gets the same ID back, not a second one": {
			group: claims.Group{ClusterUID: clusterUID, Hosts: 4, DesiredReplicas: 1},
			current: sliceMap(makeSlice(0, 4).
				Claim(0, "a", "pod-a", "uid-a").
				Claim(1, "t1", "", "").Obj()),
			reqs:         tokens(2),
			wantOutcomes: []claims.Outcome{placed(0, 1), placed(0, 2)},
			wantTouched: map[int32][]tpuv1alpha1.WorkerClaim{
				0: {existing(0, "a", "pod-a", "uid-a"), existing(1, "t1", "", ""), pending(2, "t2")},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var reclaimable claims.Reclaimable
			if tc.reclaimTokens != nil {
				reclaimable = reclaimableTokens(t, tc.reclaimTokens...)
			}
			gotOutcomes, gotWrites := claims.Plan(tc.group, tc.current, tc.reqs, reclaimable)
			gotTouched := claimsOf(gotWrites)
			if diff := cmp.Diff(tc.wantOutcomes, gotOutcomes); diff != "" {
				t.Errorf("Plan() outcomes (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantTouched, gotTouched, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Plan() touched claims (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestPlanWithKubeRayIndexes(t *testing.T) {
	const hosts = 4
	group := claims.Group{ClusterUID: clusterUID, Hosts: hosts, DesiredReplicas: 2}
	forgedReqs, forgedOutcomes := fortyForgedIndexes()
	cases := map[string]struct {
		group         claims.Group
		current       claims.Slices
		reqs          []claims.Request
		reclaimTokens []string
		wantOutcomes  []claims.Outcome
		wantTouched   map[int32][]tpuv1alpha1.WorkerClaim
	}{
		"the Pod is placed exactly at its replica and host index": {
			group:        group,
			current:      sliceMap(makeSlice(1, hosts).ReplicaName("rs-b").Claim(0, "a", "pod-a", "uid-a").Obj()),
			reqs:         []claims.Request{indexed("t1", 1, 2, "rs-b")},
			wantOutcomes: []claims.Outcome{placed(1, 2)},
			wantTouched:  map[int32][]tpuv1alpha1.WorkerClaim{1: {existing(0, "a", "pod-a", "uid-a"), pending(2, "t1")}},
		},
		"the indexes win over the lowest free ID of the lowest slice": {
			group:        group,
			reqs:         []claims.Request{indexed("t1", 1, 3, "rs-b")},
			wantOutcomes: []claims.Outcome{placed(1, 3)},
			wantTouched:  map[int32][]tpuv1alpha1.WorkerClaim{1: {pending(3, "t1")}},
		},
		"a single-host Pod with only a replica index gets worker 0": {
			group:        claims.Group{ClusterUID: clusterUID, Hosts: 1, DesiredReplicas: 4},
			reqs:         []claims.Request{indexed("t1", 3, -1, "")},
			wantOutcomes: []claims.Outcome{placed(3, 0)},
			wantTouched:  map[int32][]tpuv1alpha1.WorkerClaim{3: {pending(0, "t1")}},
		},
		"a replica index at or beyond the desired replica count opens no slice (a forged or stray label)": {
			group: group,
			reqs:  []claims.Request{indexed("t1", 5, 1, "rs-f"), indexed("t2", 2, 0, "rs-c")},
			wantOutcomes: []claims.Outcome{
				{Reason: claims.ReasonBeyondDesired, Message: claims.BeyondDesiredMessage(5, 2)},
				{Reason: claims.ReasonBeyondDesired, Message: claims.BeyondDesiredMessage(2, 2)},
			},
			wantTouched: map[int32][]tpuv1alpha1.WorkerClaim{},
		},
		"forty forged replica indexes against one desired replica: only replica 0 is placed": {
			group:        claims.Group{ClusterUID: clusterUID, Hosts: 1, DesiredReplicas: 1},
			reqs:         forgedReqs,
			wantOutcomes: forgedOutcomes,
			wantTouched:  map[int32][]tpuv1alpha1.WorkerClaim{0: {pending(0, "f0")}},
		},
		"a suspended group (no desired replicas) opens no indexed slice": {
			group:        claims.Group{ClusterUID: clusterUID, Hosts: hosts, DesiredReplicas: 0},
			reqs:         []claims.Request{indexed("t1", 0, 0, "rs-a")},
			wantOutcomes: []claims.Outcome{{Reason: claims.ReasonBeyondDesired, Message: claims.BeyondDesiredMessage(0, 0)}},
			wantTouched:  map[int32][]tpuv1alpha1.WorkerClaim{},
		},
		"a host index outside the slice is Invalid": {
			group: group,
			reqs:  []claims.Request{indexed("t1", 0, hosts, "rs-a")},
			wantOutcomes: []claims.Outcome{{Reason: claims.ReasonInvalid,
				Message: "KubeRay labels place the Pod at replica 0, host 4, outside a slice of 4 hosts"}},
			wantTouched: map[int32][]tpuv1alpha1.WorkerClaim{},
		},
		"a negative replica index is Invalid": {
			group: group,
			reqs:  []claims.Request{indexed("t1", -1, 0, "rs-a")},
			wantOutcomes: []claims.Outcome{{Reason: claims.ReasonInvalid,
				Message: "KubeRay labels place the Pod at replica -1, host 0, outside a slice of 4 hosts"}},
			wantTouched: map[int32][]tpuv1alpha1.WorkerClaim{},
		},
		"an ID bound to another live Pod is Full": {
			group:         group,
			current:       sliceMap(makeSlice(1, hosts).ReplicaName("rs-b").Claim(2, "a", "pod-a", "uid-a").Obj()),
			reqs:          []claims.Request{indexed("t1", 1, 2, "rs-b")},
			reclaimTokens: []string{},
			wantOutcomes: []claims.Outcome{{Reason: claims.ReasonFull,
				Message: "worker ID 2 of replica 1 is held by another Pod (Pod pod-a); it is released once that Pod is gone"}},
			wantTouched: map[int32][]tpuv1alpha1.WorkerClaim{},
		},
		"an ID held by another token's pending claim whose Pod may still be created is Full": {
			group:         group,
			current:       sliceMap(makeSlice(1, hosts).ReplicaName("rs-b").Claim(2, "a", "", "").Obj()),
			reqs:          []claims.Request{indexed("t1", 1, 2, "rs-b")},
			reclaimTokens: []string{},
			wantOutcomes: []claims.Outcome{{Reason: claims.ReasonFull,
				Message: "worker ID 2 of replica 1 is held by another Pod (a claim whose Pod has not been seen yet); it is released once that Pod is gone"}},
			wantTouched: map[int32][]tpuv1alpha1.WorkerClaim{},
		},
		"an ID held by a pending claim whose Pod was seen and is gone is taken over": {
			group:         group,
			current:       sliceMap(makeSlice(1, hosts).ReplicaName("rs-b").Claim(2, "a", "", "").Obj()),
			reqs:          []claims.Request{indexed("t1", 1, 2, "rs-b")},
			reclaimTokens: []string{"a"},
			wantOutcomes:  []claims.Outcome{takeover(1, 2, existing(2, "a", "", ""))},
			wantTouched:   map[int32][]tpuv1alpha1.WorkerClaim{1: {pending(2, "t1")}},
		},
		"an ID held by the same token is placed again and the claim kept as it is": {
			group:        group,
			current:      sliceMap(makeSlice(1, hosts).ReplicaName("rs-b").Claim(2, "t1", "pod-t1", "uid-t1").Obj()),
			reqs:         []claims.Request{indexed("t1", 1, 2, "rs-b")},
			wantOutcomes: []claims.Outcome{placed(1, 2)},
			wantTouched:  map[int32][]tpuv1alpha1.WorkerClaim{1: {existing(2, "t1", "pod-t1", "uid-t1")}},
		},
		"an ID bound to a reclaimable Pod is taken over": {
			group: group,
			current: sliceMap(makeSlice(1, hosts).ReplicaName("rs-b").
				Claim(2, "a", "pod-a", "uid-a").
				Claim(0, "b", "pod-b", "uid-b").Obj()),
			reqs:          []claims.Request{indexed("t1", 1, 2, "rs-b")},
			reclaimTokens: []string{"a"},
			wantOutcomes:  []claims.Outcome{takeover(1, 2, existing(2, "a", "pod-a", "uid-a"))},
			wantTouched:   map[int32][]tpuv1alpha1.WorkerClaim{1: {existing(0, "b", "pod-b", "uid-b"), pending(2, "t1")}},
		},
		"a replica recorded under another name is replaced once every Pod of the old one is gone": {
			group: group,
			current: sliceMap(makeSlice(1, hosts).ReplicaName("rs-old").
				Claim(0, "a", "pod-a", "uid-a").
				Claim(1, "b", "pod-b", "uid-b").Obj()),
			reqs:          []claims.Request{indexed("t1", 1, 1, "rs-new")},
			reclaimTokens: []string{"a", "b"},
			wantOutcomes:  []claims.Outcome{placed(1, 1)},
			wantTouched:   map[int32][]tpuv1alpha1.WorkerClaim{1: {pending(1, "t1")}},
		},
		"a replica recorded under another name whose old Pods still run is not replaced": {
			group: group,
			current: sliceMap(makeSlice(1, hosts).ReplicaName("rs-old").
				Claim(0, "a", "pod-a", "uid-a").
				Claim(1, "b", "pod-b", "uid-b").Obj()),
			reqs:          []claims.Request{indexed("t1", 1, 1, "rs-new")},
			reclaimTokens: []string{"a"},
			wantOutcomes: []claims.Outcome{{Reason: claims.ReasonFull,
				Message: "replica 1 is still held by 1 claims of KubeRay replica rs-old; it is replaced by rs-new once those Pods are gone"}},
			wantTouched: map[int32][]tpuv1alpha1.WorkerClaim{},
		},
		"a Pod of a replica name the slice has already replaced is an older replica": {
			group: group,
			current: sliceMap(func() *tpuv1alpha1.TPUSliceAssignment {
				s := makeSlice(1, hosts).ReplicaName("rs-new").Obj()
				s.Spec.ReplacedReplicaNames = []string{"rs-older", "rs-old"}
				return s
			}()),
			reqs:          []claims.Request{indexed("t1", 1, 1, "rs-old")},
			reclaimTokens: []string{},
			wantOutcomes: []claims.Outcome{{Reason: claims.ReasonOlderReplica,
				Message: "the Pod belongs to KubeRay replica rs-old, which replica 1 has already replaced with rs-new; a create of the older replica is refused (KubeRay recreates what it still wants)"}},
			wantTouched: map[int32][]tpuv1alpha1.WorkerClaim{},
		},
		"a slice of a deleted RayCluster at the requested replica is replaced": {
			group: group,
			current: sliceMap(testutil.MakeSlice("rc-tpu-1", testNamespace, testCluster, oldUID, testGroup, 1, hosts).
				ReplicaName("rs-b").
				Claim(1, "a", "pod-a", "uid-a").Obj()),
			reqs:         []claims.Request{indexed("t1", 1, 1, "rs-b")},
			wantOutcomes: []claims.Outcome{placed(1, 1)},
			wantTouched:  map[int32][]tpuv1alpha1.WorkerClaim{1: {pending(1, "t1")}},
		},
		"two Pods of a new replica name in one call both land in the emptied slice": {
			group: group,
			current: sliceMap(func() *tpuv1alpha1.TPUSliceAssignment {
				s := full(1, hosts, "old")
				s.Spec.ReplicaName = "rs-old"
				return s
			}()),
			reclaimTokens: []string{"old-0", "old-1", "old-2", "old-3"},
			reqs:          []claims.Request{indexed("t1", 1, 3, "rs-new"), indexed("t2", 1, 0, "rs-new")},
			wantOutcomes:  []claims.Outcome{placed(1, 3), placed(1, 0)},
			wantTouched:   map[int32][]tpuv1alpha1.WorkerClaim{1: {pending(3, "t1"), pending(0, "t2")}},
		},
		"two Pods of two replica names in one call and no slice: the second waits for the first's to go": {
			group:         group,
			reqs:          []claims.Request{indexed("t1", 1, 0, "rs-old"), indexed("t2", 1, 1, "rs-new")},
			reclaimTokens: []string{},
			wantOutcomes: []claims.Outcome{placed(1, 0), {Reason: claims.ReasonFull,
				Message: "replica 1 is still held by 1 claims of KubeRay replica rs-old; it is replaced by rs-new once those Pods are gone"}},
			wantTouched: map[int32][]tpuv1alpha1.WorkerClaim{1: {pending(0, "t1")}},
		},
		"a Pod of the replica name a replacement earlier in the call replaced is an older replica": {
			group: group,
			current: sliceMap(makeSlice(1, hosts).ReplicaName("rs-old").
				Claim(0, "a", "pod-a", "uid-a").Obj()),
			reqs:          []claims.Request{indexed("t1", 1, 1, "rs-new"), indexed("t2", 1, 2, "rs-old")},
			reclaimTokens: []string{"a"},
			wantOutcomes: []claims.Outcome{placed(1, 1), {Reason: claims.ReasonOlderReplica,
				Message: "the Pod belongs to KubeRay replica rs-old, which replica 1 has already replaced with rs-new; a create of the older replica is refused (KubeRay recreates what it still wants)"}},
			wantTouched: map[int32][]tpuv1alpha1.WorkerClaim{1: {pending(1, "t1")}},
		},
		"a replica name whose slice's status was never written is not remembered as replaced": {
			group:         group,
			current:       sliceMap(makeSlice(1, hosts).ReplicaName("rs-new").Obj()),
			reqs:          []claims.Request{indexed("t1", 1, 0, "rs-old"), indexed("t2", 1, 1, "rs-new")},
			reclaimTokens: []string{},
			wantOutcomes: []claims.Outcome{placed(1, 0), {Reason: claims.ReasonFull,
				Message: "replica 1 is still held by 1 claims of KubeRay replica rs-old; it is replaced by rs-new once those Pods are gone"}},
			wantTouched: map[int32][]tpuv1alpha1.WorkerClaim{1: {pending(0, "t1")}},
		},
		"two Pods with the same indexes in one call: the second is Full": {
			group:        group,
			reqs:         []claims.Request{indexed("t1", 0, 1, "rs-a"), indexed("t2", 0, 1, "rs-a")},
			wantOutcomes: []claims.Outcome{placed(0, 1), {Reason: claims.ReasonFull, Message: "worker ID 1 of replica 0 is held by another Pod (a claim whose Pod has not been seen yet); it is released once that Pod is gone"}},
			wantTouched:  map[int32][]tpuv1alpha1.WorkerClaim{0: {pending(1, "t1")}},
		},
		"a Pod without indexes after an indexed one in one call takes the next free ID": {
			group:        group,
			reqs:         []claims.Request{indexed("t1", 0, 0, "rs-a"), {Token: "t2"}},
			wantOutcomes: []claims.Outcome{placed(0, 0), placed(0, 1)},
			wantTouched:  map[int32][]tpuv1alpha1.WorkerClaim{0: {pending(0, "t1"), pending(1, "t2")}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var reclaimable claims.Reclaimable
			if tc.reclaimTokens != nil {
				reclaimable = reclaimableTokens(t, tc.reclaimTokens...)
			}
			gotOutcomes, gotWrites := claims.Plan(tc.group, tc.current, tc.reqs, reclaimable)
			gotTouched := claimsOf(gotWrites)
			if diff := cmp.Diff(tc.wantOutcomes, gotOutcomes); diff != "" {
				t.Errorf("Plan() outcomes (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantTouched, gotTouched, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Plan() touched claims (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestPlanDoesNotModifyItsInput(t *testing.T) {
	group := claims.Group{ClusterUID: clusterUID, Hosts: 2, DesiredReplicas: 3}
	current := sliceMap(
		full(0, 2, "r0"),
		makeSlice(1, 2).ReplicaName("rs-old").Claim(0, "b", "pod-b", "uid-b").Obj(),
		testutil.MakeSlice("rc-tpu-2", testNamespace, testCluster, oldUID, testGroup, 2, 2).
			Claim(0, "c", "pod-c", "uid-c").Obj(),
	)
	reqs := []claims.Request{indexed("t1", 1, 1, "rs-new"), {Token: "t2"}, {Token: "t3"}, {Token: "t4"}, {Token: "t5"}}
	wantCurrent := claims.Slices{}
	for r, s := range current {
		wantCurrent[r] = s.DeepCopy()
	}
	wantReqs := slices.Clone(reqs)

	outcomes, writes := claims.Plan(group, current, reqs, reclaimableTokens(t, "r0-1", "b"))

	wantOutcomes := []claims.Outcome{
		placed(1, 1), placed(1, 0), placed(2, 0), placed(2, 1),
		takeover(0, 1, existing(1, "r0-1", "pod-r0-1", "uid-r0-1")),
	}
	if diff := cmp.Diff(wantOutcomes, outcomes); diff != "" {
		t.Fatalf("Plan() outcomes (-want,+got):\n%s", diff)
	}
	// Writing into the returned lists must not reach the caller's slices either.
	for r := range writes {
		for i := range writes[r].Claims {
			writes[r].Claims[i].Token = "scribbled"
		}
	}
	if diff := cmp.Diff(wantCurrent, current); diff != "" {
		t.Errorf("Plan() modified the slices (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff(wantReqs, reqs); diff != "" {
		t.Errorf("Plan() modified the requests (-want,+got):\n%s", diff)
	}
}

func TestSameClusterUID(t *testing.T) {
	cases := map[string]struct {
		slice       *tpuv1alpha1.TPUSliceAssignment
		replicaName string
		want        bool
	}{
		"no slice": {
			want: false,
		},
		"another RayCluster UID": {
			slice: testutil.MakeSlice("rc-tpu-0", testNamespace, testCluster, oldUID, testGroup, 0, 4).Obj(),
			want:  false,
		},
		"same UID, no replica names": {
			slice: makeSlice(0, 4).Obj(),
			want:  true,
		},
		"same UID, the Pod has no replica name": {
			slice: makeSlice(0, 4).ReplicaName("rs-a").Obj(),
			want:  true,
		},
		"same UID, the slice has no replica name": {
			slice:       makeSlice(0, 4).Obj(),
			replicaName: "rs-a",
			want:        true,
		},
		"same UID and replica name": {
			slice:       makeSlice(0, 4).ReplicaName("rs-a").Obj(),
			replicaName: "rs-a",
			want:        true,
		},
		"same UID, another replica name": {
			slice:       makeSlice(0, 4).ReplicaName("rs-a").Obj(),
			replicaName: "rs-b",
			want:        false,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := claims.SameClusterUID(tc.slice, clusterUID, tc.replicaName); got != tc.want {
				t.Errorf("SameClusterUID() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDesiredReplicas(t *testing.T) {
	cases := map[string]struct {
		cluster      *rayv1.RayCluster
		group        string
		wantReplicas int32
		wantOK       bool
	}{
		"replicas inside min and max, counted in slices not hosts": {
			cluster: testutil.MakeRayCluster(testCluster, testNamespace).
				CPUGroup("cpu", 7).
				TPUGroup(testGroup, "tpu-v6e-slice", "4x4", 4, 4, 3).Obj(),
			group:        testGroup,
			wantReplicas: 3,
			wantOK:       true,
		},
		"replicas above max are clamped to max": {
			cluster: func() *rayv1.RayCluster {
				rc := testutil.MakeRayCluster(testCluster, testNamespace).TPUGroup(testGroup, "tpu-v6e-slice", "4x4", 4, 4, 5).Obj()
				rc.Spec.WorkerGroupSpecs[0].MaxReplicas = ptr.To[int32](2)
				return rc
			}(),
			group:        testGroup,
			wantReplicas: 2,
			wantOK:       true,
		},
		"replicas below min are raised to min": {
			cluster: func() *rayv1.RayCluster {
				rc := testutil.MakeRayCluster(testCluster, testNamespace).TPUGroup(testGroup, "tpu-v6e-slice", "4x4", 4, 4, 1).Obj()
				rc.Spec.WorkerGroupSpecs[0].MinReplicas = ptr.To[int32](3)
				return rc
			}(),
			group:        testGroup,
			wantReplicas: 3,
			wantOK:       true,
		},
		"no replicas set: min": {
			cluster: func() *rayv1.RayCluster {
				rc := testutil.MakeRayCluster(testCluster, testNamespace).TPUGroup(testGroup, "tpu-v6e-slice", "4x4", 4, 4, 1).Obj()
				rc.Spec.WorkerGroupSpecs[0].Replicas = nil
				rc.Spec.WorkerGroupSpecs[0].MinReplicas = ptr.To[int32](2)
				return rc
			}(),
			group:        testGroup,
			wantReplicas: 2,
			wantOK:       true,
		},
		"a suspended group asks for no replicas": {
			cluster: func() *rayv1.RayCluster {
				rc := testutil.MakeRayCluster(testCluster, testNamespace).TPUGroup(testGroup, "tpu-v6e-slice", "4x4", 4, 4, 3).Obj()
				rc.Spec.WorkerGroupSpecs[0].MinReplicas = ptr.To[int32](1)
				rc.Spec.WorkerGroupSpecs[0].Suspend = ptr.To(true)
				return rc
			}(),
			group:        testGroup,
			wantReplicas: 0,
			wantOK:       true,
		},
		"a suspended cluster asks for no replicas in any group": {
			cluster: func() *rayv1.RayCluster {
				rc := testutil.MakeRayCluster(testCluster, testNamespace).TPUGroup(testGroup, "tpu-v6e-slice", "4x4", 4, 4, 3).Obj()
				rc.Spec.Suspend = ptr.To(true)
				return rc
			}(),
			group:        testGroup,
			wantReplicas: 0,
			wantOK:       true,
		},
		"the second group is found by name": {
			cluster: testutil.MakeRayCluster(testCluster, testNamespace).
				TPUGroup("other", "tpu-v6e-slice", "4x4", 4, 4, 1).
				TPUGroup(testGroup, "tpu-v6e-slice", "2x4", 4, 2, 6).Obj(),
			group:        testGroup,
			wantReplicas: 6,
			wantOK:       true,
		},
		"a missing group": {
			cluster:      testutil.MakeRayCluster(testCluster, testNamespace).TPUGroup("other", "tpu-v6e-slice", "4x4", 4, 4, 3).Obj(),
			group:        testGroup,
			wantReplicas: 0,
			wantOK:       false,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := tc.cluster.DeepCopy()
			gotReplicas, gotOK := claims.DesiredReplicas(tc.cluster, tc.group)
			if gotReplicas != tc.wantReplicas || gotOK != tc.wantOK {
				t.Errorf("DesiredReplicas() = (%d, %v), want (%d, %v)", gotReplicas, gotOK, tc.wantReplicas, tc.wantOK)
			}
			if diff := cmp.Diff(before, tc.cluster); diff != "" {
				t.Errorf("DesiredReplicas() modified the RayCluster (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestPlanInvariants plans random batches of requests without KubeRay indexes against random
// slices and checks docs/spec.md §3.2 and I1/I2 on every result.
func TestPlanInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(20260301, 9))
	var placedTotal, fullTotal int
	for iter := range 200 {
		hosts := int32(1 + rng.IntN(4))
		desired := int32(rng.IntN(4))
		group := claims.Group{ClusterUID: clusterUID, Hosts: hosts, DesiredReplicas: desired}

		// Random slices, some beyond the desired count, some of a deleted RayCluster UID.
		current := claims.Slices{}
		for r := range desired + 2 {
			if rng.IntN(3) == 0 {
				continue
			}
			uid := clusterUID
			if rng.IntN(5) == 0 {
				uid = oldUID
			}
			s := testutil.MakeSlice(fmt.Sprintf("rc-tpu-%d", r), testNamespace, testCluster, uid, testGroup, r, hosts)
			for _, id := range rng.Perm(int(hosts)) {
				if rng.IntN(2) == 0 {
					tok := fmt.Sprintf("pre-%d-%d", r, id)
					s.Claim(int32(id), tok, "pod-"+tok, types.UID("uid-"+tok))
				}
			}
			current[r] = s.Obj()
		}

		next := 0
		for batch := range 1 + rng.IntN(4) {
			ctx := fmt.Sprintf("iteration %d, batch %d (hosts %d, desired %d)", iter, batch, hosts, desired)
			reqs := make([]claims.Request, 1+rng.IntN(int(hosts)*2+1))
			for i := range reqs {
				next++
				reqs[i].Token = fmt.Sprintf("t%d", next)
			}
			free := freeIDs(group, current)
			before := liveClaims(group, current)

			outcomes, writes := claims.Plan(group, current, reqs, nil)
			touched := claimsOf(writes)

			// Exactly the first min(len(reqs), free) requests are placed; the rest are Full.
			wantPlaced := min(len(reqs), free)
			placedTotal += wantPlaced
			fullTotal += len(reqs) - wantPlaced
			for i, o := range outcomes {
				switch {
				case i < wantPlaced && !o.HasSlot():
					t.Fatalf("%s: request %d not placed with %d free IDs: %+v", ctx, i, free, o)
				case i >= wantPlaced && o.Reason != claims.ReasonFull:
					t.Fatalf("%s: request %d = %+v, want Full: only %d IDs were free", ctx, i, o, free)
				}
				if o.HasSlot() && (o.Slot.Replica < 0 || o.Slot.Replica >= desired ||
					o.Slot.WorkerID < 0 || o.Slot.WorkerID >= hosts) {
					t.Fatalf("%s: request %d placed outside the group: %+v", ctx, i, o.Slot)
				}
			}
			for r, list := range touched {
				if r < 0 || r >= desired {
					t.Fatalf("%s: replica %d touched outside [0, %d)", ctx, r, desired)
				}
				seen := map[int32]string{}
				for _, c := range list {
					if c.WorkerID < 0 || c.WorkerID >= hosts {
						t.Fatalf("%s: replica %d claim %q has ID %d outside [0, %d)", ctx, r, c.Token, c.WorkerID, hosts)
					}
					if other, dup := seen[c.WorkerID]; dup {
						t.Fatalf("%s: replica %d ID %d claimed by both %q and %q", ctx, r, c.WorkerID, other, c.Token)
					}
					seen[c.WorkerID] = c.Token
				}
				// Nothing already claimed in a live slice is lost.
				for _, c := range before[r] {
					if !slices.Contains(list, c) {
						t.Fatalf("%s: replica %d lost claim %+v", ctx, r, c)
					}
				}
				current[r] = testutil.MakeSlice(fmt.Sprintf("rc-tpu-%d", r), testNamespace, testCluster, clusterUID, testGroup, r, hosts).Obj()
				current[r].Status.Claims = list
			}
			// Every slot handed out is recorded in its replica's list under its token.
			for i, o := range outcomes {
				if o.HasSlot() && !slices.Contains(touched[o.Slot.Replica], tpuv1alpha1.WorkerClaim{WorkerID: o.Slot.WorkerID, Token: reqs[i].Token}) {
					t.Fatalf("%s: slot %+v of %q is missing from the touched claims %v", ctx, o.Slot, reqs[i].Token, touched[o.Slot.Replica])
				}
			}
			if got, want := freeIDs(group, current), free-wantPlaced; got != want {
				t.Fatalf("%s: %d IDs free after the batch, want %d", ctx, got, want)
			}
		}
	}
	// Guard against a generator that stopped exercising one of the two outcomes.
	if placedTotal < 300 || fullTotal < 100 {
		t.Fatalf("random cases placed %d and refused %d requests: too few to test anything", placedTotal, fullTotal)
	}
	t.Logf("placed %d requests, refused %d as Full", placedTotal, fullTotal)
}

// liveClaims returns the claims of the slices of the group's RayCluster UID, by replica.
func liveClaims(g claims.Group, current claims.Slices) map[int32][]tpuv1alpha1.WorkerClaim {
	out := map[int32][]tpuv1alpha1.WorkerClaim{}
	for r, s := range current {
		if claims.SameClusterUID(s, g.ClusterUID, "") && s.Spec.Hosts == g.Hosts {
			out[r] = s.Status.Claims
		}
	}
	return out
}

// freeIDs counts the unclaimed IDs of replicas [0, DesiredReplicas) of the group's RayCluster UID.
func freeIDs(g claims.Group, current claims.Slices) int {
	live := liveClaims(g, current)
	free := 0
	for r := range g.DesiredReplicas {
		free += int(g.Hosts) - len(live[r])
	}
	return free
}

func TestPlanWithAnotherHostCount(t *testing.T) {
	// The group's topology changed from 4 to 8 hosts per slice while replica 0 holds the old one.
	g := claims.Group{ClusterUID: clusterUID, Hosts: 8, DesiredReplicas: 2}
	mismatch := "this Pod's topology gives 8 hosts per slice, but replica 0 of its worker group is a slice of 4 hosts that still holds 4 claims of live or starting Pods; " +
		"delete the group's old replicas (or the RayCluster) before changing its topology, or keep the template's topology"
	cases := map[string]struct {
		current       claims.Slices
		reqs          []claims.Request
		reclaimTokens []string
		wantOutcomes  []claims.Outcome
		wantWrites    map[int32]claims.Write
	}{
		"a slice of another host count with live Pods denies every Pod of the group, naming both counts": {
			current:      sliceMap(full(0, 4, "old")),
			reqs:         tokens(2),
			wantOutcomes: []claims.Outcome{{Reason: claims.ReasonHostsMismatch, Message: mismatch}, {Reason: claims.ReasonHostsMismatch, Message: mismatch}},
			wantWrites:   map[int32]claims.Write{},
		},
		"the same with KubeRay's indexes": {
			current:      sliceMap(full(0, 4, "old")),
			reqs:         []claims.Request{indexed("t1", 1, 0, "rs-b")},
			wantOutcomes: []claims.Outcome{{Reason: claims.ReasonHostsMismatch, Message: mismatch}},
			wantWrites:   map[int32]claims.Write{},
		},
		"a slice of another host count whose Pods are all gone is replaced": {
			current:       sliceMap(full(0, 4, "old")),
			reqs:          tokens(1),
			reclaimTokens: []string{"old-0", "old-1", "old-2", "old-3"},
			wantOutcomes:  []claims.Outcome{placed(0, 0)},
			wantWrites:    map[int32]claims.Write{0: {Claims: []tpuv1alpha1.WorkerClaim{pending(0, "t1")}, Replace: true}},
		},
		"an empty slice of another host count is replaced": {
			current:      sliceMap(makeSlice(0, 4).Obj()),
			reqs:         tokens(1),
			wantOutcomes: []claims.Outcome{placed(0, 0)},
			wantWrites:   map[int32]claims.Write{0: {Claims: []tpuv1alpha1.WorkerClaim{pending(0, "t1")}, Replace: true}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var reclaimable claims.Reclaimable
			if tc.reclaimTokens != nil {
				reclaimable = reclaimableTokens(t, tc.reclaimTokens...)
			}
			outcomes, writes := claims.Plan(g, tc.current, tc.reqs, reclaimable)
			if diff := cmp.Diff(tc.wantOutcomes, outcomes); diff != "" {
				t.Errorf("Plan() outcomes (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWrites, writes, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Plan() writes (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestPlanRecordsReplacedReplicaNames(t *testing.T) {
	g := claims.Group{ClusterUID: clusterUID, Hosts: 2, DesiredReplicas: 2}
	old := makeSlice(1, 2).ReplicaName("rs-b").Claim(0, "a", "pod-a", "uid-a").Obj()
	old.Spec.ReplacedReplicaNames = []string{"rs-a"}
	other := testutil.MakeSlice("rc-tpu-0", testNamespace, testCluster, oldUID, testGroup, 0, 2).ReplicaName("rs-x").Obj()
	outcomes, writes := claims.Plan(g, sliceMap(old, other),
		[]claims.Request{indexed("t1", 1, 0, "rs-c"), indexed("t2", 1, 1, "rs-c"), indexed("t3", 0, 0, "rs-y")}, reclaimableTokens(t, "a"))
	if diff := cmp.Diff([]claims.Outcome{placed(1, 0), placed(1, 1), placed(0, 0)}, outcomes); diff != "" {
		t.Errorf("Plan() outcomes (-want,+got):\n%s", diff)
	}
	want := map[int32]claims.Write{
		1: {Claims: []tpuv1alpha1.WorkerClaim{pending(0, "t1"), pending(1, "t2")}, Replace: true, ReplicaName: "rs-c", ReplacedReplicaNames: []string{"rs-a", "rs-b"}},
		// Another RayCluster UID's names are not carried over.
		0: {Claims: []tpuv1alpha1.WorkerClaim{pending(0, "t3")}, Replace: true, ReplicaName: "rs-y"},
	}
	if diff := cmp.Diff(want, writes, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Plan() writes (-want,+got):\n%s", diff)
	}
}

// An older KubeRay replica's create that finds the slice a newer replica's first create made, before
// its claim was stored, takes the slice over without remembering the newer name: the newer
// replica's Pods then wait for the older one's claims to go (Full) instead of being refused as an
// older replica for good (docs/spec.md §3.1, §5). A slice whose claims the reconciler released
// (a replica KubeRay deleted) still records its name.
func TestPlanRemembersOnlyAWrittenReplicaName(t *testing.T) {
	g := claims.Group{ClusterUID: clusterUID, Hosts: 2, DesiredReplicas: 2}
	empty := makeSlice(1, 2).ReplicaName("rs-new").Obj()
	empty.Spec.ReplacedReplicaNames = []string{"rs-a"}
	outcomes, writes := claims.Plan(g, sliceMap(empty), []claims.Request{indexed("t1", 1, 0, "rs-old")}, reclaimableTokens(t))
	if diff := cmp.Diff([]claims.Outcome{placed(1, 0)}, outcomes); diff != "" {
		t.Errorf("Plan() outcomes (-want,+got):\n%s", diff)
	}
	want := map[int32]claims.Write{
		1: {Claims: []tpuv1alpha1.WorkerClaim{pending(0, "t1")}, Replace: true, ReplicaName: "rs-old", ReplacedReplicaNames: []string{"rs-a"}},
	}
	if diff := cmp.Diff(want, writes, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Plan() writes (-want,+got):\n%s", diff)
	}
	replaced := makeSlice(1, 2).ReplicaName("rs-old").ReplacedReplicaNames("rs-a").Claim(0, "t1", "", "").Obj()
	outcomes, _ = claims.Plan(g, sliceMap(replaced), []claims.Request{indexed("t2", 1, 1, "rs-new")}, reclaimableTokens(t))
	wantFull := claims.Outcome{Reason: claims.ReasonFull,
		Message: "replica 1 is still held by 1 claims of KubeRay replica rs-old; it is replaced by rs-new once those Pods are gone"}
	if diff := cmp.Diff([]claims.Outcome{wantFull}, outcomes); diff != "" {
		t.Errorf("Plan() of the newer replica (-want,+got):\n%s", diff)
	}
	released := makeSlice(1, 2).ReplicaName("rs-old").Obj()
	released.Status.Conditions = []metav1.Condition{{Type: tpuv1alpha1.ConditionClaimed, Status: metav1.ConditionFalse, Reason: "HostsMissing"}}
	_, writes = claims.Plan(g, sliceMap(released), []claims.Request{indexed("t3", 1, 0, "rs-new")}, reclaimableTokens(t))
	if got := writes[1].ReplacedReplicaNames; !slices.Equal(got, []string{"rs-old"}) {
		t.Errorf("Plan() over a slice whose claims were released records replaced names %v, want [rs-old]", got)
	}
}
