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

package webhooks

// Pods that arrive carrying a TPU identity (docs/spec.md §8): this admission coming back, or a
// copy. Which tokens are a re-invocation is the allocator's answer (allocator.TestReinvoked); the
// whole path, four Pods created from one copied manifest, is test/integration/identity's.

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// running is worker of replica 0, claim token token: the claim of a running worker.
func running(worker int32, token string) allocator.Assignment {
	return allocator.Assignment{SliceName: slice0, Replica: 0, WorkerID: worker, Token: token}
}

// TestPodWebhookReinvocationReturnsThePodUnchanged: the same admission coming back (a later
// webhook changed the Pod) keeps the claim it made: nothing is claimed, nothing changes.
func TestPodWebhookReinvocationReturnsThePodUnchanged(t *testing.T) {
	first := applied(multiHostPod().Obj(), multiHostIdentity(claimed), 0)
	stub := &stubClaimer{reinvoked: true, assignment: claimed}
	before := admissionCounts(t)

	got, err := create(t, newPodWebhook(stub), first)

	if err != nil {
		t.Fatalf("Default() = %v, want the Pod admitted", err)
	}
	checkAdmissionCounted(t, before, metrics.ResultAlreadyAssigned)
	if diff := cmp.Diff(first, got); diff != "" {
		t.Errorf("Re-invocation changed the Pod (-want +got):\n%s", diff)
	}
	want := []reinvocation{{Namespace: testNS, Slice: slice2, Token: "token-2", WorkerID: 1}}
	if diff := cmp.Diff(want, stub.reinvocations); diff != "" {
		t.Errorf("Reinvoked requests (-want +got):\n%s", diff)
	}
	if len(stub.claims) != 0 || len(stub.plans) != 0 {
		t.Errorf("Claim requests %v, Plan requests %v; want none", stub.claims, stub.plans)
	}
}

// TestPodWebhookCopiedIdentity: a Pod that carries an identity but is not a re-invocation is a
// copy (a manifest copied from a running worker, a template, a dry run's output). A token is not a
// claim: the copy is admitted exactly as the Pod it was copied from, with nothing of the copied
// identity left.
func TestPodWebhookCopiedIdentity(t *testing.T) {
	multislice := multiHostPod().Env(0, constants.EnvMegascaleNumSlices, "2").Obj()
	v7xIdentity := func(a allocator.Assignment) tpuenv.Values {
		return tpuenv.Values{GroupName: group, ReplicaIndex: a.Replica, WorkerID: a.WorkerID, Hosts: 2, Subdomain: headless, V7x: true,
			SliceName: a.SliceName, ClaimToken: a.Token, Topology: []int32{2, 2, 2}, ChipsPerHost: 4, AffinityTopologyKey: nodePool}
	}
	onSubblock := subsliceIdentity(running(1, "token-0"))
	onSubblock.AffinityTopologyKey = subblock
	gated := multiHostIdentity(running(2, "token-0"))
	gated.Placement = tpuv1alpha1.PlacementChosenDomain
	placedBy := func(a allocator.Assignment, p tpuv1alpha1.SlicePlacement) allocator.Assignment {
		a.Placement = p
		return a
	}
	cases := map[string]struct {
		// copied was made from original; the stub answers assignment and reinvoked.
		original, copied *corev1.Pod
		assignment       allocator.Assignment
		reinvoked        bool
		wantReinvoked    []reinvocation
	}{
		"a copy of a running multislice worker": {
			original: multislice, copied: applied(multislice, multiHostIdentity(running(2, "token-0")), 0),
			assignment:    claimed,
			wantReinvoked: []reinvocation{{Namespace: testNS, Slice: slice0, Token: "token-0", WorkerID: 2}},
		},
		"a copy of host 1 of a running v7x slice, whose containers have IDs 2 and 3": {
			original: v7xPod().Obj(), copied: applied(v7xPod().Obj(), v7xIdentity(running(1, "token-0")), 0, 1),
			assignment:    claimed,
			wantReinvoked: []reinvocation{{Namespace: testNS, Slice: slice0, Token: "token-0", WorkerID: 1}},
		},
		"a copy of a subslice worker kept on its sub-block": {
			original: subslicePod().Obj(), copied: applied(subslicePod().Obj(), onSubblock, 0),
			assignment:    withKey(claimed, subblock),
			wantReinvoked: []reinvocation{{Namespace: testNS, Slice: slice0, Token: "token-0", WorkerID: 1}},
		},
		"a copy of a gated worker, admitted into a slice of inter-pod affinity, loses the gate": {
			original: multiHostPod().Obj(), copied: applied(multiHostPod().Obj(), gated, 0),
			assignment:    placedBy(claimed, tpuv1alpha1.PlacementInterPodAffinity),
			wantReinvoked: []reinvocation{{Namespace: testNS, Slice: slice0, Token: "token-0", WorkerID: 2}},
		},
		"a copy of a gated worker, admitted into a chosen-domain slice, is gated once": {
			original: multiHostPod().Obj(), copied: applied(multiHostPod().Obj(), gated, 0),
			assignment:    placedBy(claimed, tpuv1alpha1.PlacementChosenDomain),
			wantReinvoked: []reinvocation{{Namespace: testNS, Slice: slice0, Token: "token-0", WorkerID: 2}},
		},
		"a dry run's output, created for real": {
			original: multiHostPod().Obj(), copied: applied(multiHostPod().Obj(), multiHostIdentity(running(2, "dry-run")), 0),
			assignment:    claimed,
			wantReinvoked: []reinvocation{{Namespace: testNS, Slice: slice0, Token: "dry-run", WorkerID: 2}},
		},
		"a Pod carrying the reference webhook's identity, without a token, is never a re-invocation": {
			original: multiHostPod().Obj(), copied: multiHostPod().TPUIdentity(group, 0, 2).Obj(),
			assignment: claimed, reinvoked: true,
		},
		"a Pod carrying a token without an identity is never a re-invocation": {
			original: multiHostPod().Obj(), copied: multiHostPod().Annotation(tpuv1alpha1.ClaimTokenAnnotation, "token-0").Obj(),
			assignment: claimed, reinvoked: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fresh := &stubClaimer{assignment: tc.assignment}
			want, err := create(t, newPodWebhook(fresh), tc.original)
			if err != nil {
				t.Fatalf("Default() of the original = %v", err)
			}
			stub := &stubClaimer{assignment: tc.assignment, reinvoked: tc.reinvoked}
			before := admissionCounts(t)

			got, err := create(t, newPodWebhook(stub), tc.copied)

			if err != nil {
				t.Fatalf("Default() = %v, want the copy admitted", err)
			}
			checkAdmissionCounted(t, before, metrics.ResultAssigned)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Admitted copy (-as the original +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantReinvoked, stub.reinvocations); diff != "" {
				t.Errorf("Reinvoked requests (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(fresh.claims, stub.claims); diff != "" {
				t.Errorf("Claim requests (-as the original's +got):\n%s", diff)
			}
		})
	}
}
