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

package gate

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// TestExcluded: a bound Pod's required anti-affinity term that selects the slice's Pods excludes
// every Node of its Node's domain at the term's key (docs/spec.md §12, "The choice"), as
// kube-scheduler would refuse them there.
func TestExcluded(t *testing.T) {
	nodes := []corev1.Node{
		*testutil.MakeNode("a-0").TPU(v6e, "4x4", "pool-a").Obj(),
		*testutil.MakeNode("a-1").TPU(v6e, "4x4", "pool-a").Obj(),
		*testutil.MakeNode("b-0").TPU(v6e, "4x4", "pool-b").Obj(),
		*testutil.MakeNode("b-1").TPU(v6e, "4x4", "pool-b").Obj(),
	}
	// notOtherSlices is the term the operator injected before issue 24 (and still does with
	// InterPodAffinity): no Pod of another slice, in any namespace, in the Pod's node pool.
	notOtherSlices := corev1.PodAffinityTerm{
		TopologyKey: poolKey, NamespaceSelector: &metav1.LabelSelector{},
		LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: tpuv1alpha1.SliceLabel, Operator: metav1.LabelSelectorOpExists},
			{Key: tpuv1alpha1.SliceLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"old-0"}},
		}},
	}
	withTerm := func(w *testutil.PodWrapper, terms ...corev1.PodAffinityTerm) *testutil.PodWrapper {
		return w.Affinity(&corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: terms}})
	}
	old := func(name, node string, terms ...corev1.PodAffinityTerm) *testutil.PodWrapper {
		return withTerm(testutil.MakePod(name, "old").Label(tpuv1alpha1.SliceLabel, "old-0").NodeName(node), terms...)
	}
	target := worker(0, t0).Label(tpuv1alpha1.SliceLabel, "tpu-0").Obj()
	mine := func(p *corev1.Pod) bool { return p.Namespace == "ml" && p.Labels[tpuv1alpha1.SliceLabel] == "tpu-0" }
	cases := map[string]struct {
		pods   []corev1.Pod
		target *corev1.Pod
		want   map[string]string
	}{
		"a bound Pod of another slice with the inter-pod terms: its whole pool": {
			pods: pods(old("o-1", "a-1", notOtherSlices), old("o-0", "a-0", notOtherSlices)),
			want: map[string]string{"a-0": "old/o-0", "a-1": "old/o-0"},
		},
		"the slice's own Pod: never": {
			pods: pods(withTerm(worker(1, t0).Label(tpuv1alpha1.SliceLabel, "tpu-0").NodeName("a-0"), notOtherSlices)),
		},
		"an unbound, finished or terminating Pod: never": {
			pods: pods(withTerm(testutil.MakePod("o-0", "old").Label(tpuv1alpha1.SliceLabel, "old-0"), notOtherSlices),
				old("o-1", "a-0", notOtherSlices).Phase(corev1.PodSucceeded), old("o-2", "b-0", notOtherSlices).Terminating()),
		},
		"a term at a key its Node lacks applies nowhere": {
			pods: pods(old("o-0", "a-0", corev1.PodAffinityTerm{TopologyKey: "example.com/rack", NamespaceSelector: &metav1.LabelSelector{},
				LabelSelector: &metav1.LabelSelector{}})),
		},
		"a term at the hostname key: that Node alone": {
			pods: pods(old("o-0", "b-1", corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname", NamespaceSelector: &metav1.LabelSelector{},
				LabelSelector: &metav1.LabelSelector{}})),
			want: map[string]string{"b-1": "old/o-0"},
		},
		"a selector that does not match the slice's Pods": {
			pods: pods(old("o-0", "a-0", corev1.PodAffinityTerm{TopologyKey: poolKey, NamespaceSelector: &metav1.LabelSelector{},
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}})),
		},
		"no namespaces named: the term's Pod's own namespace only": {
			pods: pods(old("o-0", "a-0", corev1.PodAffinityTerm{TopologyKey: poolKey, LabelSelector: &metav1.LabelSelector{}})),
		},
		"the slice's namespace named": {
			pods: pods(old("o-0", "a-0", corev1.PodAffinityTerm{TopologyKey: poolKey, Namespaces: []string{"ml"}, LabelSelector: &metav1.LabelSelector{}})),
			want: map[string]string{"a-0": "old/o-0", "a-1": "old/o-0"},
		},
		"a namespace selector on the namespace's name label": {
			pods: pods(old("o-0", "b-0", corev1.PodAffinityTerm{TopologyKey: poolKey, LabelSelector: &metav1.LabelSelector{},
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "ml"}}}),
				old("o-1", "a-0", corev1.PodAffinityTerm{TopologyKey: poolKey, LabelSelector: &metav1.LabelSelector{},
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "other"}}})),
			want: map[string]string{"b-0": "old/o-0", "b-1": "old/o-0"},
		},
		"a nil label selector selects no Pod": {
			pods: pods(old("o-0", "a-0", corev1.PodAffinityTerm{TopologyKey: poolKey, NamespaceSelector: &metav1.LabelSelector{}})),
		},
		"a Node not in the Node list": {
			pods: pods(old("o-0", "gone", notOtherSlices)),
		},
		"no gated Pod to judge for: nothing": {
			pods:   pods(old("o-0", "a-0", notOtherSlices)),
			target: &corev1.Pod{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tgt := target
			if tc.target != nil {
				tgt = nil
			}
			if diff := cmp.Diff(tc.want, Excluded(tc.pods, nodes, mine, tgt), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Excluded (-want,+got):\n%s", diff)
			}
		})
	}
}
