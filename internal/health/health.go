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

// Package health evaluates what a slice's hosts are doing (docs/spec.md §11): for each worker ID
// whose Pod is bound to a node, that node, the node's value of the slice's placement key and
// whether the Pod is Ready; and from those facts the slice's Scheduled, Placed, Ready and Degraded
// conditions. It only observes: nothing here deletes, evicts or cordons anything.
//
// The package is pure. The reconciler feeds it the claims it is about to write, the Pods they name
// (from its Pod cache, which keeps spec.nodeName and the Ready condition) and the Nodes (from the
// TPU Node cache, package nodes), and writes the result in the same status update as the claims.
package health

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
)

// Input is what Evaluate reads.
type Input struct {
	// Slice is the slice as stored: its spec, and its conditions, whose Ready tells whether the
	// slice has been Ready before.
	Slice *tpuv1alpha1.TPUSliceAssignment
	// Claims are the slice's claims after this reconcile's decision.
	Claims []tpuv1alpha1.WorkerClaim
	// Pods are the Pods the claims may name, matched by UID; others are ignored.
	Pods []corev1.Pod
	// Node returns the Node of that name, false when it does not exist (or is not a TPU Node).
	Node func(name string) (*corev1.Node, bool)
}

// Result is the slice's health.
type Result struct {
	// Hosts are the facts of every host whose Pod is bound to a node, by worker ID.
	Hosts tpuv1alpha1.HostList
	// Key is the placement key the domains are values of (PlacementKey).
	Key string
	// Scheduled, Placed, Ready and Degraded are the slice's conditions of those types.
	Scheduled, Placed, Ready, Degraded metav1.Condition
}

// host is what Evaluate found for one worker ID.
type host struct {
	id int32
	// pod is the live Pod holding the ID, nil when none holds it yet.
	pod *corev1.Pod
	// node is the Node the Pod is bound to, nil when unscheduled or unknown.
	node      *corev1.Node
	scheduled bool
	fact      tpuv1alpha1.HostFact
	// problem is what is wrong with the host's node ("" for nothing), and its Degraded reason.
	problem, reason string
}

// ready reports whether the host can run: its Pod is Ready on a node that is Ready.
func (h *host) ready() bool {
	return h.scheduled && h.fact.Ready && h.node != nil && nodeReady(h.node)
}

// Evaluate returns the per-host facts and the conditions of the slice.
func Evaluate(in Input) Result {
	s := in.Slice
	byUID := make(map[types.UID]*corev1.Pod, len(in.Pods))
	for i := range in.Pods {
		byUID[in.Pods[i].UID] = &in.Pods[i]
	}
	claimed := make([]*corev1.Pod, s.Spec.Hosts)
	for _, c := range in.Claims {
		if c.PodUID != "" && c.WorkerID >= 0 && c.WorkerID < s.Spec.Hosts {
			claimed[c.WorkerID] = byUID[c.PodUID]
		}
	}
	key := PlacementKey(s, claimed)
	hosts := make([]host, s.Spec.Hosts)
	r := Result{Key: key}
	for id := range s.Spec.Hosts {
		h := &hosts[id]
		h.id, h.pod = id, claimed[id]
		if h.pod == nil || h.pod.Spec.NodeName == "" {
			continue
		}
		h.scheduled = true
		h.fact = tpuv1alpha1.HostFact{WorkerID: id, Node: h.pod.Spec.NodeName, Domain: tpuv1alpha1.NoDomain, Ready: PodReady(h.pod)}
		if node, ok := in.Node(h.pod.Spec.NodeName); ok {
			h.node = node
			if v := node.Labels[key]; v != "" {
				h.fact.Domain = v
			}
		}
		h.problem, h.reason = nodeProblem(h.node)
		r.Hosts = append(r.Hosts, h.fact)
	}
	r.Scheduled = scheduledCondition(s, hosts, gatedPods(s.Name, in.Pods))
	r.Placed = placedCondition(s, hosts, key)
	r.Ready = readyCondition(s, hosts)
	r.Degraded = degradedCondition(s, hosts, r.Ready.Reason == tpuv1alpha1.ReasonReadinessLost)
	return r
}

// PodReady reports whether a live Pod's Ready condition is True.
func PodReady(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// gatedPods counts the live Pods of slice (by their spec identity: callers may pass every Pod of
// the worker group) that carry the operator's scheduling gate.
func gatedPods(slice string, pods []corev1.Pod) int {
	n := 0
	for i := range pods {
		p := &pods[i]
		if id, ok := identity.FromPod(p); !ok || id.SliceName() != slice {
			continue
		}
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded &&
			slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == tpuv1alpha1.PlacementSchedulingGate }) {
			n++
		}
	}
	return n
}

