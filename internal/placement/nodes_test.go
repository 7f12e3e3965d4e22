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

package placement

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
)

const (
	v6e = "tpu-v6e-slice"
	v5e = "tpu-v5-lite-podslice"
)

// tpuNode returns a Node of a TPU node pool with the given GCE topology labels ("" omits one).
func tpuNode(name, accelerator, topology, pool, block, subblock, host string) Node {
	labels := map[string]string{
		constants.AcceleratorNodeSelectorKey: accelerator,
		constants.TopologyNodeSelectorKey:    topology,
		constants.NodePoolTopologyKey:        pool,
	}
	for k, v := range map[string]string{
		constants.GCETopologyBlockKey:    block,
		constants.GCETopologySubblockKey: subblock,
		constants.GCETopologyHostKey:     host,
	} {
		if v != "" {
			labels[k] = v
		}
	}
	return Node{Name: name, Labels: labels}
}

// v6ePool returns the 4 Nodes of a v6e 4x4 node pool in block, split into two subblocks of two
// Nodes, each Node on its own physical host.
func v6ePool(pool, block string) []Node {
	nodes := make([]Node, 0, 4)
	for i := range 4 {
		nodes = append(nodes, tpuNode(fmt.Sprintf("%s-%d", pool, i), v6e, "4x4", pool, block,
			fmt.Sprintf("%s-sb%d", pool, i/2), fmt.Sprintf("%s-h%d", pool, i)))
	}
	return nodes
}

// v6e4x4 is the nodeSelector of a v6e Pod of a 4x4 parent slice.
var v6e4x4 = map[string]string{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4"}

func TestFindFit(t *testing.T) {
	cases := map[string]struct {
		nodes    []Node
		selector map[string]string
		hosts    int32
		want     Fit
	}{
		"the guide's 2x4 subslice of a 4x4 pool of two 2-Node subblocks fits a subblock": {
			nodes: v6ePool("pool-a", "b1"), selector: v6e4x4, hosts: 2,
			want: Fit{Key: constants.GCETopologySubblockKey, Matching: 4, Labeled: 4},
		},
		"one host fits a physical host, the smallest level": {
			nodes: v6ePool("pool-a", "b1"), selector: v6e4x4, hosts: 1,
			want: Fit{Key: constants.GCETopologyHostKey, Matching: 4, Labeled: 4},
		},
		"the whole pool fits its block when the block holds nothing else": {
			nodes: v6ePool("pool-a", "b1"), selector: v6e4x4, hosts: 4,
			want: Fit{Key: constants.GCETopologyBlockKey, Matching: 4, Labeled: 4},
		},
		"two pools in one block leave no domain of exactly 4": {
			nodes: append(v6ePool("pool-a", "b1"), v6ePool("pool-b", "b1")...), selector: v6e4x4, hosts: 4,
			want: Fit{Matching: 8, Labeled: 8},
		},
		"two pools in two blocks: each block holds exactly 4": {
			nodes: append(v6ePool("pool-a", "b1"), v6ePool("pool-b", "b2")...), selector: v6e4x4, hosts: 4,
			want: Fit{Key: constants.GCETopologyBlockKey, Matching: 8, Labeled: 8},
		},
		"two VMs on one physical host fit the host level before their subblock": {
			nodes: []Node{
				tpuNode("a", v6e, "4x4", "p", "b1", "sb1", "h1"), tpuNode("b", v6e, "4x4", "p", "b1", "sb1", "h1"),
				tpuNode("c", v6e, "4x4", "p", "b1", "sb2", "h2"), tpuNode("d", v6e, "4x4", "p", "b1", "sb2", "h3"),
			},
			selector: v6e4x4, hosts: 2,
			want: Fit{Key: constants.GCETopologyHostKey, Matching: 4, Labeled: 4},
		},
		"Nodes not matching the nodeSelector are not counted": {
			nodes: []Node{
				tpuNode("a", v6e, "4x4", "p", "b1", "sb1", "h1"), tpuNode("b", v6e, "4x4", "p", "b1", "sb1", "h2"),
				tpuNode("c", v6e, "4x4", "p", "b1", "sb1", "h3"), tpuNode("d", v6e, "4x4", "p", "b1", "sb1", "h4"),
				tpuNode("e", v5e, "2x4", "q", "b1", "sb9", "h5"), tpuNode("f", v5e, "2x4", "q", "b1", "sb9", "h6"),
			},
			selector: v6e4x4, hosts: 2,
			want: Fit{Matching: 4, Labeled: 4},
		},
		"Nodes without a level's label are left out at that level only": {
			nodes: []Node{
				tpuNode("a", v6e, "4x4", "p", "b1", "sb1", ""), tpuNode("b", v6e, "4x4", "p", "b1", "sb1", ""),
				tpuNode("c", v6e, "4x4", "p", "b1", "", ""), tpuNode("d", v6e, "4x4", "p", "b1", "", ""),
			},
			selector: v6e4x4, hosts: 2,
			want: Fit{Key: constants.GCETopologySubblockKey, Matching: 4, Labeled: 4},
		},
		"an empty nodeSelector matches every Node": {
			nodes: v6ePool("pool-a", "b1"), hosts: 2,
			want: Fit{Key: constants.GCETopologySubblockKey, Matching: 4, Labeled: 4},
		},
		"no Nodes: nothing matches": {
			selector: v6e4x4, hosts: 2,
			want: Fit{},
		},
		"Nodes without GCE topology labels fit nothing, not even a node pool of exactly the hosts": {
			nodes:    []Node{tpuNode("a", v6e, "4x4", "p", "", "", ""), tpuNode("b", v6e, "4x4", "p", "", "", "")},
			selector: v6e4x4, hosts: 2,
			want: Fit{Matching: 2},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, FindFit(tc.nodes, tc.selector, tc.hosts)); diff != "" {
				t.Errorf("FindFit() (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestLevels(t *testing.T) {
	want := []string{"cloud.google.com/gce-topology-host", "cloud.google.com/gce-topology-subblock", "cloud.google.com/gce-topology-block"}
	got := Levels()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Levels() (-want,+got):\n%s", diff)
	}
	got[0] = "changed"
	if Levels()[0] != want[0] {
		t.Error("Levels() returned the package's own slice")
	}
}

func TestFormatSelector(t *testing.T) {
	if got, want := FormatSelector(v6e4x4), "cloud.google.com/gke-tpu-accelerator=tpu-v6e-slice, cloud.google.com/gke-tpu-topology=4x4"; got != want {
		t.Errorf("FormatSelector() = %q, want %q", got, want)
	}
	if got := FormatSelector(nil); got != "" {
		t.Errorf("FormatSelector(nil) = %q, want empty", got)
	}
}
