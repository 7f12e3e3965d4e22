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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/version"
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

// Metrics are the operator's collectors: what the Pod webhook, the allocator, claim forwarding and
// the reconciler count. Every component takes its *Metrics in its Options (Default when nil).
// Production code records into Default, the set the metrics endpoint serves; tests and the
// benchmark that run several operator instances in one process give each its own set (New) and
// read it with Value and Sum.
type Metrics struct {
	// Admissions counts Pod admissions by result.
	Admissions *prometheus.CounterVec
	// ClaimsAdopted counts the bound claims recorded for live Pods that carried a TPU identity but
	// no claim, by where they were recorded.
	ClaimsAdopted *prometheus.CounterVec
	// ClaimsReleased counts claims the reconciler released, by reason.
	ClaimsReleased *prometheus.CounterVec
	// PodsDeleted counts the live Pods the reconciler deleted because another live Pod of their
	// slice holds their worker ID (docs/spec.md §8 repair).
	PodsDeleted prometheus.Counter
	// SliceTimeToReady observes, when a slice turns Ready for the first time, how long after its
	// first claim (the slice's creationTimestamp: the webhook creates it with its first claim).
	SliceTimeToReady prometheus.Histogram
	// SliceDegraded counts Degraded transitions to True, by the condition's reason.
	SliceDegraded *prometheus.CounterVec

	// Results counts claims by outcome (committed, denied), forwarded claims at their owner.
	Results *prometheus.CounterVec
	// Attempts observes, per committed or denied claim, how many plans it took.
	Attempts prometheus.Histogram
	// Conflicts observes, per claim, how many of its writes lost a resourceVersion conflict.
	Conflicts prometheus.Histogram
	// Duration observes how long a claim took inside the allocator, to its commit or denial.
	Duration prometheus.Histogram
	// Writes counts the API writes claims made (creates, deletes of slices of a deleted RayCluster
	// UID, status updates), LostWrites those that lost a conflict to another writer: with several
	// replicas, the cost of their racing for one slice.
	Writes, LostWrites prometheus.Counter
	// Reserved counts the worker IDs handed out from a reservation, with no write of their own,
	// GiveBacks the writes that gave a reservation's unhanded IDs back, and Renewals the writes
	// that renewed a reservation off the admission path (docs/spec.md §3.5).
	Reserved, GiveBacks, Renewals prometheus.Counter
	// Forwards counts claims sent to, or served for, the replica that owns their worker group, and
	// ForwardDuration how long they took, round trip included (answered, fallback) or at the owner
	// (served).
	Forwards        *prometheus.CounterVec
	ForwardDuration *prometheus.HistogramVec
}

// Default is the process's metrics, registered with controller-runtime's registry.
var Default = New()

func init() {
	crmetrics.Registry.MustRegister(Default.collectors()...)
	crmetrics.Registry.MustRegister(buildInfo(version.Get()))
}

// buildInfo is the constant gauge tpu_slice_operator_build_info{version,commit,go_version} = 1: which
// release every replica runs, for dashboards and for alerts on a mixed-version rollout.
func buildInfo(info version.Info) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help: "Always 1: the operator's version, the commit it was built from and the Go version that built it, as labels.",
	}, []string{"version", "commit", "go_version"})
	g.WithLabelValues(info.Version, info.Commit, info.GoVersion).Set(1)
	return g
}

// New returns a set of the operator's metrics registered nowhere.
func New() *Metrics {
	return &Metrics{
		Admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "pod_admissions_total",
			Help: "Pod admissions handled by the webhook, by result.",
		}, []string{"result"}),
		ClaimsAdopted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "claims_adopted_total",
			Help: "Claims recorded for live Pods that carried a TPU identity in their spec but no claim (created before the operator ran, by hand, or late), by where (admission: before a group's first ID was handed out; reconciler).",
		}, []string{"source"}),
		ClaimsReleased: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "claims_released_total",
			Help: "Claims released by the reconciler, by reason (PodGone, PodTerminating, PodFinished, PendingExpired).",
		}, []string{"reason"}),
		PodsDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "duplicate_pods_deleted_total",
			Help: "Live TPU worker Pods deleted because another live Pod of their slice holds their worker ID (a create that committed after its claim was released, or a second Pod carrying one claim's token).",
		}),
		SliceTimeToReady: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "slice_time_to_ready_seconds",
			Help:    "Time from a slice's first claim (its creation) to its first Ready condition (every host's Pod Ready on a Ready node).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 13), // 1 s .. ~68 min
		}),
		SliceDegraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "slice_degraded_total",
			Help: "Slices that turned Degraded, by reason (NodeMissing, NodeDeleting, NodeNotReady, NodeTainted, NodeUnschedulable, PodNotReady).",
		}, []string{"reason"}),
		Results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "claims_total",
			Help: "Claims by outcome (committed, denied), counted where they were committed: at the group's owner when forwarded.",
		}, []string{"result"}),
		Attempts: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "claim_attempts",
			Help:    "Plans (attempts) one claim took before it was committed or denied.",
			Buckets: []float64{1, 2, 3, 4, 6, 8, 12, 16},
		}),
		Conflicts: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "claim_conflicts",
			Help:    "Writes of one claim that lost a resourceVersion conflict.",
			Buckets: []float64{0, 1, 2, 3, 4, 6, 8, 12},
		}),
		Duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "claim_duration_seconds",
			Help:    "Time one claim took in the allocator, to its commit or denial.",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 13), // 2 ms .. 8 s
		}),
		Writes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "claim_writes_total",
			Help: "API writes made to commit claims, including writes that lost a conflict.",
		}),
		LostWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "claim_writes_lost_total",
			Help: "Claim writes that lost a resourceVersion conflict (or a create race) to another writer.",
		}),
		Reserved: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "claims_from_reservations_total",
			Help: "Worker IDs handed out from a reservation made by an earlier write, with no API write of their own.",
		}),
		GiveBacks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "reservation_give_backs_total",
			Help: "Writes that gave back the unhanded worker IDs of a reservation whose window ended.",
		}),
		Renewals: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "reservation_renewals_total",
			Help: "Writes that renewed a reservation while its IDs were being handed out, off the admission path: a new block reserved, expired unhanded IDs dropped, IDs still inside their window kept.",
		}),
		Forwards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "claim_forwards_total",
			Help: "Claims forwarded to the replica that owns their worker group (answered, fallback: claimed locally after a failed forward) or served for a peer (served).",
		}, []string{"result"}),
		ForwardDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "claim_forward_duration_seconds",
			Help:    "Time a forwarded claim took: at the caller, round trip included (answered, fallback), or at the owner (served).",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 13),
		}, []string{"result"}),
	}
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Admissions, m.ClaimsAdopted, m.ClaimsReleased, m.PodsDeleted, m.SliceTimeToReady, m.SliceDegraded,
		m.Results, m.Attempts, m.Conflicts, m.Duration, m.Writes, m.LostWrites, m.Reserved, m.GiveBacks, m.Renewals, m.Forwards, m.ForwardDuration}
}

