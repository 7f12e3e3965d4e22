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

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// subsliceNodes is a 4x4 v6e pool of 4 hosts split into two sub-blocks of 2 (Ray's subslicing guide).
var subsliceNodes = []placement.Node{
	{Name: "n0", Labels: map[string]string{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4", constants.GCETopologySubblockKey: "sb-a"}},
	{Name: "n1", Labels: map[string]string{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4", constants.GCETopologySubblockKey: "sb-a"}},
	{Name: "n2", Labels: map[string]string{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4", constants.GCETopologySubblockKey: "sb-b"}},
	{Name: "n3", Labels: map[string]string{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4", constants.GCETopologySubblockKey: "sb-b"}},
}

// keyed returns id kept on the slice affinity key key, or without slice affinity when key is "".
func keyed(id tpuenv.Values, key string) tpuenv.Values {
	id.AffinityTopologyKey, id.NoAffinity = key, key == ""
	return id
}

// TestPodWebhookPlacement checks what the webhook reads for placement.Decide (the Pod; its
// RayCluster from the cache or, when the cache does not have it, from the API server; the TPU
// Nodes matching its nodeSelector), the slice affinity key it asks the claimer to record, and the
// key it hands to tpuenv: the slice's recorded key, if any, wins over the Pod's own placement
// (docs/spec.md §4). The rules are placement's (internal/placement).
func TestPodWebhookPlacement(t *testing.T) {
	cases := map[string]struct {
		pod *corev1.Pod
		// rc is the Pod's RayCluster in the cache, live the one the API server has, if any; nodes
		// are the TPU Nodes.
		rc, live *testutil.RayClusterWrapper
		nodes    []placement.Node
		// recorded is the key the Pod's slice records (the stub's answer).
		recorded string
		// wantListed says the Nodes were listed, for the Pod's nodeSelector.
		wantListed     bool
		wantRequestKey string
		want           tpuenv.Values
	}{
		"a subslice of a pool split in sub-blocks is kept on its sub-block": {
			pod: subslicePod().Obj(), nodes: subsliceNodes, wantListed: true,
			wantRequestKey: subblock, want: keyed(subsliceIdentity(claimed), subblock),
		},
		"a whole slice keeps its node pool, without listing the Nodes": {
			pod: multiHostPod().Obj(), nodes: subsliceNodes,
			wantRequestKey: nodePool, want: multiHostIdentity(claimed),
		},
		"a Pod queued by Kueue gets no slice affinity": {
			pod:            multiHostPod().Label(constants.KueueQueueNameLabel, "lq").Obj(),
			wantRequestKey: "", want: keyed(multiHostIdentity(claimed), ""),
		},
		"a Pod of a RayCluster queued by Kueue gets no slice affinity": {
			pod: multiHostPod().Obj(), rc: cluster().Label(constants.KueueQueueNameLabel, "lq"),
			wantRequestKey: "", want: keyed(multiHostIdentity(claimed), ""),
		},
		"a Pod of a RayCluster queued by Kueue that the cache has not seen yet gets no slice affinity": {
			pod: multiHostPod().Obj(), live: cluster().Label(constants.KueueQueueNameLabel, "lq"),
			wantRequestKey: "", want: keyed(multiHostIdentity(claimed), ""),
		},
		"a Pod of a re-created RayCluster queued by Kueue, the cache still holding the one before, gets no slice affinity": {
			pod: multiHostPod().Obj(), rc: testutil.MakeRayCluster(clusterName, testNS).UID("rc-uid-1"),
			live:           cluster().Label(constants.KueueQueueNameLabel, "lq"),
			wantRequestKey: "", want: keyed(multiHostIdentity(claimed), ""),
		},
		"the Pod's annotation names the key": {
			pod:            multiHostPod().Annotation(constants.AffinityTopologyKeyAnnotation, constants.GCETopologyBlockKey).Obj(),
			wantRequestKey: constants.GCETopologyBlockKey, want: keyed(multiHostIdentity(claimed), constants.GCETopologyBlockKey),
		},
		"the slice's recorded key wins over the Nodes, which changed since its first claim": {
			pod: subslicePod().Obj(), recorded: subblock, wantListed: true,
			wantRequestKey: nodePool, want: keyed(subsliceIdentity(claimed), subblock),
		},
		"the slice's recorded key wins over Kueue's none": {
			pod: multiHostPod().Obj(), rc: cluster().Label(constants.KueueQueueNameLabel, "lq"), recorded: nodePool,
			wantRequestKey: "", want: multiHostIdentity(claimed),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			stub := &stubClaimer{assignment: withKey(claimed, tc.recorded)}
			nodes := &fakeNodes{nodes: tc.nodes}
			clusters, live := testutil.NewClientBuilder(), testutil.NewClientBuilder()
			if tc.rc != nil {
				clusters = clusters.WithObjects(tc.rc.Obj())
			}
			if tc.live != nil {
				live = live.WithObjects(tc.live.Obj())
			}
			w := newPodWebhook(stub)
			w.clusters, w.live, w.nodes = clusters.Build(), live.Build(), nodes

			got, err := create(t, w, tc.pod)

			if err != nil {
				t.Fatalf("Default() = %v, want the Pod admitted", err)
			}
			if len(stub.claims) != 1 || stub.claims[0].AffinityTopologyKey != tc.wantRequestKey {
				t.Errorf("Claim requests %+v, want one with AffinityTopologyKey %q", stub.claims, tc.wantRequestKey)
			}
			if diff := cmp.Diff(applied(tc.pod, tc.want, 0), got); diff != "" {
				t.Errorf("Mutated Pod (-want +got):\n%s", diff)
			}
			var wantSelectors []map[string]string
			if tc.wantListed {
				wantSelectors = []map[string]string{tc.pod.Spec.NodeSelector}
			}
			if diff := cmp.Diff(wantSelectors, nodes.selectors); diff != "" {
				t.Errorf("Node lists by selector (-want +got):\n%s", diff)
			}
		})
	}
}