// scheduledCondition: True when every host is bound to a node. Otherwise False: for a
// ChosenDomain slice whose Pods wait behind the operator's scheduling gate, or that has no domain
// (DomainChosen False), reason NoDomainFits when DomainChosen says so, else SchedulingGated,
// with DomainChosen's message; else HostsUnscheduled.
func scheduledCondition(s *tpuv1alpha1.TPUSliceAssignment, hosts []host, gated int) metav1.Condition {
	var missing []int32
	for i := range hosts {
		if !hosts[i].scheduled {
			missing = append(missing, hosts[i].id)
		}
	}
	cond := metav1.Condition{Type: tpuv1alpha1.ConditionScheduled, ObservedGeneration: s.Generation}
	n := len(hosts) - len(missing)
	if len(missing) == 0 {
		cond.Status, cond.Reason = metav1.ConditionTrue, tpuv1alpha1.ReasonAllHostsScheduled
		cond.Message = fmt.Sprintf("all %d hosts bound to a node", n)
		return cond
	}
	cond.Status, cond.Reason = metav1.ConditionFalse, tpuv1alpha1.ReasonHostsUnscheduled
	cond.Message = fmt.Sprintf("%d of %d hosts bound to a node; not yet: %s", n, len(hosts), Hosts(missing))
	if s.Spec.Placement != tpuv1alpha1.PlacementChosenDomain {
		return cond
	}
	chosen := apimeta.FindStatusCondition(s.Status.Conditions, tpuv1alpha1.ConditionDomainChosen)
	waiting := chosen != nil && chosen.Status == metav1.ConditionFalse
	if gated == 0 && !waiting {
		return cond
	}
	cond.Reason = tpuv1alpha1.ReasonSchedulingGated
	if waiting && chosen.Reason == tpuv1alpha1.ReasonNoDomainFits {
		cond.Reason = tpuv1alpha1.ReasonNoDomainFits
	}
	cond.Message += fmt.Sprintf("; %d Pods wait behind the scheduling gate %s", gated, tpuv1alpha1.PlacementSchedulingGate)
	if waiting {
		cond.Message += ": " + chosen.Message
	}
	return cond
}

func readyCondition(s *tpuv1alpha1.TPUSliceAssignment, hosts []host) metav1.Condition {
	var notReady []int32
	for i := range hosts {
		if !hosts[i].ready() {
			notReady = append(notReady, hosts[i].id)
		}
	}
	cond := metav1.Condition{Type: tpuv1alpha1.ConditionReady, ObservedGeneration: s.Generation}
	if len(notReady) == 0 {
		cond.Status, cond.Reason = metav1.ConditionTrue, tpuv1alpha1.ReasonAllHostsReady
		cond.Message = fmt.Sprintf("all %d hosts Ready", len(hosts))
		return cond
	}
	cond.Status, cond.Reason = metav1.ConditionFalse, tpuv1alpha1.ReasonHostsNotReady
	if WasReady(s.Status.Conditions) {
		cond.Reason = tpuv1alpha1.ReasonReadinessLost
	}
	cond.Message = fmt.Sprintf("%d of %d hosts Ready; not Ready: %s", len(hosts)-len(notReady), len(hosts), Hosts(notReady))
	return cond
}

// WasReady reports whether stored conditions say the slice has been Ready: Ready is True, or False
// because readiness was lost.
func WasReady(conds []metav1.Condition) bool {
	c := apimeta.FindStatusCondition(conds, tpuv1alpha1.ConditionReady)
	return c != nil && (c.Status == metav1.ConditionTrue || c.Reason == tpuv1alpha1.ReasonReadinessLost)
}

// Hosts names worker IDs compactly: "host 3", "hosts 0-31, 40", at most maxRanges ranges.
func Hosts(ids []int32) string {
	word := "hosts "
	if len(ids) == 1 {
		word = "host "
	}
	return word + Ranges(ids)
}

// maxRanges bounds the ranges a message lists.
const maxRanges = 8

// Ranges writes sorted worker IDs as ranges, "0-31, 40, 42-45", at most maxRanges of them.
func Ranges(ids []int32) string {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	var parts []string
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if len(parts) == maxRanges {
			return strings.Join(parts, ", ") + fmt.Sprintf(" and %d more", len(ids)-i)
		}
		part := strconv.Itoa(int(ids[i]))
		if j > i {
			part += "-" + strconv.Itoa(int(ids[j]))
		}
		parts = append(parts, part)
		i = j + 1
	}
	return cmp.Or(strings.Join(parts, ", "), "none")
}
