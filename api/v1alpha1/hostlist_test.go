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
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestHostListJSON(t *testing.T) {
	runJSON(t, hostsField, map[string]jsonCase[HostList]{
		"no hosts": {list: nil, wantJSON: `{"claimed":0}`},
		"sorted by ID, no domain as a dash": {
			list:     HostList{{WorkerID: 3, Node: "n3", Domain: "pool-b"}, {WorkerID: 0, Node: "n0", Domain: "pool-a", Ready: true}, {WorkerID: 1, Node: "n1"}},
			wantJSON: `{"claimed":0,"hosts":"0 n0 pool-a Ready\n1 n1 - NotReady\n3 n3 pool-b NotReady"}`,
		},
	})
}

func TestHostListUnmarshal(t *testing.T) {
	runUnmarshal(t, " a p Ready", "named twice", map[string]unmarshalCase[HostList]{
		"the string form":         {json: `"0 n0 pool-a Ready\n2 n2 - NotReady"`, want: HostList{{WorkerID: 0, Node: "n0", Domain: "pool-a", Ready: true}, {WorkerID: 2, Node: "n2", Domain: NoDomain}}},
		"three fields":            {json: `"1 a Ready"`, wantErr: "want"},
		"an empty node":           {json: `"1  p Ready"`, wantErr: "needs its node and domain"},
		"another readiness":       {json: `"1 a p true"`, wantErr: "readiness \"true\""},
		"a tab inside a node":     {json: `"1 a\tb p Ready"`, wantErr: "needs its node and domain"},
		"not a string":            {json: `7`, wantErr: "hosts"},
		"a claim line, not hosts": {json: `"0 t w u"`, wantErr: "readiness"},
	})
}

// TestStatusSizeAt2240Hosts measures the status of the largest v5p slice (2,240 hosts) with every
// claim bound and every host scheduled, with names of GKE's length: it must stay well inside the
// 1 MiB the API server accepts for an object (docs/design.md, "Slice health").
func TestStatusSizeAt2240Hosts(t *testing.T) {
	const hosts = 2240
	var status TPUSliceAssignmentStatus
	for id := range int32(hosts) {
		pod := fmt.Sprintf("bench-v5p-tpu-worker-%05x", id)
		status.Claims = append(status.Claims, WorkerClaim{WorkerID: id, Token: fmt.Sprintf("%016x", id),
			PodName: pod, PodUID: types.UID(fmt.Sprintf("%08x-1d3b-4f5a-9c7e-%012x", id, id))})
		status.Hosts = append(status.Hosts, HostFact{WorkerID: id,
			Node: fmt.Sprintf("gke-tpu-v5p-16x20x28-pool-1a2b3c4d-%04x", id), Domain: "tpu-v5p-16x20x28-pool", Ready: true})
	}
	status.Claimed = hosts
	for _, c := range []string{ConditionClaimed, ConditionScheduled, ConditionPlaced, ConditionReady, ConditionDegraded, ConditionConflict} {
		status.Conditions = append(status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: "SomeReason",
			Message: strings.Repeat("m", 200), LastTransitionTime: metav1.Now()})
	}
	workers, err := json.Marshal(status.Claims)
	if err != nil {
		t.Fatal(err)
	}
	hostsJSON, err := json.Marshal(status.Hosts)
	if err != nil {
		t.Fatal(err)
	}
	all, err := json.Marshal(status)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("2,240 hosts: workers %.1f KiB, hosts %.1f KiB, status %.1f KiB", kib(workers), kib(hostsJSON), kib(all))
	if limit := 512 * 1024; len(all) > limit {
		t.Errorf("status of a 2,240-host slice is %d bytes, want at most %d (half of the API server's 1 MiB)", len(all), limit)
	}
	if perHost := len(hostsJSON) / hosts; perHost > 80 {
		t.Errorf("status.hosts costs %d bytes per host, want at most 80", perHost)
	}
}

func kib(b []byte) float64 { return float64(len(b)) / 1024 }

// FuzzParseHosts: whatever the stored string, parsing never panics, and what parses prints back to
// the same string (sorted) and parses again to the same hosts, with no worker ID twice.
func FuzzParseHosts(f *testing.F) {
	for _, seed := range []string{"", "0 n p Ready", "0 n p Ready\n2 m - NotReady", "1 a p Ready\n1 b p Ready", "4294967296 n p Ready", "0 n p", " \n "} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		list, err := ParseHosts(text)
		if err != nil {
			return
		}
		seen := map[int32]bool{}
		for _, h := range list {
			if seen[h.WorkerID] || h.WorkerID < 0 || h.Node == "" || h.Domain == "" {
				t.Fatalf("parsed %q into %+v", text, list)
			}
			seen[h.WorkerID] = true
		}
		again, err := ParseHosts(list.String())
		if err != nil {
			t.Fatalf("re-parsing %q: %v", list.String(), err)
		}
		if diff := cmp.Diff(list.String(), again.String()); diff != "" {
			t.Fatalf("round trip of %q (-first,+second):\n%s", text, diff)
		}
		if len(again) != len(list) {
			t.Fatalf("round trip of %q: %d hosts, then %d", text, len(list), len(again))
		}
	})
}
