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
	"fmt"
	"strconv"
	"strings"

	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
)

// samplePools are the node pools of the local cluster: room for every RayCluster sample in
// config/samples at once (two v6e 4x4 slices, one v4 2x2x4 slice, two single-host v5e 2x4 slices,
// and their three heads), each TPU slice in a pool of its own.
var samplePools = []localcluster.Pool{
	localcluster.CPUPool(2),
	{Name: "v6e-4x4-a", Accelerator: "tpu-v6e-slice", Topology: "4x4"},
	{Name: "v6e-4x4-b", Accelerator: "tpu-v6e-slice", Topology: "4x4"},
	{Name: "v4-2x2x4", Accelerator: "tpu-v4-podslice", Topology: "2x2x4"},
	{Name: "v5e-2x4", Accelerator: "tpu-v5-lite-podslice", Topology: "2x4", Slices: 2},
}

// poolUsage is the syntax of --pool.
const poolUsage = "name=<pool>,accelerator=<gke-tpu-accelerator>,topology=<topology>[,slices=<n>][,subblocks=<n>][,block=<gce block>][,chips=<per host>], or name=<pool>,cpu=<nodes>"

// poolsFlag is the repeatable --pool flag: each value adds one node pool.
type poolsFlag []localcluster.Pool

func (f *poolsFlag) String() string {
	if f == nil {
		return ""
	}
	names := make([]string, len(*f))
	for i, p := range *f {
		names[i] = p.Name
	}
	return strings.Join(names, ",")
}

func (f *poolsFlag) Set(value string) error {
	p, err := parsePool(value)
	if err != nil {
		return err
	}
	*f = append(*f, p)
	return nil
}

// parsePool parses one --pool value (poolUsage) into a Pool whose Nodes build
// (localcluster.Nodes), so that a mistake fails at flag parsing rather than at start.
func parsePool(value string) (localcluster.Pool, error) {
	var p localcluster.Pool
	ints := map[string]*int{"slices": &p.Slices, "subblocks": &p.SubBlocks, "cpu": &p.CPUNodes}
	strs := map[string]*string{"name": &p.Name, "accelerator": &p.Accelerator, "topology": &p.Topology, "block": &p.Block}
	seen := map[string]bool{}
	for field := range strings.SplitSeq(value, ",") {
		key, val, ok := strings.Cut(field, "=")
		key = strings.TrimSpace(key)
		if !ok || val == "" {
			return p, fmt.Errorf("%q is not key=value (%s)", field, poolUsage)
		}
		if seen[key] {
			return p, fmt.Errorf("%s given twice", key)
		}
		seen[key] = true
		switch {
		case strs[key] != nil:
			*strs[key] = val
		case ints[key] != nil || key == "chips":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 {
				return p, fmt.Errorf("%s=%s: want a positive integer", key, val)
			}
			if key == "chips" {
				p.ChipsPerHost = int64(n)
			} else {
				*ints[key] = n
			}
		default:
			return p, fmt.Errorf("unknown key %q (%s)", key, poolUsage)
		}
	}
	if p.Name == "" {
		return p, fmt.Errorf("no name (%s)", poolUsage)
	}
	if _, err := localcluster.Nodes([]localcluster.Pool{p}); err != nil {
		return p, err
	}
	return p, nil
}
