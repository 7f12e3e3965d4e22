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
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

// TestClaimListEncoderRefusesWhatDoesNotParseBack: every claim the doors accept (a token
// ValidToken accepts, a Pod name and UID ValidPodName and ValidPodUID accept) is stored and
// parsed back as itself; anything else is refused by the encoder, naming the claim, instead of
// being stored as a line that no longer parses or that reads as other claims.
func TestClaimListEncoderRefusesWhatDoesNotParseBack(t *testing.T) {
	cases := map[string]encodeCase[ClaimList]{
		"pending and bound claims":       {list: ClaimList{{WorkerID: 1, Token: "0123456789abcdef"}, {WorkerID: 0, Token: "e5f0a8c2-1d3b-4f5a-9c7e-123456789abc", PodName: "rc-g-worker-x7k2p", PodUID: "e5f0a8c2-1d3b-4f5a-9c7e-123456789abc"}}},
		"a token of 64 characters":       {list: ClaimList{{WorkerID: 0, Token: strings.Repeat("x", 64)}}},
		"a token with punctuation":       {list: ClaimList{{WorkerID: 0, Token: `a"b\c<d>&{e}~`}}},
		"a Pod name of 253 characters":   {list: ClaimList{{WorkerID: 0, Token: "t", PodName: strings.Repeat("n", 253), PodUID: "u"}}},
		"a token with a space":           {list: ClaimList{{WorkerID: 0, Token: "a b"}}, wantErr: `worker ID 0: invalid token "a b"`},
		"a token that injects claims":    {list: ClaimList{{WorkerID: 0, Token: "x\n1 y\n2 z"}}, wantErr: `invalid token "x\n1 y\n2 z"`},
		"a token with a carriage return": {list: ClaimList{{WorkerID: 0, Token: "a\r"}}, wantErr: "invalid token"},
		"an empty token":                 {list: ClaimList{{WorkerID: 0, Token: ""}}, wantErr: "invalid token"},
		"a token of 65 characters":       {list: ClaimList{{WorkerID: 0, Token: strings.Repeat("x", 65)}}, wantErr: "invalid token"},
		"a token that is not ASCII":      {list: ClaimList{{WorkerID: 0, Token: "é"}}, wantErr: "invalid token"},
		"a token that is not UTF-8":      {list: ClaimList{{WorkerID: 0, Token: "a\xffb"}}, wantErr: "invalid token"},
		"a Pod name with a space":        {list: ClaimList{{WorkerID: 0, Token: "t", PodName: "a b", PodUID: "u"}}, wantErr: "a bound claim needs its Pod's name and UID"},
		"a Pod UID with a line break":    {list: ClaimList{{WorkerID: 0, Token: "t", PodName: "p", PodUID: "u\n1 t"}}, wantErr: "a bound claim needs its Pod's name and UID"},
		"a Pod name without its UID":     {list: ClaimList{{WorkerID: 0, Token: "t", PodName: "p"}}, wantErr: "a bound claim needs its Pod's name and UID"},
		"a Pod UID without its name":     {list: ClaimList{{WorkerID: 0, Token: "t", PodUID: "u"}}, wantErr: "a bound claim needs its Pod's name and UID"},
		"a Pod name of 254 characters":   {list: ClaimList{{WorkerID: 0, Token: "t", PodName: strings.Repeat("n", 254), PodUID: "u"}}, wantErr: "a bound claim needs"},
		"a worker ID claimed twice":      {list: ClaimList{{WorkerID: 3, Token: "a"}, {WorkerID: 3, Token: "b"}}, wantErr: "worker ID 3 is claimed twice"},
		"a negative worker ID":           {list: ClaimList{{WorkerID: -1, Token: "a"}}, wantErr: "worker ID -1 is negative"},
	}
	runEncode(t, claimsField, sortedClaims, cases)
}

func TestHostListEncoderRefusesWhatDoesNotParseBack(t *testing.T) {
	cases := map[string]encodeCase[HostList]{
		"nodes and domains":            {list: HostList{{WorkerID: 0, Node: "gke-tpu-0", Domain: "pool-a", Ready: true}, {WorkerID: 1, Node: "gke-tpu-1", Domain: NoDomain}}},
		"a node with a space":          {list: HostList{{WorkerID: 0, Node: "a b", Domain: "d"}}, wantErr: `hosts: worker ID 0: node "a b"`},
		"a domain that injects a host": {list: HostList{{WorkerID: 0, Node: "n", Domain: "d Ready\n1 m"}}, wantErr: "not 1 to 253 printable characters"},
		"a host named twice":           {list: HostList{{WorkerID: 2, Node: "a", Domain: "d"}, {WorkerID: 2, Node: "b", Domain: "d"}}, wantErr: "worker ID 2 is named twice"},
		"a negative worker ID":         {list: HostList{{WorkerID: -3, Node: "a", Domain: "d"}}, wantErr: "worker ID -3 is negative"},
	}
	runEncode(t, hostsField, func(l HostList) HostList { return l }, cases)
}

