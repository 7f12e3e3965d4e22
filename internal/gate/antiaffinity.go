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
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
)

// Excluded returns, by Node name, the Pod ("namespace/name") whose required pod anti-affinity
// keeps a Pod like target off that Node (docs/spec.md §12, "The choice"). kube-scheduler refuses
// to bind a Pod into the topology domain of a bound Pod whose required anti-affinity term selects
// it; a Pod pinned there would wait for good. Such Pods run next to ChosenDomain slices after an
// upgrade (slices placed with the inter-pod terms keep them), and a slice of another key (a
// subslice's sub-block inside a node pool) may overlap their domain.
//
// Only the live Pods among pods that are bound, and not own (the slice's own Pods), are read. A
// term applies to target when its label selector matches target's labels and its namespaces do:
// the term's Pod's own namespace when it names none, those it names, and, for a namespace
// selector, one that matches the only label every namespace carries
// (kubernetes.io/metadata.name); an empty namespace selector matches every namespace. A term whose
// topology key the bound Pod's Node lacks applies nowhere, as for the scheduler.
func Excluded(pods []corev1.Pod, nodes []corev1.Node, own func(*corev1.Pod) bool, target *corev1.Pod) map[string]string {
	if target == nil {
		return nil
	}
	type domain struct{ key, value string }
	byName := make(map[string]*corev1.Node, len(nodes))
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	blocked := map[domain]string{}
	for i := range pods {
		p := &pods[i]
		a := p.Spec.Affinity
		if p.Spec.NodeName == "" || a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 ||
			!lifecycle.PodLive(p) || own(p) {
			continue
		}
		node := byName[p.Spec.NodeName]
		if node == nil {
			continue
		}
		for j := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			t := &a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[j]
			v, ok := node.Labels[t.TopologyKey]
			if !ok {
				continue
			}
			d, by := domain{t.TopologyKey, v}, p.Namespace+"/"+p.Name
			if cur, seen := blocked[d]; (seen && cur <= by) || !termSelects(t, p.Namespace, target) {
				continue
			}
			blocked[d] = by // the smallest name, for a message that does not flap
		}
	}
	if len(blocked) == 0 {
		return nil
	}
	out := map[string]string{}
	for i := range nodes {
		n := &nodes[i]
		for d, by := range blocked {
			if v, ok := n.Labels[d.key]; ok && v == d.value {
				if cur, taken := out[n.Name]; !taken || by < cur {
					out[n.Name] = by
				}
			}
		}
	}
	return out
}

// termSelects reports whether anti-affinity term t of a Pod in namespace ns selects target.
func termSelects(t *corev1.PodAffinityTerm, ns string, target *corev1.Pod) bool {
	switch {
	case len(t.Namespaces) > 0 || t.NamespaceSelector != nil:
		in := slices.Contains(t.Namespaces, target.Namespace)
		if !in && t.NamespaceSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(t.NamespaceSelector)
			in = err == nil && sel.Matches(labels.Set{corev1.LabelMetadataName: target.Namespace})
		}
		if !in {
			return false
		}
	case target.Namespace != ns:
		return false
	}
	if t.LabelSelector == nil {
		return false // selects no Pod
	}
	sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
	return err == nil && sel.Matches(labels.Set(target.Labels))
}
