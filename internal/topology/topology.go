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
	"strconv"
	"strings"
)

const (
	// maxDims is the largest number of dimensions of a topology.
	maxDims = 3
	// maxDimSize is the largest size of one dimension.
	maxDimSize = 4096
	// maxChips is the largest number of chips in a topology. It is far above any real slice and
	// keeps the product of the dimensions, and the host count, well inside int32.
	maxChips = 1 << 20
	// syntaxHint ends the message of every syntax error.
	syntaxHint = `want 1 to 3 positive integers separated by a lowercase "x", such as 4x4 or 2x2x4`
)

// Topology is a parsed TPU topology such as 2x2x4.
type Topology struct {
	// Dims are the sizes of the dimensions, each at least 1.
	Dims []int32
}

// ParseTopology parses a topology of 1 to 3 positive decimal integers separated by a lowercase
// "x", such as 16, 4x4 or 2x2x4. Each dimension must be at most 4096, without sign, leading
// zero or space, and the topology must have at most 1<<20 chips.
//
// On success, String returns s unchanged. Errors are *Error with Field FieldTopology wrapping
// ErrInvalidTopology.
func ParseTopology(s string) (Topology, error) {
	if s == "" {
		return Topology{}, invalidTopology(s, "it is empty; "+syntaxHint)
	}
	if n := strings.Count(s, "x") + 1; n > maxDims {
		return Topology{}, invalidTopology(s, fmt.Sprintf("it has %d dimensions, at most %d are allowed", n, maxDims))
	}
	parts := strings.Split(s, "x")
	dims := make([]int32, 0, len(parts))
	chips := int64(1)
	for i, part := range parts {
		d, reason := parseDim(part)
		if reason != "" {
			return Topology{}, invalidTopology(s, fmt.Sprintf("dimension %d %s", i+1, reason))
		}
		dims = append(dims, d)
		chips *= int64(d) // At most 4096^3, no overflow.
	}
	if chips > maxChips {
		return Topology{}, invalidTopology(s, fmt.Sprintf("it has %d chips, more than the maximum of %d", chips, maxChips))
	}
	return Topology{Dims: dims}, nil
}

// parseDim parses one dimension. It returns a reason, completing "dimension N ...", on error.
func parseDim(p string) (int32, string) {
	if p == "" {
		return 0, "is empty; " + syntaxHint
	}
	for _, r := range p {
		if r < '0' || r > '9' {
			hint := syntaxHint
			if strings.ContainsRune(p, 'X') {
				hint = `separate dimensions with a lowercase "x", such as 4x4 or 2x2x4`
			}
			return 0, fmt.Sprintf("%q is not a positive decimal integer; %s", p, hint)
		}
	}
	if p[0] == '0' {
		if strings.Trim(p, "0") == "" {
			return 0, "is 0, it must be at least 1"
		}
		return 0, fmt.Sprintf("%q has a leading zero; %s", p, syntaxHint)
	}
	// Without leading zeros, more than 4 digits is more than 4096; checking the length first
	// also keeps huge numbers away from Atoi.
	if len(p) > len(strconv.Itoa(maxDimSize)) {
		return 0, fmt.Sprintf("is %s, more than the maximum of %d", p, maxDimSize)
	}
	d, err := strconv.Atoi(p)
	if err != nil {
		return 0, fmt.Sprintf("%q is not a positive decimal integer; %s", p, syntaxHint)
	}
	if d > maxDimSize {
		return 0, fmt.Sprintf("is %d, more than the maximum of %d", d, maxDimSize)
	}
	return int32(d), ""
}

func invalidTopology(s, reason string) *Error {
	return &Error{
		Field:  FieldTopology,
		Err:    ErrInvalidTopology,
		Detail: fmt.Sprintf("invalid topology %q: %s", s, reason),
	}
}

// Chips returns the number of chips in the topology, the product of its dimensions. It returns
// 0 for a topology without dimensions or with a dimension below 1, which ParseTopology never
// returns, and saturates instead of overflowing.
func (t Topology) Chips() int64 {
	if len(t.Dims) == 0 {
		return 0
	}
	chips := int64(1)
	for _, d := range t.Dims {
		if d < 1 {
			return 0
		}
		if chips > math.MaxInt64/int64(d) {
			return math.MaxInt64
		}
		chips *= int64(d)
	}
	return chips
}

// String returns the topology in nodeSelector form, such as "2x2x4".
func (t Topology) String() string {
	var b strings.Builder
	for i, d := range t.Dims {
		if i > 0 {
			b.WriteByte('x')
		}
		b.WriteString(strconv.FormatInt(int64(d), 10))
	}
	return b.String()
}
