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
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// fakeNodes lists fixed Nodes, or fails.
type fakeNodes struct {
	nodes []placement.Node
	err   error
}

func (f fakeNodes) ListNodes(context.Context, map[string]string) ([]placement.Node, error) {
	return f.nodes, f.err
}

// subsliceNodes is a 4x4 v6e pool of 4 hosts split into two sub-blocks of 2 (Ray's subslicing guide).
var subsliceNodes = []placement.Node{
	{Name: "n0", Labels: map[string]string{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4", constants.GCETopologySubblockKey: "sb-a"}},
	{Name: "n1", Labels: map[string]string{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4", constants.GCETopologySubblockKey: "sb-a"}},
	{Name: "n2", Labels: map[string]string{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4", constants.GCETopologySubblockKey: "sb-b"}},
	{Name: "n3", Labels: map[string]string{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4", constants.GCETopologySubblockKey: "sb-b"}},
}

func envValue(p *corev1.Pod, name string) string {
	for _, e := range p.Spec.Containers[0].Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func affinityKeys(p *corev1.Pod) []string {
	if p.Spec.Affinity == nil || p.Spec.Affinity.PodAffinity == nil {
		return nil
	}
	var keys []string
	for _, t := range p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		keys = append(keys, t.TopologyKey)
	}
	for _, t := range p.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		keys = append(keys, t.TopologyKey)
	}
	return keys
}

// TestPodWebhookHandsTheSliceToTpuenv checks what the webhook hands to tpuenv and records in the
// slice: the slice's own (subslice) topology for TorchTPU, the affinity key placement chose (the
// smallest GCE domain of exactly the slice's hosts, none under Kueue), recorded on the slice's
// first claim so that every Pod of the slice gets the same key.
func TestPodWebhookHandsTheSliceToTpuenv(t *testing.T) {
	subsliced := cluster().TPUGroup(group, v6e, "4x4", 4, 2, 2).GroupAnnotation(0, constants.SliceTopologyAnnotation, "2x4")
	cases := map[string]struct {
		rc        *testutil.RayClusterWrapper
		nodes     fakeNodes
		pod       func(*testutil.PodWrapper) *testutil.PodWrapper
		wantKeys  []string
		wantTorch string
	}{
		"a subslice of a pool split in sub-blocks gets sub-block affinity and its own TorchTPU topology": {
			rc: subsliced, nodes: fakeNodes{nodes: subsliceNodes},
			pod:       func(p *testutil.PodWrapper) *testutil.PodWrapper { return p },
			wantKeys:  []string{constants.GCETopologySubblockKey, constants.GCETopologySubblockKey},
			wantTorch: "2,4,1",
		},
		"a whole slice keeps its node pool": {
			rc:    cluster().TPUGroup(group, v6e, "4x4", 4, 4, 1),
			nodes: fakeNodes{nodes: subsliceNodes},
			pod:   func(p *testutil.PodWrapper) *testutil.PodWrapper { return p }, wantKeys: []string{constants.NodePoolTopologyKey, constants.NodePoolTopologyKey},
			wantTorch: "4,4,1",
		},
		"a Kueue-queued RayCluster gets no slice affinity, and still its identity": {
			rc: cluster().TPUGroup(group, v6e, "4x4", 4, 4, 1), nodes: fakeNodes{nodes: subsliceNodes},
			pod:       func(p *testutil.PodWrapper) *testutil.PodWrapper { return p.Label(constants.KueueQueueNameLabel, "lq") },
			wantTorch: "4,4,1",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rc := tc.rc.Obj()
			c := newClient(t, &apiCalls{}, nil, rc)
			w := newPodWebhook(c)
			w.clusters, w.nodes = c, tc.nodes
			pod := tc.pod(testutil.WorkerPodFor(rc, group)).Obj()
			if err := w.Default(admissionContext(t, admissionv1.Create, false), pod); err != nil {
				t.Fatalf("Default() = %v", err)
			}
			if diff := cmp.Diff(tc.wantKeys, affinityKeys(pod)); diff != "" {
				t.Errorf("affinity topology keys (-want +got):\n%s", diff)
			}
			if got := envValue(pod, constants.EnvTorchTopology); got != tc.wantTorch {
				t.Errorf("TORCH_TPU_TOPOLOGY = %q, want %q", got, tc.wantTorch)
			}
			var slice tpuv1alpha1.TPUSliceAssignment
			if err := c.Get(t.Context(), types.NamespacedName{Namespace: testNS, Name: naming.SliceName(clusterName, group, 0)}, &slice); err != nil {
				t.Fatal(err)
			}
			want := ""
			if len(tc.wantKeys) > 0 {
				want = tc.wantKeys[0]
			}
			if slice.Spec.AffinityTopologyKey != want {
				t.Errorf("slice records affinityTopologyKey %q, want %q", slice.Spec.AffinityTopologyKey, want)
			}
		})
	}
	t.Run("every Pod of a slice gets the key of its first claim, even when the Nodes changed since", func(t *testing.T) {
		rc := subsliced.Obj()
		c := newClient(t, &apiCalls{}, nil, rc)
		w := newPodWebhook(c)
		w.clusters, w.nodes = c, fakeNodes{nodes: subsliceNodes}
		first := testutil.WorkerPodFor(rc, group).Obj()
		if err := w.Default(admissionContext(t, admissionv1.Create, false), first); err != nil {
			t.Fatal(err)
		}
		w.nodes = fakeNodes{} // the Nodes are gone: placement alone would fall back to the node pool
		second := testutil.WorkerPodFor(rc, group).Obj()
		if err := w.Default(admissionContext(t, admissionv1.Create, false), second); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(affinityKeys(first), affinityKeys(second)); diff != "" {
			t.Errorf("the second Pod's keys differ from the first's (-first +second):\n%s", diff)
		}
	})
	t.Run("Nodes that cannot be listed deny a subslice's Pod as transient; an invalid key annotation permanently", func(t *testing.T) {
		rc := subsliced.Obj()
		c := newClient(t, &apiCalls{}, nil, rc)
		w := newPodWebhook(c)
		w.clusters, w.nodes = c, fakeNodes{err: errors.New("cache not synced")}
		pod := testutil.WorkerPodFor(rc, group).Obj()
		if err := w.Default(admissionContext(t, admissionv1.Create, false), pod); admissionResult(err, false) != "denied_transient" {
			t.Errorf("Default() = %v, want a transient denial", err)
		}
		pod = testutil.WorkerPodFor(rc, group).Annotation(constants.AffinityTopologyKeyAnnotation, "not a key!").Obj()
		if err := w.Default(admissionContext(t, admissionv1.Create, false), pod); admissionResult(err, false) != "denied_permanent" {
			t.Errorf("Default() = %v, want a permanent denial", err)
		}
	})
}
