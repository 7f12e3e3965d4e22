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

package autoscaler

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
)

// The pure decisions of the stand-in: whether a new pool of a node group would take a Pod, which
// pending Pods a scale-up serves, how many pools it creates, and what a ProvisioningRequest gets.

// PoolKey is the Node label that names a pool, the domain a multi-host TPU slice lives in.
const PoolKey = constants.NodePoolTopologyKey

// NodeGroup is a shape of pool the stand-in can create, as GKE node auto-provisioning creates TPU
// pools: every scale-up of the group adds one whole multi-host pool of Topology on Accelerator
// (a localcluster.Pool of one slice), never single Nodes.
type NodeGroup struct {
	// Name prefixes the pools' names, <Name>-<n>; default nap-<accelerator>-<topology>.
	Name string
	// Accelerator is the cloud.google.com/gke-tpu-accelerator value, such as tpu-v6e-slice.
	Accelerator string
	// Topology is the cloud.google.com/gke-tpu-topology value, such as 4x4.
	Topology string
	// ChipsPerHost overrides the chips of each host (localcluster.Pool's default otherwise).
	ChipsPerHost int64
}

func (g NodeGroup) name() string {
	if g.Name != "" {
		return g.Name
	}
	return "nap-" + strings.ReplaceAll(g.Accelerator+"-"+g.Topology, ".", "-")
}

// pool is the localcluster.Pool of the group's pool called name.
func (g NodeGroup) pool(name string) localcluster.Pool {
	return localcluster.Pool{Name: name, Accelerator: g.Accelerator, Topology: g.Topology, ChipsPerHost: g.ChipsPerHost}
}

// template is a node group as the simulation sees it: the Nodes one new pool would have, built as
// the real ones are, under a pool name no Node carries yet.
type template struct {
	group NodeGroup
	nodes []*corev1.Node
}

// newTemplate builds the template of g.
func newTemplate(g NodeGroup) (template, error) {
	nodes, err := localcluster.Nodes([]localcluster.Pool{g.pool(g.name() + "-template")})
	if err != nil {
		return template{}, fmt.Errorf("node group %s: %w", g.name(), err)
	}
	return template{group: g, nodes: nodes}, nil
}

// hosts is the number of Nodes of one pool of the group.
func (t template) hosts() int { return len(t.nodes) }

// perNode returns how many Pods like pod one Node of the template holds, and when none, why: the
// scheduler's filters a new Node is judged by in the autoscaler's simulation (node affinity and
// nodeSelector, taints, resources and the Pod count), each through the scheduler's own helper.
func perNode(pod *corev1.Pod, node *corev1.Node) (int, string) {
	if ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); err != nil || !ok {
		return 0, "node(s) didn't match Pod's node affinity/selector"
	}
	for i := range node.Spec.Taints {
		t := &node.Spec.Taints[i]
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		if !corev1helpers.TolerationsTolerateTaint(logr.Discard(), pod.Spec.Tolerations, t, false) {
			return 0, fmt.Sprintf("node(s) had untolerated taint {%s: %s}", t.Key, t.Value)
		}
	}
	n := 0
	if pods, ok := node.Status.Allocatable[corev1.ResourcePods]; ok {
		n = int(pods.Value())
	}
	requests := podRequests(pod)
	for _, name := range slices.Sorted(maps.Keys(requests)) {
		want := requests[name]
		if want.IsZero() {
			continue
		}
		have := node.Status.Allocatable[name]
		fit := int(have.MilliValue() / want.MilliValue())
		if fit == 0 {
			return 0, fmt.Sprintf("Insufficient %s", name)
		}
		n = min(n, fit)
	}
	if n == 0 {
		return 0, "Too many pods"
	}
	return n, ""
}

// gangOf returns what makes pod one of a gang, Pods that must share one pool: its namespace and
// its required pod affinity terms on PoolKey, when the Pod matches every such term itself (the
// scheduler lets the first of them land anywhere, and the rest only where it did). It returns ""
// for a Pod without such terms. ok is false for a Pod with such a term it does not match itself:
// it follows Pods outside the pending set, which a new pool never holds.
func gangOf(pod *corev1.Pod) (gang string, ok bool) {
	if pod.Spec.Affinity == nil || pod.Spec.Affinity.PodAffinity == nil {
		return "", true
	}
	var keys []string
	for _, term := range pod.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if term.TopologyKey != PoolKey {
			continue // not simulated: only the pool decides a multi-host slice's fit
		}
		sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
		if err != nil || !sel.Matches(labels.Set(pod.Labels)) || !ownNamespace(pod, &term) {
			return "", false
		}
		keys = append(keys, sel.String())
	}
	if len(keys) == 0 {
		return "", true
	}
	slices.Sort(keys)
	return pod.Namespace + "/" + strings.Join(keys, ";"), true
}

// ownNamespace reports whether term's namespaces include pod's own.
func ownNamespace(pod *corev1.Pod, term *corev1.PodAffinityTerm) bool {
	if term.NamespaceSelector != nil {
		return true // an empty selector is every namespace; a narrower one is not simulated
	}
	return len(term.Namespaces) == 0 || slices.Contains(term.Namespaces, pod.Namespace)
}

