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
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// Pinning (docs/spec.md §12): a released Pod gets, next to the domain's nodeSelector, a required
// node affinity on one usable Node of the domain by name. kube-scheduler then looks at that one
// Node (its NodeAffinity PreFilter narrows the Nodes to those a metadata.name term names) instead
// of filtering every Node of the cluster for the H of one pool: the scheduler's cost per Pod no
// longer grows with the Nodes. The Pods of a slice are pinned to distinct Nodes, so that none
// waits for a Node another of them took.

// PinTerm is the node selector term that pins a Pod to node.
func PinTerm(node string) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{
		Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{node},
	}}}
}

// Pinnable reports whether the operator pins pod when it releases it: the Pod has no required node
// affinity term of its own. Terms of the Pod's own may exclude the Node a pin would name (the
// chooser reads nodeSelectors, not terms), and the API server lets a gated Pod's terms only grow,
// so such a Pod is released with the domain's nodeSelector alone and the scheduler picks its Node.
func Pinnable(pod *corev1.Pod) bool {
	a := pod.Spec.Affinity
	return a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
		len(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0
}

// PinnedNode returns the Node a Pod's required node affinity names as its only possible Node, "" for
// none: every term requires metadata.name In one same Node (the operator's pin, PinTerm, or the
// user's own). The Pod cannot run anywhere else.
func PinnedNode(pod *corev1.Pod) string {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	node := ""
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		named := ""
		for _, r := range term.MatchFields {
			if r.Key == metav1.ObjectNameField && r.Operator == corev1.NodeSelectorOpIn && len(r.Values) == 1 {
				named = r.Values[0]
				break
			}
		}
		if named == "" || (node != "" && named != node) {
			return ""
		}
		node = named
	}
	return node
}

// OperatorPin returns the Node the operator pinned pod to: PinnedNode, when the Pod's
// tpu.ray.io/pinned-node annotation, written with the pin in one patch (ReleasePatch), names the
// same Node; "" otherwise. A Pod whose own required node affinity names one Node (a user's
// matchFields term) is not the operator's to judge: it is never deleted as stranded.
func OperatorPin(pod *corev1.Pod) string {
	n := PinnedNode(pod)
	if n == "" || pod.Annotations[tpuv1alpha1.PinnedNodeAnnotation] != n {
		return ""
	}
	return n
}

// takenNodes returns the Nodes live Pods among pods are bound or pinned to.
func takenNodes(pods []corev1.Pod) map[string]bool {
	taken := make(map[string]bool, len(pods))
	for i := range pods {
		p := &pods[i]
		if !lifecycle.PodLive(p) {
			continue
		}
		if p.Spec.NodeName != "" {
			taken[p.Spec.NodeName] = true
		} else if n := PinnedNode(p); n != "" {
			taken[n] = true
		}
	}
	return taken
}

// AssignNodes pins each pinnable gated Pod of a slice to a distinct Node of usable (the chosen
// domain's usable Nodes, sorted by name) that no live Pod of the slice (among pods) is bound or
// pinned to: the gated Pods by worker ID, then name, take the free Nodes in name order. So the
// same Pods and Nodes give the same pins, whoever computes them. A gated Pod left without a free
// Node (the domain has fewer usable Nodes than the slice has Pods waiting: a domain kept because
// the slice's Pods are bound to it) is not in the map and is released with the nodeSelector
// alone. The result is by Pod UID.
func AssignNodes(gated []*corev1.Pod, pods []corev1.Pod, usable []string) map[types.UID]string {
	taken := takenNodes(pods)
	free := make([]string, 0, len(usable))
	for _, n := range usable {
		if !taken[n] {
			free = append(free, n)
		}
	}
	order := make([]*corev1.Pod, 0, len(gated))
	for _, p := range gated {
		if tpuenv.HasGate(p) && Pinnable(p) {
			order = append(order, p)
		}
	}
	slices.SortFunc(order, func(a, b *corev1.Pod) int {
		return cmp.Or(cmp.Compare(workerID(a), workerID(b)), cmp.Compare(a.Name, b.Name))
	})
	out := make(map[types.UID]string, min(len(order), len(free)))
	for i, p := range order {
		if i == len(free) {
			break
		}
		out[p.UID] = free[i]
	}
	return out
}

// workerID is a Pod's worker ID by its spec identity, -1 without one.
func workerID(p *corev1.Pod) int32 {
	if id, ok := identity.FromPod(p); ok {
		return id.WorkerID
	}
	return -1
}

