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

// Package gate holds the pure decisions of the reconciler's placement step for a ChosenDomain
// slice (docs/spec.md §4): when its gated Pods are ready for a domain to be chosen (Assemble),
// what placement.Choose is asked (NewRequest), the one JSON patch that releases a Pod
// (ReleasePatch), and the per-domain Lease that makes a choice exclusive (NewLease, Holds).
// The placement reconciler (controllers/placement) reads the caches, writes, and records Events.
package gate

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/boundpods"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// DefaultAssemblyTimeout is the default --slice-assembly-timeout.
const DefaultAssemblyTimeout = 2 * time.Minute

// Assembly is whether a slice's gated Pods are ready for a domain to be chosen.
type Assembly struct {
	// Gated are the live Pods of the slice that carry the gate.
	Gated []*corev1.Pod
	// Missing are the worker IDs of 0..hosts-1 that no live Pod of the slice holds.
	Missing []int32
	// Ready says a domain is to be chosen now: some Pod is gated, and no ID is missing or the
	// oldest gated Pod has waited the assembly timeout.
	Ready bool
	// TimedOut says Ready only because of the timeout.
	TimedOut bool
	// Wait is how long until the timeout makes the slice Ready, when it is not, and Deadline
	// when that is (the oldest gated Pod's creation plus the timeout).
	Wait     time.Duration
	Deadline time.Time
}

// Assemble decides, for a slice of hosts hosts, whether its gated Pods (among pods, the slice's
// Pods) are released now: once every worker ID is held by a live Pod of the slice, or once the
// oldest gated Pod was created timeout ago (now and creation times on the API server's clock as
// the reconciler reads it), whichever comes first. A Pod's worker ID is its spec identity's.
func Assemble(hosts int32, pods []corev1.Pod, now time.Time, timeout time.Duration) Assembly {
	var a Assembly
	held := make([]bool, hosts)
	var oldest time.Time
	for i := range pods {
		p := &pods[i]
		if !lifecycle.PodLive(p) {
			continue
		}
		if id, ok := identity.FromPod(p); ok && id.WorkerID >= 0 && id.WorkerID < hosts {
			held[id.WorkerID] = true
		}
		if tpuenv.HasGate(p) {
			a.Gated = append(a.Gated, p)
			if t := p.CreationTimestamp.Time; oldest.IsZero() || t.Before(oldest) {
				oldest = t
			}
		}
	}
	for id, ok := range held {
		if !ok {
			a.Missing = append(a.Missing, int32(id)) //nolint:gosec // id < hosts, an int32.
		}
	}
	if len(a.Gated) == 0 {
		return a
	}
	if len(a.Missing) == 0 {
		a.Ready = true
		return a
	}
	a.Deadline = oldest.Add(timeout)
	if waited := now.Sub(oldest); waited >= timeout {
		a.Ready, a.TimedOut = true, true
	} else {
		a.Wait = timeout - waited
	}
	return a
}

// PodChips is the google.com/tpu a Pod requests: the sum over its containers (a request, else a
// limit, as the scheduler reads an extended resource).
func PodChips(pod *corev1.Pod) int64 {
	var n int64
	for i := range pod.Spec.Containers {
		n += topology.ContainerChips(&pod.Spec.Containers[i])
	}
	return n
}

// Usage is what the Pods on one Node take of it (boundpods.Usage: the same sum the bound Pods'
// tracker keeps).
type Usage = boundpods.Usage

// NodeUsage sums, by Node name, what the live Pods among pods take of the Node they are bound to,
// whatever created them, or, not bound yet, the one Node their required node affinity names
// (PinnedNode: the operator promised them that Node, or their own terms allow no other; a slice of
// another key may overlap its domain). Pods own
// reports (the slice's own) are skipped, and so is a second Pod of one UID (the caches the
// reconciler reads overlap).
func NodeUsage(pods []corev1.Pod, own func(*corev1.Pod) bool) map[string]*Usage {
	out := map[string]*Usage{}
	seen := make(map[types.UID]bool, len(pods))
	for i := range pods {
		p := &pods[i]
		node := p.Spec.NodeName
		if node == "" {
			node = PinnedNode(p) // the only Node it can bind to, whoever pinned it
		}
		if node == "" || !lifecycle.PodLive(p) || own(p) || seen[p.UID] {
			continue
		}
		seen[p.UID] = true
		u := out[node]
		if u == nil {
			u = &Usage{Requests: corev1.ResourceList{}}
			out[node] = u
		}
		u.Add(Usage{Requests: resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}), Pods: 1})
	}
	return out
}

