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

import (
	"fmt"
	"math"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
)

// Slice is everything derived from a Pod (template) about its TPU slice.
type Slice struct {
	// Topology is the slice's own topology: the parsed cloud.google.com/gke-tpu-slice-topology
	// annotation when Annotated, else the parsed cloud.google.com/gke-tpu-topology nodeSelector.
	Topology Topology
	// Parent is the parsed cloud.google.com/gke-tpu-topology nodeSelector when Annotated and the
	// nodeSelector is set: the slice the subslice Topology is cut from, which contains it. It is
	// nil without the annotation (the nodeSelector is then Topology) and for GKE dynamic slicing,
	// whose Pods select only the accelerator.
	Parent *Topology
	// Annotated reports that Topology comes from the cloud.google.com/gke-tpu-slice-topology
	// annotation (GKE subslicing or dynamic slicing).
	Annotated bool
	// Accelerator is the raw cloud.google.com/gke-tpu-accelerator nodeSelector, may be "".
	Accelerator string
	// ChipsPerPod is the google.com/tpu chips of one Pod, that is of one host VM.
	ChipsPerPod int64
	// Hosts is the number of Pods (host VMs) in the slice.
	Hosts int32
	// TPUContainers are the indexes into spec.containers of the containers requesting TPUs.
	TPUContainers []int
}

// ContainerChips returns the google.com/tpu chips of one container: its request if it has one,
// else its limit, else 0. A negative quantity counts as 0, a fractional one is rounded up and
// one beyond int64 saturates; the API server rejects all three for a Pod.
func ContainerChips(c *corev1.Container) int64 {
	if c == nil {
		return 0
	}
	if q, ok := c.Resources.Requests[constants.TPUResourceName]; ok {
		return quantityChips(q)
	}
	if q, ok := c.Resources.Limits[constants.TPUResourceName]; ok {
		return quantityChips(q)
	}
	return 0
}

// maxQuantity is math.MaxInt64 as a quantity, to saturate huge chip counts.
var maxQuantity = resource.NewQuantity(math.MaxInt64, resource.DecimalSI)

func quantityChips(q resource.Quantity) int64 {
	if q.Sign() <= 0 {
		return 0
	}
	if v, ok := q.AsInt64(); ok {
		return v
	}
	if q.Cmp(*maxQuantity) >= 0 {
		return math.MaxInt64
	}
	return q.Value() // Rounds a fraction up.
}

