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
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// apiserverMetrics is an excerpt of kube-apiserver 1.37's /metrics as S7 reads it: other verbs,
// resources, subresources, webhooks and operations must not count.
const apiserverMetrics = `# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1",le="+Inf"} 10
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 0.1
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 10
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="All",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1",le="+Inf"} 2
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="All",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 0.02
apiserver_request_duration_seconds_count{component="apiserver",dry_run="All",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 2
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1",le="+Inf"} 5
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 5
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 5
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1",le="+Inf"} 7
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 7
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 7
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="POST",version="v1",le="+Inf"} 3
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="POST",version="v1"} 3
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mpod.tpu.ray.io",operation="CREATE",rejected="false",type="admit",le="+Inf"} 9
apiserver_admission_webhook_admission_duration_seconds_sum{name="mpod.tpu.ray.io",operation="CREATE",rejected="false",type="admit"} 0.045
apiserver_admission_webhook_admission_duration_seconds_count{name="mpod.tpu.ray.io",operation="CREATE",rejected="false",type="admit"} 9
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mpod.tpu.ray.io",operation="CREATE",rejected="true",type="admit",le="+Inf"} 1
apiserver_admission_webhook_admission_duration_seconds_sum{name="mpod.tpu.ray.io",operation="CREATE",rejected="true",type="admit"} 0.005
apiserver_admission_webhook_admission_duration_seconds_count{name="mpod.tpu.ray.io",operation="CREATE",rejected="true",type="admit"} 1
apiserver_admission_webhook_admission_duration_seconds_bucket{name="vraycluster.tpu.ray.io",operation="CREATE",rejected="false",type="validating",le="+Inf"} 4
apiserver_admission_webhook_admission_duration_seconds_sum{name="vraycluster.tpu.ray.io",operation="CREATE",rejected="false",type="validating"} 4
apiserver_admission_webhook_admission_duration_seconds_count{name="vraycluster.tpu.ray.io",operation="CREATE",rejected="false",type="validating"} 4
apiserver_admission_webhook_admission_duration_seconds_bucket{name="other.example.com",operation="CREATE",rejected="false",type="admit",le="+Inf"} 6
apiserver_admission_webhook_admission_duration_seconds_sum{name="other.example.com",operation="CREATE",rejected="false",type="admit"} 6
apiserver_admission_webhook_admission_duration_seconds_count{name="other.example.com",operation="CREATE",rejected="false",type="admit"} 6
`

func TestServerTimesOf(t *testing.T) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	apiserver, err := parser.TextToMetricFamilies(strings.NewReader(apiserverMetrics))
	if err != nil {
		t.Fatal(err)
	}
	handler := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "controller_runtime_webhook_latency_seconds"}, []string{"webhook"})
	handler.WithLabelValues(podWebhookPath).Observe(0.002)
	handler.WithLabelValues(podWebhookPath).Observe(0.004)
	handler.WithLabelValues("/validate-ray-io-v1-raycluster").Observe(1)
	reg := prometheus.NewRegistry()
	reg.MustRegister(handler)
	own, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}

	got := serverTimesOf(apiserver, own)
	want := serverTimes{
		// Dry runs are creates the API server handles too; the binding subresource is not one.
		post:    sumCount{sum: 0.12, count: 12},
		webhook: sumCount{sum: 0.05, count: 10},
		handler: sumCount{sum: 0.006, count: 2},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(serverTimes{}, sumCount{}), cmp.Comparer(approx)); diff != "" {
		t.Errorf("serverTimesOf (-want,+got):\n%s", diff)
	}
	if m := got.webhook.meanMS(); !approx(m, 5) {
		t.Errorf("mean webhook wait = %v ms, want 5", m)
	}
	run := got.minus(serverTimes{post: sumCount{sum: 0.02, count: 2}})
	if m := run.post.meanMS(); !approx(m, 10) || run.post.count != 10 {
		t.Errorf("a run's creates: mean %v ms of %d, want 10 ms of 10", m, run.post.count)
	}
	if d := (serverTimes{writes: 5, lost: 2}).minus(serverTimes{writes: 3, lost: 1}); d.writes != 2 || d.lost != 1 {
		t.Errorf("a run's claim writes: %v (lost %v), want 2 (lost 1)", d.writes, d.lost)
	}
	if m := (sumCount{}).meanMS(); m != 0 {
		t.Errorf("mean of no sample = %v, want 0", m)
	}
}

func approx(a, b float64) bool {
	d := a - b
	return d < 1e-9 && d > -1e-9
}

func TestCreateSampled(t *testing.T) {
	rc := testutil.MakeRayCluster("bench", "ns").TPUGroup("tpu", s5Accelerator, "4x4x4", 4, 16, 1).Obj()
	b := &bench{c: fake.NewClientBuilder().WithScheme(operator.Scheme).Build()}
	var at []int
	created := func() int {
		var pods corev1.PodList
		if err := b.c.List(t.Context(), &pods); err != nil {
			t.Fatal(err)
		}
		return len(pods.Items)
	}
	start := time.Now()
	lat, wall, failures := b.createSampled(t.Context(), rc, 16, []int{0, 4, 12, 16}, func() {
		at = append(at, created())
		time.Sleep(50 * time.Millisecond)
	})
	if diff := cmp.Diff([]int{0, 4, 12, 16}, at); diff != "" {
		t.Errorf("Pods created when sampled (-want,+got):\n%s", diff)
	}
	if len(lat) != 16 || failures != 0 {
		t.Errorf("createSampled made %d creates and %d failures, want 16 and 0", len(lat), failures)
	}
	// Four samples of 50 ms each are not the creates' time.
	if total := time.Since(start); total-wall < 200*time.Millisecond {
		t.Errorf("wall time %v of %v in all holds some of the samples' 200 ms", wall, total)
	}
}