// NewRequest builds what placement.Choose is asked for slice: its key and hosts, the chips,
// effective requests, nodeSelector, required node affinity and tolerations of its Pods (the gated
// ones: the webhook gave them the group's template), the TPU Nodes with what other Pods take of
// them (usage, NodeUsage) and the Pod whose anti-affinity excludes the slice from each (Excluded), the domains other slices hold,
// status.domain as Previous, and PodsBound when a live Pod of the slice is bound to a Node or
// already selects a value of the key. A slice with no status.domain whose ungated Pods already
// sit in a domain (BoundDomain) gets that domain as Previous: its Pods cannot leave it.
func NewRequest(slice *tpuv1alpha1.TPUSliceAssignment, pods []corev1.Pod, nodes []corev1.Node,
	usage map[string]*Usage, excluded map[string]string, holds []placement.Hold) placement.Request {
	key := slice.Spec.AffinityTopologyKey
	req := placement.Request{
		UID: slice.UID, Key: key, Hosts: slice.Spec.Hosts, Holds: holds, Previous: slice.Status.Domain,
	}
	req.PodsBound = Committed(pods, key)
	if req.Previous == "" && req.PodsBound {
		req.Previous = BoundDomain(slice, pods, nodes)
	}
	for i := range pods {
		p := &pods[i]
		if !lifecycle.PodLive(p) || !tpuenv.HasGate(p) {
			continue
		}
		req.ChipsPerHost = max(req.ChipsPerHost, PodChips(p))
		if req.NodeSelector == nil {
			// A gated Pod's own value of the key (the user pins a node pool) narrows the
			// candidates to that domain: it is the only one its Pods can be released onto.
			req.NodeSelector = maps.Clone(p.Spec.NodeSelector)
			req.Tolerations = p.Spec.Tolerations
			req.Requests = resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
			if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil {
				req.NodeAffinity = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
			}
		}
	}
	req.Nodes = make([]placement.Candidate, 0, len(nodes))
	for i := range nodes {
		var requested corev1.ResourceList
		var count int64
		if u := usage[nodes[i].Name]; u != nil {
			requested, count = u.Requests, u.Pods
		}
		c := placement.CandidateFromNode(&nodes[i], requested, count)
		c.ExcludedBy = excluded[nodes[i].Name]
		req.Nodes = append(req.Nodes, c)
	}
	return req
}

// Priority is the priority of a slice's gated Pods: the highest spec.priority among the live gated
// Pods of pods (the Priority admission plugin resolves it at creation), 0 when none carries one.
func Priority(pods []corev1.Pod) int32 {
	var out int32
	found := false
	for i := range pods {
		p := &pods[i]
		if !lifecycle.PodLive(p) || !tpuenv.HasGate(p) || p.Spec.Priority == nil {
			continue
		}
		if !found || *p.Spec.Priority > out {
			out, found = *p.Spec.Priority, true
		}
	}
	return out
}

// Committed reports whether a live Pod among pods is bound to a Node or selects a value of key:
// the slice has started to land in a domain, which its Pods' nodeSelectors never leave.
func Committed(pods []corev1.Pod, key string) bool {
	for i := range pods {
		p := &pods[i]
		if lifecycle.PodLive(p) && (p.Spec.NodeName != "" || p.Spec.NodeSelector[key] != "") {
			return true
		}
	}
	return false
}

// BoundDomain returns the domain of slice's key that its live ungated Pods (among pods) are in
// the most, by their nodeSelector's value of the key or else the label of the Node they are bound
// to (among nodes); ties go to the smallest name, and "" when none is in one. These are Pods that
// bypassed admission (docs/spec.md §12: created past the webhook, or before the install) or were
// released before the slice lost its status (re-created by hand): where they run, the scheduler
// or their selector put them, and the slice's gated Pods must join them there.
func BoundDomain(slice *tpuv1alpha1.TPUSliceAssignment, pods []corev1.Pod, nodes []corev1.Node) string {
	key := slice.Spec.AffinityTopologyKey
	var at map[string]string // Node name -> its value of key, built on first use
	counts := map[string]int{}
	for i := range pods {
		p := &pods[i]
		if !lifecycle.PodLive(p) || tpuenv.HasGate(p) {
			continue
		}
		if id, ok := identity.FromPod(p); !ok || id.SliceName() != slice.Name || !id.OfClusterUID(slice.Spec.RayClusterUID) {
			continue
		}
		d := p.Spec.NodeSelector[key]
		if d == "" && p.Spec.NodeName != "" {
			if at == nil {
				at = make(map[string]string, len(nodes))
				for j := range nodes {
					at[nodes[j].Name] = nodes[j].Labels[key]
				}
			}
			d = at[p.Spec.NodeName]
		}
		if d != "" {
			counts[d]++
		}
	}
	best := ""
	for d, n := range counts {
		if best == "" || n > counts[best] || (n == counts[best] && d < best) {
			best = d
		}
	}
	return best
}

