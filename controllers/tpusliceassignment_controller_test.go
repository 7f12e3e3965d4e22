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
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// TestBindSettle: the reconciler's bookkeeping writes (binds, the Ready condition) wait while a
// slice is receiving claims, so that they do not make the next claim's write conflict; releases and
// repairs never wait.
func TestBindSettle(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 30, 0, time.UTC)
	slice := func(created time.Time, claimedAt ...time.Time) *tpuv1alpha1.TPUSliceAssignment {
		w := testutil.MakeSlice("s", "ns", "rc", "uid", "tpu", 0, 4)
		for i, at := range claimedAt {
			w = w.Claim(int32(i), "t", "", "", at) //nolint:gosec // a handful of claims.
		}
		s := w.Obj()
		s.CreationTimestamp = metav1.NewTime(created)
		return s
	}
	bind := lifecycle.Decision{Bound: []tpuv1alpha1.WorkerClaim{{WorkerID: 0}}}
	conditionOnly := lifecycle.Decision{}
	release := lifecycle.Decision{Destructive: true}
	cases := []struct {
		name   string
		settle time.Duration
		slice  *tpuv1alpha1.TPUSliceAssignment
		d      lifecycle.Decision
		want   time.Duration
	}{
		{
			name: "binds wait while the newest claim is recent (second precision: counted from its end)", settle: time.Second,
			slice: slice(now.Add(-time.Minute), now.Add(-time.Minute), now), d: bind, want: 2 * time.Second,
		},
		{
			name: "a condition-only write waits as well", settle: time.Second,
			slice: slice(now.Add(-time.Minute), now.Add(-500*time.Millisecond)), d: conditionOnly, want: 1500 * time.Millisecond,
		},
		{
			name: "a slice just created, before its first claim lands, waits from its creation", settle: time.Second,
			slice: slice(now), d: conditionOnly, want: 2 * time.Second,
		},
		{
			name: "nothing recent: write at once", settle: time.Second,
			slice: slice(now.Add(-time.Minute), now.Add(-10*time.Second)), d: bind, want: 0,
		},
		{
			name: "an old slice without claims: write at once", settle: time.Second,
			slice: slice(now.Add(-time.Minute)), d: conditionOnly, want: 0,
		},
		{
			name: "releases never wait", settle: time.Second,
			slice: slice(now, now), d: release, want: 0,
		},
		{
			name: "settling turned off", settle: -1,
			slice: slice(now, now), d: bind, want: 0,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &SliceReconciler{bindSettleTime: tc.settle, now: func() time.Time { return now }}
			if got := r.bindSettle(tc.slice, tc.d); got != tc.want {
				t.Errorf("bindSettle() = %v, want %v", got, tc.want)
			}
		})
	}
}
