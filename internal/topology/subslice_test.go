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

func TestContains(t *testing.T) {
	cases := map[string]struct {
		parent, sub string
		want        bool
	}{
		"half of a 4x4 fits":                             {parent: "4x4", sub: "2x4", want: true},
		"the same half in the other orientation fits":    {parent: "4x4", sub: "4x2", want: true},
		"an equal topology fits":                         {parent: "2x2x4", sub: "2x2x4", want: true},
		"a 3-D subslice fits dimension by dimension":     {parent: "4x4x8", sub: "2x4x8", want: true},
		"one dimension too large does not fit":           {parent: "4x4", sub: "2x8", want: false},
		"a rotated shape does not fit (orientation)":     {parent: "2x4", sub: "4x2", want: false},
		"a 3-D rotated shape does not fit":               {parent: "4x4x8", sub: "8x4x4", want: false},
		"fewer dimensions than the parent do not fit":    {parent: "2x2x4", sub: "2x2", want: false},
		"more dimensions than the parent do not fit":     {parent: "4x4", sub: "2x2x1", want: false},
		"a larger topology does not fit":                 {parent: "2x4", sub: "4x4", want: false},
		"a 1-D topology fits a longer 1-D topology":      {parent: "16", sub: "8", want: true},
		"a topology without dimensions contains nothing": {parent: "", sub: "", want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			parent, sub := mustTopology(t, tc.parent), mustTopology(t, tc.sub)
			if got := parent.Contains(sub); got != tc.want {
				t.Errorf("%s.Contains(%s) = %t, want %t", tc.parent, tc.sub, got, tc.want)
			}
		})
	}
}

func TestOrientationInside(t *testing.T) {
	cases := map[string]struct {
		parent, sub string
		want        string // "" means none
	}{
		"a 2-D rotation":                          {parent: "2x4", sub: "4x2", want: "2x4"},
		"a 3-D rotation, the first that fits":     {parent: "4x4x8", sub: "8x4x4", want: "4x4x8"},
		"a 3-D rotation with two orders that fit": {parent: "4x8x8", sub: "8x2x4", want: "2x8x4"},
		"no orientation fits a too large shape":   {parent: "4x4", sub: "2x8"},
		"the shape itself is never the answer":    {parent: "4x4", sub: "2x4", want: "4x2"},
		"another dimensionality has none":         {parent: "4x4", sub: "2x2x2"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := orientationInside(mustTopology(t, tc.sub), mustTopology(t, tc.parent))
			if tc.want == "" {
				if ok {
					t.Errorf("orientationInside(%s, %s) = %s, want none", tc.sub, tc.parent, got)
				}
				return
			}
			if !ok || got.String() != tc.want {
				t.Errorf("orientationInside(%s, %s) = %s, %t; want %s", tc.sub, tc.parent, got, ok, tc.want)
			}
		})
	}
}

func TestCheckMaxHosts(t *testing.T) {
	v5p := func(topology string, annotated bool) Slice {
		tt := Topology{}
		if topology != "" {
			var err error
			if tt, err = ParseTopology(topology); err != nil {
				t.Fatal(err)
			}
		}
		hosts := int32(tt.Chips() / 4) //nolint:gosec // test data.
		return Slice{Topology: tt, Annotated: annotated, Accelerator: "tpu-v5p-slice", ChipsPerPod: 4, Hosts: hosts}
	}
	cases := map[string]struct {
		slice      Slice
		maxHosts   int32
		wantErr    bool
		wantField  Field
		wantErrMsg string
	}{
		"the largest v5p slice (2,240 hosts) is within the default limit": {
			slice: v5p("16x20x28", false),
		},
		"a slice of exactly the limit is allowed": {
			slice:    v5p("4x4x8", false),
			maxHosts: 32,
		},
		"a slice of one host more than the limit names the topology, the hosts and the limit": {
			slice:      v5p("4x4x8", false),
			maxHosts:   31,
			wantErr:    true,
			wantField:  FieldTopology,
			wantErrMsg: "topology 4x4x8 with 4 chips per Pod is a slice of 32 hosts, more than the limit of 31 hosts per slice",
		},
		"a slice above the default limit is refused when no limit is given": {
			slice:      v5p("16x24x28", false),
			wantErr:    true,
			wantField:  FieldTopology,
			wantErrMsg: "is a slice of 2688 hosts, more than the limit of 2400 hosts per slice",
		},
		"a negative limit is the default limit, not no limit": {
			slice:      v5p("16x24x28", false),
			maxHosts:   -1,
			wantErr:    true,
			wantField:  FieldTopology,
			wantErrMsg: "more than the limit of 2400 hosts per slice",
		},
		"a subslice over the limit blames the annotation": {
			slice:      v5p("2x2x4", true),
			maxHosts:   2,
			wantErr:    true,
			wantField:  FieldSliceTopology,
			wantErrMsg: "topology 2x2x4 with 4 chips per Pod is a slice of 4 hosts, more than the limit of 2 hosts per slice",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.slice.CheckMaxHosts(tc.maxHosts)
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("CheckMaxHosts(%d) = %v, want nil", tc.maxHosts, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("CheckMaxHosts(%d) = nil, want an error", tc.maxHosts)
			}
			assertError(t, err, ErrTooManyHosts, tc.wantField, tc.wantErrMsg)
		})
	}
}

func TestTopologyField(t *testing.T) {
	got := []Field{Slice{}.TopologyField(), Slice{Annotated: true}.TopologyField()}
	if diff := cmp.Diff([]Field{FieldTopology, FieldSliceTopology}, got); diff != "" {
		t.Errorf("TopologyField() of a nodeSelector and an annotated slice (-want,+got):\n%s", diff)
	}
}

// mustTopology parses s, or returns the topology without dimensions for "".
func mustTopology(t *testing.T, s string) Topology {
	t.Helper()
	if s == "" {
		return Topology{}
	}
	topo, err := ParseTopology(s)
	if err != nil {
		t.Fatalf("ParseTopology(%q): %v", s, err)
	}
	return topo
}
