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
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLookupAccelerator(t *testing.T) {
	v5e := Generation{Name: "v5e", Dims: 2, ChipsPerVM: []int64{1, 4, 8}}
	v7x := Generation{Name: "v7x", Dims: 3, ChipsPerVM: []int64{1, 4}}
	cases := map[string]struct {
		accelerator string
		want        Generation
		wantOK      bool
	}{
		"v4 is 3-D with 4 chips per VM": {
			accelerator: "tpu-v4-podslice",
			want:        Generation{Name: "v4", Dims: 3, ChipsPerVM: []int64{4}},
			wantOK:      true,
		},
		"v5e podslice is 2-D": {
			accelerator: "tpu-v5-lite-podslice",
			want:        v5e,
			wantOK:      true,
		},
		"v5e device is the same generation as the podslice": {
			accelerator: "tpu-v5-lite-device",
			want:        v5e,
			wantOK:      true,
		},
		"v5p is 3-D with 4 chips per VM": {
			accelerator: "tpu-v5p-slice",
			want:        Generation{Name: "v5p", Dims: 3, ChipsPerVM: []int64{4}},
			wantOK:      true,
		},
		"v6e is 2-D": {
			accelerator: "tpu-v6e-slice",
			want:        Generation{Name: "v6e", Dims: 2, ChipsPerVM: []int64{1, 4, 8}},
			wantOK:      true,
		},
		"tpu7x is Ironwood": {
			accelerator: "tpu7x",
			want:        v7x,
			wantOK:      true,
		},
		"any value starting with tpu7x is Ironwood": {
			accelerator: "tpu7x-standard-4t",
			want:        v7x,
			wantOK:      true,
		},
		"an unknown future generation is not known": {
			accelerator: "tpu-v8-slice",
		},
		"a prefix of a known value is not known": {
			accelerator: "tpu-v6e",
		},
		"tpu7 without the x is not Ironwood": {
			accelerator: "tpu7",
		},
		"matching is case-sensitive like nodeSelectors": {
			accelerator: "TPU-V6E-SLICE",
		},
		"the empty value is not known": {
			accelerator: "",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, gotOK := LookupAccelerator(tc.accelerator)
			if gotOK != tc.wantOK {
				t.Errorf("LookupAccelerator(%q) ok = %t, want %t", tc.accelerator, gotOK, tc.wantOK)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("LookupAccelerator(%q) (-want,+got):\n%s", tc.accelerator, diff)
			}
		})
	}
}

func TestLookupAcceleratorReturnsACopy(t *testing.T) {
	g, _ := LookupAccelerator("tpu-v6e-slice")
	g.ChipsPerVM[0] = 99
	got, _ := LookupAccelerator("tpu-v6e-slice")
	if diff := cmp.Diff([]int64{1, 4, 8}, got.ChipsPerVM); diff != "" {
		t.Errorf("modifying a returned Generation changed the table (-want,+got):\n%s", diff)
	}
}

func TestIsV7x(t *testing.T) {
	cases := map[string]struct {
		accelerator string
		want        bool
	}{
		"tpu7x":                      {accelerator: "tpu7x", want: true},
		"a tpu7x-prefixed machine":   {accelerator: "tpu7x-standard-4t", want: true},
		"v6e":                        {accelerator: "tpu-v6e-slice", want: false},
		"tpu7 without the x":         {accelerator: "tpu7", want: false},
		"a value containing tpu7x":   {accelerator: "my-tpu7x", want: false},
		"uppercase is another value": {accelerator: "TPU7X", want: false},
		"the empty value":            {accelerator: "", want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := IsV7x(tc.accelerator); got != tc.want {
				t.Errorf("IsV7x(%q) = %t, want %t", tc.accelerator, got, tc.want)
			}
		})
	}
}

func TestExampleTopology(t *testing.T) {
	cases := map[string]struct {
		dims int
		want string
	}{
		"2-D generations show a v5e/v6e shape":    {dims: 2, want: "4x4"},
		"3-D generations show a v4/v5p/v7x shape": {dims: 3, want: "2x2x4"},
		"other dimensionalities still parse":      {dims: 1, want: "4"},
		"no dimensions does not panic":            {dims: 0, want: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := exampleTopology(tc.dims); got != tc.want {
				t.Errorf("exampleTopology(%d) = %q, want %q", tc.dims, got, tc.want)
			}
		})
	}
}
