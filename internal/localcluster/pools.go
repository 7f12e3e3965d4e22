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
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
)

// KwokNodeAnnotation marks the Nodes kwok manages (the cluster runs kwok with this annotation as
// its Node selector).
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

// Pool is a GKE TPU node pool of the local cluster: Slices slices of Topology on Accelerator, one
// Node per TPU host, all labeled with the pool's name and tainted google.com/tpu=present:NoSchedule
// as GKE does. A Pool with CPUNodes instead is a pool of that many Nodes without TPUs and without
// the taint, where Pods that ask for no TPU (Ray heads, CPU workers) land.
type Pool struct {
	// Name is the node pool (cloud.google.com/gke-nodepool); Nodes are named <Name>-<i>.
	Name string
	// Accelerator is the cloud.google.com/gke-tpu-accelerator value, such as tpu-v6e-slice.
	Accelerator string
	// Topology is the cloud.google.com/gke-tpu-topology value, such as 4x4.
	Topology string
	// Slices is the number of slices of Topology the pool holds (default 1). A GKE multi-host
	// pool holds one; a single-host pool holds one per Node.
	Slices int
	// SubBlocks splits the pool's Nodes, in order, into that many equal GCE sub-blocks (default
	// 1), for subslicing.
	SubBlocks int
	// Block is the GCE topology block of every Node (default "block-1").
	Block string
	// ChipsPerHost overrides the chips of each host VM. By default: every chip of a v5e or v6e
	// topology of at most 8 chips (one host), else 4 (1 for tpu7x 1x1x1).
	ChipsPerHost int64
	// CPUNodes, when positive, makes the pool a CPU pool of that many e2-standard-8 Nodes; the
	// TPU fields must then be empty.
	CPUNodes int
}

// CPUPool is the CPU node pool of a cluster, as GKE's default-pool: n Nodes without TPUs.
func CPUPool(n int) Pool { return Pool{Name: "default-pool", CPUNodes: n} }

// chipsPerHost returns the TPU chips of each host VM of the pool.
func (p Pool) chipsPerHost(t topology.Topology) int64 {
	switch {
	case p.ChipsPerHost > 0:
		return p.ChipsPerHost
	case t.Chips() < 4:
		return t.Chips()
	}
	if g, ok := topology.LookupAccelerator(p.Accelerator); ok && g.Dims == 2 && t.Chips() <= 8 {
		return t.Chips()
	}
	return 4
}

// machineTypes are the GKE machine types of TPU hosts by generation, %d being the chips per host.
var machineTypes = map[string]string{
	"v4": "ct4p-hightpu-%dt", "v5e": "ct5lp-hightpu-%dt", "v5p": "ct5p-hightpu-%dt",
	"v6e": "ct6e-standard-%dt", "v7x": "tpu7x-standard-%dt",
}

// Nodes returns the Nodes of the pools, shaped like GKE TPU nodes: the pool, accelerator,
// topology and GCE block, sub-block and host labels, the TPU chips per host as capacity and
// allocatable, and kwok's annotation. Their status carries no conditions: kwok makes them Ready.
func Nodes(pools []Pool) ([]*corev1.Node, error) {
	var nodes []*corev1.Node
	seen := map[string]bool{}
	for _, p := range pools {
		pn, err := p.nodes()
		if err != nil {
			return nil, fmt.Errorf("pool %q: %w", p.Name, err)
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("pool %q: listed twice", p.Name)
		}
		seen[p.Name] = true
		nodes = append(nodes, pn...)
	}
	return nodes, nil
}

func (p Pool) nodes() ([]*corev1.Node, error) {
	if errs := validation.IsDNS1123Label(p.Name); len(errs) > 0 {
		return nil, fmt.Errorf("invalid name: %v", errs)
	}
	if p.CPUNodes > 0 {
		return p.cpuNodes()
	}
	if p.Accelerator == "" {
		return nil, errors.New("no accelerator")
	}
	t, err := topology.ParseTopology(p.Topology)
	if err != nil {
		return nil, err
	}
	hosts, err := topology.Hosts(t, p.chipsPerHost(t))
	if err != nil {
		return nil, err
	}
	slices, subBlocks, block := max(p.Slices, 1), max(p.SubBlocks, 1), p.Block
	if block == "" {
		block = "block-1"
	}
	count := slices * int(hosts)
	if count%subBlocks != 0 {
		return nil, fmt.Errorf("%d nodes do not split into %d equal sub-blocks", count, subBlocks)
	}
	chips := p.chipsPerHost(t)
	machineType := "ct6e-standard-%dt"
	if g, ok := topology.LookupAccelerator(p.Accelerator); ok && machineTypes[g.Name] != "" {
		machineType = machineTypes[g.Name]
	}
	nodes := make([]*corev1.Node, 0, count)
	for i := range count {
		n := testutil.MakeNode(fmt.Sprintf("%s-%d", p.Name, i)).
			TPU(p.Accelerator, p.Topology, p.Name).
			GCE(block, fmt.Sprintf("%s-sb%d", p.Name, i/(count/subBlocks))).
			TPUCapacity(chips).TPUTaint().Obj()
		n.Labels["node.kubernetes.io/instance-type"] = fmt.Sprintf(machineType, chips)
		n.Annotations = map[string]string{KwokNodeAnnotation: "fake"}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// cpuNodes returns the Nodes of a CPU pool.
func (p Pool) cpuNodes() ([]*corev1.Node, error) {
	if p.Accelerator != "" || p.Topology != "" || p.Slices != 0 || p.SubBlocks != 0 || p.ChipsPerHost != 0 {
		return nil, errors.New("a CPU pool (CPUNodes) has no accelerator, topology, slices, sub-blocks or chips")
	}
	nodes := make([]*corev1.Node, 0, p.CPUNodes)
	for i := range p.CPUNodes {
		n := testutil.MakeNode(fmt.Sprintf("%s-%d", p.Name, i)).CPUCapacity().Obj()
		n.Labels[constants.NodePoolTopologyKey] = p.Name
		n.Annotations = map[string]string{KwokNodeAnnotation: "fake"}
		nodes = append(nodes, n)
	}
	return nodes, nil
}
