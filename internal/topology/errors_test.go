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
	"testing"
)

func TestFieldString(t *testing.T) {
	cases := map[string]struct {
		field Field
		want  string
	}{
		"topology":           {field: FieldTopology, want: "topology"},
		"accelerator":        {field: FieldAccelerator, want: "accelerator"},
		"resources":          {field: FieldResources, want: "resources"},
		"slice topology":     {field: FieldSliceTopology, want: "slice topology"},
		"the zero value":     {field: 0, want: "unknown"},
		"an undefined value": {field: 42, want: "unknown"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.field.String(); got != tc.want {
				t.Errorf("Field(%d).String() = %q, want %q", int(tc.field), got, tc.want)
			}
		})
	}
}

func TestError(t *testing.T) {
	cases := map[string]struct {
		err     *Error
		wantMsg string
		wantIs  error
	}{
		"the detail is the message": {
			err:     &Error{Field: FieldTopology, Err: ErrInvalidTopology, Detail: `invalid topology "2x"`},
			wantMsg: `invalid topology "2x"`,
			wantIs:  ErrInvalidTopology,
		},
		"without detail the sentinel is the message": {
			err:     &Error{Field: FieldResources, Err: ErrNoTPUChips},
			wantMsg: ErrNoTPUChips.Error(),
			wantIs:  ErrNoTPUChips,
		},
		"the zero error still has a message": {
			err:     &Error{},
			wantMsg: "invalid TPU slice",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.wantMsg {
				t.Errorf("Error() = %q, want %q", got, tc.wantMsg)
			}
			if tc.wantIs != nil && !errors.Is(tc.err, tc.wantIs) {
				t.Errorf("errors.Is(%v, %v) = false, want true", tc.err, tc.wantIs)
			}
		})
	}
}

func TestSentinelsAreDistinct(t *testing.T) {
	sentinels := []error{ErrMissingTopology, ErrEmptySliceTopology, ErrInvalidTopology, ErrNotInParent, ErrDimensionMismatch, ErrNoTPUChips, ErrChipsMismatch, ErrTooManyHosts}
	for i, a := range sentinels {
		for j, b := range sentinels {
			if i != j && errors.Is(a, b) {
				t.Errorf("errors.Is(%q, %q) = true, want sentinels to be distinct", a, b)
			}
		}
	}
}
