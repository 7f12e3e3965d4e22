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

package tpuenv_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// TestStrip: Strip undoes Apply, so a copied manifest admitted as a new Pod keeps nothing of the
// identity it was copied with, and keeps everything the user set.
func TestStrip(t *testing.T) {
	userAffinity := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}},
	}}}
	id := func(hosts int32, v7x bool) tpuenv.Values {
		return tpuenv.Values{GroupName: "tpu", ReplicaIndex: 1, WorkerID: 2 % hosts, Hosts: hosts, Subdomain: "rc-headless", V7x: v7x,
			SliceName: "rc-tpu-abc-1", ClaimToken: "t"}
	}
	cases := map[string]struct {
		pod *corev1.Pod
		id  tpuenv.Values
	}{
		"single-host": {
			pod: testutil.MakeWorkerPod("ml", "rc", "uid", "tpu").TPU(4).Topology("tpu-v6e-slice", "2x2").Obj(),
			id:  id(1, false),
		},
		"multi-host with the user's affinity and variables": {
			pod: testutil.MakeWorkerPod("ml", "rc", "uid", "tpu").TPU(4).Topology("tpu-v6e-slice", "4x4").Affinity(userAffinity).
				Env(0, "RAY_X", "1").Obj(),
			id: id(4, false),
		},
		"multislice, with a MEGASCALE_PORT the user set": {
			pod: testutil.MakeWorkerPod("ml", "rc", "uid", "tpu").TPU(4).Topology("tpu-v6e-slice", "4x4").
				Env(0, constants.EnvMegascaleNumSlices, "2").Env(0, constants.EnvMegascalePort, "9999").Obj(),
			id: id(4, false),
		},
		"multi-host of a chosen-domain slice, with the user's gate": {
			pod: testutil.MakeWorkerPod("ml", "rc", "uid", "tpu").TPU(4).Topology("tpu-v6e-slice", "4x4").
				SchedulingGate("example.com/quota").Obj(),
			id: func() tpuenv.Values {
				v := id(4, false)
				v.Placement = tpuv1alpha1.PlacementChosenDomain
				return v
			}(),
		},
		"multi-host with its host lists in the slice's ConfigMap": {
			pod: testutil.MakeWorkerPod("ml", "rc", "uid", "tpu").TPU(4).Topology("tpu-v6e-slice", "4x4").Env(0, "RAY_X", "1").Obj(),
			id: func() tpuenv.Values {
				v := id(4, false)
				v.Topology, v.ChipsPerHost, v.HostListsInConfigMap = []int32{4, 4}, 4, true
				return v
			}(),
		},
		"v7x with its host lists in the slice's ConfigMap": {
			pod: testutil.MakeWorkerPod("ml", "rc", "uid", "tpu").Topology("tpu7x", "2x2x2").TPU(2).Container("second", 2).Obj(),
			id: func() tpuenv.Values {
				v := id(2, true)
				v.Topology, v.ChipsPerHost, v.HostListsInConfigMap = []int32{2, 2, 2}, 2, true
				return v
			}(),
		},
		"v7x, two TPU containers and a CPU sidecar": {
			pod: testutil.MakeWorkerPod("ml", "rc", "uid", "tpu").Topology("tpu7x", "2x2x2").TPU(2).Container("second", 2).
				Container("sidecar", 0).Obj(),
			id: id(2, true),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			want := tc.pod.DeepCopy()
			got := tc.pod.DeepCopy()
			tpuContainers := topology.TPUContainers(&got.Spec)
			tpuenv.Apply(got, tc.id, tpuContainers)
			// The webhook reads a copy's identity from its spec, which does not say where its
			// host lists came from: Strip removes both forms.
			copied := tc.id
			copied.HostListsInConfigMap = false
			tpuenv.Strip(got, copied, tpuContainers)
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Strip(Apply(pod)) (-want pod,+got):\n%s", diff)
			}
		})
	}
	t.Run("a value the user changed after a copy is kept", func(t *testing.T) {
		pod := testutil.MakeWorkerPod("ml", "rc", "uid", "tpu").TPU(4).Topology("tpu-v6e-slice", "4x4").
			Env(0, constants.EnvMegascaleNumSlices, "2").Obj()
		i := id(4, false)
		tpuenv.Apply(pod, i, []int{0})
		for j, e := range pod.Spec.Containers[0].Env {
			if e.Name == constants.EnvMegascaleCoordinator {
				pod.Spec.Containers[0].Env[j].Value = "mine:1234"
			}
		}
		tpuenv.Strip(pod, i, []int{0})
		want := []corev1.EnvVar{{Name: constants.EnvMegascaleNumSlices, Value: "2"}, {Name: constants.EnvMegascaleCoordinator, Value: "mine:1234"}}
		if diff := cmp.Diff(want, pod.Spec.Containers[0].Env); diff != "" {
			t.Errorf("env after Strip (-want,+got):\n%s", diff)
		}
	})
	t.Run("the operator's pin of a copied released Pod goes; a user's own term stays", func(t *testing.T) {
		cases := map[string]struct {
			pod     *corev1.Pod
			wantPin bool
		}{
			"the operator's pin (term and annotation)": {
				pod: testutil.MakeWorkerPod("ml", "rc", "uid", "tpu").TPU(4).Annotation(tpuv1alpha1.ClaimTokenAnnotation, "t").PinnedTo("n-1").Obj(),
			},
			"a user's own term naming one Node": {
				pod:     testutil.MakeWorkerPod("ml", "rc", "uid", "tpu").TPU(4).Annotation(tpuv1alpha1.ClaimTokenAnnotation, "t").OwnNodeTerm("n-1").Obj(),
				wantPin: true,
			},
			"an annotation naming another Node than the term: the term stays": {
				pod: testutil.MakeWorkerPod("ml", "rc", "uid", "tpu").TPU(4).Annotation(tpuv1alpha1.ClaimTokenAnnotation, "t").
					OwnNodeTerm("n-1").Annotation(tpuv1alpha1.PinnedNodeAnnotation, "n-2").Obj(),
				wantPin: true,
			},
		}
		for name, tc := range cases {
			t.Run(name, func(t *testing.T) {
				tpuenv.Strip(tc.pod, tpuenv.Values{ClaimToken: "t"}, []int{0})
				gotPin := tc.pod.Spec.Affinity != nil && tc.pod.Spec.Affinity.NodeAffinity != nil
				if _, note := tc.pod.Annotations[tpuv1alpha1.PinnedNodeAnnotation]; note || gotPin != tc.wantPin {
					t.Errorf("after Strip: affinity %+v, annotations %v; want the term kept %v and no pinned-node annotation",
						tc.pod.Spec.Affinity, tc.pod.Annotations, tc.wantPin)
				}
			})
		}
	})
	t.Run("a token without an identity removes only the token", func(t *testing.T) {
		pod := testutil.MakeWorkerPod("ml", "rc", "uid", "tpu").TPU(4).Annotation(tpuv1alpha1.ClaimTokenAnnotation, "t").
			Label(tpuv1alpha1.SliceLabel, "s").Obj()
		tpuenv.Strip(pod, tpuenv.Values{ClaimToken: "t"}, []int{0})
		if _, ok := pod.Annotations[tpuv1alpha1.ClaimTokenAnnotation]; ok || pod.Labels[tpuv1alpha1.SliceLabel] != "s" {
			t.Errorf("Strip() left annotations %v labels %v", pod.Annotations, pod.Labels)
		}
	})
}
