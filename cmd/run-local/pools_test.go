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

package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
)

func TestParsePool(t *testing.T) {
	testCases := map[string]struct {
		value    string
		wantPool localcluster.Pool
		wantErr  bool
	}{
		"a multi-host pool": {
			value:    "name=v6e-c,accelerator=tpu-v6e-slice,topology=4x4",
			wantPool: localcluster.Pool{Name: "v6e-c", Accelerator: "tpu-v6e-slice", Topology: "4x4"},
		},
		"every key, in any order": {
			value: "subblocks=2,block=b7,chips=4,slices=2,topology=2x4,accelerator=tpu-v6e-slice,name=sub",
			wantPool: localcluster.Pool{Name: "sub", Accelerator: "tpu-v6e-slice", Topology: "2x4", Slices: 2, SubBlocks: 2,
				Block: "b7", ChipsPerHost: 4},
		},
		"a CPU pool": {
			value:    "name=cpu,cpu=3",
			wantPool: localcluster.Pool{Name: "cpu", CPUNodes: 3},
		},
		"no name is an error": {
			value:   "accelerator=tpu-v6e-slice,topology=4x4",
			wantErr: true,
		},
		"an unknown key is an error": {
			value:   "name=a,accelerator=tpu-v6e-slice,topology=4x4,zone=b",
			wantErr: true,
		},
		"a key given twice is an error": {
			value:   "name=a,name=b,accelerator=tpu-v6e-slice,topology=4x4",
			wantErr: true,
		},
		"a field without a value is an error": {
			value:   "name=a,accelerator=tpu-v6e-slice,topology",
			wantErr: true,
		},
		"a count that is not a positive integer is an error": {
			value:   "name=a,accelerator=tpu-v6e-slice,topology=4x4,slices=0",
			wantErr: true,
		},
		"a pool whose Nodes do not build is an error": {
			value:   "name=a,accelerator=tpu-v6e-slice,topology=4x4,subblocks=3",
			wantErr: true,
		},
		"a pool without an accelerator or CPU Nodes is an error": {
			value:   "name=a,topology=4x4",
			wantErr: true,
		},
	}
	for name, tc := range testCases {
		t.Run(name, func(t *testing.T) {
			got, err := parsePool(tc.value)
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("parsePool(%q) error = %v, want error %t", tc.value, err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if diff := cmp.Diff(tc.wantPool, got); diff != "" {
				t.Errorf("parsePool(%q) (-want +got):\n%s", tc.value, diff)
			}
		})
	}
}

func TestPoolFlagRepeats(t *testing.T) {
	var pools poolsFlag
	fs := flag.NewFlagSet("run-local", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(&pools, "pool", "")
	if err := fs.Parse([]string{"--pool", "name=a,cpu=1", "--pool=name=b,accelerator=tpu-v4-podslice,topology=2x2x2"}); err != nil {
		t.Fatalf("Parse() error = %v", err)
	}
	want := poolsFlag{{Name: "a", CPUNodes: 1}, {Name: "b", Accelerator: "tpu-v4-podslice", Topology: "2x2x2"}}
	if diff := cmp.Diff(want, pools); diff != "" {
		t.Errorf("pools (-want +got):\n%s", diff)
	}
}

// TestSamplePoolsHoldEverySample checks that the default pools hold every RayCluster sample of
// config/samples at once (the invalid one aside), each TPU slice in a pool of its own: per
// accelerator and topology, as many pools' slices of the sample's hosts as the samples' replicas,
// on Nodes with the chips a worker asks for; and a CPU pool with room for every head.
func TestSamplePoolsHoldEverySample(t *testing.T) {
	nodes, err := localcluster.Nodes(samplePools)
	if err != nil {
		t.Fatalf("Nodes(samplePools) error = %v", err)
	}
	type shape struct{ accelerator, topology string }
	type poolInfo struct {
		shape
		nodes int
		chips int64
	}
	pools := map[string]*poolInfo{}
	var headCPU, headMemory resource.Quantity
	for _, n := range nodes {
		name := n.Labels[constants.NodePoolTopologyKey]
		if pools[name] == nil {
			pools[name] = &poolInfo{shape: shape{n.Labels[constants.AcceleratorNodeSelectorKey], n.Labels[constants.TopologyNodeSelectorKey]}}
		}
		pools[name].nodes++
		pools[name].chips = n.Status.Allocatable.Name(constants.TPUResourceName, resource.DecimalSI).Value()
		if _, tpu := n.Labels[constants.AcceleratorNodeSelectorKey]; !tpu {
			headCPU.Add(n.Status.Allocatable[corev1.ResourceCPU])
			headMemory.Add(n.Status.Allocatable[corev1.ResourceMemory])
		}
	}
	// free holds, per shape, the hosts and chips per host of each pool slice no sample took yet.
	type slice struct {
		hosts int
		chips int64
	}
	free := map[shape][]slice{}
	for _, p := range samplePools {
		info := pools[p.Name]
		if p.CPUNodes > 0 {
			continue
		}
		for range max(p.Slices, 1) {
			free[info.shape] = append(free[info.shape], slice{hosts: info.nodes / max(p.Slices, 1), chips: info.chips})
		}
	}

	files, err := filepath.Glob(filepath.Join("..", "..", "config", "samples", "ray_v1_raycluster_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no RayCluster samples found: %v", err)
	}
	for _, file := range files {
		if strings.Contains(file, "invalid") {
			continue
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var rc rayv1.RayCluster
		if err := yaml.UnmarshalStrict(data, &rc); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		head := rc.Spec.HeadGroupSpec.Template.Spec.Containers[0].Resources.Requests
		headCPU.Sub(head[corev1.ResourceCPU])
		headMemory.Sub(head[corev1.ResourceMemory])
		for _, g := range rc.Spec.WorkerGroupSpecs {
			sel := g.Template.Spec.NodeSelector
			s := shape{sel[constants.AcceleratorNodeSelectorKey], sel[constants.TopologyNodeSelectorKey]}
			chips := g.Template.Spec.Containers[0].Resources.Requests.Name(constants.TPUResourceName, resource.DecimalSI).Value()
			for range *g.Replicas {
				i := slices.IndexFunc(free[s], func(f slice) bool { return f.hosts == int(g.NumOfHosts) && f.chips >= chips })
				if i < 0 {
					t.Errorf("%s: group %s: no free pool of %d %s %s hosts with %d chips each is left", file, g.GroupName, g.NumOfHosts, s.accelerator, s.topology, chips)
					break
				}
				free[s] = slices.Delete(free[s], i, i+1)
			}
		}
	}
	if headCPU.Sign() < 0 || headMemory.Sign() < 0 {
		t.Errorf("the CPU pool lacks room for every head: %s CPU, %s memory left", headCPU.String(), headMemory.String())
	}
}
