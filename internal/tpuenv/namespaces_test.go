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
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ray-tpu/tpu-slice-operator/internal/gate"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// TestSliceTermsNamespaces: a slice's name is unique in its namespace only, so the slice terms
// are scoped by namespace (docs/spec.md §4): the affinity names no namespace (the Pod's own), the
// anti-affinity is one term for the other slices of the own namespace and one for every slice of
// every other namespace.
func TestSliceTermsNamespaces(t *testing.T) {
	cases := map[string]struct {
		podNamespace, valsNamespace string
		wantAffinity                *corev1.Affinity
	}{
		"the namespace of the values (admission may see a Pod without one)": {
			valsNamespace: "team-a",
			wantAffinity: &corev1.Affinity{
				PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
					sliceAffinityTerm("rc-tpu-group-1"),
				}},
				PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
					otherSlicesTerm("rc-tpu-group-1"), otherNamespacesTerm("team-a"),
				}},
			},
		},
		"the values' namespace over the Pod's": {
			podNamespace: "ml", valsNamespace: "team-a",
			wantAffinity: &corev1.Affinity{
				PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
					sliceAffinityTerm("rc-tpu-group-1"),
				}},
				PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
					otherSlicesTerm("rc-tpu-group-1"), otherNamespacesTerm("team-a"),
				}},
			},
		},
		"the Pod's namespace when the values have none": {
			podNamespace: "team-b",
			wantAffinity: &corev1.Affinity{
				PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
					sliceAffinityTerm("rc-tpu-group-1"),
				}},
				PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
					otherSlicesTerm("rc-tpu-group-1"), otherNamespacesTerm("team-b"),
				}},
			},
		},
		"no namespace at all: no term against other namespaces rather than one against the own": {
			wantAffinity: &corev1.Affinity{
				PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
					sliceAffinityTerm("rc-tpu-group-1"),
				}},
				PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
					otherSlicesTerm("rc-tpu-group-1"),
				}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := testutil.MakeWorkerPod(tc.podNamespace, "rc", "uid", testGroup).TPU(4).Obj()
			vals := multiHost(0)
			vals.Namespace = tc.valsNamespace
			tpuenv.Apply(pod, vals, []int{0})
			if diff := cmp.Diff(tc.wantAffinity, pod.Spec.Affinity); diff != "" {
				t.Errorf("affinity (-want,+got):\n%s", diff)
			}
			// Applying again adds nothing (the webhook's re-invocation).
			again := pod.DeepCopy()
			tpuenv.Apply(again, vals, []int{0})
			if diff := cmp.Diff(pod.Spec.Affinity, again.Spec.Affinity); diff != "" {
				t.Errorf("affinity after a second Apply (-first,+second):\n%s", diff)
			}
		})
	}
}

