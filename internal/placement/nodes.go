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
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
)

// Node is what placement reads of a Node: its name and labels. A cache of TPU Nodes can be
// trimmed to this (a transform that drops everything else) to keep its memory small.
type Node struct {
	Name   string
	Labels map[string]string
}

// NodeLister lists the TPU Nodes (those labeled cloud.google.com/gke-tpu-accelerator).
type NodeLister interface {
	// ListNodes returns the TPU Nodes whose labels hold every key and value of selector, all of
	// them for an empty selector, in any order. The result is read, never modified.
	ListNodes(ctx context.Context, selector map[string]string) ([]Node, error)
}

// levels are the GCE topology levels, from the smallest domain to the largest.
var levels = [...]string{constants.GCETopologyHostKey, constants.GCETopologySubblockKey, constants.GCETopologyBlockKey}

// Levels returns the GCE topology levels a subslice's affinity can be kept on, from the
// smallest domain to the largest: cloud.google.com/gce-topology-host, -subblock, -block.
func Levels() []string {
	return slices.Clone(levels[:])
}

// Fit is what the Nodes matching a Pod's nodeSelector say about where a slice fits.
type Fit struct {
	// Key is the smallest level of Levels at which some group of matching Nodes sharing that
	// label's value has exactly the slice's host count, "" when there is none.
	Key string
	// Matching is the number of Nodes matching the nodeSelector.
	Matching int
	// Labeled is the number of matching Nodes carrying at least one label of Levels.
	Labeled int
}

// FindFit looks for the smallest GCE topology domain that holds exactly hosts of the Nodes that
// match selector (every key and value). At each level of Levels, the matching Nodes are grouped by
// their value of that label (Nodes without it are left out at that level); the first level with
// a group of exactly hosts Nodes is Fit.Key. It counts Nodes, not free capacity (docs/design.md,
// "Why an exact Node count").
func FindFit(nodes []Node, selector map[string]string, hosts int32) Fit {
	var fit Fit
	matching := make([]Node, 0, len(nodes))
	for _, n := range nodes {
		if matches(n.Labels, selector) {
			matching = append(matching, n)
		}
	}
	fit.Matching = len(matching)
	for _, n := range matching {
		if slices.ContainsFunc(levels[:], func(k string) bool { _, ok := n.Labels[k]; return ok }) {
			fit.Labeled++
		}
	}
	for _, level := range levels {
		counts := make(map[string]int32)
		for _, n := range matching {
			if v, ok := n.Labels[level]; ok {
				counts[v]++
			}
		}
		if slices.Contains(slices.Collect(maps.Values(counts)), hosts) {
			fit.Key = level
			return fit
		}
	}
	return fit
}

// matches reports whether labels hold every key and value of selector.
func matches(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// FormatSelector returns selector as "k1=v1, k2=v2" in key order, for messages.
func FormatSelector(selector map[string]string) string {
	parts := make([]string, 0, len(selector))
	for _, k := range slices.Sorted(maps.Keys(selector)) {
		parts = append(parts, fmt.Sprintf("%s=%s", k, selector[k]))
	}
	return strings.Join(parts, ", ")
}
