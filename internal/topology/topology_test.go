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
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseTopology(t *testing.T) {
	cases := map[string]struct {
		input      string
		want       Topology
		wantErrMsg string // substring of the error message; "" means no error
	}{
		"a 1-D topology is a single dimension": {
			input: "8",
			want:  Topology{Dims: []int32{8}},
		},
		"a 2-D v5e/v6e topology": {
			input: "4x4",
			want:  Topology{Dims: []int32{4, 4}},
		},
		"a 3-D v4/v5p/v7x topology": {
			input: "2x2x4",
			want:  Topology{Dims: []int32{2, 2, 4}},
		},
		"the smallest 3-D topology": {
			input: "1x1x1",
			want:  Topology{Dims: []int32{1, 1, 1}},
		},
		"a large v5p topology": {
			input: "16x16x24",
			want:  Topology{Dims: []int32{16, 16, 24}},
		},
		"a dimension may be the maximum of 4096": {
			input: "4096",
			want:  Topology{Dims: []int32{4096}},
		},
		"the chip product may be exactly the maximum of 1<<20": {
			input: "64x64x256",
			want:  Topology{Dims: []int32{64, 64, 256}},
		},
		"a dimension may contain a zero digit after the first": {
			input: "10x20",
			want:  Topology{Dims: []int32{10, 20}},
		},
		"the empty string is rejected": {
			input:      "",
			wantErrMsg: `invalid topology "": it is empty`,
		},
		"a trailing separator leaves an empty last dimension": {
			input:      "2x",
			wantErrMsg: `invalid topology "2x": dimension 2 is empty`,
		},
		"a leading separator leaves an empty first dimension": {
			input:      "x2",
			wantErrMsg: `invalid topology "x2": dimension 1 is empty`,
		},
		"a doubled separator leaves an empty middle dimension": {
			input:      "4xx4",
			wantErrMsg: `invalid topology "4xx4": dimension 2 is empty`,
		},
		"a lone separator is two empty dimensions": {
			input:      "x",
			wantErrMsg: "dimension 1 is empty",
		},
		"a zero first dimension is rejected": {
			input:      "0x4",
			wantErrMsg: `invalid topology "0x4": dimension 1 is 0, it must be at least 1`,
		},
		"a zero last dimension is rejected": {
			input:      "4x0",
			wantErrMsg: "dimension 2 is 0, it must be at least 1",
		},
		"several zero digits are still zero": {
			input:      "00x4",
			wantErrMsg: "dimension 1 is 0, it must be at least 1",
		},
		"a leading zero is rejected so that the topology round-trips": {
			input:      "04x4",
			wantErrMsg: `dimension 1 "04" has a leading zero`,
		},
		"four dimensions are too many": {
			input:      "4x4x4x4",
			wantErrMsg: `invalid topology "4x4x4x4": it has 4 dimensions, at most 3 are allowed`,
		},
		"a negative dimension is rejected": {
			input:      "-1x4",
			wantErrMsg: `dimension 1 "-1" is not a positive decimal integer`,
		},
		"a plus sign is rejected": {
			input:      "+4x4",
			wantErrMsg: `dimension 1 "+4" is not a positive decimal integer`,
		},
		"an uppercase separator is rejected with a hint": {
			input:      "4X4",
			wantErrMsg: `dimension 1 "4X4" is not a positive decimal integer; separate dimensions with a lowercase "x"`,
		},
		"a leading space is rejected": {
			input:      " 4x4",
			wantErrMsg: `dimension 1 " 4" is not a positive decimal integer`,
		},
		"a trailing newline is rejected": {
			input:      "4x4\n",
			wantErrMsg: `dimension 2 "4\n" is not a positive decimal integer`,
		},
		"letters are rejected": {
			input:      "ax4",
			wantErrMsg: `dimension 1 "a" is not a positive decimal integer`,
		},
		"a decimal point is rejected": {
			input:      "4.0x4",
			wantErrMsg: `dimension 1 "4.0" is not a positive decimal integer`,
		},
		"non-ASCII digits are rejected": {
			input:      "４x4",
			wantErrMsg: `dimension 1 "４" is not a positive decimal integer`,
		},
		"a dimension above 4096 is rejected": {
			input:      "4097x1",
			wantErrMsg: "dimension 1 is 4097, more than the maximum of 4096",
		},
		"a number beyond int64 is rejected without overflowing": {
			input:      "99999999999999999999999x4",
			wantErrMsg: "dimension 1 is 99999999999999999999999, more than the maximum of 4096",
		},
		"a chip product above 1<<20 is rejected": {
			input:      "64x64x257",
			wantErrMsg: `invalid topology "64x64x257": it has 1052672 chips, more than the maximum of 1048576`,
		},
		"the largest dimensions multiply to too many chips": {
			input:      "4096x4096x4096",
			wantErrMsg: "it has 68719476736 chips, more than the maximum of 1048576",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseTopology(tc.input)
			if tc.wantErrMsg == "" {
				if err != nil {
					t.Fatalf("ParseTopology(%q) returned unexpected error: %v", tc.input, err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("ParseTopology(%q) (-want,+got):\n%s", tc.input, diff)
				}
				if got.String() != tc.input {
					t.Errorf("ParseTopology(%q).String() = %q, want the input back", tc.input, got.String())
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseTopology(%q) = %v, want error containing %q", tc.input, got, tc.wantErrMsg)
			}
			if diff := cmp.Diff(Topology{}, got); diff != "" {
				t.Errorf("ParseTopology(%q) returned a topology with an error (-want,+got):\n%s", tc.input, diff)
			}
			assertError(t, err, ErrInvalidTopology, FieldTopology, tc.wantErrMsg)
		})
	}
}

func TestTopologyChips(t *testing.T) {
	cases := map[string]struct {
		topology  Topology
		wantChips int64
	}{
		"a 1-D topology has its only dimension as chips": {
			topology:  Topology{Dims: []int32{8}},
			wantChips: 8,
		},
		"a 2-D topology multiplies both dimensions": {
			topology:  Topology{Dims: []int32{4, 4}},
			wantChips: 16,
		},
		"a 3-D topology multiplies all dimensions": {
			topology:  Topology{Dims: []int32{2, 2, 4}},
			wantChips: 16,
		},
		"the zero topology has no chips": {
			topology:  Topology{},
			wantChips: 0,
		},
		"a hand-built topology with a zero dimension has no chips": {
			topology:  Topology{Dims: []int32{4, 0}},
			wantChips: 0,
		},
		"a hand-built topology with a negative dimension has no chips": {
			topology:  Topology{Dims: []int32{-4, -4}},
			wantChips: 0,
		},
		"a hand-built topology too large for int64 saturates": {
			topology:  Topology{Dims: []int32{math.MaxInt32, math.MaxInt32, math.MaxInt32}},
			wantChips: math.MaxInt64,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.topology.Chips(); got != tc.wantChips {
				t.Errorf("%#v.Chips() = %d, want %d", tc.topology, got, tc.wantChips)
			}
		})
	}
}

