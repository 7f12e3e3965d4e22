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

package placement

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/boundpods"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tombstones"
)

// The placement tests run the placement reconciler on the fake client: one store stands for the
// API server (the reconciler's live reads and every write), seen by its cached reads through the
// operator's label-selected Pod cache (testutil.WorkerPodCache). The world is the claim
// reconciler's tests' (controllers): replica 0 of group tpu of RayCluster rc in namespace ml,
// 4 hosts; placement needs no claim, but the slices hold them as the claim reconciler leaves them.

// t0 is the tests' clock's start.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// bindSettle is the operator's default bind settle (controllers.DefaultBindSettle).
const bindSettle = time.Second

const releaseNamespace = "ml"

// releaseSlice is the name of replica 0 of group tpu of RayCluster rc.
var releaseSlice = naming.SliceName("rc", "tpu", 0)

// newTestReconciler is the placement reconciler under test: reads through cache, live reads
// through live, the default bind settle, the Leases in tpu-system, the test's clock.
func newTestReconciler(cache client.Client, live client.Reader, events *testutil.EventRecorder, clock clock.PassiveClock) *Reconciler {
	return New(cache, live, events, Options{Tombstones: tombstones.New(0), BindSettle: bindSettle, LeaseNamespace: "tpu-system",
		Clock: clock, Metrics: metrics.New()})
}

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

// reconcileSlice is replica of group tpu of RayCluster rc (UID uid-rc), 4 hosts, labeled as the
// webhook creates it; no claims yet.
func reconcileSlice(replica int32) *testutil.SliceWrapper {
	return testutil.MakeSlice(naming.SliceName("rc", "tpu", replica), releaseNamespace, "rc", "uid-rc", "tpu", replica, 4).
		SelectorLabels()
}

// reconcileCluster is RayCluster rc (UID uid-rc), whose group tpu asks for 2 slices of 4 hosts.
func reconcileCluster() *testutil.RayClusterWrapper {
	return testutil.MakeRayCluster("rc", releaseNamespace).UID("uid-rc").TPUGroup("tpu", "tpu-v4-podslice", "2x2x4", 4, 4, 2)
}

// chosenDomain returns a copy of slice placed by a chosen domain on the node-pool key.
func chosenDomain(slice *testutil.SliceWrapper) *testutil.SliceWrapper {
	return (&testutil.SliceWrapper{TPUSliceAssignment: *slice.Obj().DeepCopy()}).Placement(tpuv1alpha1.PlacementChosenDomain, constants.NodePoolTopologyKey)
}

// trackerOf is the bound Pods' tracker as its informer fills it from the store: every Pod bound
// to a Node, whatever created it, trimmed as the cache trims it.
func trackerOf(t *testing.T, store client.Client) *boundpods.Tracker {
	t.Helper()
	var pods corev1.PodList
	if err := store.List(t.Context(), &pods); err != nil {
		t.Fatal(err)
	}
	tr := boundpods.NewTracker()
	h := tr.Handler()
	for i := range pods.Items {
		if pods.Items[i].Spec.NodeName == "" {
			continue
		}
		trimmed, err := boundpods.Trim(&pods.Items[i])
		if err != nil {
			t.Fatal(err)
		}
		h.OnAdd(trimmed, true)
	}
	return tr
}
