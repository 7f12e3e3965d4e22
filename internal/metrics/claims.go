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
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Outcomes of a claim (ClaimMetrics.Results).
const (
	ClaimCommitted = "committed"
	ClaimDenied    = "denied"
)

// ClaimMetrics are the metrics of one process's claims: what the allocator and claim forwarding
// did. Production code records into Claims, the set the metrics endpoint serves; tests and the
// benchmark that run several operator instances in one process give each its own set
// (NewClaimMetrics) and read it with Value and Sum, so that there is one set of counters.
type ClaimMetrics struct {
	// Results counts claims by outcome (committed, denied), forwarded claims at their owner.
	Results *prometheus.CounterVec
	// Attempts observes, per committed or denied claim, how many plans it took.
	Attempts prometheus.Histogram
	// Conflicts observes, per claim, how many of its writes lost a resourceVersion conflict.
	Conflicts prometheus.Histogram
	// Duration observes how long a claim took inside the allocator, to its commit or denial.
	Duration prometheus.Histogram
	// Writes counts the API writes claims made (creates, deletes of slices of a deleted RayCluster UID, status
	// updates), LostWrites those that lost a conflict to another writer: with several replicas,
	// the cost of their racing for one slice.
	Writes, LostWrites prometheus.Counter
	// Forwards counts claims sent to, or served for, the replica that owns their worker group, and
	// ForwardDuration how long they took, round trip included (answered, fallback) or at the owner
	// (served).
	Forwards        *prometheus.CounterVec
	ForwardDuration *prometheus.HistogramVec
}

// NewClaimMetrics returns a set of claim metrics registered nowhere.
func NewClaimMetrics() *ClaimMetrics {
	return &ClaimMetrics{
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

func (m *ClaimMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Results, m.Attempts, m.Conflicts, m.Duration, m.Writes, m.LostWrites, m.Forwards, m.ForwardDuration}
}

// Value returns the value of a counter, or the number of observations of a histogram.
func Value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	if h := m.GetHistogram(); h != nil {
		return float64(h.GetSampleCount())
	}
	return m.GetCounter().GetValue()
}

// Sum returns the sum of the observations of a histogram.
func Sum(h prometheus.Metric) float64 {
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		return 0
	}
	return m.GetHistogram().GetSampleSum()
}

// LabelSum returns the sum of the observations of the histogram of v with the given label value.
func LabelSum(v *prometheus.HistogramVec, label string) float64 {
	m, ok := v.WithLabelValues(label).(prometheus.Metric)
	if !ok {
		return 0
	}
	return Sum(m)
}
