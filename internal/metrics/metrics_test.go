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
	"crypto/x509"
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/version"
)

// TestSliceCollector: once elected, slices are counted by state (the Ready condition) and by
// condition type and status, a missing condition as Unknown; before, nothing is reported.
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
			cond(tpuv1alpha1.ConditionDegraded, metav1.ConditionFalse), cond(tpuv1alpha1.ConditionDomainChosen, metav1.ConditionTrue)),
		slice("b", cond(tpuv1alpha1.ConditionClaimed, metav1.ConditionTrue), cond(tpuv1alpha1.ConditionReady, metav1.ConditionFalse),
			cond(tpuv1alpha1.ConditionDegraded, metav1.ConditionTrue)),
		slice("c", cond(tpuv1alpha1.ConditionClaimed, metav1.ConditionFalse), cond(tpuv1alpha1.ConditionDomainChosen, metav1.ConditionFalse)),
	).Build()
	collect := func(collector *sliceCollector) map[[2]string]float64 {
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
		return got
	}

	notElected := make(chan struct{})
	if got := collect(newSliceCollector(c, notElected)); len(got) != 0 {
		t.Errorf("a replica that is not the leader reported %v, want nothing", got)
	}

	elected := make(chan struct{})
	close(elected)
	got := collect(newSliceCollector(c, elected))
	want := map[[2]string]float64{
		{"slices", "ready"}: 1, {"slices", "not_ready"}: 2,
	}
	for _, typ := range sliceConditionTypes {
		for _, status := range []string{"True", "False", "Unknown"} {
			want[[2]string{typ, status}] = 0
		}
	}
	maps.Copy(want, map[[2]string]float64{
		{"Ready", "True"}: 1, {"Ready", "False"}: 1, {"Ready", "Unknown"}: 1,
		{"Degraded", "True"}: 1, {"Degraded", "False"}: 1, {"Degraded", "Unknown"}: 1,
		{"Claimed", "True"}: 2, {"Claimed", "False"}: 1,
		{"DomainChosen", "True"}: 1, {"DomainChosen", "False"}: 1, {"DomainChosen", "Unknown"}: 1,
		{"Scheduled", "Unknown"}: 3, {"Placed", "Unknown"}: 3, {"Conflict", "Unknown"}: 3, {"Malformed", "Unknown"}: 3,
	})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("gauges (-want,+got):\n%s", diff)
	}
}

// TestCertificateCollector: the gauge is the served certificate's NotAfter, and absent while no
// certificate is served.
func TestCertificateCollector(t *testing.T) {
	notAfter := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		serving func() (*x509.Certificate, error)
		want    []float64
	}{
		{"served", func() (*x509.Certificate, error) { return &x509.Certificate{NotAfter: notAfter}, nil }, []float64{float64(notAfter.Unix())}},
		{"not yet", func() (*x509.Certificate, error) { return nil, errors.New("no webhook serving certificate yet") }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := make(chan prometheus.Metric, 4)
			newCertificateCollector(tc.serving).Collect(ch)
			close(ch)
			var got []float64
			for m := range ch {
				var pb dtoMetric
				if err := m.Write(&pb.Metric); err != nil {
					t.Fatal(err)
				}
				got = append(got, pb.GetGauge().GetValue())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("gauge values (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestBuildInfo: one sample of 1 whose labels are the build's.
func TestBuildInfo(t *testing.T) {
	info := version.Info{Version: "v0.1.0", Commit: "abc", GoVersion: "go1.27.3"}
	ch := make(chan prometheus.Metric, 2)
	buildInfo(info).Collect(ch)
	close(ch)
	var got []map[string]string
	for m := range ch {
		var pb dtoMetric
		if err := m.Write(&pb.Metric); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{"value": strconv.FormatFloat(pb.GetGauge().GetValue(), 'g', -1, 64)}
		for _, l := range pb.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		got = append(got, labels)
	}
	want := []map[string]string{{"version": "v0.1.0", "commit": "abc", "go_version": "go1.27.3", "value": "1"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("build_info (-want,+got):\n%s", diff)
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
