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

package testutil

import (
	"encoding/json"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
)

// PatchedPod returns the Pod JSON raw with the JSON patch ops (any value that encodes as a list of
// RFC 6902 operations; nil for none) applied as the API server applies a webhook's patch
// (evanphx/json-patch), decoded.
func PatchedPod(t testing.TB, raw []byte, ops any) *corev1.Pod {
	t.Helper()
	encoded, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	if string(encoded) == "null" {
		encoded = []byte("[]")
	}
	patch, err := jsonpatch.DecodePatch(encoded)
	if err != nil {
		t.Fatalf("decoding the patch %s: %v", encoded, err)
	}
	out, err := patch.Apply(raw)
	if err != nil {
		t.Fatalf("applying the patch %s: %v", encoded, err)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(out, &pod); err != nil {
		t.Fatal(err)
	}
	return &pod
}
