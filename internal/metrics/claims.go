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

// Outcomes of a claim (Metrics.Results).
const (
	ClaimCommitted = "committed"
	ClaimDenied    = "denied"
)

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
