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

package v1alpha1

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestClaimListJSON(t *testing.T) {
	runJSON(t, claimsField, map[string]jsonCase[ClaimList]{
		"no claims":                       {list: nil, wantJSON: `{"claimed":0}`},
		"pending and bound, sorted by ID": {list: ClaimList{{WorkerID: 2, Token: "t2"}, {WorkerID: 0, Token: "t0", PodName: "w0", PodUID: "u0"}}, wantJSON: `{"workers":"0 t0 w0 u0\n2 t2","claimed":0}`},
	})
}

func TestClaimListUnmarshal(t *testing.T) {
	runUnmarshal(t, " a", "claimed twice", map[string]unmarshalCase[ClaimList]{
		"the string form":        {json: `"0 t0 w0 u0\n3 t3"`, want: ClaimList{{WorkerID: 0, Token: "t0", PodName: "w0", PodUID: "u0"}, {WorkerID: 3, Token: "t3"}}},
		"three fields":           {json: `"1 a w"`, wantErr: "want"},
		"an empty token":         {json: `"1 "`, wantErr: "invalid token"},
		"a token with a tab":     {json: `"1 a\tb"`, wantErr: "invalid token"},
		"a bound claim half set": {json: `"1 a  u"`, wantErr: "needs its Pod's name and UID"},
		"not a string":           {json: `7`, wantErr: "claims"},
	})
}

// TestStatusReadsTheListFormOfEarlierVersions: a slice stored before the workers string decodes
// with its claims, and is stored in the string form when written again.
func TestStatusReadsTheListFormOfEarlierVersions(t *testing.T) {
	stored := `{"claims":[{"workerID":1,"token":"a","claimedAt":"2026-01-01T00:00:00Z"},{"workerID":0,"token":"b","podName":"w","podUID":"u","claimedAt":"2026-01-01T00:00:00Z"}],"claimed":2}`
	var got TPUSliceAssignmentStatus
	if err := json.Unmarshal([]byte(stored), &got); err != nil {
		t.Fatal(err)
	}
	want := TPUSliceAssignmentStatus{Claims: ClaimList{{WorkerID: 1, Token: "a"}, {WorkerID: 0, Token: "b", PodName: "w", PodUID: "u"}}, Claimed: 2}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Unmarshal() (-want,+got):\n%s", diff)
	}
	data, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(`{"workers":"0 b w u\n1 a","claimed":2}`, string(data)); diff != "" {
		t.Errorf("Marshal() (-want,+got):\n%s", diff)
	}
	var both TPUSliceAssignmentStatus
	if err := json.Unmarshal([]byte(`{"workers":"3 c","claims":[{"workerID":1,"token":"a"}]}`), &both); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ClaimList{{WorkerID: 3, Token: "c"}}, both.Claims); diff != "" {
		t.Errorf("with both forms, workers wins (-want,+got):\n%s", diff)
	}
}

func TestValidToken(t *testing.T) {
	for token, want := range map[string]bool{
		"0123456789abcdef": true, "e5f0a8c2-1d3b-4f5a-9c7e-123456789abc": true,
		"": false, "a b": false, "a\nb": false, strings.Repeat("x", 65): false,
	} {
		if got := ValidToken(token); got != want {
			t.Errorf("ValidToken(%q) = %t, want %t", token, got, want)
		}
	}
}

// FuzzParseClaims: whatever the stored string, parsing never panics, and what parses prints back
// to the same claims (sorted), with no worker ID twice.
func FuzzParseClaims(f *testing.F) {
	for _, seed := range []string{"", "0 t", "0 t w u\n2 x", "1 a\n1 b", "4294967296 t", "0 t w", " \n "} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		list, err := ParseClaims(text)
		if err != nil {
			return
		}
		seen := map[int32]bool{}
		for _, c := range list {
			if seen[c.WorkerID] || c.WorkerID < 0 || !ValidToken(c.Token) {
				t.Fatalf("parsed %q into %+v", text, list)
			}
			seen[c.WorkerID] = true
		}
		again, err := ParseClaims(list.String())
		if err != nil {
			t.Fatalf("re-parsing %q: %v", list.String(), err)
		}
		if len(again) != len(list) {
			t.Fatalf("round trip of %q: %d claims, then %d", text, len(list), len(again))
		}
	})
}