// TestStatusDecodesMalformedLines: a status whose stored lines do not parse decodes with every
// line that does, and names each that does not in MalformedLines; such a status cannot be written
// again until they are cleared (the reconciler's repair), so no write drops them silently.
func TestStatusDecodesMalformedLines(t *testing.T) {
	cases := map[string]struct {
		stored      string
		wantClaims  ClaimList
		wantHosts   HostList
		wantBad     []string
		wantClaimed int32
	}{
		"valid lines": {
			stored:     `{"workers":"0 a p0 u0\n1 b","hosts":"0 n0 d Ready","claimed":2}`,
			wantClaims: ClaimList{{WorkerID: 0, Token: "a", PodName: "p0", PodUID: "u0"}, {WorkerID: 1, Token: "b"}}, wantHosts: HostList{{WorkerID: 0, Node: "n0", Domain: "d", Ready: true}},
			wantClaimed: 2,
		},
		"a token with a space, between valid lines": {
			stored:     `{"workers":"0 a b p0 u0\n1 b\n2 c p2 u2","claimed":3}`,
			wantClaims: ClaimList{{WorkerID: 1, Token: "b"}, {WorkerID: 2, Token: "c", PodName: "p2", PodUID: "u2"}},
			wantBad:    []string{`claims line 1: "0 a b p0 u0": want`}, wantClaimed: 3,
		},
		"three fields, a bad ID, an ID twice, an empty line": {
			stored:     `{"workers":"0 a b\nx t\n1 c\n1 d\n\n2 e"}`,
			wantClaims: ClaimList{{WorkerID: 1, Token: "c"}, {WorkerID: 2, Token: "e"}},
			wantBad: []string{`claims line 1: "0 a b": want`, `claims line 2: "x t": worker ID "x" is not a non-negative integer`,
				`claims line 4: "1 d": worker ID 1 is claimed twice`, `claims line 5: "": want`},
		},
		"a bad host line": {
			stored:     `{"workers":"0 a","hosts":"0 n0 d Maybe\n1 n1 d NotReady"}`,
			wantClaims: ClaimList{{WorkerID: 0, Token: "a"}}, wantHosts: HostList{{WorkerID: 1, Node: "n1", Domain: "d"}},
			wantBad: []string{`hosts line 1: "0 n0 d Maybe": readiness "Maybe" is not Ready or NotReady`},
		},
		"workers not a string": {
			stored:    `{"workers":7,"hosts":"0 n0 d Ready"}`,
			wantHosts: HostList{{WorkerID: 0, Node: "n0", Domain: "d", Ready: true}},
			wantBad:   []string{"workers: json: cannot unmarshal number"},
		},
		"a legacy claim with a token that injects claims": {
			stored:     `{"claims":[{"workerID":0,"token":"x\n1 y"},{"workerID":2,"token":"z"}]}`,
			wantClaims: ClaimList{{WorkerID: 2, Token: "z"}},
			wantBad:    []string{`claims[0]: invalid token "x\n1 y"`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got TPUSliceAssignmentStatus
			if err := json.Unmarshal([]byte(tc.stored), &got); err != nil {
				t.Fatalf("Unmarshal() error = %v, want none", err)
			}
			if diff := gocmp.Diff(tc.wantClaims, got.Claims); diff != "" {
				t.Errorf("claims (-want,+got):\n%s", diff)
			}
			if diff := gocmp.Diff(tc.wantHosts, got.Hosts); diff != "" {
				t.Errorf("hosts (-want,+got):\n%s", diff)
			}
			if diff := gocmp.Diff(tc.wantClaimed, got.Claimed); diff != "" {
				t.Errorf("claimed (-want,+got):\n%s", diff)
			}
			if len(got.MalformedLines) != len(tc.wantBad) {
				t.Fatalf("MalformedLines = %q, want %d lines like %q", got.MalformedLines, len(tc.wantBad), tc.wantBad)
			}
			for i, want := range tc.wantBad {
				if !strings.Contains(got.MalformedLines[i], want) {
					t.Errorf("MalformedLines[%d] = %q, want it to contain %q", i, got.MalformedLines[i], want)
				}
			}
			data, err := json.Marshal(got)
			if len(tc.wantBad) > 0 {
				if !errors.Is(err, ErrMalformedLines) {
					t.Fatalf("Marshal() of a status with malformed lines = %s, %v; want ErrMalformedLines", data, err)
				}
				got.MalformedLines = nil // what the repair does, having rebuilt the claims
				if _, err := json.Marshal(got); err != nil {
					t.Fatalf("Marshal() after the repair: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// alphabet draws the characters of generated values: letters and digits, punctuation, the stored
// form's separators, other white space and control characters, non-ASCII, and a byte that is not
// UTF-8.
var alphabet = []string{"a", "z", "0", "9", "-", ".", "_", "\"", "\\", "<", "~", " ", "\n", "\r", "\t", "\v", "\x00", "\x7f", "é", "\u2028", "\xff"}

func randomValue(r *rand.Rand) string {
	n := r.IntN(70)
	if r.IntN(8) == 0 {
		n = 250 + r.IntN(6) // around the Pod name bound
	}
	var b strings.Builder
	for range n {
		if r.IntN(3) == 0 {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		} else {
			b.WriteString(alphabet[r.IntN(4)])
		}
	}
	return b.String()
}

// TestDoorsAndEncoderAgree is a property test over random values (a fixed seed, so a failure
// repeats): a claim whose token, Pod name and UID the doors accept (ValidToken, ValidPodName,
// ValidPodUID) is stored and parsed back identically; one with any value the doors refuse is
// refused by the encoder. The same for hosts' nodes and domains. FuzzClaimRoundTrip explores
// further under go test -fuzz.
func TestDoorsAndEncoderAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 1))
	for range 20000 {
		checkClaimRoundTrip(t, r.Int32N(3000), randomValue(r), randomValue(r), randomValue(r))
		checkHostRoundTrip(t, r.Int32N(3000), randomValue(r), randomValue(r))
	}
}

func FuzzClaimRoundTrip(f *testing.F) {
	for _, seed := range [][3]string{{"a", "", ""}, {"a b", "", ""}, {"x\n1 y\n2 z", "p", "u"}, {"t", "p q", "u"}, {"t", "p", "u\r"}, {"\xff", "p", "u"}} {
		f.Add(int32(0), seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, id int32, token, name, uid string) {
		checkClaimRoundTrip(t, id, token, name, uid)
		checkHostRoundTrip(t, id, name, uid)
	})
}

// checkClaimRoundTrip checks the pending claim (id, token) and the bound claim (id, token, name,
// uid), each stored next to another valid claim.
func checkClaimRoundTrip(t *testing.T, id int32, token, name, uid string) {
	t.Helper()
	other := WorkerClaim{WorkerID: id + 1, Token: "t", PodName: "p", PodUID: "u"}
	if id < 0 {
		other.WorkerID = 0
	}
	for _, c := range []WorkerClaim{{WorkerID: id, Token: token}, {WorkerID: id, Token: token, PodName: name, PodUID: types.UID(uid)}} {
		accepted := id >= 0 && ValidToken(c.Token) && (c.PodName == "" && c.PodUID == "" || ValidPodName(c.PodName) && ValidPodUID(string(c.PodUID)))
		list := ClaimList{other, c}
		checkStatusRoundTrip(t, c, accepted, TPUSliceAssignmentStatus{Claims: list}, func(back TPUSliceAssignmentStatus) string {
			return gocmp.Diff(sortedClaims(list), back.Claims)
		})
	}
}

func checkHostRoundTrip(t *testing.T, id int32, node, domain string) {
	t.Helper()
	h := HostFact{WorkerID: id, Node: node, Domain: domain, Ready: id%2 == 0}
	// An empty node or domain is stored as NoDomain; anything else must be a plain field.
	accepted := id >= 0 && (node == "" || plainField(node)) && (domain == "" || plainField(domain))
	want := h
	if want.Node == "" {
		want.Node = NoDomain
	}
	if want.Domain == "" {
		want.Domain = NoDomain
	}
	checkStatusRoundTrip(t, h, accepted, TPUSliceAssignmentStatus{Hosts: HostList{h}}, func(back TPUSliceAssignmentStatus) string {
		return gocmp.Diff(HostList{want}, back.Hosts)
	})
}

// checkStatusRoundTrip checks that the encoder refuses status when the doors refuse what (accepted
// false), and otherwise stores it so that it decodes with no malformed line and diff reports
// nothing.
func checkStatusRoundTrip(t *testing.T, what any, accepted bool, status TPUSliceAssignmentStatus, diff func(TPUSliceAssignmentStatus) string) {
	t.Helper()
	data, err := json.Marshal(status)
	if !accepted {
		if err == nil {
			t.Fatalf("the encoder stored what the doors refuse: %+v as %s", what, data)
		}
		return
	}
	if err != nil {
		t.Fatalf("the encoder refused what the doors accept: %+v: %v", what, err)
	}
	var back TPUSliceAssignmentStatus
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if d := diff(back); d != "" || len(back.MalformedLines) > 0 {
		t.Fatalf("round trip of %+v through %s (-want,+got):\n%s\nmalformed: %q", what, data, d, back.MalformedLines)
	}
}

func sortedClaims(l ClaimList) ClaimList {
	out := slices.Clone(l)
	slices.SortStableFunc(out, func(a, b WorkerClaim) int { return cmp.Compare(a.WorkerID, b.WorkerID) })
	return out
}

// The runners of the table tests ClaimList and HostList share.

// listField stores a list in a TPUSliceAssignmentStatus (in) and reads it back (out).
type listField[L fmt.Stringer] struct {
	in  func(L) TPUSliceAssignmentStatus
	out func(TPUSliceAssignmentStatus) L
}

var (
	claimsField = listField[ClaimList]{
		in:  func(l ClaimList) TPUSliceAssignmentStatus { return TPUSliceAssignmentStatus{Claims: l} },
		out: func(s TPUSliceAssignmentStatus) ClaimList { return s.Claims },
	}
	hostsField = listField[HostList]{
		in:  func(l HostList) TPUSliceAssignmentStatus { return TPUSliceAssignmentStatus{Hosts: l} },
		out: func(s TPUSliceAssignmentStatus) HostList { return s.Hosts },
	}
)

// jsonCase is a list and the status JSON it is stored as.
type jsonCase[L fmt.Stringer] struct {
	list     L
	wantJSON string
}

// runJSON checks that each case's list is stored as wantJSON and reads back as itself.
func runJSON[L fmt.Stringer](t *testing.T, f listField[L], cases map[string]jsonCase[L]) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			data, err := json.Marshal(f.in(tc.list))
			if err != nil {
				t.Fatal(err)
			}
			if diff := gocmp.Diff(tc.wantJSON, string(data)); diff != "" {
				t.Errorf("Marshal() (-want,+got):\n%s", diff)
			}
			var back TPUSliceAssignmentStatus
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			if diff := gocmp.Diff(tc.list.String(), f.out(back).String()); diff != "" {
				t.Errorf("round trip (-want,+got):\n%s", diff)
			}
		})
	}
}

