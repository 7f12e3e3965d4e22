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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

const subblockKey = "cloud.google.com/gce-topology-subblock"

// keyedSliceAffinity is the affinity Apply gives a multi-host Pod of slice that had none, with
// the slice's terms on key.
func keyedSliceAffinity(slice, key string) *corev1.Affinity {
	a := sliceAffinity(slice)
	a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey = key
	for i := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[i].TopologyKey = key
	}
	return a
}

func TestApplyAffinityTopologyKey(t *testing.T) {
	withKey := func(id tpuenv.Values, key string, none bool) tpuenv.Values {
		id.AffinityTopologyKey, id.NoAffinity = key, none
		return id
	}
	userTerm := corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cache"}},
		TopologyKey:   "topology.kubernetes.io/zone",
	}
	user := func() *corev1.Affinity {
		return &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{userTerm}}}
	}
	cases := map[string]struct {
		affinity     *corev1.Affinity
		id           tpuenv.Values
		wantAffinity *corev1.Affinity
	}{
		"the chosen key is on both slice terms": {
			id:           withKey(multiHost(0), subblockKey, false),
			wantAffinity: keyedSliceAffinity("rc-tpu-group-1", subblockKey),
		},
		"no key is the node pool": {
			id:           withKey(multiHost(0), "", false),
			wantAffinity: sliceAffinity("rc-tpu-group-1"),
		},
		"the user's terms are kept and the slice terms added on the chosen key": {
			affinity: user(),
			id:       withKey(multiHost(0), subblockKey, false),
			wantAffinity: func() *corev1.Affinity {
				a := keyedSliceAffinity("rc-tpu-group-1", subblockKey)
				a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append([]corev1.PodAffinityTerm{userTerm},
					a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
				return a
			}(),
		},
		"no affinity leaves a Pod without affinity without one": {
			id: withKey(multiHost(0), "", true),
		},
		"no affinity leaves the user's affinity exactly as it was": {
			affinity:     user(),
			id:           withKey(multiHost(0), subblockKey, true),
			wantAffinity: user(),
		},
		"a single-host Pod gets no affinity whatever the key": {
			id: withKey(singleHost, subblockKey, false),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := workerPod(testGroup, rayWorker().Obj()).Affinity(tc.affinity).Obj()
			tpuenv.Apply(pod, tc.id, []int{0})
			if diff := cmp.Diff(tc.wantAffinity, pod.Spec.Affinity); diff != "" {
				t.Errorf("Affinity after Apply (-want,+got):\n%s", diff)
			}
			again := pod.DeepCopy()
			tpuenv.Apply(again, tc.id, []int{0})
			if diff := cmp.Diff(pod.Spec.Affinity, again.Spec.Affinity); diff != "" {
				t.Errorf("A second Apply changed the affinity (-first,+second):\n%s", diff)
			}
		})
	}
}
