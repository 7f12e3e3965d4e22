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

package tpuenv

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
)

// affinityKey returns the topologyKey of the slice of vals terms: vals.AffinityTopologyKey, or
// cloud.google.com/gke-nodepool when it is empty.
func affinityKey(vals Values) string {
	if vals.AffinityTopologyKey != "" {
		return vals.AffinityTopologyKey
	}
	return constants.NodePoolTopologyKey
}

// sliceAffinityTerm places a Pod in the topology domain (by default the node pool) of the other
// Pods of its slice. It names no namespace, so it selects Pods of the Pod's own namespace only: a
// slice's name is unique in its namespace, not in the cluster (docs/spec.md §4).
func sliceAffinityTerm(slice, key string) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{tpuv1alpha1.SliceLabel: slice},
		},
		TopologyKey: key,
	}
}

// otherSlicesAntiAffinityTerm keeps a Pod out of topology domains running Pods of any other slice
// of its own namespace (the term names no namespace).
func otherSlicesAntiAffinityTerm(slice, key string) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: tpuv1alpha1.SliceLabel, Operator: metav1.LabelSelectorOpExists},
				{Key: tpuv1alpha1.SliceLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{slice}},
			},
		},
		TopologyKey: key,
	}
}

// otherNamespacesAntiAffinityTerm keeps a Pod of namespace out of topology domains running Pods of
// any slice of every other namespace, whatever their slice's name: a slice of the same name in
// another namespace is another slice (docs/spec.md §4).
func otherNamespacesAntiAffinityTerm(namespace, key string) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: tpuv1alpha1.SliceLabel, Operator: metav1.LabelSelectorOpExists},
			},
		},
		TopologyKey: key,
		NamespaceSelector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{namespace}},
			},
		},
	}
}

// isOtherNamespacesAntiAffinityTerm reports whether t is an otherNamespacesAntiAffinityTerm of
// some namespace, on any topologyKey: a Pod copied from another namespace carries that one's.
func isOtherNamespacesAntiAffinityTerm(t corev1.PodAffinityTerm) bool {
	if len(t.Namespaces) > 0 || t.NamespaceSelector == nil || len(t.NamespaceSelector.MatchLabels) > 0 ||
		len(t.NamespaceSelector.MatchExpressions) != 1 || len(t.NamespaceSelector.MatchExpressions[0].Values) != 1 {
		return false
	}
	want := otherNamespacesAntiAffinityTerm(t.NamespaceSelector.MatchExpressions[0].Values[0], "")
	t.TopologyKey = ""
	return equality.Semantic.DeepEqual(t, want)
}

// legacyOtherSlicesAntiAffinityTerm is the single anti-affinity term versions before issue 44 gave
// a Pod of slice: every other slice name in every namespace, which let two slices of one name in
// two namespaces share a domain. Strip recognizes it on Pods those versions admitted.
func legacyOtherSlicesAntiAffinityTerm(slice, key string) corev1.PodAffinityTerm {
	t := otherSlicesAntiAffinityTerm(slice, key)
	t.NamespaceSelector = &metav1.LabelSelector{}
	return t
}

// mergeAffinity adds the required slice affinity and anti-affinity terms of vals, on affinityKey(vals),
// to pod, keeping every term the Pod already has and adding none that is already present. With
// vals.NoAffinity it leaves the Pod's affinity untouched. The namespace of the anti-affinity term
// of other namespaces is vals.Namespace, else the Pod's; with neither that term is not added.
func mergeAffinity(pod *corev1.Pod, vals Values) {
	if vals.NoAffinity {
		return
	}
	key := affinityKey(vals)
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	affinity := pod.Spec.Affinity
	if affinity.PodAffinity == nil {
		affinity.PodAffinity = &corev1.PodAffinity{}
	}
	affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = addTerm(
		affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, sliceAffinityTerm(vals.SliceName, key))
	if affinity.PodAntiAffinity == nil {
		affinity.PodAntiAffinity = &corev1.PodAntiAffinity{}
	}
	anti := &affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	*anti = addTerm(*anti, otherSlicesAntiAffinityTerm(vals.SliceName, key))
	if ns := cmp.Or(vals.Namespace, pod.Namespace); ns != "" {
		*anti = addTerm(*anti, otherNamespacesAntiAffinityTerm(ns, key))
	}
}

// addTerm appends term to terms unless a semantically equal term is already there.
func addTerm(terms []corev1.PodAffinityTerm, term corev1.PodAffinityTerm) []corev1.PodAffinityTerm {
	if slices.ContainsFunc(terms, func(t corev1.PodAffinityTerm) bool {
		return equality.Semantic.DeepEqual(t, term)
	}) {
		return terms
	}
	return append(terms, term)
}

// addGate adds the operator's scheduling gate to pod, unless it is already there.
func addGate(pod *corev1.Pod) {
	if !HasGate(pod) {
		pod.Spec.SchedulingGates = append(pod.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: tpuv1alpha1.PlacementSchedulingGate})
	}
}

// HasGate reports whether pod carries the operator's scheduling gate
// (tpuv1alpha1.PlacementSchedulingGate).
func HasGate(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.SchedulingGates, isOurGate)
}

// removeGate removes the operator's scheduling gate from pod, keeping every other gate.
func removeGate(pod *corev1.Pod) {
	pod.Spec.SchedulingGates = slices.DeleteFunc(pod.Spec.SchedulingGates, isOurGate)
	if len(pod.Spec.SchedulingGates) == 0 {
		pod.Spec.SchedulingGates = nil
	}
}

func isOurGate(g corev1.PodSchedulingGate) bool {
	return g.Name == tpuv1alpha1.PlacementSchedulingGate
}