// unmarshalCase is the stored JSON value of a list and what it decodes to, or the error.
type unmarshalCase[L any] struct {
	json    string
	want    L
	wantErr string
}

// runUnmarshal decodes into an L each case's JSON and that of the cases every list shares
// (parseLines' rules), built from line, the fields of a valid line after the worker ID, and twice,
// what the list calls a worker ID named twice.
func runUnmarshal[L any](t *testing.T, line, twice string, cases map[string]unmarshalCase[L]) {
	t.Helper()
	all := map[string]unmarshalCase[L]{
		"empty":                 {json: `""`},
		"null":                  {json: `null`},
		"an ID named twice":     {json: `"1` + line + `\n1` + line + `"`, wantErr: "worker ID 1 is " + twice},
		"a negative ID":         {json: `"-1` + line + `"`, wantErr: "not a non-negative integer"},
		"a signed ID":           {json: `"+1` + line + `"`, wantErr: "not a non-negative integer"},
		"a leading zero":        {json: `"01` + line + `"`, wantErr: "not a non-negative integer"},
		"an ID beyond int32":    {json: `"4294967296` + line + `"`, wantErr: "not a non-negative integer"},
		"an empty line":         {json: `"1` + line + `\n\n2` + line + `"`, wantErr: "want"},
		"a trailing line break": {json: `"1` + line + `\n"`, wantErr: "want"},
	}
	maps.Copy(all, cases)
	for name, tc := range all {
		t.Run(name, func(t *testing.T) {
			var got L
			err := json.Unmarshal([]byte(tc.json), &got)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Unmarshal() error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := gocmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Unmarshal() (-want,+got):\n%s", diff)
			}
		})
	}
}

// encodeCase is a list and the error the encoder refuses it with ("": it is stored).
type encodeCase[L fmt.Stringer] struct {
	list    L
	wantErr string
}

// runEncode checks that the encoder refuses each case's list with wantErr, String() then showing it
// on one line, or stores it so that it decodes, with no malformed line, as want(list).
func runEncode[L fmt.Stringer](t *testing.T, f listField[L], want func(L) L, cases map[string]encodeCase[L]) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			data, err := json.Marshal(f.in(tc.list))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Marshal() = %s, %v; want an error containing %q", data, err, tc.wantErr)
				}
				if s := tc.list.String(); strings.Contains(s, "\n") {
					t.Errorf("String() of a list that cannot be stored shows lines: %q", s)
				}
				return
			}
			if err != nil {
				t.Fatalf("Marshal() error = %v", err)
			}
			var back TPUSliceAssignmentStatus
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			if diff := gocmp.Diff(want(tc.list), f.out(back)); diff != "" {
				t.Errorf("round trip (-want,+got):\n%s", diff)
			}
			if len(back.MalformedLines) > 0 {
				t.Errorf("round trip found malformed lines: %q", back.MalformedLines)
			}
		})
	}
}
