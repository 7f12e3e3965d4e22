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
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
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

func TestPlacementWatchStartsOnLastCreate(t *testing.T) {
	gated := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: "g"}}}}
	}
	released := func(name string) *corev1.Pod { return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	bound := func(name, node string) *corev1.Pod {
		p := released(name)
		p.Spec.NodeName = node
		return p
	}
	testCases := map[string]struct {
		startOnCreate bool
		events        []*corev1.Pod
		wantStarted   bool
		wantCPUStart  time.Duration
		wantCPUBind   time.Duration
		wantPools     int
	}{
		"the clock starts when the last Pod is first seen, and the CPU is read then": {
			startOnCreate: true,
			events:        []*corev1.Pod{gated("a"), gated("b"), released("a"), released("b"), bound("a", "n1"), bound("b", "n2")},
			wantStarted:   true, wantCPUStart: time.Second, wantCPUBind: 2 * time.Second, wantPools: 1,
		},
		"updates of Pods already seen do not move the clock": {
			startOnCreate: true,
			events:        []*corev1.Pod{gated("a"), gated("a"), gated("b"), bound("a", "n1"), bound("b", "n3")},
			wantStarted:   true, wantCPUStart: time.Second, wantCPUBind: 2 * time.Second, wantPools: 2,
		},
		"without startOnCreate the clock waits for setStart": {
			events:      []*corev1.Pod{gated("a"), gated("b"), bound("a", "n1"), bound("b", "n2")},
			wantCPUBind: 3 * time.Second, wantPools: 1,
		},
	}
	for name, tc := range testCases {
		t.Run(name, func(t *testing.T) {
			calls := time.Duration(0)
			w := &placementWatch{
				want: 2, poolOf: map[string]string{"n1": "p1", "n2": "p1", "n3": "p2"}, startOnCreate: tc.startOnCreate,
				schedCPU: func() (time.Duration, error) { calls += time.Second; return calls, nil },
				seen:     map[string]bool{}, released: map[string]bool{}, nodes: map[string]string{}, ready: map[string]bool{},
				allBound: make(chan struct{}), allReady: make(chan struct{}),
			}
			if !tc.startOnCreate {
				calls = 2 * time.Second // setStart's caller read the CPU
			}
			for _, p := range tc.events {
				w.observe(p)
			}
			if started := !w.start.IsZero(); started != tc.wantStarted {
				t.Fatalf("started = %t, want %t", started, tc.wantStarted)
			}
			cpuStart, ungate := w.created()
			if tc.startOnCreate {
				if cpuStart != tc.wantCPUStart {
					t.Errorf("CPU at the start = %v, want %v", cpuStart, tc.wantCPUStart)
				}
				if ungate < 0 {
					t.Errorf("released %v after the start, want >= 0", ungate)
				}
			}
			_, _, cpu, pools := w.result(cpuStart)
			if cpu != tc.wantCPUBind-cpuStart || pools != tc.wantPools {
				t.Errorf("result CPU = %v, pools = %d; want %v, %d", cpu, pools, tc.wantCPUBind-cpuStart, tc.wantPools)
			}
			if w.cpuErr != nil {
				t.Errorf("cpuErr = %v", w.cpuErr)
			}
		})
	}
}

func TestPlacementLine(t *testing.T) {
	base := placementRun{pods: 2240, bound: 2240, bind: 28 * time.Second, ready: 37 * time.Second, schedCPU: 18 * time.Second, pools: 3}
	cases := map[string]struct {
		run  placementRun
		want string
	}{
		"all bound": {
			run: placementRun{pods: 2240, bound: 2240, bind: 56 * time.Second, ready: 60 * time.Second, schedCPU: 36 * time.Second, pools: 1},
			want: "BENCH S6 hosts=2240 slice=2 placement=InterPodAffinity bind_s=56.00 ready_s=60.00 bind_ratio=2.00 sched_cpu_ratio=2.00 pools=1 pods_per_s=40" +
				" sched_cpu_s=36.00 ungate_s=0.00 base_bind_s=28.00 base_ready_s=37.00 base_sched_cpu_s=18.00 base_ungate_s=0.00 base_pools=3" +
				" timed_out=0 bound=2240 base_timed_out=0 base_bound=2240",
		},
		"timed out: the timeout as a lower bound, and how many were bound": {
			run: placementRun{pods: 2240, bound: 13, timedOut: true, bind: 40 * time.Minute, ready: 40 * time.Minute, schedCPU: 100 * time.Second, pools: 1},
			want: "BENCH S6 hosts=2240 slice=2 placement=InterPodAffinity bind_s=2400.00 ready_s=2400.00 bind_ratio=85.71 sched_cpu_ratio=5.56 pools=1 pods_per_s=0" +
				" sched_cpu_s=100.00 ungate_s=0.00 base_bind_s=28.00 base_ready_s=37.00 base_sched_cpu_s=18.00 base_ungate_s=0.00 base_pools=3" +
				" timed_out=1 bound=13 base_timed_out=0 base_bound=2240",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, placementLine(2240, 2, tpuv1alpha1.PlacementInterPodAffinity, tc.run, base)); diff != "" {
				t.Errorf("placementLine (-want,+got):\n%s", diff)
			}
		})
	}
}