// jsonPatchOp is one operation of an RFC 6902 JSON patch.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// ReleasePatch returns the JSON patch that releases pod onto domain: it tests that the Pod is
// the one read (its UID: a later Pod of the same name is another Pod) and that its
// scheduling gates are still the ones read (so it fails, with nothing applied, when the Pod was
// released or changed since: a second release, by this replica or another, never applies), adds
// {key: domain} to its nodeSelector, pins it to node (unless node is "": a required node affinity
// term PinTerm, set where the Pod has none, see Pinnable), and removes the operator's gate, all in
// one write: the API server lets a gated Pod's nodeSelector grow and its node affinity be set,
// and a Pod never runs with the gate off and no selector. It fails for a Pod without the gate,
// and for a pin on a Pod that is not Pinnable.
func ReleasePatch(pod *corev1.Pod, key, domain, node string) ([]byte, error) {
	return ReleasePatchWith(pod, key, domain, node, nil)
}

// ReleasePatchWith is ReleasePatch that also sets annotations on the Pod, such as the
// ProvisioningRequest whose capacity it consumes (docs/spec.md §12, "Capacity").
func ReleasePatchWith(pod *corev1.Pod, key, domain, node string, annotations map[string]string) ([]byte, error) {
	if !tpuenv.HasGate(pod) {
		return nil, fmt.Errorf("pod %s/%s does not carry the scheduling gate %s", pod.Namespace, pod.Name, tpuv1alpha1.PlacementSchedulingGate)
	}
	if pod.UID == "" {
		return nil, fmt.Errorf("pod %s/%s has no UID to test", pod.Namespace, pod.Name)
	}
	if got, ok := pod.Spec.NodeSelector[key]; ok && got != domain {
		return nil, fmt.Errorf("pod %s/%s already selects %s=%s", pod.Namespace, pod.Name, key, got)
	}
	kept := slices.DeleteFunc(slices.Clone(pod.Spec.SchedulingGates), func(g corev1.PodSchedulingGate) bool {
		return g.Name == tpuv1alpha1.PlacementSchedulingGate
	})
	ops := []jsonPatchOp{
		{Op: "test", Path: "/metadata/uid", Value: pod.UID},
		{Op: "test", Path: "/spec/schedulingGates", Value: pod.Spec.SchedulingGates},
	}
	if pod.Spec.NodeSelector == nil {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/spec/nodeSelector", Value: map[string]string{key: domain}})
	} else {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/spec/nodeSelector/" + escapePointer(key), Value: domain})
	}
	if node != "" {
		op, err := pinOp(pod, node)
		if err != nil {
			return nil, err
		}
		ops = append(ops, op)
		annotations = maps.Clone(annotations)
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[tpuv1alpha1.PinnedNodeAnnotation] = node
	}
	if len(annotations) > 0 {
		if len(pod.Annotations) == 0 {
			ops = append(ops, jsonPatchOp{Op: "add", Path: "/metadata/annotations", Value: annotations})
		} else {
			for _, k := range slices.Sorted(maps.Keys(annotations)) {
				ops = append(ops, jsonPatchOp{Op: "add", Path: "/metadata/annotations/" + escapePointer(k), Value: annotations[k]})
			}
		}
	}
	if len(kept) == 0 {
		ops = append(ops, jsonPatchOp{Op: "remove", Path: "/spec/schedulingGates"})
	} else {
		ops = append(ops, jsonPatchOp{Op: "replace", Path: "/spec/schedulingGates", Value: kept})
	}
	return json.Marshal(ops)
}

// pinOp is the operation that gives pod, which has no required node affinity term, the one term
// PinTerm(node), at the shallowest part of its affinity that is unset.
func pinOp(pod *corev1.Pod, node string) (jsonPatchOp, error) {
	if !Pinnable(pod) {
		return jsonPatchOp{}, fmt.Errorf("pod %s/%s has required node affinity terms of its own: not pinned", pod.Namespace, pod.Name)
	}
	required := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{PinTerm(node)}}
	a := pod.Spec.Affinity
	switch {
	case a == nil:
		return jsonPatchOp{Op: "add", Path: "/spec/affinity",
			Value: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: required}}}, nil
	case a.NodeAffinity == nil:
		return jsonPatchOp{Op: "add", Path: "/spec/affinity/nodeAffinity",
			Value: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: required}}, nil
	case a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil:
		return jsonPatchOp{Op: "add", Path: "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution", Value: required}, nil
	default: // a required node selector with no term
		return jsonPatchOp{Op: "add", Path: "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms",
			Value: required.NodeSelectorTerms}, nil
	}
}

// escapePointer escapes a map key as one JSON pointer token (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
