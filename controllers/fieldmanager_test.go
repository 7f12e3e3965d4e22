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

	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tombstones"
)

// TestReconcileWritesNameTheFieldManager: every write of the reconciler (a slice re-created for
// the live Pod that holds an ID of it, its status update binding that Pod's claim, the cluster
// label's patch of a slice that lacks it) names the operator's field manager.
func TestReconcileWritesNameTheFieldManager(t *testing.T) {
	rc := testutil.MakeRayCluster("rc", releaseNamespace).UID("uid-rc").TPUGroup("tpu", "tpu-v4-podslice", "2x2x4", 4, 4, 2).Obj()
	unlabeled := testutil.MakeSlice(naming.SliceName("rc", "tpu", 1), releaseNamespace, "rc", "uid-rc", "tpu", 1, 4).SelectorLabels().Obj()
	c := testutil.NewClientBuilder().
		WithObjects(rc, releasePod("p", "t-p", 0).Obj(), unlabeled).
		WithInterceptorFuncs(testutil.RequireFieldManager(t, constants.FieldManager)).
		Build()
	r := &TPUSliceAssignmentReconciler{client: c, reader: c, recorder: &events.FakeRecorder{}, tombstones: tombstones.New(0),
		pendingTTL: time.Minute, bindSettleTime: -1, clock: clocktesting.NewFakePassiveClock(t0), metrics: metrics.New(),
		seen: newObservations(0)}
	for _, name := range []string{releaseSlice, releaseSlice, unlabeled.Name} {
		req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: releaseNamespace, Name: name}}
		if _, err := r.Reconcile(t.Context(), req); err != nil {
			t.Fatalf("Reconcile(%s) error: %v", name, err)
		}
	}

	// The writes happened: the test is not vacuous.
	var slice tpuv1alpha1.TPUSliceAssignment
	if err := c.Get(t.Context(), types.NamespacedName{Namespace: releaseNamespace, Name: releaseSlice}, &slice); err != nil {
		t.Fatalf("the slice was not re-created: %v", err)
	}
	if len(slice.Status.Claims) != 1 || slice.Status.Claims[0].PodName != "p" {
		t.Errorf("re-created slice claims = %+v, want one bound to Pod p", slice.Status.Claims)
	}
	if err := c.Get(t.Context(), types.NamespacedName{Namespace: releaseNamespace, Name: unlabeled.Name}, &slice); err != nil {
		t.Fatal(err)
	}
	if slice.Labels[rayutils.RayClusterLabelKey] != "rc" {
		t.Errorf("slice labels = %v, want %s=rc", slice.Labels, rayutils.RayClusterLabelKey)
	}
}
