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

package identity_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
)

// worker is a v4 2x2x4 worker Pod of group tpu-group of RayCluster rc (owner uid-rc), 4 chips.
func worker() *testutil.PodWrapper {
	return testutil.MakeWorkerPod("ml", "rc", "uid-rc", "tpu-group").TPU(4).Topology("tpu-v4-podslice", "2x2x4")
}

func TestFromPod(t *testing.T) {
	v7x := testutil.MakeWorkerPod("ml", "rc", "uid-rc", "g").Topology("tpu7x", "2x2x2").TPU(2).Container("second", 2).
		Env(0, constants.EnvWorkerID, "6").Env(0, constants.EnvName, "g-1").Env(1, constants.EnvWorkerID, "7").Env(1, constants.EnvName, "g-1")
	withoutOwner := worker().TPUIdentity("tpu-group", 0, 1).Obj()
	withoutOwner.OwnerReferences = nil
	cases := map[string]struct {
		pod    *corev1.Pod
		want   identity.Identity
		wantOK bool
	}{
		"the identity the webhook writes: the group may contain dashes": {
			pod:    worker().TPUIdentity("tpu-group", 3, 2).Obj(),
			want:   identity.Identity{Cluster: "rc", ClusterUID: "uid-rc", Group: "tpu-group", Replica: 3, WorkerID: 2, Hosts: 4},
			wantOK: true,
		},
		"labels play no part": {
			pod: worker().TPUIdentity("tpu-group", 0, 1).Label(tpuv1alpha1.SliceLabel, "other").Label(tpuv1alpha1.WorkerIDLabel, "3").
				WithoutLabel("ray.io/group").Obj(),
			want:   identity.Identity{Cluster: "rc", ClusterUID: "uid-rc", Group: "tpu-group", Replica: 0, WorkerID: 1, Hosts: 4},
			wantOK: true,
		},
		"without an owner the cluster comes from the ray.io/cluster label, with no UID": {
			pod:    withoutOwner,
			want:   identity.Identity{Cluster: "rc", Group: "tpu-group", WorkerID: 1, Hosts: 4},
			wantOK: true,
		},
		"v7x with two containers: the host is the first container's ID divided by two": {
			pod:    v7x.Obj(),
			want:   identity.Identity{Cluster: "rc", ClusterUID: "uid-rc", Group: "g", Replica: 1, WorkerID: 3, Hosts: 2},
			wantOK: true,
		},
		"a topology that gives no slice still has an identity, with no host count": {
			pod:    worker().Topology("tpu-v4-podslice", "3x3x3").TPUIdentity("tpu-group", 0, 0).Obj(),
			want:   identity.Identity{Cluster: "rc", ClusterUID: "uid-rc", Group: "tpu-group", Hosts: 0},
			wantOK: true,
		},
		"no TPU container":                     {pod: testutil.MakeWorkerPod("ml", "rc", "uid-rc", "g").Env(0, constants.EnvWorkerID, "0").Env(0, constants.EnvName, "g-0").Obj()},
		"no TPU_WORKER_ID":                     {pod: worker().Env(0, constants.EnvName, "tpu-group-0").Obj()},
		"no TPU_NAME":                          {pod: worker().Env(0, constants.EnvWorkerID, "0").Obj()},
		"TPU_WORKER_ID from a field reference": {pod: worker().EnvFieldRef(0, constants.EnvWorkerID, "metadata.name").Env(0, constants.EnvName, "g-0").Obj()},
		"a negative worker ID":                 {pod: worker().Env(0, constants.EnvWorkerID, "-1").Env(0, constants.EnvName, "g-0").Obj()},
		"a name without a replica":             {pod: worker().Env(0, constants.EnvWorkerID, "0").Env(0, constants.EnvName, "tpu").Obj()},
		"a name ending in a dash":              {pod: worker().Env(0, constants.EnvWorkerID, "0").Env(0, constants.EnvName, "tpu-").Obj()},
		"a signed replica":                     {pod: worker().Env(0, constants.EnvWorkerID, "0").Env(0, constants.EnvName, "tpu-+1").Obj()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := identity.FromPod(tc.pod)
			if ok != tc.wantOK {
				t.Fatalf("FromPod() ok = %t, want %t", ok, tc.wantOK)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("FromPod() (-want,+got):\n%s", diff)
			}
			slice, err := topology.FromPod(tc.pod.Annotations, &tc.pod.Spec)
			if err != nil {
				return
			}
			parsed, parsedOK := identity.FromParsedPod(tc.pod, slice)
			if parsedOK != tc.wantOK {
				t.Fatalf("FromParsedPod() ok = %t, want %t", parsedOK, tc.wantOK)
			}
			if diff := cmp.Diff(tc.want, parsed); diff != "" {
				t.Errorf("FromParsedPod() (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestIndexValues(t *testing.T) {
	pod := worker().TPUIdentity("tpu-group", 2, 0).Annotation(tpuv1alpha1.ClaimTokenAnnotation, "t1").Obj()
	if diff := cmp.Diff([]string{naming.SliceName("rc", "tpu-group", 2)}, identity.SliceIndexValue(pod)); diff != "" {
		t.Errorf("SliceIndexValue() (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"t1"}, identity.TokenIndexValue(pod)); diff != "" {
		t.Errorf("TokenIndexValue() (-want,+got):\n%s", diff)
	}
	plain := worker().Obj()
	if got := identity.SliceIndexValue(plain); got != nil {
		t.Errorf("SliceIndexValue() of a Pod without identity = %v, want none", got)
	}
	if got := identity.TokenIndexValue(plain); got != nil {
		t.Errorf("TokenIndexValue() of a Pod without token = %v, want none", got)
	}
}
