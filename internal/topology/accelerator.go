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
	"slices"
	"strings"
)

// v7xPrefix starts every Ironwood (TPU v7x) accelerator value, such as tpu7x.
const v7xPrefix = "tpu7x"

// Generation describes a known TPU accelerator family.
type Generation struct {
	// Name is the short name of the generation: "v4", "v5e", "v5p", "v6e" or "v7x".
	Name string
	// Dims is the number of dimensions of the generation's topologies, 2 or 3.
	Dims int
	// ChipsPerVM are the allowed chips per host VM. They are informational: FromPod does
	// not check the chips per Pod against them.
	ChipsPerVM []int64
}

// generations maps the known cloud.google.com/gke-tpu-accelerator values, except the v7x
// family which is matched by prefix, to their generation.
var generations = map[string]Generation{
	"tpu-v4-podslice":      {Name: "v4", Dims: 3, ChipsPerVM: []int64{4}},
	"tpu-v5-lite-podslice": {Name: "v5e", Dims: 2, ChipsPerVM: []int64{1, 4, 8}},
	"tpu-v5-lite-device":   {Name: "v5e", Dims: 2, ChipsPerVM: []int64{1, 4, 8}},
	"tpu-v5p-slice":        {Name: "v5p", Dims: 3, ChipsPerVM: []int64{4}},
	"tpu-v6e-slice":        {Name: "v6e", Dims: 2, ChipsPerVM: []int64{1, 4, 8}},
}

// v7x is Ironwood: 4 chips per VM, or 1 for the 1x1x1 topology.
var v7x = Generation{Name: "v7x", Dims: 3, ChipsPerVM: []int64{1, 4}}

// LookupAccelerator returns the generation for a cloud.google.com/gke-tpu-accelerator value,
// and ok=false for an unknown or empty value. The match is exact and case-sensitive, like
// nodeSelector matching, except that every value starting with tpu7x is v7x.
func LookupAccelerator(accelerator string) (Generation, bool) {
	g, ok := generations[accelerator]
	if !ok && IsV7x(accelerator) {
		g, ok = v7x, true
	}
	if !ok {
		return Generation{}, false
	}
	// Callers may modify the result; keep the table intact.
	g.ChipsPerVM = slices.Clone(g.ChipsPerVM)
	return g, true
}

// IsV7x reports whether the accelerator is Ironwood (tpu7x or a value starting with tpu7x).
func IsV7x(accelerator string) bool {
	return strings.HasPrefix(accelerator, v7xPrefix)
}

// exampleTopology returns a typical topology with dims dimensions, for error messages.
func exampleTopology(dims int) string {
	switch dims {
	case 2:
		return "4x4"
	case 3:
		return "2x2x4"
	default:
		return strings.TrimPrefix(strings.Repeat("x4", dims), "x")
	}
}