// sliceCollector reports the slices in the cache by state and by condition when scraped, on the
// elected leader only: every replica caches every slice, so gauges from each would count each slice
// once per replica in a sum().
type sliceCollector struct {
	reader     client.Reader
	elected    <-chan struct{}
	desc       *prometheus.Desc
	conditions *prometheus.Desc
}

// sliceConditionTypes are the condition types the slices-by-condition gauge reports.
var sliceConditionTypes = []string{
	tpuv1alpha1.ConditionClaimed, tpuv1alpha1.ConditionScheduled, tpuv1alpha1.ConditionDomainChosen,
	tpuv1alpha1.ConditionPlaced, tpuv1alpha1.ConditionReady, tpuv1alpha1.ConditionDegraded,
	tpuv1alpha1.ConditionConflict, tpuv1alpha1.ConditionMalformed,
}

// The states of tpu_slice_operator_slices.
const (
	// SliceReady: the slice's Ready condition is True (docs/spec.md §11).
	SliceReady = "ready"
	// SliceNotReady: any other slice.
	SliceNotReady = "not_ready"
)

// RegisterSliceCollector registers a collector, reading from reader (normally the manager's
// cache), of the number of slices by state (ready: the Ready condition True; not_ready) and of
// slices by condition type and status. It reports only once elected is closed (the manager's
// Elected(): the leader, or every replica without leader election), so that the gauges of a
// slice come from one replica.
func RegisterSliceCollector(reader client.Reader, elected <-chan struct{}) error {
	return crmetrics.Registry.Register(newSliceCollector(reader, elected))
}

func newSliceCollector(reader client.Reader, elected <-chan struct{}) *sliceCollector {
	return &sliceCollector{
		reader:  reader,
		elected: elected,
		desc: prometheus.NewDesc(namespace+"_slices", "TPUSliceAssignments by state (ready: the Ready condition True; not_ready), reported by the leader only.",
			[]string{"state"}, nil),
		conditions: prometheus.NewDesc(namespace+"_slice_conditions", "TPUSliceAssignments by condition type and status (a slice without the condition counts as Unknown), reported by the leader only.",
			[]string{"type", "status"}, nil),
	}
}

func (c *sliceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desc
	ch <- c.conditions
}

func (c *sliceCollector) Collect(ch chan<- prometheus.Metric) {
	select {
	case <-c.elected:
	default:
		return // not the leader: the leader reports every slice
	}
	var list tpuv1alpha1.TPUSliceAssignmentList
	if err := c.reader.List(context.Background(), &list); err != nil {
		return
	}
	ready := 0
	counts := map[string]map[metav1.ConditionStatus]int{}
	for _, t := range sliceConditionTypes {
		counts[t] = map[metav1.ConditionStatus]int{}
	}
	for i := range list.Items {
		conds := list.Items[i].Status.Conditions
		if apimeta.IsStatusConditionTrue(conds, tpuv1alpha1.ConditionReady) {
			ready++
		}
		for _, t := range sliceConditionTypes {
			status := metav1.ConditionUnknown
			if cond := apimeta.FindStatusCondition(conds, t); cond != nil {
				status = cond.Status
			}
			counts[t][status]++
		}
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(ready), SliceReady)
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(len(list.Items)-ready), SliceNotReady)
	for _, t := range sliceConditionTypes {
		for _, status := range []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown} {
			ch <- prometheus.MustNewConstMetric(c.conditions, prometheus.GaugeValue, float64(counts[t][status]), t, string(status))
		}
	}
}
