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

package v1alpha1

// The labels and annotation this operator writes, which users and tools select and read. They are
// API: renaming one breaks every selector and script that uses it.
const (
	// SliceLabel names the TPUSliceAssignment a Pod's claim lives in.
	SliceLabel = "tpu.ray.io/slice"
	// WorkerIDLabel is the worker ID (TPU_WORKER_ID host) the Pod claimed.
	WorkerIDLabel = "tpu.ray.io/worker-id"
	// ClaimTokenAnnotation links a Pod to its claim: at admission a generateName Pod has no name or
	// UID, so the claim records this random token instead until the reconciler binds it.
	ClaimTokenAnnotation = "tpu.ray.io/claim-token"

	// ClusterLabel holds the RayCluster name on every TPUSliceAssignment, for listing by selector.
	ClusterLabel = "tpu.ray.io/cluster"
	// PlacementSchedulingGate is the scheduling gate the webhook gives each Pod of a ChosenDomain
	// slice (spec.placement). The reconciler removes it, in the same update that adds a
	// nodeSelector on the slice's chosen domain, once the slice's Pods exist and one domain has
	// room for all of them (docs/spec.md §4).
	PlacementSchedulingGate = "tpu.ray.io/slice-placement"
	// PinnedNodeAnnotation names the Node the reconciler pinned a released Pod to, written in the
	// same patch as the pin (a required node affinity on that Node by name). Only a pin the
	// annotation confirms is the operator's: a Pod whose own terms name one Node is never deleted
	// as stranded (docs/spec.md §12, "Pinning").
	PinnedNodeAnnotation = "tpu.ray.io/pinned-node"

	// GroupLabel holds the worker group name on every TPUSliceAssignment, for listing by selector.
	GroupLabel = "tpu.ray.io/group"

	// CapacityForLabel names the slice a capacity object is for: the ProvisioningRequest and
	// PodTemplate, or the capacity Pods, the operator creates when no domain fits a ChosenDomain
	// slice (docs/spec.md §12, "Capacity"). They are owned by the slice.
	CapacityForLabel = "tpu.ray.io/capacity-for"
)
