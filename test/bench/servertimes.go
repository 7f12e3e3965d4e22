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
	"bytes"
	"context"
	"fmt"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// podWebhookName and podWebhookPath name the operator's Pod webhook (webhooks/pod_webhook.go's
// marker); the payload floor's stand-in is registered under the same name.
const (
	podWebhookName = "mpod.tpu.ray.io"
	podWebhookPath = "/mutate--v1-pod"
)

// sumCount is a histogram's sum (seconds) and count.
type sumCount struct {
	sum   float64
	count uint64
}

func (s sumCount) minus(t sumCount) sumCount {
	return sumCount{sum: s.sum - t.sum, count: s.count - t.count}
}

// meanMS is the histogram's mean in milliseconds, 0 with no sample.
func (s sumCount) meanMS() float64 {
	if s.count == 0 {
		return 0
	}
	return s.sum / float64(s.count) * 1000
}

// serverTimes split a run's Pod creates by who spent the time, from the histograms the API server
// and controller-runtime keep: a difference of two samples is one run's.
type serverTimes struct {
	// post is the API server's handling of a Pod create (apiserver_request_duration_seconds,
	// POST pods), admission included.
	post sumCount
	// webhook is how long the API server waited for the Pod webhook on a create
	// (apiserver_admission_webhook_admission_duration_seconds): the round trip through the bench's
	// proxy to whoever serves it.
	webhook sumCount
	// handler is the operator's instances' own time in the Pod webhook's handler
	// (controller_runtime_webhook_latency_seconds), forwarding to the slice's owner included; none
	// for the stand-in of the payload floor.
	handler sumCount
	// claim is the allocators' time per claim committed or denied, where it was committed
	// (tpu_slice_operator_claim_duration_seconds); forward is a forwarded claim's round trip to the
	// slice's owner at the caller (tpu_slice_operator_claim_forward_duration_seconds, answered),
	// claim included. Both are the instances' (framework.TotalCounts).
	claim, forward sumCount
	// writes are the instances' claim writes (give-backs included), lost those of them that lost a
	// resourceVersion conflict.
	writes, lost float64
}

func (s serverTimes) minus(t serverTimes) serverTimes {
	return serverTimes{post: s.post.minus(t.post), webhook: s.webhook.minus(t.webhook), handler: s.handler.minus(t.handler),
		claim: s.claim.minus(t.claim), forward: s.forward.minus(t.forward), writes: s.writes - t.writes, lost: s.lost - t.lost}
}

// String gives the means: a create's time past the webhook's round trip is the API server's own
// (decoding, the patch, storage, waiting for a CPU), and the round trip past the handler's time is
// the transport.
func (s serverTimes) String() string {
	return fmt.Sprintf("Pod create in the API server %.2f ms (%d), its wait for the webhook %.2f ms (%d), the operator's handler %.2f ms (%d), a forward to the owner %.2f ms (%d), a claim %.2f ms (%d), claim writes %.0f (lost %.0f)",
		s.post.meanMS(), s.post.count, s.webhook.meanMS(), s.webhook.count, s.handler.meanMS(), s.handler.count,
		s.forward.meanMS(), s.forward.count, s.claim.meanMS(), s.claim.count, s.writes, s.lost)
}

// sampleServerTimes reads the API server's metrics, this process's controller-runtime registry and
// the metrics of the operator's instances.
func sampleServerTimes(ctx context.Context, cfg *rest.Config, instances []*framework.Instance) (serverTimes, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return serverTimes{}, err
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return serverTimes{}, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	apiserver, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return serverTimes{}, fmt.Errorf("parsing the API server's metrics: %w", err)
	}
	own, err := crmetrics.Registry.Gather()
	if err != nil {
		return serverTimes{}, err
	}
	t := serverTimesOf(apiserver, own)
	c := framework.TotalCounts(instances)
	t.claim = sumCount{sum: c.ClaimTime.Seconds(), count: uint64(c.Committed + c.Denied)}
	t.forward = sumCount{sum: c.ForwardTime.Seconds(), count: uint64(c.Forwarded)}
	t.writes, t.lost = float64(c.Writes), float64(c.LostWrites)
	return t, nil
}

// serverTimesOf picks serverTimes out of the API server's metric families and this process's.
func serverTimesOf(apiserver map[string]*dto.MetricFamily, own []*dto.MetricFamily) serverTimes {
	var t serverTimes
	t.post = histogramSum(apiserver["apiserver_request_duration_seconds"],
		map[string]string{"verb": "POST", "resource": "pods", "subresource": ""})
	t.webhook = histogramSum(apiserver["apiserver_admission_webhook_admission_duration_seconds"],
		map[string]string{"name": podWebhookName, "operation": "CREATE", "type": "admit"})
	for _, f := range own {
		if f.GetName() == "controller_runtime_webhook_latency_seconds" {
			t.handler = histogramSum(f, map[string]string{"webhook": podWebhookPath})
		}
	}
	return t
}

// histogramSum adds up the histograms of f whose labels have the values want names; a label
// wanted empty matches a metric without it.
func histogramSum(f *dto.MetricFamily, want map[string]string) sumCount {
	var s sumCount
	if f == nil {
		return s
	}
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if have[k] != v {
				match = false
				break
			}
		}
		if match && m.GetHistogram() != nil {
			s.sum += m.GetHistogram().GetSampleSum()
			s.count += m.GetHistogram().GetSampleCount()
		}
	}
	return s
}
