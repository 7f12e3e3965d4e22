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
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tombstones"
)

const releaseNamespace = "ml"

// releaseSlice is the name of replica 0 of group tpu of RayCluster rc.
var releaseSlice = naming.SliceName("rc", "tpu", 0)

// releasePod is worker Pod name of replica 0 of group tpu holding worker ID id by its spec, with
// the claim token given and KubeRay's labels, Running; its UID is uid-<name>.
func releasePod(name, token string, id int32) *testutil.PodWrapper {
	return testutil.MakeWorkerPod(releaseNamespace, "rc", "uid-rc", "tpu").
		Named(name).
		UID(types.UID("uid-"+name)).
		TPU(4).Topology("tpu-v4-podslice", "2x2x4").
		TPUIdentity("tpu", 0, id).
		Annotation(tpuv1alpha1.ClaimTokenAnnotation, token).
		Created(t0.Add(-time.Minute)).
		Phase(corev1.PodRunning)
}

// emptyReleaseSlice is replica 0 of group tpu of RayCluster rc, 4 hosts, no claims yet.
func emptyReleaseSlice() *testutil.SliceWrapper {
	return testutil.MakeSlice(releaseSlice, releaseNamespace, "rc", "uid-rc", "tpu", 0, 4)
}

// TestReleaseOnlyOnThePodsOwnFate: a claim is released only when a read of its Pod by name from
// the API server shows the Pod gone (NotFound, or the name now belongs to another UID),
// terminating or finished (docs/spec.md §8). A Pod that left the label-selected cache and the
// live List by KubeRay's labels (`kubectl label pod P ray.io/group-`) is not gone: its pending
// claim is bound to it, its bound claim kept. The informer's DELETED event for such a Pod left a
// tombstone, which names the Pod a pending claim's read by name looks for.
func TestReleaseOnlyOnThePodsOwnFate(t *testing.T) {
	pending := emptyReleaseSlice().Claim(0, "t-p", "", "").Claim(1, "t-q", "q", "uid-q")
	bound := emptyReleaseSlice().Claim(0, "t-p", "p", "uid-p").Claim(1, "t-q", "q", "uid-q")
	q := releasePod("q", "t-q", 1)
	p := releasePod("p", "t-p", 0)
	cases := map[string]struct {
		slice *testutil.SliceWrapper
		// cached are the Pods the label-selected cache holds; live those the API server holds.
		cached, live []*testutil.PodWrapper
		// tombstone is the Pod the informer saw leave (deleted or out of its selector), if any.
		tombstone *corev1.Pod
		// expired makes every pending claim older than the pending TTL.
		expired bool
		// getErr fails the live reads of Pods by name.
		getErr        error
		wantReleased  []lifecycle.Release
		wantBound     []tpuv1alpha1.WorkerClaim
		wantErr       bool
		wantLiveGetsN int32
		// wantRequeue is set when a live Pod outside the label selector holds a claim: no informer
		// event will tell of its fate, so the slice is looked at again after the pending TTL.
		wantRequeue time.Duration
	}{
		"pending, its Pod's ray.io/group label removed: present by name, so bound, not released": {
			slice: pending, cached: []*testutil.PodWrapper{q},
			live:      []*testutil.PodWrapper{q, p.Clone().WithoutLabel(rayutils.RayNodeGroupLabelKey)},
			tombstone: p.Obj(),
			wantBound: []tpuv1alpha1.WorkerClaim{{WorkerID: 0, Token: "t-p", PodName: "p", PodUID: "uid-p"}}, wantLiveGetsN: 1,
			wantRequeue: time.Minute,
		},
		"pending, its Pod's ray.io/cluster label removed: present by name, so bound, not released": {
			slice: pending, cached: []*testutil.PodWrapper{q},
			live:      []*testutil.PodWrapper{q, p.Clone().WithoutLabel(rayutils.RayClusterLabelKey)},
			tombstone: p.Obj(),
			wantBound: []tpuv1alpha1.WorkerClaim{{WorkerID: 0, Token: "t-p", PodName: "p", PodUID: "uid-p"}}, wantLiveGetsN: 1,
			wantRequeue: time.Minute,
		},
		"pending, its Pod's ray.io/node-type label removed: still in the live List, bound": {
			slice: pending, cached: []*testutil.PodWrapper{q},
			live:      []*testutil.PodWrapper{q, p.Clone().WithoutLabel(rayutils.RayNodeTypeLabelKey)},
			tombstone: p.Obj(),
			wantBound: []tpuv1alpha1.WorkerClaim{{WorkerID: 0, Token: "t-p", PodName: "p", PodUID: "uid-p"}},
		},
		"pending, the only tombstone left by a copy of its token in another place: not confirmed gone": {
			slice: pending, cached: []*testutil.PodWrapper{q},
			live:        []*testutil.PodWrapper{q, p.Clone().WithoutLabel(rayutils.RayNodeGroupLabelKey)},
			tombstone:   releasePod("copy", "t-p", 2).Obj(),
			wantRequeue: time.Minute, // the pending claim's TTL
		},
		"pending, its Pod deleted: NotFound by name, released": {
			slice: pending, cached: []*testutil.PodWrapper{q}, live: []*testutil.PodWrapper{q},
			tombstone:    p.Obj(),
			wantReleased: []lifecycle.Release{{Claim: pending.Obj().Status.Claims[0], Reason: lifecycle.ReasonPodGone}}, wantLiveGetsN: 1,
		},
		"pending, its Pod's name now another Pod's (another UID): released": {
			slice: pending, cached: []*testutil.PodWrapper{q},
			live:         []*testutil.PodWrapper{q, releasePod("p", "", 3).UID("uid-other").WithoutLabel(rayutils.RayNodeGroupLabelKey)},
			tombstone:    p.Obj(),
			wantReleased: []lifecycle.Release{{Claim: pending.Obj().Status.Claims[0], Reason: lifecycle.ReasonPodGone}}, wantLiveGetsN: 1,

			wantRequeue: time.Minute, // the other Pod holds ID 3 by its spec outside the selector: adopted
		},
		"pending, its Pod out of the selector and Failed: released as finished": {
			slice: pending, cached: []*testutil.PodWrapper{q},
			live:         []*testutil.PodWrapper{q, p.Clone().WithoutLabel(rayutils.RayNodeGroupLabelKey).Phase(corev1.PodFailed)},
			tombstone:    p.Obj(),
			wantReleased: []lifecycle.Release{{Claim: pending.Obj().Status.Claims[0], Reason: lifecycle.ReasonPodFinished}}, wantLiveGetsN: 1,
		},
		"pending, its Pod out of the selector and terminating: released as terminating": {
			slice: pending, cached: []*testutil.PodWrapper{q},
			live: []*testutil.PodWrapper{q, p.Clone().WithoutLabel(rayutils.RayNodeGroupLabelKey).
				Finalizer("example.com/hold").Terminating()},
			tombstone:    p.Obj(),
			wantReleased: []lifecycle.Release{{Claim: pending.Obj().Status.Claims[0], Reason: lifecycle.ReasonPodTerminating}}, wantLiveGetsN: 1,
		},
		"pending, the read by name fails: nothing released": {
			slice: pending, cached: []*testutil.PodWrapper{q}, live: []*testutil.PodWrapper{q},
			tombstone: p.Obj(), getErr: errors.New("the API server is unavailable"), wantErr: true, wantLiveGetsN: 1,
		},
		"bound, its Pod's ray.io/group label removed: present by name, kept": {
			slice: bound, cached: []*testutil.PodWrapper{q},
			live:      []*testutil.PodWrapper{q, p.Clone().WithoutLabel(rayutils.RayNodeGroupLabelKey)},
			tombstone: p.Obj(), wantLiveGetsN: 1, wantRequeue: time.Minute,
		},
		"bound, its Pod deleted: released": {
			slice: bound, cached: []*testutil.PodWrapper{q}, live: []*testutil.PodWrapper{q},
			tombstone:    p.Obj(),
			wantReleased: []lifecycle.Release{{Claim: bound.Obj().Status.Claims[0], Reason: lifecycle.ReasonPodGone}}, wantLiveGetsN: 1,
		},
		"bound, its name now another Pod's: released": {
			slice: bound, cached: []*testutil.PodWrapper{q},
			live:         []*testutil.PodWrapper{q, releasePod("p", "", 3).UID("uid-other")},
			wantReleased: []lifecycle.Release{{Claim: bound.Obj().Status.Claims[0], Reason: lifecycle.ReasonPodGone}}, wantLiveGetsN: 1,
		},
		"pending past its TTL, its Pod out of the selector and no tombstone (a restart): found by the namespace scan, bound": {
			slice: pending, cached: []*testutil.PodWrapper{q}, expired: true,
			live:      []*testutil.PodWrapper{q, p.Clone().WithoutLabel(rayutils.RayNodeGroupLabelKey).WithoutLabel(rayutils.RayClusterLabelKey)},
			wantBound: []tpuv1alpha1.WorkerClaim{{WorkerID: 0, Token: "t-p", PodName: "p", PodUID: "uid-p"}},
		},
		"pending past its TTL, its Pod never created: released": {
			slice: pending, cached: []*testutil.PodWrapper{q}, live: []*testutil.PodWrapper{q}, expired: true,
			wantReleased: []lifecycle.Release{{Claim: pending.Obj().Status.Claims[0], Reason: lifecycle.ReasonPendingExpired}},
		},
		"nothing left the cache: no live read at all": {
			slice: bound, cached: []*testutil.PodWrapper{q, p}, live: []*testutil.PodWrapper{q, p},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var gets atomic.Int32
			cache := testutil.NewClientBuilder().WithObjects(objects(tc.slice, tc.cached)...).Build()
			live := testutil.NewClientBuilder().WithObjects(objects(tc.slice, tc.live)...).
				WithInterceptorFuncs(interceptor.Funcs{
					Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
						if _, ok := obj.(*corev1.Pod); ok {
							gets.Add(1)
							if tc.getErr != nil {
								return tc.getErr
							}
						}
						return c.Get(ctx, key, obj, opts...)
					},
				}).Build()
			deleted := tombstones.New(0)
			if tc.tombstone != nil {
				deleted.Record(tc.tombstone)
			}
			ttl := time.Minute
			if tc.expired {
				ttl = 0
			}
			r := &TPUSliceAssignmentReconciler{client: cache, reader: live, tombstones: deleted, pendingTTL: ttl,
				clock: clocktesting.NewFakePassiveClock(t0), seen: newObservations(0)}

			_, _, d, err := r.decide(t.Context(), tc.slice.Obj().DeepCopy())
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("decide() error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantReleased, d.Released); diff != "" {
				t.Errorf("released (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantBound, d.Bound); diff != "" {
				t.Errorf("bound (-want +got):\n%s", diff)
			}
			if d.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeue after %v, want %v", d.RequeueAfter, tc.wantRequeue)
			}
			if got := gets.Load(); got != tc.wantLiveGetsN {
				t.Errorf("live Pod reads by name = %d, want %d", got, tc.wantLiveGetsN)
			}
		})
	}
}

func objects(slice *testutil.SliceWrapper, pods []*testutil.PodWrapper) []client.Object {
	objs := make([]client.Object, 0, 1+len(pods))
	objs = append(objs, slice.Obj().DeepCopy())
	for _, p := range pods {
		objs = append(objs, p.Clone().Obj())
	}
	return objs
}
