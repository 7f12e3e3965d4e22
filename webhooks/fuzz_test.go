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
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// FuzzPodAdmission sends random Pods, and random bytes, to the Pod webhook's HTTP handler, as the
// API server would, with a claimer that succeeds or denies. Whatever comes in: no panic, the
// answer is always an AdmissionReview (never an HTTP error page), a dry run claims nothing, an
// admission claims at most once, and a denial never follows a claim that succeeded, so that a
// denied Pod leaves no claim behind. (What the allocator does with a request is fuzzed by its
// callers' tests: claims.TestPlanInvariants.)
func FuzzPodAdmission(f *testing.F) {
	f.Add("4x4", "tpu-v6e-slice", int64(4), "tpu", "", "", false, false, false, []byte(nil))
	f.Add("2x2x4", "tpu-v4-podslice", int64(4), "tpu", "1", "3", false, false, false, []byte(nil))
	f.Add("2x2x2", "tpu7x", int64(2), "tpu", "", "", true, false, false, []byte(nil))
	f.Add("4x4", "tpu-v6e-slice", int64(4), "tpu", "0", "9", false, true, false, []byte(nil))
	f.Add("16x16", "", int64(4), "other", "x", "-1", false, false, false, []byte(nil))
	f.Add("0x4", "tpu-v6e-slice", int64(3), "tpu", "", "", false, false, false, []byte(nil))
	f.Add("", "", int64(0), "", "", "", false, false, true, []byte(`{"kind":"AdmissionReview","request":{"object":{}}}`))
	f.Add("", "", int64(0), "", "", "", false, false, true, []byte(`not json`))
	f.Fuzz(func(t *testing.T, topology, accelerator string, chips int64, group, replicaIndex, hostIndex string,
		dryRun, claimFails, raw bool, body []byte) {
		stub := &stubClaimer{assignment: claimed}
		if claimFails {
			stub.err = &allocator.DeniedError{Transient: true, Message: "fully claimed"}
		}
		handler := &admission.Webhook{Handler: newPodWebhook(stub)}

		if !raw {
			pod := testutil.MakeWorkerPod(testNS, clusterName, clusterUID, group).Obj()
			pod.Spec.NodeSelector = map[string]string{constants.TopologyNodeSelectorKey: topology, constants.AcceleratorNodeSelectorKey: accelerator}
			q := *resource.NewQuantity(chips, resource.DecimalSI)
			pod.Spec.Containers[0].Resources.Requests = corev1.ResourceList{constants.TPUResourceName: q}
			if replicaIndex != "" {
				pod.Labels["ray.io/worker-group-replica-index"] = replicaIndex
			}
			if hostIndex != "" {
				pod.Labels["ray.io/replica-host-index"] = hostIndex
			}
			object, err := json.Marshal(pod)
			if err != nil {
				t.Skip()
			}
			review := admissionv1.AdmissionReview{
				Request: &admissionv1.AdmissionRequest{
					UID: "req-1", Operation: admissionv1.Create, Namespace: testNS, DryRun: &dryRun,
					Object: runtime.RawExtension{Raw: object},
				},
			}
			review.APIVersion, review.Kind = "admission.k8s.io/v1", "AdmissionReview"
			if body, err = json.Marshal(&review); err != nil {
				t.Fatal(err)
			}
		}

		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/mutate--v1-pod", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		handler.ServeHTTP(rec, req)

		if rec.Code != http.StatusOK {
			t.Fatalf("HTTP %d instead of an AdmissionReview: %s", rec.Code, rec.Body.String())
		}
		var got admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.Response == nil {
			t.Fatalf("the answer is not an AdmissionReview (%v): %s", err, rec.Body.String())
		}
		if msg := got.Response.Result; msg != nil && strings.Contains(strings.ToLower(msg.Message), "panic") {
			t.Fatalf("the handler panicked: %s", msg.Message)
		}
		switch claimed := len(stub.claims); {
		case claimed > 1:
			t.Fatalf("one admission claimed %d times", claimed)
		case dryRun && claimed > 0:
			t.Fatalf("a dry run claimed %v", stub.claims)
		case !got.Response.Allowed && claimed > 0 && !claimFails:
			t.Fatalf("a denial followed a claim that succeeded: %s", got.Response.Result.Message)
		}
	})
}
