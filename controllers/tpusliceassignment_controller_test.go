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

package controllers

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

var sliceKey = types.NamespacedName{Namespace: "ns", Name: "s"}

// sliceWith is a slice whose claims were all made an hour before t0 by a webhook's clock: the
// reconciler must not care.
func sliceWith(tokens ...string) *tpuv1alpha1.TPUSliceAssignment {
	w := testutil.MakeSlice("s", "ns", "rc", "uid", "tpu", 0, 4)
	for i, token := range tokens {
		w = w.Claim(int32(i), token, "", "") //nolint:gosec // a handful of claims.
	}
	return w.Obj()
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// TestBindSettle: the reconciler's bookkeeping writes (binds, the conditions) wait while a slice is
// receiving claims, so that they do not make the next claim's write conflict; releases and repairs
// never wait. The wait is timed by the reconciler's own clock, from when it saw the claims change.
func TestBindSettle(t *testing.T) {
	bind := lifecycle.Decision{Bound: []tpuv1alpha1.WorkerClaim{{WorkerID: 0}}}
	release := lifecycle.Decision{Destructive: true}
	cases := map[string]struct {
		settle time.Duration
		// seen are the token sets the reconciler observed, at t0 + i seconds.
		seen [][]string
		// rebind makes every second observation the reconciler's own bind write of the same claims.
		rebind bool
		now    time.Duration
		d      lifecycle.Decision
		want   time.Duration
	}{
		"a slice first seen just now waits a whole settle": {
			settle: time.Second, seen: [][]string{{"a"}}, now: 0, d: bind, want: time.Second,
		},
		"a new claim seen restarts the wait": {
			settle: time.Second, seen: [][]string{{"a"}, {"a", "b"}}, now: 1500 * time.Millisecond, d: bind, want: 500 * time.Millisecond,
		},
		"the same claims seen again (bound, re-sorted) do not restart it": {
			settle: time.Second, seen: [][]string{{"a", "b"}, {"a", "b"}, {"a", "b"}}, rebind: true, now: 1500 * time.Millisecond, d: bind, want: 0,
		},
		"nothing new for longer than the settle: write at once": {
			settle: time.Second, seen: [][]string{{"a"}}, now: 3 * time.Second, d: bind, want: 0,
		},
		"releases never wait": {
			settle: time.Second, seen: [][]string{{"a"}}, now: 0, d: release, want: 0,
		},
		"settling turned off": {
			settle: -1, seen: [][]string{{"a"}}, now: 0, d: bind, want: 0,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clock := clocktesting.NewFakePassiveClock(t0)
			r := &TPUSliceAssignmentReconciler{bindSettleTime: tc.settle, clock: clock, seen: newObservations()}
			for i, tokens := range tc.seen {
				slice := sliceWith(tokens...)
				if i%2 == 1 && tc.rebind {
					// The reconciler's own write: the claims bound and sorted the other way round.
					for j := range slice.Status.Claims {
						slice.Status.Claims[j].PodName, slice.Status.Claims[j].PodUID = "p", "u"
					}
					slices.Reverse(slice.Status.Claims)
				}
				r.seen.observe(sliceKey, slice, t0.Add(time.Duration(i)*time.Second))
			}
			clock.SetTime(t0.Add(tc.now))
			if got := r.bindSettle(sliceKey, tc.d); got != tc.want {
				t.Errorf("bindSettle() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPendingForCountsFromFirstSight: a pending claim's TTL counts from when this reconciler first
// saw it, never from its claimedAt (another machine's clock), and restarts for a claim seen again
// after it was gone.
func TestPendingForCountsFromFirstSight(t *testing.T) {
	o := newObservations()
	o.observe(sliceKey, sliceWith("a"), t0)
	pendingFor := o.observe(sliceKey, sliceWith("a", "b"), t0.Add(10*time.Second))
	if got := pendingFor(tpuv1alpha1.WorkerClaim{Token: "a"}); got != 10*time.Second {
		t.Errorf("pendingFor(a) = %v, want 10s (first seen at t0, although claimed an hour earlier)", got)
	}
	if got := pendingFor(tpuv1alpha1.WorkerClaim{Token: "b"}); got != 0 {
		t.Errorf("pendingFor(b) = %v, want 0 (seen just now)", got)
	}
	o.observe(sliceKey, sliceWith("b"), t0.Add(20*time.Second))
	pendingFor = o.observe(sliceKey, sliceWith("a", "b"), t0.Add(30*time.Second))
	if got := pendingFor(tpuv1alpha1.WorkerClaim{Token: "a"}); got != 0 {
		t.Errorf("pendingFor(a) after it was gone = %v, want 0", got)
	}
	o.forget(sliceKey)
	if got := o.changedAt(sliceKey); !got.IsZero() {
		t.Errorf("changedAt after forget = %v, want zero", got)
	}
}
