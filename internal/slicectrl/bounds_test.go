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

package slicectrl

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBoundedNote(t *testing.T) {
	cases := map[string]struct {
		note    string
		wantLen int
	}{
		"a short note is kept":                      {note: "Slice s held stored lines", wantLen: 25},
		"a note of 1 kB is kept":                    {note: strings.Repeat("x", 1024), wantLen: 1024},
		"a longer note is cut to 1 kB":              {note: strings.Repeat("x", 5000), wantLen: 1024},
		"a cut through a character drops its bytes": {note: strings.Repeat("x", 1020) + "ééé", wantLen: 1023},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := BoundedNote(tc.note)
			if len(got) != tc.wantLen || !utf8.ValidString(got) {
				t.Errorf("BoundedNote() is %d bytes (valid UTF-8: %t), want %d", len(got), utf8.ValidString(got), tc.wantLen)
			}
		})
	}
}
