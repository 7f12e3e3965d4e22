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

// Package topology derives the shape of a GKE TPU slice from a Pod (or Pod template), with no
// API calls.
//
// A slice is described by these inputs:
//
//   - the slice's topology, such as 4x4 or 2x2x4, whose product is the number of TPU chips in
//     the slice: the cloud.google.com/gke-tpu-slice-topology annotation when present (GKE
//     subslicing and dynamic slicing), else the cloud.google.com/gke-tpu-topology nodeSelector.
//     With the annotation, the nodeSelector, when set, is the parent slice and must contain it;
//   - the cloud.google.com/gke-tpu-accelerator nodeSelector, which names the TPU generation and
//     so whether the topology is 2-D or 3-D (unknown generations are accepted unchecked);
//   - the google.com/tpu resources of the Pod's containers, which give the chips per Pod, that
//     is per host VM.
//
// The number of hosts in the slice is the chips in the slice divided by the chips per Pod.
// FromPod computes all of it and returns an *Error whose Field names the input at fault and
// which wraps one of the sentinel errors (ErrMissingTopology, ErrEmptySliceTopology,
// ErrInvalidTopology, ErrDimensionMismatch, ErrNotInParent, ErrNoTPUChips, ErrChipsMismatch), so
// webhooks can build field errors with the right path. Slice.CheckMaxHosts bounds the host
// count for callers that enforce a limit (ErrTooManyHosts).
package topology
