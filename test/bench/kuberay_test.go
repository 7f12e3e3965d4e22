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
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
)

func TestWorkerCounter(t *testing.T) {
	start := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	type event struct {
		add  bool
		name string
		at   time.Time
	}
	testCases := map[string]struct {
		events   []event
		want     replicaRun
		wantDone bool
	}{
		"the clock stops when the last Pod is created": {
			events: []event{{true, "a", at(1)}, {true, "b", at(2)}, {true, "c", at(3)}},
			want: replicaRun{created: 3 * time.Second, live: 3, creates: 3,
				gaps: gapStats{first: time.Second, largest: time.Second, largestAfter: 1, long: 2, longTotal: 2 * time.Second}},
			wantDone: true,
		},
		"a Pod seen twice counts once": {
			events: []event{{true, "a", at(1)}, {true, "a", at(2)}, {true, "b", at(4)}, {true, "c", at(5)}},
			want: replicaRun{created: 5 * time.Second, live: 3, creates: 3,
				gaps: gapStats{first: time.Second, largest: 3 * time.Second, largestAfter: 1, long: 2, longTotal: 4 * time.Second}},
			wantDone: true,
		},
		"a replica KubeRay deleted and created again is complete only with all its new Pods": {
			events: []event{
				{true, "a", at(1)}, {true, "b", at(2)}, {false, "a", at(3)}, {false, "b", at(3)},
				{true, "d", at(4)}, {true, "e", at(5)}, {true, "f", at(6)},
			},
			want: replicaRun{created: 6 * time.Second, live: 3, creates: 5,
				gaps: gapStats{first: time.Second, largest: 2 * time.Second, largestAfter: 2, long: 4, longTotal: 5 * time.Second}},
			wantDone: true,
		},
		"Pods created after the replica was complete do not move the clock": {
			events: []event{{true, "a", at(1)}, {true, "b", at(2)}, {true, "c", at(3)}, {false, "c", at(4)}, {true, "g", at(5)}},
			want: replicaRun{created: 3 * time.Second, live: 3, creates: 4,
				gaps: gapStats{first: time.Second, largest: time.Second, largestAfter: 1, long: 2, longTotal: 2 * time.Second}},
			wantDone: true,
		},
		"a replica never complete times out": {
			events: []event{{true, "a", at(1)}, {true, "b", at(2)}},
			want: replicaRun{created: time.Minute, live: 2, creates: 2, timedOut: true,
				gaps: gapStats{first: time.Second, largest: time.Second, largestAfter: 1, long: 1, longTotal: time.Second}},
		},
	}
	for name, tc := range testCases {
		t.Run(name, func(t *testing.T) {
			c := newWorkerCounter(3)
			for _, e := range tc.events {
				if e.add {
					c.added(e.name, e.at)
				} else {
					c.deleted(e.name)
				}
			}
			done := false
			select {
			case <-c.done:
				done = true
			default:
			}
			if done != tc.wantDone {
				t.Errorf("done = %t, want %t", done, tc.wantDone)
			}
			if diff := cmp.Diff(tc.want, c.result(start, time.Minute), cmp.AllowUnexported(replicaRun{}, gapStats{}, serverTimes{}, sumCount{})); diff != "" {
				t.Errorf("result (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestReplicaLine(t *testing.T) {
	r := replicaResult{
		hosts: 1024,
		run: replicaRun{created: 40 * time.Second, live: 1024, creates: 1024, server: serverTimes{
			post: sumCount{sum: 10.25, count: 1025}, webhook: sumCount{sum: 5.125, count: 1025}, handler: sumCount{sum: 2.05, count: 1025},
			forward: sumCount{sum: 0.6, count: 682}, claim: sumCount{sum: 0.3, count: 1024},
		}},
		base: replicaRun{created: 10 * time.Second, live: 1024, creates: 1024, server: serverTimes{post: sumCount{sum: 4.1, count: 1025}}},
		floor: replicaRun{created: 25 * time.Second, live: 1024, creates: 1024, server: serverTimes{
			post: sumCount{sum: 8.2, count: 1025}, webhook: sumCount{sum: 3.075, count: 1025},
		}},
		placement:   tpuv1alpha1.PlacementChosenDomain,
		stored:      storedBytes{pods: 1024, podBytes: 1024 * 5000, configMaps: 1, configMapBytes: 102400},
		floorStored: storedBytes{pods: 1024, podBytes: 1024 * 150000},
	}
	want := "BENCH S7 hosts=1024 created_s=40.00 base_created_s=10.00 ratio=4.00 pods_per_s=25.6 base_pods_per_s=102.4" +
		" floor_created_s=25.00 floor_ratio=2.50 creates=1024 base_creates=1024 timed_out=0 base_timed_out=0 floor_timed_out=0" +
		" placement=ChosenDomain duplicates=0" +
		" stored_pod_bytes=5120000 stored_configmap_bytes=102400 stored_bytes_per_pod=5100" +
		" floor_stored_pod_bytes=153600000 floor_stored_configmap_bytes=0 floor_stored_bytes_per_pod=150000" +
		" server_create_ms=10.00 floor_server_create_ms=8.00 base_server_create_ms=4.00 webhook_wait_ms=5.00 floor_webhook_wait_ms=3.00" +
		" handler_ms=2.00 forward_ms=0.88 claim_ms=0.29"
	if diff := cmp.Diff(want, replicaLine(r)); diff != "" {
		t.Errorf("replicaLine (-want,+got):\n%s", diff)
	}
}

func TestRoundsLine(t *testing.T) {
	round := func(run, floor time.Duration, dups int, timedOut bool) replicaResult {
		return replicaResult{
			hosts:      64,
			run:        replicaRun{created: run, live: 64, creates: 64, timedOut: timedOut},
			base:       replicaRun{created: 10 * time.Second, live: 64, creates: 64},
			floor:      replicaRun{created: floor, live: 64, creates: 64},
			placement:  tpuv1alpha1.PlacementChosenDomain,
			duplicates: dups,
		}
	}
	// line is the BENCH line of a round whose webhook run took run seconds and its payload floor
	// took floor seconds, both against a baseline of 10 s.
	line := func(run, floor float64, dups, timedOut int) string {
		return fmt.Sprintf("BENCH S7 hosts=64 created_s=%.2f base_created_s=10.00 ratio=%.2f pods_per_s=%.1f base_pods_per_s=6.4"+
			" floor_created_s=%.2f floor_ratio=%.2f creates=64 base_creates=64 timed_out=%d base_timed_out=0 floor_timed_out=0"+
			" placement=ChosenDomain duplicates=%d stored_pod_bytes=0 stored_configmap_bytes=0 stored_bytes_per_pod=0"+
			" floor_stored_pod_bytes=0 floor_stored_configmap_bytes=0 floor_stored_bytes_per_pod=0"+
			" server_create_ms=0.00 floor_server_create_ms=0.00 base_server_create_ms=0.00 webhook_wait_ms=0.00 floor_webhook_wait_ms=0.00"+
			" handler_ms=0.00 forward_ms=0.00 claim_ms=0.00",
			run, run/10, 64/run, floor, floor/10, timedOut, dups)
	}
	tests := []struct {
		name   string
		rounds []replicaResult
		want   string
	}{{
		name:   "one round is its own line",
		rounds: []replicaResult{round(12*time.Second, 11*time.Second, 0, false)},
		want:   line(12, 11, 0, 0) + " rounds=1 round_ratios=1.20 round_floor_ratios=1.10",
	}, {
		name: "the median round's line, every round's ratios in the order they ran",
		rounds: []replicaResult{
			round(14*time.Second, 10*time.Second, 0, false),
			round(12*time.Second, 11*time.Second, 0, false),
			round(13*time.Second, 12*time.Second, 0, false),
		},
		want: line(13, 12, 0, 0) + " rounds=3 round_ratios=1.40,1.20,1.30 round_floor_ratios=1.00,1.10,1.20",
	}, {
		name: "duplicates and timeouts of any round are the line's",
		rounds: []replicaResult{
			round(12*time.Second, 10*time.Second, 2, false),
			round(14*time.Second, 10*time.Second, 0, true),
			round(13*time.Second, 10*time.Second, 1, false),
		},
		want: line(13, 10, 3, 1) + " rounds=3 round_ratios=1.20,1.40,1.30 round_floor_ratios=1.00,1.00,1.00",
	}, {
		name: "an even count takes the upper median",
		rounds: []replicaResult{
			round(12*time.Second, 10*time.Second, 0, false),
			round(14*time.Second, 10*time.Second, 0, false),
		},
		want: line(14, 10, 0, 0) + " rounds=2 round_ratios=1.20,1.40 round_floor_ratios=1.00,1.00",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, roundsLine(tc.rounds)); diff != "" {
				t.Errorf("roundsLine (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestGapsOf(t *testing.T) {
	start := time.Date(2026, 12, 4, 17, 0, 0, 0, time.UTC)
	at := func(ms ...int) []time.Time {
		out := make([]time.Time, len(ms))
		for i, m := range ms {
			out[i] = start.Add(time.Duration(m) * time.Millisecond)
		}
		return out
	}
	tests := []struct {
		name string
		seen []time.Time
		want gapStats
	}{{
		name: "no Pod seen",
		want: gapStats{},
	}, {
		name: "one Pod: only the first",
		seen: at(300),
		want: gapStats{first: 300 * time.Millisecond},
	}, {
		name: "steady creates have no long pause",
		seen: at(100, 110, 120, 131, 141),
		want: gapStats{first: 100 * time.Millisecond, largest: 11 * time.Millisecond, largestAfter: 3},
	}, {
		name: "pauses of 50 ms and more are counted and summed; the largest is named by the Pods before it",
		seen: at(20, 30, 80, 90, 290, 300, 349),
		want: gapStats{first: 20 * time.Millisecond, largest: 200 * time.Millisecond, largestAfter: 4,
			long: 2, longTotal: 250 * time.Millisecond},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, gapsOf(start, tc.seen), cmp.AllowUnexported(gapStats{})); diff != "" {
				t.Errorf("gapsOf (-want,+got):\n%s", diff)
			}
		})
	}
}
