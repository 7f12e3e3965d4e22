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

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// poolNode is a TPU Node of the v6e 4x4 node pool pool-a: it matches multiHostPod's nodeSelector
// and has a value of cloud.google.com/gke-nodepool.
func poolNode() *corev1.Node {
	return testutil.MakeNode("pool-a-0").TPU(v6e, "4x4", "pool-a").Obj()
}

// recordedSlice is replica 0 of the group, kept on the node pool, recording placement p, with
// worker ID 0 claimed by a Pod not seen yet.
func recordedSlice(p tpuv1alpha1.SlicePlacement) *tpuv1alpha1.TPUSliceAssignment {
	s := testutil.MakeSlice(slice0, testNS, clusterName, clusterUID, group, 0, 4).SelectorLabels().
		AffinityTopologyKey(nodePool).Claim(0, "pending-0", "", "").Obj()
	s.Spec.Placement = p
	return s
}

// TestPodWebhookSlicePlacement checks the admission rules of docs/spec.md §4 through the real
// allocator: a multi-host slice the operator places is gated, without inter-pod terms, when a TPU
// Node matching its Pods' nodeSelector has a value of its key and --slice-placement is
// ChosenDomain; it falls back to the terms otherwise; others are untouched; and every Pod follows
// the placement its slice recorded at creation, a legacy slice without one keeping the terms.
func TestPodWebhookSlicePlacement(t *testing.T) {
	userTerm := corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ml"}}, TopologyKey: nodePool,
	}
	cases := map[string]struct {
		pod *corev1.Pod
		// rc is the Pod's RayCluster (catalogCluster(1), of 4-host slices, when nil).
		rc      *testutil.RayClusterWrapper
		objects []client.Object
		mode    tpuv1alpha1.SlicePlacement
		dryRun  bool
		// wantGated says the Pod carries the operator's gate; wantTermsOn is the key of the slice
		// terms it carries ("" for none: its affinity as it came).
		wantGated     bool
		wantTermsOn   string
		wantPlacement tpuv1alpha1.SlicePlacement
	}{
		"a node pool slice with a matching labeled TPU Node is gated, without terms": {
			pod: multiHostPod().Obj(), objects: []client.Object{poolNode()},
			wantGated: true, wantPlacement: tpuv1alpha1.PlacementChosenDomain,
		},
		"--slice-placement=InterPodAffinity keeps today's terms": {
			pod: multiHostPod().Obj(), objects: []client.Object{poolNode()}, mode: tpuv1alpha1.PlacementInterPodAffinity,
			wantTermsOn: nodePool, wantPlacement: tpuv1alpha1.PlacementInterPodAffinity,
		},
		"without a matching TPU Node the slice falls back to today's terms": {
			pod:         multiHostPod().Obj(),
			wantTermsOn: nodePool, wantPlacement: tpuv1alpha1.PlacementInterPodAffinity,
		},
		"a Pod queued by Kueue is neither gated nor given terms": {
			pod: multiHostPod().Label(constants.KueueQueueNameLabel, "lq").Obj(), objects: []client.Object{poolNode()},
		},
		"a Pod with its own cloud.google.com term gets the terms, not the gate": {
			pod: multiHostPod().Affinity(&corev1.Affinity{PodAffinity: &corev1.PodAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{userTerm},
			}}).Obj(),
			objects:     []client.Object{poolNode()},
			wantTermsOn: nodePool,
		},
		"a single-host Pod is never gated": {
			pod: singleHostPod().Obj(), rc: cluster().TPUGroup(group, v6e, "2x2", 4, 1, 1),
			objects: []client.Object{testutil.MakeNode("n").TPU(v6e, "2x2", "pool-b").Obj()},
		},
		"a legacy slice without placement keeps today's terms, Nodes or not": {
			pod: multiHostPod().Obj(), objects: []client.Object{poolNode(), recordedSlice("")},
			wantTermsOn: nodePool,
		},
		"a Pod of a slice recorded ChosenDomain is gated though it alone would not be": {
			pod:       multiHostPod().Label(constants.KueueQueueNameLabel, "lq").Obj(),
			objects:   []client.Object{recordedSlice(tpuv1alpha1.PlacementChosenDomain)},
			mode:      tpuv1alpha1.PlacementInterPodAffinity,
			wantGated: true, wantPlacement: tpuv1alpha1.PlacementChosenDomain,
		},
		"a Pod of a slice recorded InterPodAffinity keeps the terms though a Node is now labeled": {
			pod: multiHostPod().Obj(), objects: []client.Object{poolNode(), recordedSlice(tpuv1alpha1.PlacementInterPodAffinity)},
			wantTermsOn: nodePool, wantPlacement: tpuv1alpha1.PlacementInterPodAffinity,
		},
		"a dry run of a new slice gets the Pod a create would": {
			pod: multiHostPod().Obj(), objects: []client.Object{poolNode()}, dryRun: true,
			wantGated: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rc := tc.rc
			if rc == nil {
				rc = catalogCluster(1)
			}
			c := testutil.NewClientBuilder().WithObjects(append(tc.objects, rc.Obj())...).Build()
			a := allocator.New(c, c, allocator.Options{})
			w := &podWebhook{planner: a, claimer: a, clusters: c, live: c, metrics: metrics.New(), mode: tc.mode}

			got, err := admit(t, w, tc.pod, "CREATE", tc.dryRun)

			if err != nil {
				t.Fatalf("Default() = %v, want the Pod admitted", err)
			}
			var wantGates []corev1.PodSchedulingGate
			if tc.wantGated {
				wantGates = []corev1.PodSchedulingGate{{Name: tpuv1alpha1.PlacementSchedulingGate}}
			}
			if diff := cmp.Diff(wantGates, got.Spec.SchedulingGates); diff != "" {
				t.Errorf("Scheduling gates (-want +got):\n%s", diff)
			}
			wantAffinity := tc.pod.Spec.Affinity
			if tc.wantTermsOn != "" {
				wantAffinity = applied(tc.pod, tpuenv.Values{Hosts: 4, SliceName: got.Labels[tpuv1alpha1.SliceLabel],
					AffinityTopologyKey: tc.wantTermsOn}).Spec.Affinity
			}
			if diff := cmp.Diff(wantAffinity, got.Spec.Affinity); diff != "" {
				t.Errorf("Affinity (-want +got):\n%s", diff)
			}
			var stored tpuv1alpha1.TPUSliceAssignment
			err = c.Get(t.Context(), types.NamespacedName{Namespace: testNS, Name: got.Labels[tpuv1alpha1.SliceLabel]}, &stored)
			switch {
			case tc.dryRun:
				if err == nil {
					t.Errorf("A dry run wrote slice %s", stored.Name)
				}
			case err != nil:
				t.Fatalf("Reading the Pod's slice: %v", err)
			case stored.Spec.Placement != tc.wantPlacement:
				t.Errorf("The slice records placement %q, want %q", stored.Spec.Placement, tc.wantPlacement)
			}
		})
	}
}
