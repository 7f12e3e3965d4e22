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

package constants

// GKE subslicing, dynamic slicing and placement (docs/design.md, GKE placement).
const (
	// GKELabelPrefix starts every GKE and GCE node label and annotation key.
	GKELabelPrefix = "cloud.google.com/"

	// SliceTopologyAnnotation, on a Pod or a worker group's Pod template, is the topology of the
	// slice its Pods form, such as 2x4. It takes precedence over TopologyNodeSelectorKey, which then
	// names the parent slice (GKE subslicing) or is absent (GKE dynamic slicing).
	SliceTopologyAnnotation = "cloud.google.com/gke-tpu-slice-topology"
	// SkipTPUWebhookCheckAnnotation set to "true" says that someone else (Kueue, GKE's slice
	// controller) places the slice: the operator adds no affinity and checks no Nodes.
	SkipTPUWebhookCheckAnnotation = "cloud.google.com/skip-tpu-webhook-check"
	// AffinityTopologyKeyAnnotation, on a Pod, names the topologyKey of its slice affinity.
	AffinityTopologyKeyAnnotation = "ray.io/tpu-affinity-topology-key"

	// GCETopologyHostKey, GCETopologySubblockKey and GCETopologyBlockKey are the node labels of
	// the physical GCE topology, from the smallest domain to the largest.
	GCETopologyHostKey     = "cloud.google.com/gce-topology-host"
	GCETopologySubblockKey = "cloud.google.com/gce-topology-subblock"
	GCETopologyBlockKey    = "cloud.google.com/gce-topology-block"
)

// Kueue's keys, retyped from sigs.k8s.io/kueue (pkg/controller/constants and
// apis/kueue/v1beta2) rather than imported: the operator does not otherwise depend on Kueue.
const (
	// KueueQueueNameLabel is the LocalQueue a workload is submitted to.
	KueueQueueNameLabel = "kueue.x-k8s.io/queue-name"
	// KueuePodSetRequiredTopologyAnnotation is the topology level all Pods of a PodSet must share
	// (topology-aware scheduling); KueuePodSetPreferredTopologyAnnotation the level they should share.
	KueuePodSetRequiredTopologyAnnotation  = "kueue.x-k8s.io/podset-required-topology"
	KueuePodSetPreferredTopologyAnnotation = "kueue.x-k8s.io/podset-preferred-topology"
	// KueuePodSetSliceRequiredTopologyAnnotation is the level each slice of a PodSet must share,
	// with its constraints in KueuePodSetSliceRequiredTopologyConstraintsAnnotation.
	KueuePodSetSliceRequiredTopologyAnnotation            = "kueue.x-k8s.io/podset-slice-required-topology"
	KueuePodSetSliceRequiredTopologyConstraintsAnnotation = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
)

// TorchTPU (torch_tpu's slice builder) environment.
const (
	EnvTorchTopology              = "TORCH_TPU_TOPOLOGY"
	EnvTorchSlicebuilderAddresses = "TORCH_TPU_SLICEBUILDER_ADDRESSES"
	// TorchSlicebuilderPortBase is the port of the first slice-builder process of a host.
	TorchSlicebuilderPortBase = 8471
)
