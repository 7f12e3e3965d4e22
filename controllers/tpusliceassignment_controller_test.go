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
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

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
			r := &TPUSliceAssignmentReconciler{bindSettleTime: tc.settle, clock: clock, seen: newObservations(tc.settle)}
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

// TestSettleWaitPodsAndCap: with reservations a burst adds claims once per block, so the Pods
// created tell that it goes on; a burst that never ends still gets its bookkeeping once every
// settleCapFactor settles (docs/spec.md §8, "Bookkeeping waits for bursts").
func TestSettleWaitPodsAndCap(t *testing.T) {
	const settle = time.Second
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// event is an observation of the slice's claims (claims set) or a Pod of it created, at.
	type event struct {
		at     time.Duration
		claims []string
	}
	type check struct {
		at   time.Duration
		want time.Duration
	}
	every := func(from, to, step time.Duration) []event {
		var out []event
		for at := from; at <= to; at += step {
			out = append(out, event{at: at})
		}
		return out
	}
	cases := map[string]struct {
		events []event
		checks []check
	}{
		"a Pod created restarts the wait, as a new claim does": {
			events: []event{{at: 0, claims: []string{"a"}}, {at: ms(1500)}},
			checks: []check{{at: ms(2000), want: ms(500)}},
		},
		"no Pod and no claim for a settle: write at once": {
			events: []event{{at: 0, claims: []string{"a"}}, {at: ms(1500)}},
			checks: []check{{at: ms(2500), want: 0}},
		},
		"a burst that goes on waits at most five settles from its start": {
			events: append([]event{{at: 0, claims: []string{"a"}}}, every(ms(500), ms(4500), ms(500))...),
			checks: []check{{at: ms(4600), want: ms(400)}},
		},
		"at the cap the bookkeeping runs, and the next wait counts from then": {
			events: append([]event{{at: 0, claims: []string{"a"}}}, every(ms(500), ms(5000), ms(500))...),
			checks: []check{{at: ms(5000), want: 0}, {at: ms(5100), want: ms(900)}},
		},
		"a Pod after a quiet spell starts a new burst, not a capped one": {
			events: []event{{at: 0, claims: []string{"a"}}, {at: ms(10000)}},
			checks: []check{{at: ms(10500), want: ms(500)}},
		},
		"a Pod of a slice never seen records nothing": {
			events: []event{{at: 0}},
			checks: []check{{at: ms(100), want: 0}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := newObservations(settle)
			for _, e := range tc.events {
				if e.claims != nil {
					o.observe(sliceKey, sliceWith(e.claims...), t0.Add(e.at))
				} else {
					o.podCreated(sliceKey, t0.Add(e.at))
				}
			}
			for _, c := range tc.checks {
				if got := o.settleWait(sliceKey, t0.Add(c.at)); got != c.want {
					t.Errorf("settleWait at %v = %v, want %v", c.at, got, c.want)
				}
			}
		})
	}
}

// TestPodCreateEventRestartsTheSettle: the Pod handler records a created Pod of a slice, so the
// slice's bookkeeping waits a settle after it (docs/spec.md §8, "Bookkeeping waits for bursts").
func TestPodCreateEventRestartsTheSettle(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(t0)
	r := &TPUSliceAssignmentReconciler{bindSettleTime: time.Second, clock: clock, seen: newObservations(time.Second)}
	r.seen.observe(sliceKey, sliceWith("a"), t0.Add(-5*time.Second))
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	pod := testutil.MakePod("w-1", sliceKey.Namespace).Label(tpuv1alpha1.SliceLabel, sliceKey.Name).Obj()
	r.podHandler().Create(t.Context(), event.CreateEvent{Object: pod}, q)
	clock.SetTime(t0.Add(300 * time.Millisecond))
	if got, want := r.bindSettle(sliceKey, lifecycle.Decision{}), 700*time.Millisecond; got != want {
		t.Errorf("bindSettle() after a Pod of the slice was created = %v, want %v", got, want)
	}
}

// TestPendingForCountsFromFirstSight: a pending claim's TTL counts from when this reconciler first
// saw it, never from its claimedAt (another machine's clock), and restarts for a claim seen again
// after it was gone.
func TestPendingForCountsFromFirstSight(t *testing.T) {
	o := newObservations(time.Second)
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
	if got := o.settleWait(sliceKey, t0.Add(30*time.Second)); got != 0 {
		t.Errorf("settleWait just after forget = %v, want 0 (nothing left of the slice)", got)
	}
}
