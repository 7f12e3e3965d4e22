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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// ourGate is the scheduling gate Apply adds to a Pod of a ChosenDomain slice.
var ourGate = corev1.PodSchedulingGate{Name: tpuv1alpha1.PlacementSchedulingGate}

// TestApplyPlacement: a multi-host Pod of a ChosenDomain slice gets the operator's scheduling gate
// and no slice affinity; any other placement, the legacy "" included, gets today's terms and no
// gate (docs/spec.md §4). Applying twice changes nothing more.
func TestApplyPlacement(t *testing.T) {
	placed := func(id tpuenv.Values, p tpuv1alpha1.SlicePlacement) tpuenv.Values {
		id.Placement = p
		return id
	}
	userGate := corev1.PodSchedulingGate{Name: "example.com/quota"}
	userAffinity := &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cache"}}, TopologyKey: "topology.kubernetes.io/zone",
	}}}}
	cases := map[string]struct {
		gates        []corev1.PodSchedulingGate
		affinity     *corev1.Affinity
		id           tpuenv.Values
		wantGates    []corev1.PodSchedulingGate
		wantAffinity *corev1.Affinity
	}{
		"a chosen-domain slice's Pod is gated without inter-pod terms": {
			id:        placed(multiHost(0), tpuv1alpha1.PlacementChosenDomain),
			wantGates: []corev1.PodSchedulingGate{ourGate},
		},
		"a chosen-domain slice's Pod keeps the user's gates and affinity": {
			gates: []corev1.PodSchedulingGate{userGate}, affinity: userAffinity,
			id:        placed(multiHost(0), tpuv1alpha1.PlacementChosenDomain),
			wantGates: []corev1.PodSchedulingGate{userGate, ourGate}, wantAffinity: userAffinity,
		},
		"a Pod that already carries the gate gets it once": {
			gates:     []corev1.PodSchedulingGate{ourGate},
			id:        placed(multiHost(0), tpuv1alpha1.PlacementChosenDomain),
			wantGates: []corev1.PodSchedulingGate{ourGate},
		},
		"an inter-pod affinity slice's Pod gets today's terms and no gate": {
			id:           placed(multiHost(0), tpuv1alpha1.PlacementInterPodAffinity),
			wantAffinity: sliceAffinity("rc-tpu-group-1"),
		},
		"a legacy slice without placement keeps today's terms": {
			id:           multiHost(0),
			wantAffinity: sliceAffinity("rc-tpu-group-1"),
		},
		"a Pod of an inter-pod affinity slice that brings the operator's gate loses it, keeping the user's": {
			gates:        []corev1.PodSchedulingGate{userGate, ourGate},
			id:           placed(multiHost(0), tpuv1alpha1.PlacementInterPodAffinity),
			wantGates:    []corev1.PodSchedulingGate{userGate},
			wantAffinity: sliceAffinity("rc-tpu-group-1"),
		},
		"a single-host Pod that brings the operator's gate loses it": {
			gates: []corev1.PodSchedulingGate{ourGate},
			id:    placed(singleHost, tpuv1alpha1.PlacementChosenDomain),
		},
		"a single-host Pod is never gated": {
			id: placed(singleHost, tpuv1alpha1.PlacementChosenDomain),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := workerPod(testGroup, rayWorker().Obj()).Affinity(tc.affinity).Obj()
			pod.Spec.SchedulingGates = tc.gates

			tpuenv.Apply(pod, tc.id, []int{0})

			if diff := cmp.Diff(tc.wantGates, pod.Spec.SchedulingGates, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Scheduling gates after Apply (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantAffinity, pod.Spec.Affinity); diff != "" {
				t.Errorf("Affinity after Apply (-want,+got):\n%s", diff)
			}
			if got, want := tpuenv.HasGate(pod), len(tc.wantGates) > 0 && tc.wantGates[len(tc.wantGates)-1] == ourGate; got != want {
				t.Errorf("HasGate() = %t, want %t", got, want)
			}
			again := pod.DeepCopy()
			tpuenv.Apply(again, tc.id, []int{0})
			if diff := cmp.Diff(pod, again); diff != "" {
				t.Errorf("A second Apply changed the Pod (-first,+second):\n%s", diff)
			}
		})
	}
}

// TestStripRemovesTheGate: a copy of a gated Pod loses the operator's gate, whatever identity it
// was copied with, and keeps the user's.
func TestStripRemovesTheGate(t *testing.T) {
	userGate := corev1.PodSchedulingGate{Name: "example.com/quota"}
	cases := map[string]struct {
		gates     []corev1.PodSchedulingGate
		id        tpuenv.Values
		wantGates []corev1.PodSchedulingGate
	}{
		"a copy of a gated Pod": {
			gates: []corev1.PodSchedulingGate{ourGate}, id: multiHost(0),
		},
		"a copy carrying only a claim token": {
			gates: []corev1.PodSchedulingGate{ourGate}, id: tpuenv.Values{ClaimToken: "t"},
		},
		"the user's gate stays": {
			gates: []corev1.PodSchedulingGate{userGate, ourGate}, id: multiHost(0),
			wantGates: []corev1.PodSchedulingGate{userGate},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := workerPod(testGroup, rayWorker().Obj()).Obj()
			pod.Spec.SchedulingGates = tc.gates

			tpuenv.Strip(pod, tc.id, []int{0})

			if diff := cmp.Diff(tc.wantGates, pod.Spec.SchedulingGates); diff != "" {
				t.Errorf("Scheduling gates after Strip (-want,+got):\n%s", diff)
			}
		})
	}
}