// TPUContainers returns the indexes into spec.Containers of the containers with
// ContainerChips > 0, in order, or nil if there are none. Init containers are not considered.
func TPUContainers(spec *corev1.PodSpec) []int {
	if spec == nil {
		return nil
	}
	idx := make([]int, 0, len(spec.Containers))
	for i := range spec.Containers {
		if ContainerChips(&spec.Containers[i]) > 0 {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	return idx
}

// ChipsPerPod is the sum of ContainerChips over spec.Containers; init containers are not
// counted. The sum saturates at math.MaxInt64 instead of overflowing.
func ChipsPerPod(spec *corev1.PodSpec) int64 {
	if spec == nil {
		return 0
	}
	var sum int64
	for i := range spec.Containers {
		c := ContainerChips(&spec.Containers[i])
		if sum > math.MaxInt64-c {
			return math.MaxInt64
		}
		sum += c
	}
	return sum
}

// Hosts returns the number of hosts (Pods) of a slice: the chips in t divided by chipsPerPod.
// The division must be exact and give at least 1, else the error, with Field FieldResources
// and wrapping ErrChipsMismatch, names both numbers. A chipsPerPod below 1 is an error wrapping
// ErrNoTPUChips, and a topology without chips one wrapping ErrInvalidTopology.
func Hosts(t Topology, chipsPerPod int64) (int32, error) {
	if chipsPerPod < 1 {
		return 0, &Error{
			Field:  FieldResources,
			Err:    ErrNoTPUChips,
			Detail: fmt.Sprintf("a Pod must request at least 1 %s chip, got %d", constants.TPUResourceName, chipsPerPod),
		}
	}
	chips := t.Chips()
	if chips < 1 {
		return 0, invalidTopology(t.String(), "it has no chips")
	}
	if chips < chipsPerPod {
		return 0, &Error{
			Field:  FieldResources,
			Err:    ErrChipsMismatch,
			Detail: fmt.Sprintf("topology %s has fewer chips (%d) than one Pod requests (%d)", t, chips, chipsPerPod),
		}
	}
	if chips%chipsPerPod != 0 {
		return 0, &Error{
			Field:  FieldResources,
			Err:    ErrChipsMismatch,
			Detail: fmt.Sprintf("topology %s has %d chips, which is not a multiple of %d chips per Pod", t, chips, chipsPerPod),
		}
	}
	hosts := chips / chipsPerPod
	if hosts > math.MaxInt32 {
		// Only for a hand-built Topology: ParseTopology caps the chips far lower.
		return 0, invalidTopology(t.String(), fmt.Sprintf("it has %d hosts, more than the maximum of %d", hosts, math.MaxInt32))
	}
	return int32(hosts), nil
}

// fromPodCalls counts the calls of FromPod in this process.
var fromPodCalls atomic.Int64

// FromPodCalls returns how many times FromPod has run in this process. Tests use it to check that
// one admission reads a Pod's slice once.
func FromPodCalls() int64 {
	return fromPodCalls.Load()
}

// FromPod returns the Slice of a Pod (or Pod template) from its annotations (may be nil) and spec:
// its topology is the cloud.google.com/gke-tpu-slice-topology annotation when present, else the
// cloud.google.com/gke-tpu-topology nodeSelector; with the annotation, a nodeSelector topology is
// the parent and must contain it (docs/design.md, "Slice topology").
//
// The first failed check is returned as an *Error, in this order: the slice topology is given and
// parses (ErrMissingTopology, ErrEmptySliceTopology, ErrInvalidTopology), then the parent parses;
// a known accelerator's dimensions (ErrDimensionMismatch); containment (ErrNotInParent); TPU chips
// requested (ErrNoTPUChips); the chips per Pod divide the slice into hosts (ErrChipsMismatch).
//
// FromPod neither decides whether a Pod is a TPU Pod (check ChipsPerPod first) nor bounds the
// hosts (CheckMaxHosts).
func FromPod(annotations map[string]string, spec *corev1.PodSpec) (Slice, error) {
	fromPodCalls.Add(1)
	if spec == nil {
		spec = &corev1.PodSpec{}
	}
	_, annotated := annotations[constants.SliceTopologyAnnotation]
	t, parent, err := topologies(annotations, spec.NodeSelector)
	if err != nil {
		return Slice{}, err
	}
	accelerator := spec.NodeSelector[constants.AcceleratorNodeSelectorKey]
	if err := checkDims(accelerator, t); err != nil {
		return Slice{}, err
	}
	if parent != nil {
		if err := checkDims(accelerator, *parent); err != nil {
			return Slice{}, err
		}
		if err := checkInParent(t, *parent); err != nil {
			return Slice{}, err
		}
	}
	chips := ChipsPerPod(spec)
	if chips < 1 {
		detail := fmt.Sprintf("no container requests %s: set resources.requests or resources.limits of %s on the containers that use TPUs", constants.TPUResourceName, constants.TPUResourceName)
		if initContainersRequestTPUs(spec) {
			detail += " (init containers are not counted)"
		}
		return Slice{}, &Error{Field: FieldResources, Err: ErrNoTPUChips, Detail: detail}
	}
	hosts, err := Hosts(t, chips)
	if err != nil {
		return Slice{}, err
	}
	return Slice{
		Topology: t, Parent: parent, Annotated: annotated, Accelerator: accelerator,
		ChipsPerPod: chips, Hosts: hosts, TPUContainers: TPUContainers(spec),
	}, nil
}

// topologies parses the slice's topology and, for a subslice, its parent: the subslice annotation
// when present (the nodeSelector, if any, is then the parent), else the nodeSelector (rules 1-3 of
// FromPod).
func topologies(annotations, nodeSelector map[string]string) (Topology, *Topology, error) {
	sliceValue, annotated := annotations[constants.SliceTopologyAnnotation]
	parentValue, hasParent := nodeSelector[constants.TopologyNodeSelectorKey]
	if !annotated && !hasParent {
		return Topology{}, nil, &Error{
			Field: FieldTopology,
			Err:   ErrMissingTopology,
			Detail: fmt.Sprintf("nodeSelector %s (or, for GKE subslicing and dynamic slicing, annotation %s) is required: set it to the TPU slice topology, such as 4x4 or 2x2x4",
				constants.TopologyNodeSelectorKey, constants.SliceTopologyAnnotation),
		}
	}
	var t Topology
	if annotated {
		st, err := parseSliceTopology(sliceValue)
		if err != nil {
			return Topology{}, nil, err
		}
		t = st
	}
	if !hasParent {
		return t, nil, nil
	}
	pt, err := ParseTopology(parentValue)
	if err != nil {
		return Topology{}, nil, err
	}
	if !annotated {
		return pt, nil, nil
	}
	return t, &pt, nil
}

// checkDims returns an error when accelerator is known and t has another number of dimensions.
func checkDims(accelerator string, t Topology) error {
	if g, known := LookupAccelerator(accelerator); known && len(t.Dims) != g.Dims {
		return &Error{
			Field:  FieldAccelerator,
			Err:    ErrDimensionMismatch,
			Detail: fmt.Sprintf("accelerator %s needs a %d-D topology such as %s, got %s", accelerator, g.Dims, exampleTopology(g.Dims), t),
		}
	}
	return nil
}

func initContainersRequestTPUs(spec *corev1.PodSpec) bool {
	for i := range spec.InitContainers {
		if ContainerChips(&spec.InitContainers[i]) > 0 {
			return true
		}
	}
	return false
}
