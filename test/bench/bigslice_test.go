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
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestBigRoundsLines(t *testing.T) {
	// round is an S5 round of 128 Pods against a baseline of 10 s: its webhook run took wall
	// seconds, its first 64 creates 10 ms each and its last 64 10*flat ms, its injection floor
	// injection seconds.
	round := func(wall, flat, injection float64, dups int) bigResult {
		lat := slices.Concat(slices.Repeat([]time.Duration{10 * time.Millisecond}, 64),
			slices.Repeat([]time.Duration{time.Duration(flat * float64(10*time.Millisecond))}, 64))
		return bigResult{
			hosts: 128, pods: 128, lat: lat, duplicates: dups,
			wall: time.Duration(wall * float64(time.Second)), baselineWall: 10 * time.Second,
			injection: floor{wall: time.Duration(injection * float64(time.Second)), flatness: 1},
			health:    healthResult{hosts: 128, pods: 128, writes: int(wall)},
		}
	}
	floorLine := func(injection float64) string {
		return fmt.Sprintf("BENCH S5-floor hosts=128 write_1_ms=0.0 write_1_p99_ms=0.0 write_h_ms=0.0 write_h_p99_ms=0.0"+
			" payload_ratio=0.00 admission_ratio=0.00 injection_ratio=%.2f injection_flatness=1.00"+
			" payload_stored_pod_bytes=0 payload_stored_configmap_bytes=0 payload_stored_bytes_per_pod=0", injection/10)
	}
	s5Line := func(wall, flat float64, dups int) string {
		return fmt.Sprintf("BENCH S5 hosts=128 pods=128 ratio=%.2f flatness=%.2f p99_ms=%.1f status_kib=0.0 writes_per_pod=0.00"+
			" duplicates=%d stored_pod_bytes=0 stored_configmap_bytes=0 stored_bytes_per_pod=0", wall/10, flat, 10*flat, dups)
	}
	healthLine := func(writes int) string {
		return fmt.Sprintf("BENCH S5-health hosts=128 writes_per_pod=%.2f ready_s=0.0", float64(writes)/128)
	}
	tests := []struct {
		name   string
		rounds []bigResult
		want   []string
	}{{
		name:   "one round is its own lines",
		rounds: []bigResult{round(30, 1.1, 20, 0)},
		want: []string{floorLine(20), s5Line(30, 1.1, 0) + " rounds=1 round_ratios=3.00 round_flatness=1.10 round_injection_ratios=2.00",
			healthLine(30)},
	}, {
		name:   "the median round's lines, every round's ratio, flatness and floor in the order they ran",
		rounds: []bigResult{round(40, 1.5, 25, 0), round(25, 0.9, 20, 0), round(32, 1.2, 22, 0)},
		want: []string{floorLine(22), s5Line(32, 1.2, 0) + " rounds=3 round_ratios=4.00,2.50,3.20 round_flatness=1.50,0.90,1.20 round_injection_ratios=2.50,2.00,2.20",
			healthLine(32)},
	}, {
		name:   "the duplicates of every round are the line's",
		rounds: []bigResult{round(25, 1, 20, 2), round(32, 1, 20, 0), round(40, 1, 20, 1)},
		want: []string{floorLine(20), s5Line(32, 1, 3) + " rounds=3 round_ratios=2.50,3.20,4.00 round_flatness=1.00,1.00,1.00 round_injection_ratios=2.00,2.00,2.00",
			healthLine(32)},
	}, {
		name:   "an even count takes the upper median",
		rounds: []bigResult{round(40, 1, 20, 0), round(25, 1, 20, 0)},
		want: []string{floorLine(20), s5Line(40, 1, 0) + " rounds=2 round_ratios=4.00,2.50 round_flatness=1.00,1.00 round_injection_ratios=2.00,2.00",
			healthLine(40)},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := medianRound(tc.rounds, (*bigResult).ratio).benchLinesOfRounds(tc.rounds)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("S5's lines of rounds (-want,+got):\n%s", diff)
			}
		})
	}
}
