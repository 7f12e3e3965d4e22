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

// Package health checks slice health (docs/spec.md §11) on a real API server: fake TPU Nodes with
// GKE's labels, Pods bound through the binding subresource and their status set as a kubelet would.
package health

import (
	"testing"
	"time"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/controllers"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// pendingTTL is short here so that I3 settles quickly.
const pendingTTL = 3 * time.Second

// ctx lives as long as the suite.
var ctx = framework.SuiteContext()

// suite is the API server and the operator the specs run against: one webhook replica with the
// reconciler and one without, forwarding claims as in production. The specs bind the Pods
// themselves, as the scheduler would with today's inter-pod terms, so the slices are placed with
// --slice-placement=InterPodAffinity: a gated Pod cannot be bound (docs/spec.md §4).
var suite framework.Suite

func TestHealth(t *testing.T) {
	suite.Run(t, "Slice health suite", func() {
		suite.StartReplicas(2, operator.Options{Controllers: controllers.Options{PendingTTL: pendingTTL},
			SlicePlacement: tpuv1alpha1.PlacementInterPodAffinity})
	})
}
