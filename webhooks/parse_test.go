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
	"testing"

	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
)

// TestPodWebhookParsesThePodOnce: one admission reads the Pod's slice once (topology.FromPod), at
// its top, whatever path it then takes; every later step takes what that read found.
func TestPodWebhookParsesThePodOnce(t *testing.T) {
	cases := map[string]struct {
		pod       *corev1.Pod
		stub      stubClaimer
		listNodes bool
		dryRun    bool
		wantError bool
	}{
		"a new multi-host Pod": {pod: multiHostPod().Obj(), stub: stubClaimer{assignment: claimed}},
		"a subslice, its Nodes listed": {
			pod: subslicePod().Obj(), stub: stubClaimer{assignment: claimed}, listNodes: true,
		},
		"a dry run": {pod: multiHostPod().Obj(), stub: stubClaimer{assignment: claimed}, dryRun: true},
		"a re-invocation": {
			pod:  applied(multiHostPod().Obj(), multiHostIdentity(claimed), 0),
			stub: stubClaimer{assignment: claimed, reinvoked: true},
		},
		"a copy of a running worker, its identity stripped": {
			pod:  applied(multiHostPod().Obj(), multiHostIdentity(running(2, "token-0")), 0),
			stub: stubClaimer{assignment: claimed},
		},
		"a v7x Pod of two TPU containers carrying the reference webhook's identity": {
			pod:  v7xPod().TPUIdentity(group, 0, 3).Obj(),
			stub: stubClaimer{assignment: claimed},
		},
		"a Pod denied after its read": {
			pod: multiHostPod().Label(rayutils.RayWorkerReplicaIndexKey, "one").Obj(), wantError: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			stub := tc.stub
			w := newPodWebhook(&stub)
			if tc.listNodes {
				w.nodes = &fakeNodes{nodes: subsliceNodes}
			}
			before := topology.FromPodCalls()

			_, err := admit(t, w, tc.pod, admissionv1.Create, tc.dryRun)

			if (err != nil) != tc.wantError {
				t.Fatalf("Default() = %v, want error %t", err, tc.wantError)
			}
			if got := topology.FromPodCalls() - before; got != 1 {
				t.Errorf("The admission called topology.FromPod %d times, want 1", got)
			}
		})
	}
}
