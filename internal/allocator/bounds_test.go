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

package allocator

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
)

// TestClaimReplicaIndexBeyondDesired: KubeRay's replica index is a hint anyone can write, so an
// index at or above the group's desired replicas opens no slice (docs/spec.md §10). The cache may
// predate a scale-up KubeRay already acts on: the live RayCluster decides, before anything is
// written.
func TestClaimReplicaIndexBeyondDesired(t *testing.T) {
	errUnavailable := errors.New("the API server is unavailable")
	cases := map[string]struct {
		// cached and live are the desired replicas the cache and the API server show.
		cached, live int32
		liveErr      error
		replica      int32
		want         Assignment
		wantErr      error
		wantSlices   int
	}{
		"an index below the cached desired replicas is placed without a live read": {
			cached: 2, live: 2, replica: 1,
			want: Assignment{SliceName: sliceName(1), Replica: 1, WorkerID: 3}, wantSlices: 1,
		},
		"an index the live RayCluster does not ask for either is a permanent denial": {
			cached: 1, live: 1, replica: 39,
			wantErr: &DeniedError{Message: claims.BeyondDesiredMessage(39, 1)},
		},
		"a scale-up the cache has not seen yet: the live RayCluster asks for the index, and it is placed": {
			cached: 1, live: 3, replica: 2,
			want: Assignment{SliceName: sliceName(2), Replica: 2, WorkerID: 3}, wantSlices: 1,
		},
		"a live read that fails is a transient denial": {
			cached: 1, live: 3, liveErr: errUnavailable, replica: 2,
			wantErr: &DeniedError{Transient: true, Message: "reading RayCluster " + testNS + "/" + clusterName + ": " + errUnavailable.Error()},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			live := newClient(t, interceptor.Funcs{}, rayCluster(tc.live))
			cache := newClient(t, interceptor.Funcs{}, rayCluster(tc.cached))
			reader := client.Reader(live)
			if tc.liveErr != nil {
				reader = interceptor.NewClient(live, interceptor.Funcs{
					Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
						return tc.liveErr
					},
				})
			}
			a := newAllocator(staleCache(live, cache), reader, timeout)

			got, err := a.Claim(t.Context(), indexed(request(4), tc.replica, 3, "tpu-xk2p9"))

			if diff := cmp.Diff(tc.wantErr, err); diff != "" {
				t.Errorf("Claim() error (-want,+got):\n%s", diff)
			}
			want := tc.want
			want.Token = got.Token
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Claim() (-want,+got):\n%s", diff)
			}
			var slices tpuv1alpha1.TPUSliceAssignmentList
			if err := live.List(t.Context(), &slices); err != nil {
				t.Fatal(err)
			}
			if len(slices.Items) != tc.wantSlices {
				t.Errorf("%d slices written, want %d", len(slices.Items), tc.wantSlices)
			}
		})
	}
}
