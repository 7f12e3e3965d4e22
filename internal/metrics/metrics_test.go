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

package metrics

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
)

// TestSliceCollector: slices are counted by state (the Claimed condition) and by condition type
// and status, a missing condition as Unknown.
func TestSliceCollector(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := tpuv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	slice := func(name string, conds ...metav1.Condition) *tpuv1alpha1.TPUSliceAssignment {
		s := &tpuv1alpha1.TPUSliceAssignment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
		s.Status.Conditions = conds
		return s
	}
	cond := func(t string, s metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: t, Status: s, Reason: "R"}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		slice("a", cond(tpuv1alpha1.ConditionClaimed, metav1.ConditionTrue), cond(tpuv1alpha1.ConditionReady, metav1.ConditionTrue),
			cond(tpuv1alpha1.ConditionDegraded, metav1.ConditionFalse)),
		slice("b", cond(tpuv1alpha1.ConditionClaimed, metav1.ConditionTrue), cond(tpuv1alpha1.ConditionReady, metav1.ConditionFalse),
			cond(tpuv1alpha1.ConditionDegraded, metav1.ConditionTrue)),
		slice("c", cond(tpuv1alpha1.ConditionClaimed, metav1.ConditionFalse)),
	).Build()
	collector := &sliceCollector{reader: c,
		desc:       prometheus.NewDesc(namespace+"_slices", "h", []string{"state"}, nil),
		conditions: prometheus.NewDesc(namespace+"_slice_conditions", "h", []string{"type", "status"}, nil)}
	wantConds := map[[2]string]float64{
		{"Ready", "True"}: 1, {"Ready", "False"}: 1, {"Ready", "Unknown"}: 1,
		{"Degraded", "True"}: 1, {"Degraded", "False"}: 1, {"Degraded", "Unknown"}: 1,
		{"Claimed", "True"}: 2, {"Claimed", "False"}: 1, {"Claimed", "Unknown"}: 0,
		{"Placed", "Unknown"}: 3, {"Placed", "True"}: 0,
		{"slices", "ready"}: 2, {"slices", "incomplete"}: 1,
	}
	got := map[[2]string]float64{}
	ch := make(chan prometheus.Metric, 64)
	collector.Collect(ch)
	close(ch)
	for m := range ch {
		var pb dtoMetric
		if err := m.Write(&pb.Metric); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{}
		for _, l := range pb.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		key := [2]string{labels["type"], labels["status"]}
		if m.Desc() == collector.desc {
			key = [2]string{"slices", labels["state"]}
		}
		got[key] = pb.GetGauge().GetValue()
	}
	for k, v := range wantConds {
		if got[k] != v {
			t.Errorf("gauge %q %q = %v, want %v", k[0], k[1], got[k], v)
		}
	}
}

// dtoMetric holds one collected sample.
type dtoMetric struct{ dto.Metric }

// TestDefaultServesEveryMetric: the served set (Default) is registered with controller-runtime's
// registry under the operator's metric names, one collector per field of Metrics.
func TestDefaultServesEveryMetric(t *testing.T) {
	wantNames := []string{
		"pod_admissions_total", "claims_adopted_total", "claims_released_total", "duplicate_pods_deleted_total",
		"slice_time_to_ready_seconds", "slice_degraded_total", "claims_total", "claim_attempts", "claim_conflicts",
		"claim_duration_seconds", "claim_writes_total", "claim_writes_lost_total", "claims_from_reservations_total",
		"reservation_give_backs_total", "reservation_renewals_total", "claim_forwards_total",
		"claim_forward_duration_seconds",
	}
	collectors := Default.collectors()
	got := make([]string, 0, len(collectors))
	for _, c := range collectors {
		if crmetrics.Registry.Register(c) == nil {
			t.Errorf("a collector of Default was not registered with controller-runtime's registry")
		}
		ch := make(chan *prometheus.Desc, 1)
		c.Describe(ch)
		got = append(got, strings.TrimPrefix(descName(t, <-ch), namespace+"_"))
	}
	if diff := cmp.Diff(wantNames, got); diff != "" {
		t.Errorf("Default's metric names (-want,+got):\n%s", diff)
	}
}

// descName returns the fully-qualified name a Desc describes.
func descName(t *testing.T, d *prometheus.Desc) string {
	t.Helper()
	// Desc has no accessor: its String() reads `Desc{fqName: "name", ...}`.
	_, rest, ok := strings.Cut(d.String(), `fqName: "`)
	if !ok {
		t.Fatalf("no fqName in %s", d)
	}
	name, _, _ := strings.Cut(rest, `"`)
	return name
}
