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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/go-logr/logr"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	sigsjson "sigs.k8s.io/json"

	"github.com/ray-tpu/tpu-slice-operator/internal/podpatch"
)

// podPath is where the Pod webhook is served: the path controller-runtime gives a defaulter of
// core/v1 Pods, which the webhook marker on Default names.
const podPath = "/mutate--v1-pod"

var _ admission.Handler = &podWebhook{}

// Handle admits a Pod as controller-runtime's defaulter would: it decodes the Pod, lets Default
// mutate it, and answers with the mutation as a JSON patch, or with Default's denial. The patch
// is built from the typed Pods, one operation per field Default writes (podpatch.Diff), instead
// of encoding the mutated Pod and diffing two JSON documents, which cost 0.15–0.5 ms of CPU per
// Pod on the path of every create (docs/performance.md). Should Default ever change a
// field podpatch does not patch, the encoded Pods are diffed as before.
func (w *podWebhook) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation == admissionv1.Delete {
		return admission.Allowed("")
	}
	pod, err := decodePod(req.Object.Raw)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	orig := pod.DeepCopy()
	if err := w.Default(admission.NewContextWithRequest(ctx, req), pod); err != nil {
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			s := status.Status()
			return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &s}}
		}
		return admission.Denied(err.Error())
	}
	if ops, ok := podpatch.Diff(orig, pod); ok {
		return admission.Patched("", ops...)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("The Pod's mutation changed a field the patch builder does not cover; diffing the encoded Pods",
		"namespace", req.Namespace, "generateName", pod.GenerateName)
	return patchFromEncoded(req.Object.Raw, orig, pod)
}

// decodePod decodes the Pod of an admission request as controller-runtime's decoder does, in one
// pass over it instead of two: its universal deserializer first reads the whole object for its
// kind, then decodes it as here (sigs.k8s.io/json, case-sensitive, as the API server decodes). In
// S7's profile the decode of a 1,024-host slice's 7 KiB Pods took more CPU than all of Default;
// BenchmarkDecodePod: 38 % less (docs/performance.md). As there, the Pod's apiVersion and kind
// may be left out but must be v1 and Pod if given, and unknown fields are ignored
// (TestDecodePodAsControllerRuntime).
func decodePod(raw []byte) (*corev1.Pod, error) {
	if len(raw) == 0 {
		return nil, errors.New("there is no content to decode")
	}
	pod := &corev1.Pod{}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, pod); err != nil {
		return nil, fmt.Errorf("decoding the Pod: %w", err)
	}
	if (pod.Kind != "" && pod.Kind != "Pod") || (pod.APIVersion != "" && pod.APIVersion != "v1") {
		return nil, fmt.Errorf("the object has apiVersion %q and kind %q, not a v1 Pod", pod.APIVersion, pod.Kind)
	}
	return pod, nil
}

// patchFromEncoded is controller-runtime's defaulter's patch: the JSON diff of the Pod as received
// and as mutated, less the removals that decoding the received Pod already made (fields of the
// request that the typed Pod does not hold), which are not the mutation's.
func patchFromEncoded(raw []byte, orig, mutated *corev1.Pod) admission.Response {
	encoded, err := json.Marshal(mutated)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	resp := admission.PatchResponseFromRaw(raw, encoded)
	if !resp.Allowed || !slices.ContainsFunc(resp.Patches, isRemove) {
		return resp
	}
	encodedOrig, err := json.Marshal(orig)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	byDecoding, err := jsonpatch.CreatePatch(raw, encodedOrig)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	resp.Patches = slices.DeleteFunc(resp.Patches, func(op jsonpatch.Operation) bool {
		return isRemove(op) && slices.ContainsFunc(byDecoding, func(d jsonpatch.Operation) bool { return isRemove(d) && d.Path == op.Path })
	})
	if len(resp.Patches) == 0 {
		resp.PatchType = nil
	}
	return resp
}

func isRemove(op jsonpatch.Operation) bool { return op.Operation == "remove" }

// podLogConstructor gives the Pod webhook's log the values controller-runtime's builder gives a
// webhook's.
func podLogConstructor(base logr.Logger, req *admission.Request) logr.Logger {
	log := base.WithValues("webhookGroup", "", "webhookKind", "Pod")
	if req == nil {
		return log
	}
	return log.WithValues("Pod", klog.KRef(req.Namespace, req.Name), "namespace", req.Namespace, "name", req.Name,
		"resource", req.Resource, "user", req.UserInfo.Username, "requestID", req.UID)
}