// Strand is a released Pod that can never bind where it is pinned.
type Strand struct {
	Pod  *corev1.Pod
	Node string
	// Why says what keeps the Pod off Node.
	Why string
}

// NodeView is what Stranded reads of the Nodes and of the Pods bound to them.
type NodeView struct {
	// Gone reports a Node not found, or being deleted.
	Gone func(node string) bool
	// AllocatableChips is a present Node's allocatable google.com/tpu.
	AllocatableChips func(node string) int64
	// BoundTo returns the live Pods bound to a Node: every Pod whose chips count, of any slice or
	// none.
	BoundTo func(node string) []*corev1.Pod
	// Labels returns a present Node's labels, and false when they are not known (a failed read):
	// nil Labels knows none.
	Labels func(node string) (map[string]string, bool)
}

// unmatchedSelector returns the first key (by name) of pod's nodeSelector whose value Node n's
// labels, as v knows them, do not hold.
func unmatchedSelector(pod *corev1.Pod, n string, v NodeView) (key, value string, unmatched bool) {
	if v.Labels == nil || len(pod.Spec.NodeSelector) == 0 {
		return "", "", false
	}
	labels, known := v.Labels(n)
	if !known {
		return "", "", false
	}
	for _, k := range slices.Sorted(maps.Keys(pod.Spec.NodeSelector)) {
		if got, ok := labels[k]; !ok || got != pod.Spec.NodeSelector[k] {
			return k, pod.Spec.NodeSelector[k], true
		}
	}
	return "", "", false
}

// BoundByNode groups the live Pods among pods that are bound to a Node by that Node, for
// NodeView.BoundTo.
func BoundByNode(pods []corev1.Pod) func(node string) []*corev1.Pod {
	out := map[string][]*corev1.Pod{}
	for i := range pods {
		if p := &pods[i]; p.Spec.NodeName != "" && lifecycle.PodLive(p) {
			out[p.Spec.NodeName] = append(out[p.Spec.NodeName], p)
		}
	}
	return func(node string) []*corev1.Pod { return out[node] }
}

// Stranded returns the live, released, unbound Pods among pods (a slice's) that are pinned to a
// Node that can no longer take them: the Node is gone (not found, or being deleted), or the Pods
// bound to it leave fewer of its free TPU chips than the Pod requests (another Pod of the slice bound
// there after a pin made on a view that missed it, or a Pod that bypassed admission and that
// the scheduler put there). A pin cannot change once the gate is off, so such a Pod would stay
// Pending for good: the reconciler deletes it and its owner re-creates it, gated, and it is
// released onto a free Node of the slice's domain (docs/spec.md §12, "Stranded Pods").
func Stranded(pods []corev1.Pod, v NodeView) []Strand {
	var out []Strand
	for i := range pods {
		p := &pods[i]
		if !lifecycle.PodLive(p) || p.Spec.NodeName != "" || tpuenv.HasGate(p) {
			continue
		}
		n := OperatorPin(p)
		if n == "" {
			continue
		}
		if v.Gone(n) {
			out = append(out, Strand{Pod: p, Node: n, Why: fmt.Sprintf("Node %s is gone", n)})
			continue
		}
		if k, want, ok := unmatchedSelector(p, n, v); ok {
			// Relabelled out of the slice's domain (or of the accelerator or topology the Pod
			// selects): kube-scheduler will never bind the Pod to it.
			out = append(out, Strand{Pod: p, Node: n, Why: fmt.Sprintf("Node %s no longer has the label %s=%s the Pod selects", n, k, want)})
			continue
		}
		need := PodChips(p)
		if need == 0 {
			continue
		}
		var used int64
		var holders []string
		for _, q := range v.BoundTo(n) {
			if c := PodChips(q); c > 0 && q.UID != p.UID {
				used += c
				holders = append(holders, q.Namespace+"/"+q.Name)
			}
		}
		// Only Pods bound there strand it: a Node that reports no chips yet (one just created
		// again, whose kubelet has not reported) may still take it.
		if alloc := v.AllocatableChips(n); len(holders) > 0 && alloc-used < need {
			slices.Sort(holders)
			out = append(out, Strand{Pod: p, Node: n, Why: fmt.Sprintf("Node %s has %d of its %d TPU chips free, %d needed: Pods %s are bound to it",
				n, max(alloc-used, 0), alloc, need, strings.Join(holders, ", "))})
		}
	}
	return out
}
