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

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// s9Waiting returns the waiting slices S9 creates at scale, as the webhook records them.
func s9Waiting(scale float64) []tpuv1alpha1.TPUSliceAssignment {
	var out []tpuv1alpha1.TPUSliceAssignment
	for _, s := range s9Shapes {
		for key, n := range map[string]int{constants.NodePoolTopologyKey: s.waiting, constants.GCETopologySubblockKey: s.subblockWaiting} {
			for i := range scaled(n, scale) {
				slice := testutil.MakeSlice(fmt.Sprintf("%s-%d", s.name, i), "ml", "rc", "uid", "tpu", 0, s.hosts()).
					Placement(tpuv1alpha1.PlacementChosenDomain, key).Obj()
				slice.Spec.Accelerator, slice.Spec.Topology = s.accelerator, s.topology
				out = append(out, *slice)
			}
		}
	}
	return out
}

// TestS9Cluster: at scale 1, S9's cluster is the issue's: 5,000 TPU Nodes, 300 waiting slices.
func TestS9Cluster(t *testing.T) {
	nodes, err := localcluster.Nodes(s9Pools(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 5000 {
		t.Errorf("S9 has %d Nodes, want 5000", len(nodes))
	}
	if n := len(s9Waiting(1)); n != 300 {
		t.Errorf("S9 has %d waiting slices, want 300", n)
	}
	for _, ev := range s9Events {
		for _, before := range []bool{false, true} {
			name := s9Node(ev.shape, 1, before)
			if !slices.ContainsFunc(nodes, func(n *corev1.Node) bool { return n.Name == name }) {
				t.Errorf("event %s changes Node %s, which S9 does not create", ev.name, name)
			}
		}
	}
}

// TestS9Expected: the slices each event's Node wakes now, by key and accelerator, and those whose
// Pods could use it.
func TestS9Expected(t *testing.T) {
	nodes, err := localcluster.Nodes(s9Pools(1))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*corev1.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	waiting := s9Waiting(1)
	type counts struct{ Woken, Usable int }
	want := map[string]counts{
		// The v6e 8x8 slices on node pools, not the 4x4 ones of the same key and accelerator.
		"label":              {Woken: 80, Usable: 80},
		"prefer-no-schedule": {Woken: 40, Usable: 40},
		"heartbeat":          {Woken: 30, Usable: 30},
		// The v5p slices of the Node's topology, keyed on the node pool or on the sub-block.
		"not-ready": {Woken: 60, Usable: 60},
	}
	got := map[string]counts{}
	for _, ev := range s9Events {
		woken, usable := s9Expected(waiting, byName[s9Node(ev.shape, 1, false)])
		got[ev.name] = counts{woken, usable}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("slices of each event's key and accelerator (-want,+got):\n%s", diff)
	}
}

func TestReconcilerState(t *testing.T) {
	label := func(k, v string) *dto.LabelPair { return &dto.LabelPair{Name: ptr.To(k), Value: ptr.To(v)} }
	counter := func(v float64, labels ...*dto.LabelPair) *dto.Metric {
		return &dto.Metric{Label: labels, Counter: &dto.Counter{Value: ptr.To(v)}}
	}
	gauge := func(v float64, labels ...*dto.LabelPair) *dto.Metric {
		return &dto.Metric{Label: labels, Gauge: &dto.Gauge{Value: ptr.To(v)}}
	}
	// Both measured reconcilers count: placement, which the Node events wake, and the claim
	// reconciler, which placement's slice writes wake.
	placement, claims := s9Controllers[0], s9Controllers[1]
	families := func(active, depth map[string]float64) []*dto.MetricFamily {
		return []*dto.MetricFamily{
			{Name: ptr.To("controller_runtime_reconcile_total"), Metric: []*dto.Metric{
				counter(7, label("controller", placement), label("result", "success")),
				counter(3, label("controller", placement), label("result", "requeue_after")),
				counter(2, label("controller", claims), label("result", "success")),
				counter(100, label("controller", "other"), label("result", "success")),
			}},
			{Name: ptr.To("controller_runtime_active_workers"), Metric: []*dto.Metric{
				gauge(active[placement], label("controller", placement)), gauge(active[claims], label("controller", claims)),
				gauge(2, label("controller", "other")),
			}},
			{Name: ptr.To("workqueue_depth"), Metric: []*dto.Metric{
				gauge(depth[placement], label("controller", placement), label("name", placement)),
				gauge(depth[claims], label("controller", claims), label("name", claims)),
				gauge(5, label("controller", "other"), label("name", "other")),
			}},
		}
	}
	testCases := map[string]struct {
		active, depth map[string]float64
		wantBusy      bool
	}{
		"idle: another controller's work does not count": {},
		"a placement reconcile running":                  {active: map[string]float64{placement: 1}, wantBusy: true},
		"a slice queued for placement":                   {depth: map[string]float64{placement: 1}, wantBusy: true},
		"a claim reconcile running":                      {active: map[string]float64{claims: 1}, wantBusy: true},
		"a slice queued for its claims":                  {depth: map[string]float64{claims: 1}, wantBusy: true},
	}
	for name, tc := range testCases {
		t.Run(name, func(t *testing.T) {
			s := reconcilerState(families(tc.active, tc.depth))
			if s.reconciles != 12 || s.busy != tc.wantBusy {
				t.Errorf("reconcilerState = %v reconciles, busy %t; want 12, %t", s.reconciles, s.busy, tc.wantBusy)
			}
		})
	}
}