// followsBound reports whether one of pod's required pod affinity terms on PoolKey selects a live
// bound Pod: the scheduler then puts pod only in that Pod's pool, which a new pool is not.
func followsBound(pod *corev1.Pod, bound []*corev1.Pod) bool {
	if pod.Spec.Affinity == nil || pod.Spec.Affinity.PodAffinity == nil {
		return false
	}
	for _, term := range pod.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if term.TopologyKey != PoolKey {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
		if err != nil {
			continue
		}
		for _, b := range bound {
			if sel.Matches(labels.Set(b.Labels)) && (term.NamespaceSelector != nil || b.Namespace == pod.Namespace ||
				slices.Contains(term.Namespaces, b.Namespace)) {
				return true
			}
		}
	}
	return false
}

// Unschedulable reports whether the cluster autoscaler scales up for pod: the scheduler tried it
// and found no Node (PodScheduled False, reason Unschedulable), it carries no scheduling gate
// (gated Pods are SchedulingGated and ignored by design), it is not bound and not being deleted.
func Unschedulable(pod *corev1.Pod) bool {
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || len(pod.Spec.SchedulingGates) > 0 ||
		pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

// scaleUp is one pool the stand-in decided to create, and the pending Pods it is for.
type scaleUp struct {
	// Group is the node group's name.
	Group string
	// Gang is the gang the pool is for ("" for Pods without one).
	Gang string
	// Pods are the UIDs of the Pods the pool is for.
	Pods []types.UID
}

// inFlight is a pool created, or about to be, for pending Pods that the scheduler has not bound
// yet: the autoscaler counts it as upcoming capacity rather than scale up again for the same Pods.
type inFlight struct {
	Group string
	Gang  string
	Pods  []types.UID
}

// rejection is why no pool is created for a Pod.
type rejection struct {
	Pod    types.UID
	Reason string
}

// plan decides the pools to create for the unschedulable Pods pending, given the templates of the
// node groups (in the order they are preferred: the first that fits wins, as a priority
// expander's), the pools in flight for Pods still pending, and the live bound Pods. A gang gets
// one pool of the first group each of its Pods fits and that holds all of them, unless a pool is
// in flight for one of its Pods; the other Pods of a group get ceil(Pods / Pods per pool) pools
// minus the pools in flight for them. Pods no group takes are returned with the reason of the
// first group.
func plan(pending []*corev1.Pod, templates []template, flying []inFlight, bound []*corev1.Pod) ([]scaleUp, []rejection) {
	covered := map[types.UID]bool{}
	for _, f := range flying {
		for _, uid := range f.Pods {
			covered[uid] = true
		}
	}
	type bucket struct {
		group string
		gang  string
		cap   int
		pods  []*corev1.Pod
	}
	var buckets []*bucket
	find := func(group, gang string) *bucket {
		for _, b := range buckets {
			if b.group == group && b.gang == gang {
				return b
			}
		}
		b := &bucket{group: group, gang: gang, cap: -1}
		buckets = append(buckets, b)
		return b
	}
	var rejected []rejection
	for _, pod := range pending {
		gang, ok := gangOf(pod)
		if !ok || followsBound(pod, bound) {
			rejected = append(rejected, rejection{Pod: pod.UID, Reason: "required pod affinity to Pods a new pool would not hold"})
			continue
		}
		reason := "no node group"
		placed := false
		for _, t := range templates {
			n, why := perNode(pod, t.nodes[0])
			if n == 0 {
				if reason == "no node group" {
					reason = fmt.Sprintf("node group %s: %s", t.group.name(), why)
				}
				continue
			}
			b := find(t.group.name(), gang)
			perPool := n * t.hosts()
			if b.cap < 0 || perPool < b.cap {
				b.cap = perPool
			}
			b.pods = append(b.pods, pod)
			placed = true
			break
		}
		if !placed {
			rejected = append(rejected, rejection{Pod: pod.UID, Reason: reason})
		}
	}
	var out []scaleUp
	for _, b := range buckets {
		uids := make([]types.UID, 0, len(b.pods))
		for _, p := range b.pods {
			uids = append(uids, p.UID)
		}
		if b.gang != "" {
			if len(b.pods) > b.cap {
				for _, uid := range uids {
					rejected = append(rejected, rejection{Pod: uid, Reason: fmt.Sprintf(
						"node group %s: %d Pods that must share one pool, a pool holds %d", b.group, len(b.pods), b.cap)})
				}
				continue
			}
			if !slices.ContainsFunc(uids, func(uid types.UID) bool { return covered[uid] }) {
				out = append(out, scaleUp{Group: b.group, Gang: b.gang, Pods: uids})
			}
			continue
		}
		upcoming := 0
		for _, f := range flying {
			if f.Group == b.group && f.Gang == "" && slices.ContainsFunc(f.Pods, func(uid types.UID) bool { return slices.Contains(uids, uid) }) {
				upcoming++
			}
		}
		// The Pods no pool in flight is for fill the pools to create, in order.
		var fresh []types.UID
		for _, uid := range uids {
			if !covered[uid] {
				fresh = append(fresh, uid)
			}
		}
		need := (len(uids)+b.cap-1)/b.cap - upcoming
		for i := 0; i < need && len(fresh) > 0; i++ {
			take := fresh[:min(b.cap, len(fresh))]
			fresh = fresh[len(take):]
			out = append(out, scaleUp{Group: b.group, Pods: slices.Clone(take)})
		}
	}
	return out, rejected
}

// podRequests are a Pod's effective requests: containers, init containers and overhead.
func podRequests(pod *corev1.Pod) corev1.ResourceList {
	return resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
}

func resourceQuantity(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.DecimalSI) }