func TestTopologyString(t *testing.T) {
	cases := map[string]struct {
		topology Topology
		want     string
	}{
		"dimensions are joined with a lowercase x": {
			topology: Topology{Dims: []int32{2, 2, 4}},
			want:     "2x2x4",
		},
		"a 1-D topology has no separator": {
			topology: Topology{Dims: []int32{16}},
			want:     "16",
		},
		"the zero topology is empty": {
			topology: Topology{},
			want:     "",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.topology.String(); got != tc.want {
				t.Errorf("%#v.String() = %q, want %q", tc.topology, got, tc.want)
			}
		})
	}
}

func FuzzParseTopology(f *testing.F) {
	for _, seed := range []string{
		"8", "4x4", "2x2x4", "1x1x1", "16x16x24", "4096", "64x64x256",
		"", "2x", "x2", "x", "4xx4", "0x4", "04x4", "4x4x4x4", "-1x4", "4X4", " 4x4", "+4x4",
		"4x4\n", "ax4", "4.0x4", "４x4", "4097x1", "99999999999999999999999x4", "64x64x257",
		"4096x4096x4096",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTopology(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("ParseTopology(%q) returned an error with an empty message", s)
			}
			if !errors.Is(err, ErrInvalidTopology) {
				t.Errorf("ParseTopology(%q) error %v does not wrap ErrInvalidTopology", s, err)
			}
			if len(got.Dims) != 0 {
				t.Errorf("ParseTopology(%q) returned dimensions %v with an error", s, got.Dims)
			}
			return
		}
		if got.String() != s {
			t.Errorf("ParseTopology(%q).String() = %q, want the input back", s, got.String())
		}
		if chips := got.Chips(); chips <= 0 || chips > maxChips {
			t.Errorf("ParseTopology(%q).Chips() = %d, want in [1, %d]", s, chips, maxChips)
		}
		if n := len(got.Dims); n < 1 || n > maxDims {
			t.Errorf("ParseTopology(%q) has %d dimensions, want 1 to %d", s, n, maxDims)
		}
		for _, d := range got.Dims {
			if d < 1 || d > maxDimSize {
				t.Errorf("ParseTopology(%q) has dimension %d, want in [1, %d]", s, d, maxDimSize)
			}
		}
		if strings.TrimSpace(s) != s {
			t.Errorf("ParseTopology(%q) accepted surrounding space", s)
		}
	})
}

// assertError checks that err is an *Error for field that wraps wantErr and whose message
// contains wantMsg.
func assertError(t *testing.T, err, wantErr error, wantField Field, wantMsg string) {
	t.Helper()
	if !errors.Is(err, wantErr) {
		t.Errorf("error %q does not wrap %q", err, wantErr)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %q (%T) is not a *topology.Error", err, err)
	}
	if e.Field != wantField {
		t.Errorf("error %q has Field %v, want %v", err, e.Field, wantField)
	}
	if !strings.Contains(err.Error(), wantMsg) {
		t.Errorf("error %q does not contain %q", err, wantMsg)
	}
}
