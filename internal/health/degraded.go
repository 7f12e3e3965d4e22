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

package health

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
)

// Taints that say a node is going away or cannot serve its Pods, whoever set them.
const (
	// TaintImpendingNodeTermination is set by GKE's node termination handler when the VM is about
	// to stop: host maintenance, preemption (Spot) or repair, before the graceful shutdown.
	TaintImpendingNodeTermination = "cloud.google.com/impending-node-termination"
	// TaintToBeDeletedByClusterAutoscaler is set by the cluster autoscaler before it removes a node.
	TaintToBeDeletedByClusterAutoscaler = "ToBeDeletedByClusterAutoscaler"
	// TaintCloudProviderShutdown is set by the cloud node lifecycle controller on a stopped VM.
	TaintCloudProviderShutdown = "node.cloudprovider.kubernetes.io/shutdown"
)

// degradingTaints maps the taints that degrade a host to the reason they are reported under.
// Kubernetes' own (k8s.io/api/core/v1): not-ready and unreachable are the node lifecycle
// controller's view of the Ready condition, unschedulable mirrors spec.unschedulable, and
// out-of-service marks a node shut down for good.
var degradingTaints = map[string]string{
	TaintImpendingNodeTermination:       tpuv1alpha1.ReasonNodeTainted,
	TaintToBeDeletedByClusterAutoscaler: tpuv1alpha1.ReasonNodeTainted,
	TaintCloudProviderShutdown:          tpuv1alpha1.ReasonNodeTainted,
	corev1.TaintNodeOutOfService:        tpuv1alpha1.ReasonNodeTainted,
	corev1.TaintNodeNotReady:            tpuv1alpha1.ReasonNodeNotReady,
	corev1.TaintNodeUnreachable:         tpuv1alpha1.ReasonNodeNotReady,
	corev1.TaintNodeUnschedulable:       tpuv1alpha1.ReasonNodeUnschedulable,
}

// DegradingTaint reports whether a taint key is one that degrades a host.
func DegradingTaint(key string) bool {
	_, ok := degradingTaints[key]
	return ok
}

// reasonOrder is the order of Degraded reasons: the condition's reason is the first that applies.
var reasonOrder = []string{
	tpuv1alpha1.ReasonNodeMissing, tpuv1alpha1.ReasonNodeDeleting, tpuv1alpha1.ReasonNodeNotReady,
	tpuv1alpha1.ReasonNodeTainted, tpuv1alpha1.ReasonNodeUnschedulable, tpuv1alpha1.ReasonPodNotReady,
}

// nodeProblem returns what is wrong with a scheduled host's node, the first of: gone, being
// deleted, not Ready, tainted, unschedulable; and its Degraded reason. nil is a node that does not
// exist.
func nodeProblem(node *corev1.Node) (problem, reason string) {
	switch {
	case node == nil:
		return "node not found", tpuv1alpha1.ReasonNodeMissing
	case node.DeletionTimestamp != nil:
		return "node being deleted", tpuv1alpha1.ReasonNodeDeleting
	case !nodeReady(node):
		return "node not Ready", tpuv1alpha1.ReasonNodeNotReady
	}
	for _, reason := range []string{tpuv1alpha1.ReasonNodeNotReady, tpuv1alpha1.ReasonNodeTainted, tpuv1alpha1.ReasonNodeUnschedulable} {
		for _, t := range node.Spec.Taints {
			if degradingTaints[t.Key] == reason {
				return "node tainted " + t.Key, reason
			}
		}
	}
	if node.Spec.Unschedulable {
		return "node unschedulable", tpuv1alpha1.ReasonNodeUnschedulable
	}
	return "", ""
}

// problemGroup is the hosts with one problem.
type problemGroup struct {
	problem, reason string
	ids             []int32
	nodes           []string
}

// maxNodesNamed bounds the node names a Degraded message gives per problem.
const maxNodesNamed = 3

// degradedCondition: True when a scheduled host's node has a problem or, once the slice has been
// Ready (lost), when a host is not Ready; the message names the hosts and nodes by problem.
func degradedCondition(s *tpuv1alpha1.TPUSliceAssignment, hosts []host, lost bool) metav1.Condition {
	var groups []*problemGroup
	find := func(problem, reason string) *problemGroup {
		for _, g := range groups {
			if g.problem == problem {
				return g
			}
		}
		g := &problemGroup{problem: problem, reason: reason}
		groups = append(groups, g)
		return g
	}
	for i := range hosts {
		h := &hosts[i]
		switch {
		case h.scheduled && h.problem != "":
			g := find(h.problem, h.reason)
			g.ids, g.nodes = append(g.ids, h.id), append(g.nodes, h.fact.Node)
		case lost && !h.ready():
			g := find("not Ready since the slice was Ready", tpuv1alpha1.ReasonPodNotReady)
			g.ids = append(g.ids, h.id)
		}
	}
	cond := metav1.Condition{Type: tpuv1alpha1.ConditionDegraded, ObservedGeneration: s.Generation}
	if len(groups) == 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, tpuv1alpha1.ReasonHostsHealthy
		cond.Message = "no host's node is failing or going, and no host stopped being Ready"
		return cond
	}
	cond.Status, cond.Reason = metav1.ConditionTrue, firstReason(groups)
	parts := make([]string, 0, len(groups))
	for _, g := range groups {
		part := g.problem + ": " + Hosts(g.ids)
		if len(g.nodes) > 0 {
			named := g.nodes[:min(len(g.nodes), maxNodesNamed)]
			part += " (" + strings.Join(named, ", ")
			if n := len(g.nodes) - len(named); n > 0 {
				part += fmt.Sprintf(" and %d more", n)
			}
			part += ")"
		}
		parts = append(parts, part)
	}
	cond.Message = strings.Join(parts, "; ")
	return cond
}

func firstReason(groups []*problemGroup) string {
	for _, reason := range reasonOrder {
		for _, g := range groups {
			if g.reason == reason {
				return reason
			}
		}
	}
	return groups[0].reason
}
