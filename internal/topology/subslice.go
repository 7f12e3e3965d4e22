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
	"errors"
	"fmt"
	"slices"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
)

// DefaultMaxSliceHosts is the default bound on the hosts of one slice: a little above the
// largest TPU slice sold today (tpu7x 9,216 chips on 2,304 hosts; v5p 2,240; v4 1,024), and low
// enough that a mistyped topology cannot make the operator plan, write and list a slice of
// hundreds of thousands of hosts.
const DefaultMaxSliceHosts int32 = 2400

// TopologyField returns the input the slice's Topology was read from: FieldSliceTopology when
// Annotated, else FieldTopology.
func (s Slice) TopologyField() Field {
	if s.Annotated {
		return FieldSliceTopology
	}
	return FieldTopology
}

// CheckMaxHosts returns nil when the slice has at most maxHosts hosts, else an *Error whose Field
// is s.TopologyField(), wrapping ErrTooManyHosts and naming the limit. A maxHosts below 1 means
// DefaultMaxSliceHosts: a caller cannot turn the bound off by accident.
func (s Slice) CheckMaxHosts(maxHosts int32) error {
	if maxHosts < 1 {
		maxHosts = DefaultMaxSliceHosts
	}
	if s.Hosts <= maxHosts {
		return nil
	}
	return &Error{
		Field: s.TopologyField(),
		Err:   ErrTooManyHosts,
		Detail: fmt.Sprintf("topology %s with %d chips per Pod is a slice of %d hosts, more than the limit of %d hosts per slice",
			s.Topology, s.ChipsPerPod, s.Hosts, maxHosts),
	}
}

// Contains reports whether sub fits inside t as a subslice: both have the same number of
// dimensions and every dimension of sub is at most the same dimension of t. Equal topologies
// contain each other.
//
// The check is orientation-sensitive on purpose: a topology's dimensions are the physical ICI
// axes of the TPU mesh (libtpu reads the annotation as x, y, z), so 4x2 asks for 4 chips along
// an axis that a 2x4 parent has only 2 of. Accepting it as "2x4 rotated" would pass a shape
// that GKE and libtpu then read in the wrong orientation; instead the error suggests the
// orientation that fits.
func (t Topology) Contains(sub Topology) bool {
	if len(sub.Dims) != len(t.Dims) || len(t.Dims) == 0 {
		return false
	}
	for i, d := range sub.Dims {
		if d > t.Dims[i] {
			return false
		}
	}
	return true
}

// parseSliceTopology parses the value of the slice topology annotation.
func parseSliceTopology(value string) (Topology, error) {
	if value == "" {
		return Topology{}, &Error{
			Field: FieldSliceTopology,
			Err:   ErrEmptySliceTopology,
			Detail: fmt.Sprintf("annotation %s is empty: set it to the topology of the slice, such as 2x4, or remove it to use the nodeSelector %s",
				constants.SliceTopologyAnnotation, constants.TopologyNodeSelectorKey),
		}
	}
	t, err := ParseTopology(value)
	if terr, ok := errors.AsType[*Error](err); ok {
		return Topology{}, &Error{Field: FieldSliceTopology, Err: terr.Err, Detail: terr.Detail}
	}
	return t, err
}

// checkInParent returns an error naming both topologies unless parent contains sub.
func checkInParent(sub, parent Topology) error {
	if parent.Contains(sub) {
		return nil
	}
	detail := fmt.Sprintf("the slice topology %s of annotation %s does not fit inside the parent topology %s of nodeSelector %s: ",
		sub, constants.SliceTopologyAnnotation, parent, constants.TopologyNodeSelectorKey)
	switch {
	case len(sub.Dims) != len(parent.Dims):
		detail += fmt.Sprintf("it has %d dimensions and the parent %d", len(sub.Dims), len(parent.Dims))
	default:
		detail += "every dimension must be at most the parent's"
		if fit, ok := orientationInside(sub, parent); ok {
			detail += fmt.Sprintf(" (the same shape as %s fits)", fit)
		}
	}
	return &Error{Field: FieldSliceTopology, Err: ErrNotInParent, Detail: detail}
}

// orientationInside returns a permutation of sub's dimensions other than sub itself that parent
// contains, the first in lexicographic order of the permuted indexes, and ok=false when there is
// none.
func orientationInside(sub, parent Topology) (Topology, bool) {
	n := len(sub.Dims)
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	for {
		cand := Topology{Dims: make([]int32, n)}
		for i, j := range idx {
			cand.Dims[i] = sub.Dims[j]
		}
		if parent.Contains(cand) && !slices.Equal(cand.Dims, sub.Dims) {
			return cand, true
		}
		if !nextPermutation(idx) {
			return Topology{}, false
		}
	}
}

// nextPermutation advances p to its next permutation in lexicographic order and reports
// whether there was one.
func nextPermutation(p []int) bool {
	i := len(p) - 2
	for i >= 0 && p[i] >= p[i+1] {
		i--
	}
	if i < 0 {
		return false
	}
	j := len(p) - 1
	for p[j] <= p[i] {
		j--
	}
	p[i], p[j] = p[j], p[i]
	slices.Reverse(p[i+1:])
	return true
}
