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

// Package placement decides how the scheduler keeps the Pods of a multi-host TPU slice together
// (docs/design.md, GKE placement): the topologyKey of the slice's required pod affinity and anti-affinity,
// chosen from the Pod's own affinity and annotations and the GCE topology labels of the TPU Nodes,
// or no affinity at all when Kueue or GKE's dynamic slicing places the slice.
//
// The package makes no API calls. Callers pass the Nodes trimmed to their name and labels (Node),
// typically from a cache limited to TPU Nodes, through a NodeLister or a function Decide calls
// only when its choice depends on them.
//
// DecideMode decides, once when a slice is created, whether the operator chooses the slice's domain
// (its Pods are admitted behind a scheduling gate) or the scheduler keeps it together with the
// inter-pod terms (spec.placement, docs/spec.md §4).
//
// Choose is the domain chooser of a ChosenDomain slice (docs/spec.md §12), which the reconciler
// calls: it picks one domain (a node pool, or a GCE sub-block or block) that a whole slice fits,
// from plain Candidate Nodes with their health and free TPU chips and the domains other slices
// hold, so that gated Pods can get a nodeSelector instead of inter-pod terms.
package placement
