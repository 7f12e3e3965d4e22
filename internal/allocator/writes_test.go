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
	"testing"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// TestWritesNameTheFieldManager: every write of a claim (the slice's create and its status
// update) names the operator's field manager.
func TestWritesNameTheFieldManager(t *testing.T) {
	c := newClient(t, testutil.RequireFieldManager(t, constants.FieldManager))
	a := newAllocator(c, c, timeout)
	if _, err := a.Claim(t.Context(), request(4)); err != nil {
		t.Fatalf("Claim() error: %v", err)
	}
	if got := metrics.Value(a.m.Writes); got != 2 {
		t.Errorf("the claim made %v writes, want 2 (create and status update)", got)
	}
}
