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

package framework

import (
	"time"

	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
)

// ClaimCounts are what instances' claim metrics (metrics.Metrics) counted: the counters the
// metrics endpoint serves, read directly.
type ClaimCounts struct {
	// Committed and Denied claims (a forwarded claim counts at its owner).
	Committed, Denied int64
	// Attempts are the plans the claims took, Conflicts the writes of a claim that lost a conflict,
	// Writes the API writes and LostWrites those that lost a conflict.
	Attempts, Conflicts, Writes, LostWrites int64
	// Forwarded claims answered by their owner, Fallbacks claimed locally after a failed forward,
	// Served claims committed for a peer.
	Forwarded, Fallbacks, Served int64
	// ClaimTime is the time claims took in the allocators, ForwardTime the time forwarded claims
	// took at their caller (round trip included) and ServeTime at their owner.
	ClaimTime, ForwardTime, ServeTime time.Duration
}

// Counts returns what the instance's claim metrics counted so far.
func (i *Instance) Counts() ClaimCounts {
	m := i.Metrics
	return ClaimCounts{
		Committed:   int64(metrics.Value(m.Results.WithLabelValues(metrics.ClaimCommitted))),
		Denied:      int64(metrics.Value(m.Results.WithLabelValues(metrics.ClaimDenied))),
		Attempts:    int64(metrics.Sum(m.Attempts)),
		Conflicts:   int64(metrics.Sum(m.Conflicts)),
		Writes:      int64(metrics.Value(m.Writes)),
		LostWrites:  int64(metrics.Value(m.LostWrites)),
		Forwarded:   int64(metrics.Value(m.Forwards.WithLabelValues(metrics.ForwardAnswered))),
		Fallbacks:   int64(metrics.Value(m.Forwards.WithLabelValues(metrics.ForwardFallback))),
		Served:      int64(metrics.Value(m.Forwards.WithLabelValues(metrics.ForwardServed))),
		ClaimTime:   seconds(metrics.Sum(m.Duration)),
		ForwardTime: seconds(metrics.LabelSum(m.ForwardDuration, metrics.ForwardAnswered)),
		ServeTime:   seconds(metrics.LabelSum(m.ForwardDuration, metrics.ForwardServed)),
	}
}

// ReservedCount returns how many worker IDs the instance handed out from reservations so far
// (docs/spec.md §3.5).
func (i *Instance) ReservedCount() int64 {
	return int64(metrics.Value(i.Metrics.Reserved))
}

// RenewalCount returns how many reservation renewals the instance wrote so far (docs/spec.md §3.5).
func (i *Instance) RenewalCount() int64 {
	return int64(metrics.Value(i.Metrics.Renewals))
}

// TotalCounts sums the counts of instances.
func TotalCounts(instances []*Instance) ClaimCounts {
	var t ClaimCounts
	for _, inst := range instances {
		t = t.Plus(inst.Counts())
	}
	return t
}

// Plus returns the sum of c and o.
func (c ClaimCounts) Plus(o ClaimCounts) ClaimCounts {
	return ClaimCounts{
		Committed: c.Committed + o.Committed, Denied: c.Denied + o.Denied,
		Attempts: c.Attempts + o.Attempts, Conflicts: c.Conflicts + o.Conflicts,
		Writes: c.Writes + o.Writes, LostWrites: c.LostWrites + o.LostWrites,
		Forwarded: c.Forwarded + o.Forwarded, Fallbacks: c.Fallbacks + o.Fallbacks, Served: c.Served + o.Served,
		ClaimTime: c.ClaimTime + o.ClaimTime, ForwardTime: c.ForwardTime + o.ForwardTime, ServeTime: c.ServeTime + o.ServeTime,
	}
}

// Minus returns c less o: what was counted between two reads.
func (c ClaimCounts) Minus(o ClaimCounts) ClaimCounts {
	return c.Plus(ClaimCounts{
		Committed: -o.Committed, Denied: -o.Denied, Attempts: -o.Attempts, Conflicts: -o.Conflicts,
		Writes: -o.Writes, LostWrites: -o.LostWrites, Forwarded: -o.Forwarded, Fallbacks: -o.Fallbacks, Served: -o.Served,
		ClaimTime: -o.ClaimTime, ForwardTime: -o.ForwardTime, ServeTime: -o.ServeTime,
	})
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
