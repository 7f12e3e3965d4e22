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
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// TestClaimEvents checks the Events of the claims a reconcile changed (docs/spec.md §8): one per Pod
// (per claim, on the RayCluster, for releases) up to maxClaimEvents of a kind, one on the
// RayCluster above, so that binding a big slice records a few Events, not one per host.
func TestClaimEvents(t *testing.T) {
	rc := testutil.MakeRayCluster("rc", "ns").UID("uid-rc").Obj()
	slice := testutil.MakeSlice("rc-tpu-0", "ns", "rc", "uid-rc", "tpu", 1, 1024).Obj()
	claims := func(from, n int32) []tpuv1alpha1.WorkerClaim {
		var out []tpuv1alpha1.WorkerClaim
		for id := from; id < from+n; id++ {
			out = append(out, tpuv1alpha1.WorkerClaim{WorkerID: id, Token: fmt.Sprintf("t-%d", id),
				PodName: fmt.Sprintf("w-%d", id), PodUID: types.UID(fmt.Sprintf("uid-%d", id))})
		}
		return out
	}
	releases := func(why string, cs []tpuv1alpha1.WorkerClaim) []lifecycle.Release {
		out := make([]lifecycle.Release, 0, len(cs))
		for _, c := range cs {
			out = append(out, lifecycle.Release{Claim: c, Reason: why})
		}
		return out
	}
	const normal, warning = corev1.EventTypeNormal, corev1.EventTypeWarning
	ev := func(regarding, eventType, reason, note string) testutil.Event {
		return testutil.Event{Regarding: "ns/" + regarding, Type: eventType, Reason: reason, Note: note}
	}
	perPodBound := func(n int32) []testutil.Event {
		out := make([]testutil.Event, 0, n)
		for id := range n {
			out = append(out, ev(fmt.Sprintf("w-%d", id), normal, tpuv1alpha1.ReasonTPUWorkerIDAssigned,
				fmt.Sprintf("TPU worker ID %d of slice rc-tpu-0 (replica 1) is bound to this Pod", id)))
		}
		return out
	}
	cases := map[string]struct {
		d    lifecycle.Decision
		want []testutil.Event
	}{
		"nothing changed: no Event": {},
		"8 claims bound (a replacement, a small slice): an Event on each Pod": {
			d: lifecycle.Decision{Bound: claims(0, 8)}, want: perPodBound(8),
		},
		"9 claims bound: one Event on the RayCluster naming their IDs": {
			d: lifecycle.Decision{Bound: claims(0, 9)},
			want: []testutil.Event{ev("rc", normal, tpuv1alpha1.ReasonTPUWorkerIDAssigned,
				"TPU worker IDs 0-8 of slice rc-tpu-0 (replica 1) are bound to their 9 Pods")},
		},
		"a 1,024-host slice bound in one reconcile, IDs out of order and with gaps: one Event, ranges": {
			d: lifecycle.Decision{Bound: append(append(claims(600, 424), claims(0, 500)...), claims(510, 5)...)},
			want: []testutil.Event{ev("rc", normal, tpuv1alpha1.ReasonTPUWorkerIDAssigned,
				"TPU worker IDs 0-499, 510-514, 600-1023 of slice rc-tpu-0 (replica 1) are bound to their 929 Pods")},
		},
		"9 claims released for one reason and 2 for another: one Event for the first, one per claim for the second": {
			d: lifecycle.Decision{Released: append(releases(lifecycle.ReasonPodGone, claims(0, 9)), releases(lifecycle.ReasonPendingExpired, claims(20, 2))...)},
			want: []testutil.Event{
				ev("rc", normal, tpuv1alpha1.ReasonTPUClaimReleased, "Released TPU worker ID 20 of slice rc-tpu-0: PendingExpired"),
				ev("rc", normal, tpuv1alpha1.ReasonTPUClaimReleased, "Released TPU worker ID 21 of slice rc-tpu-0: PendingExpired"),
				ev("rc", normal, tpuv1alpha1.ReasonTPUClaimReleased, "Released 9 TPU worker IDs of slice rc-tpu-0 (0-8): PodGone"),
			},
		},
		"a slice's 1,024 claims released as its Pods went, two reasons: one Event each": {
			d: lifecycle.Decision{Released: append(releases(lifecycle.ReasonPodTerminating, claims(0, 1000)), releases(lifecycle.ReasonPodGone, claims(1000, 24))...)},
			want: []testutil.Event{
				ev("rc", normal, tpuv1alpha1.ReasonTPUClaimReleased, "Released 24 TPU worker IDs of slice rc-tpu-0 (1000-1023): PodGone"),
				ev("rc", normal, tpuv1alpha1.ReasonTPUClaimReleased, "Released 1000 TPU worker IDs of slice rc-tpu-0 (0-999): PodTerminating"),
			},
		},
		"a slice of 64 Pods that existed before the operator, adopted in one reconcile: one Event": {
			d: lifecycle.Decision{Adopted: claims(0, 64)},
			want: []testutil.Event{ev("rc", normal, tpuv1alpha1.ReasonTPUWorkerAdopted,
				"64 TPU worker IDs of slice rc-tpu-0 (0-63) recorded for the Pods that carried them in their spec before the operator claimed them")},
		},
		"one adopted, one repaired, two bound: an Event on each Pod, bound first": {
			d: lifecycle.Decision{Bound: claims(0, 2), Repaired: claims(5, 1), Adopted: claims(7, 1)},
			want: append(perPodBound(2),
				ev("w-5", warning, tpuv1alpha1.ReasonTPUClaimRepaired, "TPU worker ID 5 of slice rc-tpu-0 claimed again: the Pod was created after its pending claim was released"),
				ev("w-7", normal, tpuv1alpha1.ReasonTPUWorkerAdopted, "TPU worker ID 7 of slice rc-tpu-0 recorded for this Pod, which carried it in its spec before the operator claimed it")),
		},
		"9 repaired: one Warning on the RayCluster": {
			d: lifecycle.Decision{Repaired: claims(0, 9)},
			want: []testutil.Event{ev("rc", warning, tpuv1alpha1.ReasonTPUClaimRepaired,
				"9 TPU worker IDs of slice rc-tpu-0 (0-8) claimed again: their Pods were created after their pending claims were released")},
		},
		"IDs in more than eight ranges: the note names eight and counts the rest": {
			d: lifecycle.Decision{Bound: []tpuv1alpha1.WorkerClaim{
				{WorkerID: 0}, {WorkerID: 2}, {WorkerID: 4}, {WorkerID: 6}, {WorkerID: 8},
				{WorkerID: 10}, {WorkerID: 12}, {WorkerID: 14}, {WorkerID: 16}, {WorkerID: 18},
			}},
			want: []testutil.Event{ev("rc", normal, tpuv1alpha1.ReasonTPUWorkerIDAssigned,
				"TPU worker IDs 0, 2, 4, 6, 8, 10, 12, 14 and 2 more of slice rc-tpu-0 (replica 1) are bound to their 10 Pods")},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			events := claimEvents(rc, slice, tc.d)
			got := make([]testutil.Event, 0, len(events))
			for _, e := range events {
				m, err := meta.Accessor(e.regarding)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, testutil.Event{Regarding: m.GetNamespace() + "/" + m.GetName(), Type: e.eventType, Reason: e.reason, Note: e.note})
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("claimEvents() (-want +got):\n%s", diff)
			}
		})
	}
}
