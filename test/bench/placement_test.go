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

package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestS6Topology(t *testing.T) {
	testCases := map[string]struct {
		hosts   int32
		want    string
		wantErr bool
	}{
		"64 hosts":                                       {hosts: 64, want: "4x8x8"},
		"1,024 hosts, the largest v4 slice":              {hosts: 1024, want: "16x16x16"},
		"2,240 hosts, the largest v5p slice":             {hosts: 2240, want: "16x20x28"},
		"16 hosts, the smallest cube":                    {hosts: 16, want: "4x4x4"},
		"hosts that no multiple-of-4 topology holds":     {hosts: 10, wantErr: true},
		"a prime number of hosts has no topology either": {hosts: 67, wantErr: true},
	}
	for name, tc := range testCases {
		t.Run(name, func(t *testing.T) {
			got, err := s6Topology(tc.hosts)
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("s6Topology(%d) error = %v, want error %t", tc.hosts, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("s6Topology(%d) = %q, want %q", tc.hosts, got, tc.want)
			}
		})
	}
}

func TestParseHosts(t *testing.T) {
	testCases := map[string]struct {
		list    string
		want    []int32
		wantErr bool
	}{
		"the default sizes":    {list: "64,1024,2240", want: []int32{64, 1024, 2240}},
		"spaces are tolerated": {list: "64, 256", want: []int32{64, 256}},
		"a word is an error":   {list: "64,many", wantErr: true},
		"zero is an error":     {list: "0", wantErr: true},
		"an empty list is one": {list: "", wantErr: true},
	}
	for name, tc := range testCases {
		t.Run(name, func(t *testing.T) {
			got, err := parseHosts(tc.list)
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("parseHosts(%q) error = %v, want error %t", tc.list, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseHosts(%q) (-want +got):\n%s", tc.list, diff)
			}
		})
	}
}
