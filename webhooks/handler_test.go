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

import (
	"encoding/json"
	"net/http"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// fieldPatch matches the paths podpatch.Diff writes: an operation anywhere else came from diffing
// the encoded Pods.
var fieldPatch = regexp.MustCompile(`^(/metadata/(labels|annotations)|/spec/(hostname|subdomain|affinity|schedulingGates)|/spec/containers/[0-9]+/env)$`)

// TestHandleAnswersWithTheFieldPatch: the webhook's answer to a create, applied to the Pod as the
// API server sent it, is the Pod Default mutates, and it is built by podpatch (one operation per
// field), never by diffing the encoded Pods.
func TestHandleAnswersWithTheFieldPatch(t *testing.T) {
	gated := claimed
	gated.Placement = tpuv1alpha1.PlacementChosenDomain
	cases := map[string]struct {
		pod        *corev1.Pod
		assignment allocator.Assignment
		dryRun     bool
	}{
		"single-host":                {pod: singleHostPod().Obj(), assignment: claimed},
		"multi-host, slice affinity": {pod: multiHostPod().Env(0, "TPU_WORKER_ID", "9").Obj(), assignment: claimed},
		"multi-host, gated":          {pod: multiHostPod().Obj(), assignment: gated},
		"a subslice":                 {pod: subslicePod().Obj(), assignment: claimed},
		"v7x, a sidecar between the TPU containers": {pod: tpuWorkerPod(v7x, "2x2x2", 2).Container("log-shipper", 0).Container("ray-worker-1", 2).Obj(), assignment: claimed},
		"a dry run":                   {pod: multiHostPod().Obj(), assignment: claimed, dryRun: true},
		"a Pod that is no TPU worker": {pod: testutil.MakePod("", testNS).GenerateName("web-").Obj(), assignment: claimed},
		"a copy of an admitted Pod, its identity replaced": {
			pod:        applied(multiHostPod().Obj(), multiHostIdentity(claimed), 0),
			assignment: allocator.Assignment{SliceName: slice0, Replica: 0, WorkerID: 3, Token: "token-0"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := createRequest(t, tc.pod, tc.dryRun)
			resp := newPodWebhook(&stubClaimer{assignment: tc.assignment}).Handle(quietContext(t), req)
			if !resp.Allowed {
				t.Fatalf("Handle() denied the Pod: %v", resp.Result)
			}
			want, err := admit(t, newPodWebhook(&stubClaimer{assignment: tc.assignment}), tc.pod, req.Operation, tc.dryRun)
			if err != nil {
				t.Fatal(err)
			}
			for _, op := range resp.Patches {
				if !fieldPatch.MatchString(op.Path) {
					t.Errorf("operation %s %s: the patch was diffed from the encoded Pods", op.Operation, op.Path)
				}
			}
			if diff := cmp.Diff(want, testutil.PatchedPod(t, req.Object.Raw, resp.Patches), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("the answer applied to the Pod sent (-Default's Pod +patched):\n%s", diff)
			}
		})
	}
}

// TestHandleDenies: a denial of Default reaches the API server as its Status, with no patch.
func TestHandleDenies(t *testing.T) {
	stub := &stubClaimer{err: &allocator.DeniedError{Transient: true, Message: "slice fully claimed"}}
	resp := newPodWebhook(stub).Handle(quietContext(t), createRequest(t, multiHostPod().Obj(), false))
	if resp.Allowed || resp.Result == nil || len(resp.Patches) > 0 {
		t.Fatalf("Handle() = allowed %t, result %v, %d operations; want a denial without a patch", resp.Allowed, resp.Result, len(resp.Patches))
	}
	if resp.Result.Code != http.StatusTooManyRequests || resp.Result.Details == nil || resp.Result.Details.RetryAfterSeconds != 1 {
		t.Errorf("Handle() result = %+v, want the transient denial's Status (429, retry after 1 s)", resp.Result)
	}
}

// TestPatchFromEncoded: the fallback diffs the encoded Pods as controller-runtime's defaulter does,
// and leaves alone a field of the request that decoding dropped, which the mutation did not remove.
func TestPatchFromEncoded(t *testing.T) {
	orig := multiHostPod().Obj()
	raw, err := json.Marshal(orig)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	doc["spec"].(map[string]any)["futureField"] = "kept"
	if raw, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	mutated := orig.DeepCopy()
	mutated.Spec.NodeSelector["example.com/pool"] = "a"
	mutated.Spec.Hostname = "h"

	resp := patchFromEncoded(raw, orig, mutated)
	if !resp.Allowed {
		t.Fatalf("patchFromEncoded() denied: %v", resp.Result)
	}
	for _, op := range resp.Patches {
		if op.Path == "/spec/futureField" {
			t.Errorf("operation %s %s: a field decoding dropped is removed", op.Operation, op.Path)
		}
	}
	if diff := cmp.Diff(mutated, testutil.PatchedPod(t, raw, resp.Patches), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("the patch applied (-mutated +patched):\n%s", diff)
	}
}
