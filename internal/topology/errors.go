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

package topology

import "errors"

// Sentinel errors wrapped by every *Error this package returns. Test for them with errors.Is.
var (
	// ErrMissingTopology means the Pod has neither the cloud.google.com/gke-tpu-slice-topology
	// annotation nor the cloud.google.com/gke-tpu-topology nodeSelector.
	ErrMissingTopology = errors.New("missing TPU topology nodeSelector")
	// ErrEmptySliceTopology means the cloud.google.com/gke-tpu-slice-topology annotation is
	// present with an empty value.
	ErrEmptySliceTopology = errors.New("empty TPU slice topology annotation")
	// ErrNotInParent means the slice topology of the annotation does not fit inside the parent
	// topology of the nodeSelector.
	ErrNotInParent = errors.New("slice topology does not fit inside the parent topology")
	// ErrTooManyHosts means the slice has more hosts than the caller allows (Slice.CheckMaxHosts).
	ErrTooManyHosts = errors.New("too many hosts in the TPU slice")
	// ErrInvalidTopology means the topology is not 1 to 3 positive integers separated by "x",
	// or is too large.
	ErrInvalidTopology = errors.New("invalid TPU topology")
	// ErrDimensionMismatch means the topology has the wrong number of dimensions for a known
	// accelerator, such as a 3-D topology for tpu-v6e-slice.
	ErrDimensionMismatch = errors.New("topology dimensions do not match the TPU accelerator")
	// ErrNoTPUChips means no container of the Pod requests google.com/tpu.
	ErrNoTPUChips = errors.New("no google.com/tpu chips requested")
	// ErrChipsMismatch means the chips in the slice are not a whole, non-zero number of Pods.
	ErrChipsMismatch = errors.New("topology chips are not a multiple of the chips per Pod")
)

// Field names the input of a slice that an *Error blames.
type Field int

const (
	// FieldTopology is the cloud.google.com/gke-tpu-topology nodeSelector: it is missing or
	// cannot be parsed.
	FieldTopology Field = iota + 1
	// FieldAccelerator is the cloud.google.com/gke-tpu-accelerator nodeSelector: its generation
	// needs a topology with another number of dimensions.
	FieldAccelerator
	// FieldResources is the google.com/tpu resources of the Pod's containers: none requests
	// TPUs, or the chips per Pod do not divide the chips in the topology.
	FieldResources
	// FieldSliceTopology is the cloud.google.com/gke-tpu-slice-topology annotation: it is empty,
	// cannot be parsed or does not fit inside the parent topology.
	FieldSliceTopology
)

// String returns a short lowercase name of the field, such as "topology".
func (f Field) String() string {
	switch f {
	case FieldTopology:
		return "topology"
	case FieldAccelerator:
		return "accelerator"
	case FieldResources:
		return "resources"
	case FieldSliceTopology:
		return "slice topology"
	default:
		return "unknown"
	}
}

// Error is the error returned by ParseTopology, Hosts, FromPod and Slice.CheckMaxHosts.
//
// Field tells which input is at fault and Err is one of the sentinel errors of this package,
// so errors.Is(err, ErrMissingTopology) works on the returned error. When a value conflicts
// with the topology (the accelerator or the chips per Pod), Field blames that other value and
// not the topology; the message names both.
type Error struct {
	// Field is the input at fault.
	Field Field
	// Err is the sentinel error that classifies the failure.
	Err error
	// Detail is the full, user-facing message, including the offending values.
	Detail string
}

// Error returns the user-facing message.
func (e *Error) Error() string {
	if e.Detail != "" {
		return e.Detail
	}
	if e.Err != nil {
		return e.Err.Error()
	}
	return "invalid TPU slice"
}

// Unwrap returns the sentinel error, for errors.Is.
func (e *Error) Unwrap() error {
	return e.Err
}