// TestSameNamedSlicesOfTwoNamespacesApart: two RayClusters of one name in two namespaces have
// slices of one name. With one of them bound in pool-a, the other's Pods must be refused there
// and the own slice's admitted, whichever Pod's terms the scheduler reads: the bound Pod's
// (gate.Excluded, the scheduler's rule for existing Pods' required anti-affinity) or the incoming
// Pod's own (the same rule with the roles swapped).
func TestSameNamedSlicesOfTwoNamespacesApart(t *testing.T) {
	nodes := []corev1.Node{
		*testutil.MakeNode("a-0").TPU("tpu-v6e-slice", "4x4", "pool-a").Obj(),
		*testutil.MakeNode("b-0").TPU("tpu-v6e-slice", "4x4", "pool-b").Obj(),
	}
	// worker is host w of replica 1 of group testGroup of RayCluster rc in namespace ns, as the
	// webhook admits it, bound to node when node is not "".
	worker := func(ns string, w int32, slice, node string) *corev1.Pod {
		pod := testutil.MakeWorkerPod(ns, "rc", types.UID("uid-"+ns), testGroup).TPU(4).Named(fmt.Sprintf("%s-%s-%d", ns, slice, w)).Obj()
		vals := multiHost(w)
		vals.SliceName, vals.Namespace = slice, ns
		tpuenv.Apply(pod, vals, []int{0})
		pod.Spec.NodeName = node
		return pod
	}
	never := func(*corev1.Pod) bool { return false }
	bound := worker("team-a", 0, "rc-tpu-group-1", "a-0")
	cases := map[string]struct {
		incoming    *corev1.Pod
		wantRefused bool
	}{
		"the same slice's next host joins its pool": {
			incoming: worker("team-a", 1, "rc-tpu-group-1", ""),
		},
		"another slice of the same namespace is refused": {
			incoming:    worker("team-a", 0, "rc-tpu-group-2", ""),
			wantRefused: true,
		},
		"the slice of the same name in another namespace is refused": {
			incoming:    worker("team-b", 0, "rc-tpu-group-1", ""),
			wantRefused: true,
		},
		"another slice of another namespace is refused": {
			incoming:    worker("team-b", 0, "rc-tpu-group-2", ""),
			wantRefused: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var want map[string]string
			if tc.wantRefused {
				want = map[string]string{"a-0": "team-a/" + bound.Name}
			}
			// The bound Pod's terms against the incoming Pod.
			if diff := cmp.Diff(want, gate.Excluded([]corev1.Pod{*bound}, nodes, never, tc.incoming)); diff != "" {
				t.Errorf("Nodes the bound Pod's anti-affinity refuses (-want,+got):\n%s", diff)
			}
			// The incoming Pod's own terms against the bound Pod: placed where the bound Pod is,
			// the incoming Pod's anti-affinity selects it exactly when it refuses the domain.
			swapped := tc.incoming.DeepCopy()
			swapped.Spec.NodeName = "a-0"
			var wantSwapped map[string]string
			if tc.wantRefused {
				wantSwapped = map[string]string{"a-0": swapped.Namespace + "/" + swapped.Name}
			}
			if diff := cmp.Diff(wantSwapped, gate.Excluded([]corev1.Pod{*swapped}, nodes, never, bound)); diff != "" {
				t.Errorf("Nodes the incoming Pod's anti-affinity refuses (-want,+got):\n%s", diff)
			}
			// The incoming Pod's affinity selects the bound Pod only in its own namespace and slice.
			term := tc.incoming.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
			wantSelects := !tc.wantRefused
			if got := affinitySelects(term, tc.incoming.Namespace, bound); got != wantSelects {
				t.Errorf("the incoming Pod's slice affinity selects the bound Pod: %v, want %v", got, wantSelects)
			}
		})
	}
}

// affinitySelects reports whether required pod affinity term t of a Pod of namespace ns selects
// pod, by the API's rule for a term that names no namespace and no namespace selector (the Pod's
// own namespace only); the operator's affinity term must be of that kind.
func affinitySelects(t corev1.PodAffinityTerm, ns string, pod *corev1.Pod) bool {
	if len(t.Namespaces) > 0 || t.NamespaceSelector != nil {
		return true // would reach beyond the own namespace: the test fails on it unless wanted
	}
	sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
	return err == nil && pod.Namespace == ns && sel.Matches(labels.Set(pod.Labels))
}

// TestStripEveryAntiAffinityForm: a copied manifest loses the anti-affinity terms of every form
// the operator ever added (the single term of versions before issue 44; the term of other
// namespaces naming the namespace it was copied from) and keeps a user's term that only looks
// like one.
func TestStripEveryAntiAffinityForm(t *testing.T) {
	userLookalike := otherNamespacesTerm("team-a")
	userLookalike.NamespaceSelector.MatchExpressions[0].Values = []string{"team-a", "team-b"}
	cases := map[string]struct {
		anti     []corev1.PodAffinityTerm
		wantAnti []corev1.PodAffinityTerm
	}{
		"today's terms": {
			anti: []corev1.PodAffinityTerm{otherSlicesTerm("rc-tpu-group-1"), otherNamespacesTerm(testNamespace)},
		},
		"the single term of a Pod an older version admitted": {
			anti: []corev1.PodAffinityTerm{legacyOtherSlicesTerm("rc-tpu-group-1")},
		},
		"the term of other namespaces copied from another namespace": {
			anti: []corev1.PodAffinityTerm{otherSlicesTerm("rc-tpu-group-1"), otherNamespacesTerm("team-b")},
		},
		"a user's term that only looks like the operator's is kept": {
			anti:     []corev1.PodAffinityTerm{otherSlicesTerm("rc-tpu-group-1"), userLookalike, otherNamespacesTerm(testNamespace)},
			wantAnti: []corev1.PodAffinityTerm{userLookalike},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := testutil.MakeWorkerPod(testNamespace, "rc", "uid", testGroup).TPU(4).Affinity(&corev1.Affinity{
				PodAffinity:     &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{sliceAffinityTerm("rc-tpu-group-1")}},
				PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: tc.anti},
			}).Obj()
			tpuenv.Strip(pod, multiHost(0), []int{0})
			var got []corev1.PodAffinityTerm
			if a := pod.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
				got = a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
			}
			if diff := cmp.Diff(tc.wantAnti, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("anti-affinity after Strip (-want,+got):\n%s", diff)
			}
		})
	}
}
