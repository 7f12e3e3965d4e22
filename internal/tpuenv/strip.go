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
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
)

// stripPin removes the operator's pin a copy of a released Pod carries: the annotation
// tpu.ray.io/pinned-node and, when it is the Pod's only required node affinity term, the term
// naming that Node (docs/spec.md §12, "Pinning"). Left in place, the copy would wait for the Node its
// original holds, and the reconciler would read the pin as its own. A term of the user's, or one
// the annotation does not name, is kept.
func stripPin(pod *corev1.Pod) {
	node, ok := pod.Annotations[tpuv1alpha1.PinnedNodeAnnotation]
	if !ok {
		return
	}
	delete(pod.Annotations, tpuv1alpha1.PinnedNodeAnnotation)
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return
	}
	pin := []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
		Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{node},
	}}}}
	if !equality.Semantic.DeepEqual(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, pin) {
		return
	}
	a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = nil
	if a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution == nil {
		a.NodeAffinity = nil
	}
	if a.NodeAffinity == nil && a.PodAffinity == nil && a.PodAntiAffinity == nil {
		pod.Spec.Affinity = nil
	}
}

// Strip undoes Apply(pod, vals, tpuContainers) on a Pod that carries the identity vals although it is
// being created as a new Pod: a manifest copied from a running worker, a template or a dry-run
// output. It removes every value Apply would have set for vals, where the Pod still has exactly
// that value, so that applying the Pod's own new identity afterwards leaves nothing of the old one
// (a defaulted MEGASCALE_SLICE_ID or TPU_PROCESS_ADDRESSES of another slice would otherwise stay,
// since Apply keeps a value the user set). A value the user set to something else is kept.
//
// The operator's scheduling gate is removed whatever vals say: only Apply adds it, and the new
// identity's slice decides again whether the Pod is gated.
//
// vals may be partial (only ClaimToken, when the Pod carries a token but no identity): what it does
// not describe is left alone.
func Strip(pod *corev1.Pod, vals Values, tpuContainers []int) {
	removeGate(pod)
	removeIf(pod.Labels, constants.ReplicaIndexLabel, naming.ReplicaIndexValue(vals.GroupName, vals.ReplicaIndex), vals.GroupName != "")
	removeIf(pod.Labels, tpuv1alpha1.SliceLabel, vals.SliceName, vals.SliceName != "")
	removeIf(pod.Labels, tpuv1alpha1.WorkerIDLabel, itoa(vals.WorkerID), vals.GroupName != "")
	delete(pod.Annotations, tpuv1alpha1.ClaimTokenAnnotation)
	stripPin(pod)
	if vals.GroupName == "" {
		return
	}
	if vals.multiHost() {
		if pod.Spec.Hostname == naming.Hostname(vals.GroupName, vals.ReplicaIndex, vals.WorkerID) {
			pod.Spec.Hostname = ""
		}
		if pod.Spec.Subdomain == vals.Subdomain {
			pod.Spec.Subdomain = ""
		}
		stripAffinity(pod, vals.SliceName)
	}
	// The copy may carry the host lists inline or as references to the slice's ConfigMap,
	// whichever its slice's size and the webhook's flag gave it: both forms are removed.
	inline, inConfigMap := vals, vals
	inline.HostListsInConfigMap, inConfigMap.HostListsInConfigMap = false, true
	forms := []*hostLists{newHostLists(inline, len(tpuContainers)), newHostLists(inConfigMap, len(tpuContainers))}
	for c, i := range tpuContainers {
		container := &pod.Spec.Containers[i]
		// What Apply adds to a container that has only the variables Apply reads.
		var seed []corev1.EnvVar
		if hasEnv(container.Env, constants.EnvMegascaleNumSlices) {
			seed = []corev1.EnvVar{{Name: constants.EnvMegascaleNumSlices}}
		}
		var applied []corev1.EnvVar
		for _, lists := range forms {
			applied = append(applied, applyEnv(slices.Clone(seed), lists, c)...)
		}
		container.Env = slices.DeleteFunc(container.Env, func(e corev1.EnvVar) bool {
			return e.Name != constants.EnvMegascaleNumSlices && slices.ContainsFunc(applied, func(a corev1.EnvVar) bool {
				return equality.Semantic.DeepEqual(a, e)
			})
		})
		if len(container.Env) == 0 {
			container.Env = nil
		}
	}
}

func removeIf(m map[string]string, key, value string, known bool) {
	if known && m[key] == value {
		delete(m, key)
	}
}

// stripAffinity removes the slice affinity terms Apply added for slice, on whatever topologyKey
// they were placed: the terms are recognized by their selectors of this operator's slice label.
// The anti-affinity term of other namespaces is removed whatever namespace it names (a copy from
// another namespace carries that one's), and so is the single anti-affinity term of versions
// before issue 44 (a copy of a Pod they admitted).
func stripAffinity(pod *corev1.Pod, slice string) {
	a := pod.Spec.Affinity
	if a == nil {
		return
	}
	if a.PodAffinity != nil {
		a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = removeTerm(
			a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, sliceAffinityTerm(slice, ""))
	}
	if a.PodAntiAffinity != nil {
		anti := &a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		*anti = removeTerm(*anti, otherSlicesAntiAffinityTerm(slice, ""))
		*anti = removeTerm(*anti, legacyOtherSlicesAntiAffinityTerm(slice, ""))
		*anti = slices.DeleteFunc(*anti, isOtherNamespacesAntiAffinityTerm)
		if len(*anti) == 0 {
			*anti = nil
		}
	}
	if a.PodAffinity != nil && len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 &&
		len(a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
		a.PodAffinity = nil
	}
	if a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 &&
		len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
		a.PodAntiAffinity = nil
	}
	if a.NodeAffinity == nil && a.PodAffinity == nil && a.PodAntiAffinity == nil {
		pod.Spec.Affinity = nil
	}
}

// removeTerm removes the terms equal to term but for their topologyKey.
func removeTerm(terms []corev1.PodAffinityTerm, term corev1.PodAffinityTerm) []corev1.PodAffinityTerm {
	out := slices.DeleteFunc(terms, func(t corev1.PodAffinityTerm) bool {
		t.TopologyKey = ""
		return equality.Semantic.DeepEqual(t, term)
	})
	if len(out) == 0 {
		return nil
	}
	return out
}
