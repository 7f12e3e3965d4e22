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

// Package metrics defines the operator's Prometheus metrics, registered with controller-runtime's
// registry and served on the manager's metrics endpoint.
package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
)

const namespace = "tpu_slice_operator"

// Admission results.
const (
	ResultAssigned        = "assigned"
	ResultDryRun          = "dry_run"
	ResultDeniedTransient = "denied_transient"
	ResultDeniedPermanent = "denied_permanent"
	ResultAlreadyAssigned = "already_assigned"
	ResultNotTPUWorker    = "not_tpu_worker"
	ResultNotCreate       = "not_create"
)

// Where claims of Pods that carried an identity but no claim were recorded.
const (
	AdoptedAtAdmission  = "admission"
	AdoptedByReconciler = "reconciler"
)

// Results of claim forwarding between replicas.
const (
	// ForwardAnswered: the owner committed or denied the claim.
	ForwardAnswered = "answered"
	// ForwardFallback: the owner could not be reached and the claim was made locally.
	ForwardFallback = "fallback"
	// ForwardServed: this replica committed a claim a peer forwarded.
	ForwardServed = "served"
)

var (
	// Admissions counts Pod admissions by result.
	Admissions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "pod_admissions_total",
		Help: "Pod admissions handled by the webhook, by result.",
	}, []string{"result"})

	// ClaimsAdopted counts the bound claims recorded for live Pods that carried a TPU identity but
	// no claim, by where they were recorded.
	ClaimsAdopted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "claims_adopted_total",
		Help: "Claims recorded for live Pods that carried a TPU identity in their spec but no claim (created before the operator ran, by hand, or late), by where (admission: before a group's first ID was handed out; reconciler).",
	}, []string{"source"})

	// PodsDeleted counts the live Pods the reconciler deleted because another live Pod of their
	// slice holds their worker ID (docs/spec.md §8 repair).
	PodsDeleted = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Name: "duplicate_pods_deleted_total",
		Help: "Live TPU worker Pods deleted because another live Pod of their slice holds their worker ID (a create that committed after its claim was released, or a second Pod carrying one claim's token).",
	})

	// ClaimsReleased counts claims the reconciler released, by reason.
	ClaimsReleased = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "claims_released_total",
		Help: "Claims released by the reconciler, by reason (PodGone, PodTerminating, PodFinished, PendingExpired).",
	}, []string{"reason"})
)

// Claims is the process's claim metrics, registered with controller-runtime's registry.
var Claims = NewClaimMetrics()

func init() {
	crmetrics.Registry.MustRegister(Admissions, ClaimsAdopted, PodsDeleted, ClaimsReleased)
	crmetrics.Registry.MustRegister(Claims.collectors()...)
}

// sliceCollector reports the slices in the cache by state when scraped.
type sliceCollector struct {
	reader client.Reader
	desc   *prometheus.Desc
}

// RegisterSliceCollector registers a collector of the number of slices by state (ready: every
// host bound; incomplete) read from reader, normally the manager's cache.
func RegisterSliceCollector(reader client.Reader) error {
	return crmetrics.Registry.Register(&sliceCollector{
		reader: reader,
		desc: prometheus.NewDesc(namespace+"_slices", "TPUSliceAssignments by state (ready: every host ID bound to a Pod).",
			[]string{"state"}, nil),
	})
}

func (c *sliceCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *sliceCollector) Collect(ch chan<- prometheus.Metric) {
	var list tpuv1alpha1.TPUSliceAssignmentList
	if err := c.reader.List(context.Background(), &list); err != nil {
		return
	}
	ready := 0
	for i := range list.Items {
		if apimeta.IsStatusConditionTrue(list.Items[i].Status.Conditions, tpuv1alpha1.ConditionReady) {
			ready++
		}
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(ready), "ready")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(len(list.Items)-ready), "incomplete")
}
