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

package rendezvous

import (
	"fmt"
	"slices"
	"testing"
)

func TestOwner(t *testing.T) {
	three := []string{"10.0.0.1:9443", "10.0.0.2:9443", "10.0.0.3:9443"}
	cases := []struct {
		name    string
		members []string
		wantOK  bool
	}{
		{name: "no members", members: nil, wantOK: false},
		{name: "one member", members: three[:1], wantOK: true},
		{name: "three members", members: three, wantOK: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Owner("ns/uid/group", tc.members)
			if ok != tc.wantOK {
				t.Fatalf("Owner() ok = %v, want %v", ok, tc.wantOK)
			}
			if ok && !slices.Contains(tc.members, got) {
				t.Fatalf("Owner() = %q, not a member of %v", got, tc.members)
			}
			if !ok && got != "" {
				t.Fatalf("Owner() = %q with no members, want empty", got)
			}
		})
	}
}

// TestOwnerIgnoresOrder: every replica sees the endpoints in its own order; all must agree.
func TestOwnerIgnoresOrder(t *testing.T) {
	members := []string{"a:1", "b:1", "c:1", "d:1"}
	for k := range 200 {
		key := fmt.Sprintf("ns/cluster-%d/group", k)
		want, _ := Owner(key, members)
		for _, perm := range [][]string{{"d:1", "c:1", "b:1", "a:1"}, {"b:1", "d:1", "a:1", "c:1"}} {
			if got, _ := Owner(key, perm); got != want {
				t.Fatalf("Owner(%q, %v) = %q, want %q as for %v", key, perm, got, want, members)
			}
		}
	}
}

// TestOwnerMovesOnlyTheLeaversKeys: when a member leaves, only the keys it owned change owner;
// when it comes back, exactly those keys return to it.
func TestOwnerMovesOnlyTheLeaversKeys(t *testing.T) {
	members := []string{"a:1", "b:1", "c:1"}
	without := []string{"a:1", "c:1"}
	moved := 0
	for k := range 1000 {
		key := fmt.Sprintf("ns-%d/uid/group", k)
		before, _ := Owner(key, members)
		after, _ := Owner(key, without)
		switch {
		case before == "b:1":
			moved++
			if after == "b:1" {
				t.Fatalf("key %q still owned by the member that left", key)
			}
		case after != before:
			t.Fatalf("key %q moved from %q to %q although its owner stayed", key, before, after)
		}
	}
	if moved == 0 {
		t.Fatal("the member that left owned no key of 1000")
	}
}

// TestOwnerSpreadsKeys: keys spread over the members; each of three owns a fair share of 3000
// keys (within ±20 % of 1000, far wider than the binomial spread of ±3σ ≈ ±8 %).
func TestOwnerSpreadsKeys(t *testing.T) {
	members := []string{"10.0.0.1:9443", "10.0.0.2:9443", "10.0.0.3:9443"}
	counts := map[string]int{}
	for k := range 3000 {
		owner, _ := Owner(fmt.Sprintf("team-a/0f1e2d3c-%04d/tpu-group", k), members)
		counts[owner]++
	}
	for _, m := range members {
		if counts[m] < 800 || counts[m] > 1200 {
			t.Errorf("member %s owns %d of 3000 keys, want 800..1200 (all: %v)", m, counts[m], counts)
		}
	}
}

func TestWeightSeparatesKeyAndMember(t *testing.T) {
	cases := []struct{ k1, m1, k2, m2 string }{
		{"ab", "c", "a", "bc"},
		{"", "ab", "ab", ""},
		{"key", "m1", "key", "m2"},
	}
	for _, tc := range cases {
		if Weight(tc.k1, tc.m1) == Weight(tc.k2, tc.m2) {
			t.Errorf("Weight(%q, %q) == Weight(%q, %q)", tc.k1, tc.m1, tc.k2, tc.m2)
		}
	}
}
