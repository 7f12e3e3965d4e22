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

package localcluster

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
)

// node is what a test checks of a built Node.
type node struct {
	Name, Pool, Accelerator, Topology, Block, Subblock, Host, MachineType string
	Chips                                                                 int64
	Kwok, Taint                                                           string
}

// tpuTaint is GKE's taint of a TPU node, as node.Taint prints it.
const tpuTaint = "google.com/tpu=present:NoSchedule"

func TestNodes(t *testing.T) {
	testCases := map[string]struct {
		pools     []Pool
		wantNodes []node
		wantErr   bool
	}{
		"a multi-host v6e pool has one Node of 4 chips per host": {
			pools: []Pool{{Name: "a", Accelerator: "tpu-v6e-slice", Topology: "4x4"}},
			wantNodes: []node{
				{Name: "a-0", Pool: "a", Accelerator: "tpu-v6e-slice", Topology: "4x4", Block: "block-1", Subblock: "a-sb0", Host: "a-0", MachineType: "ct6e-standard-4t", Chips: 4, Kwok: "fake", Taint: tpuTaint},
				{Name: "a-1", Pool: "a", Accelerator: "tpu-v6e-slice", Topology: "4x4", Block: "block-1", Subblock: "a-sb0", Host: "a-1", MachineType: "ct6e-standard-4t", Chips: 4, Kwok: "fake", Taint: tpuTaint},
				{Name: "a-2", Pool: "a", Accelerator: "tpu-v6e-slice", Topology: "4x4", Block: "block-1", Subblock: "a-sb0", Host: "a-2", MachineType: "ct6e-standard-4t", Chips: 4, Kwok: "fake", Taint: tpuTaint},
				{Name: "a-3", Pool: "a", Accelerator: "tpu-v6e-slice", Topology: "4x4", Block: "block-1", Subblock: "a-sb0", Host: "a-3", MachineType: "ct6e-standard-4t", Chips: 4, Kwok: "fake", Taint: tpuTaint},
			},
		},
		"sub-blocks split the pool's Nodes in order": {
			pools: []Pool{{Name: "s", Accelerator: "tpu-v6e-slice", Topology: "4x4", SubBlocks: 2, Block: "b7"}},
			wantNodes: []node{
				{Name: "s-0", Pool: "s", Accelerator: "tpu-v6e-slice", Topology: "4x4", Block: "b7", Subblock: "s-sb0", Host: "s-0", MachineType: "ct6e-standard-4t", Chips: 4, Kwok: "fake", Taint: tpuTaint},
				{Name: "s-1", Pool: "s", Accelerator: "tpu-v6e-slice", Topology: "4x4", Block: "b7", Subblock: "s-sb0", Host: "s-1", MachineType: "ct6e-standard-4t", Chips: 4, Kwok: "fake", Taint: tpuTaint},
				{Name: "s-2", Pool: "s", Accelerator: "tpu-v6e-slice", Topology: "4x4", Block: "b7", Subblock: "s-sb1", Host: "s-2", MachineType: "ct6e-standard-4t", Chips: 4, Kwok: "fake", Taint: tpuTaint},
				{Name: "s-3", Pool: "s", Accelerator: "tpu-v6e-slice", Topology: "4x4", Block: "b7", Subblock: "s-sb1", Host: "s-3", MachineType: "ct6e-standard-4t", Chips: 4, Kwok: "fake", Taint: tpuTaint},
			},
		},
		"a single-host v5e pool has one Node per slice with every chip": {
			pools: []Pool{{Name: "e", Accelerator: "tpu-v5-lite-podslice", Topology: "2x4", Slices: 2}},
			wantNodes: []node{
				{Name: "e-0", Pool: "e", Accelerator: "tpu-v5-lite-podslice", Topology: "2x4", Block: "block-1", Subblock: "e-sb0", Host: "e-0", MachineType: "ct5lp-hightpu-8t", Chips: 8, Kwok: "fake", Taint: tpuTaint},
				{Name: "e-1", Pool: "e", Accelerator: "tpu-v5-lite-podslice", Topology: "2x4", Block: "block-1", Subblock: "e-sb0", Host: "e-1", MachineType: "ct5lp-hightpu-8t", Chips: 8, Kwok: "fake", Taint: tpuTaint},
			},
		},
		"a v4 pool has 4 chips per host": {
			pools: []Pool{{Name: "v4", Accelerator: "tpu-v4-podslice", Topology: "2x2x2"}},
			wantNodes: []node{
				{Name: "v4-0", Pool: "v4", Accelerator: "tpu-v4-podslice", Topology: "2x2x2", Block: "block-1", Subblock: "v4-sb0", Host: "v4-0", MachineType: "ct4p-hightpu-4t", Chips: 4, Kwok: "fake", Taint: tpuTaint},
				{Name: "v4-1", Pool: "v4", Accelerator: "tpu-v4-podslice", Topology: "2x2x2", Block: "block-1", Subblock: "v4-sb0", Host: "v4-1", MachineType: "ct4p-hightpu-4t", Chips: 4, Kwok: "fake", Taint: tpuTaint},
			},
		},
		"a CPU pool has untainted Nodes without TPUs": {
			pools: []Pool{CPUPool(2)},
			wantNodes: []node{
				{Name: "default-pool-0", Pool: "default-pool", MachineType: "e2-standard-8", Kwok: "fake"},
				{Name: "default-pool-1", Pool: "default-pool", MachineType: "e2-standard-8", Kwok: "fake"},
			},
		},
		"a CPU pool with a TPU field is an error": {
			pools:   []Pool{{Name: "c", CPUNodes: 1, Accelerator: "tpu-v6e-slice"}},
			wantErr: true,
		},
		"sub-blocks that do not divide the Nodes are an error": {
			pools:   []Pool{{Name: "a", Accelerator: "tpu-v6e-slice", Topology: "4x4", SubBlocks: 3}},
			wantErr: true,
		},
		"an invalid topology is an error": {
			pools:   []Pool{{Name: "a", Accelerator: "tpu-v6e-slice", Topology: "4y4"}},
			wantErr: true,
		},
		"a pool listed twice is an error": {
			pools: []Pool{
				{Name: "a", Accelerator: "tpu-v6e-slice", Topology: "2x2"},
				{Name: "a", Accelerator: "tpu-v6e-slice", Topology: "2x2"},
			},
			wantErr: true,
		},
	}
	for name, tc := range testCases {
		t.Run(name, func(t *testing.T) {
			nodes, err := Nodes(tc.pools)
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("Nodes() error = %v, want error %t", err, tc.wantErr)
			}
			var got []node
			for _, n := range nodes {
				chips := n.Status.Allocatable[constants.TPUResourceName]
				capacity := n.Status.Capacity[constants.TPUResourceName]
				if capacity.Cmp(chips) != 0 {
					t.Errorf("Node %s: capacity %s, allocatable %s TPU chips", n.Name, capacity.String(), chips.String())
				}
				var taints []string
				for _, t := range n.Spec.Taints {
					taints = append(taints, t.ToString())
				}
				got = append(got, node{
					Name: n.Name, Pool: n.Labels[constants.NodePoolTopologyKey],
					Accelerator: n.Labels[constants.AcceleratorNodeSelectorKey], Topology: n.Labels[constants.TopologyNodeSelectorKey],
					Block: n.Labels[constants.GCETopologyBlockKey], Subblock: n.Labels[constants.GCETopologySubblockKey],
					Host: n.Labels[constants.GCETopologyHostKey], MachineType: n.Labels["node.kubernetes.io/instance-type"],
					Chips: chips.Value(), Kwok: n.Annotations[KwokNodeAnnotation], Taint: strings.Join(taints, ","),
				})
			}
			if diff := cmp.Diff(tc.wantNodes, got); diff != "" {
				t.Errorf("Nodes() (-want +got):\n%s", diff)
			}
		})
	}
}
