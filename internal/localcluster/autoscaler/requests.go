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

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ray-tpu/tpu-slice-operator/internal/provisioning"
)

// Condition reasons and messages the cluster autoscaler writes on ProvisioningRequests
// (cluster-autoscaler/provisioningrequest/conditions), so that a reader sees the same values.
const (
	ReasonAccepted              = "Accepted"
	MessageAccepted             = "ProvisioningRequest is accepted by ClusterAutoscaler"
	ReasonCapacityIsProvisioned = "CapacityIsProvisioned"
	MessageCapacityProvisioned  = "Capacity is found in the cluster"
	ReasonCapacityIsFound       = "CapacityIsFound"
	ReasonCapacityIsNotFound    = "CapacityIsNotFound"
	ReasonFailedToCreatePods    = "FailedToCreatePods"
	// ReasonInjectedFailure is the stand-in's own: a failure its fault knob asked for.
	ReasonInjectedFailure = "InjectedFailure"
	// ReasonClassRefused is the stand-in's own: a class its options refuse, or one it does not know.
	ReasonClassRefused = "ProvisioningClassNotSupported"
)

// requestAction is what the stand-in does with a ProvisioningRequest.
type requestAction int

const (
	// skipRequest: the request has a terminal condition (or is of a class left to others).
	skipRequest requestAction = iota
	// failRequest: Failed=True with the decision's reason and message.
	failRequest
	// provisionRequest: create the decision's pools, then Provisioned=True.
	provisionRequest
	// checkRequest: Provisioned True or False by whether the decision's Capacity is there.
	checkRequest
)

// requestDecision is what decideRequest decided.
type requestDecision struct {
	Action          requestAction
	Reason, Message string
	// Pools names the node group of each pool to create (provisionRequest).
	Pools []string
	// Pods are the Pods the request asks capacity for, one per Pod (checkRequest).
	Pods []*corev1.Pod
}

// Terminal reports whether a request is settled for the stand-in: Failed, BookingExpired,
// CapacityRevoked or Provisioned True.
func Terminal(pr *provisioning.ProvisioningRequest) bool {
	for _, t := range []string{provisioning.ConditionFailed, provisioning.ConditionBookingExpired,
		provisioning.ConditionCapacityRevoked, provisioning.ConditionProvisioned} {
		if apimeta.IsStatusConditionTrue(pr.Status.Conditions, t) {
			return true
		}
	}
	return false
}

// classes are the classes the stand-in provisions: the autoscaler's atomic scale-up and GKE's
// queued provisioning (both: all the pools at once or none), and check-capacity (none created).
var classes = map[string]bool{
	provisioning.ClassBestEffortAtomicScaleUp: true,
	provisioning.ClassQueuedProvisioning:      true,
	provisioning.ClassCheckCapacity:           true,
}

// decideRequest decides what a ProvisioningRequest without a terminal condition gets, given the
// PodTemplates of its namespace by name, the node groups' templates, and the classes refused.
// Each pod set's Pods take the first group that fits its template, ceil(count / Pods per pool)
// pools of it: all of them or, when one pod set fits no group, none (Failed). An unknown class
// fails unless ignoreUnknown (the real autoscaler leaves a class it does not know to others).
func decideRequest(pr *provisioning.ProvisioningRequest, podTemplates map[string]*corev1.PodTemplate, templates []template,
	refused map[string]bool, ignoreUnknown bool) requestDecision {
	if Terminal(pr) {
		return requestDecision{Action: skipRequest}
	}
	class := pr.Spec.ProvisioningClassName
	switch {
	case refused[class]:
		return requestDecision{Action: failRequest, Reason: ReasonClassRefused,
			Message: fmt.Sprintf("provisioning class %s is refused in this cluster", class)}
	case !classes[class] && ignoreUnknown:
		return requestDecision{Action: skipRequest}
	case !classes[class]:
		return requestDecision{Action: failRequest, Reason: ReasonClassRefused,
			Message: fmt.Sprintf("provisioning class %s is not supported", class)}
	}
	var d requestDecision
	for i, ps := range pr.Spec.PodSets {
		pt, ok := podTemplates[ps.PodTemplateRef.Name]
		if !ok {
			return requestDecision{Action: failRequest, Reason: ReasonFailedToCreatePods,
				Message: fmt.Sprintf("pod set %d: PodTemplate %s/%s not found", i, pr.Namespace, ps.PodTemplateRef.Name)}
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: pr.Namespace, Labels: pt.Template.Labels},
			Spec:       pt.Template.Spec,
		}
		for range ps.Count {
			d.Pods = append(d.Pods, pod)
		}
		reason := "no node group"
		placed := false
		for _, t := range templates {
			n, why := perNode(pod, t.nodes[0])
			if n == 0 {
				if !placed && reason == "no node group" {
					reason = fmt.Sprintf("node group %s: %s", t.group.name(), why)
				}
				continue
			}
			perPool := n * t.hosts()
			for range (int(ps.Count) + perPool - 1) / perPool {
				d.Pools = append(d.Pools, t.group.name())
			}
			placed = true
			break
		}
		if !placed && class != provisioning.ClassCheckCapacity {
			return requestDecision{Action: failRequest, Reason: ReasonFailedToCreatePods,
				Message: fmt.Sprintf("pod set %d (PodTemplate %s, %d Pods) fits no node group: %s", i, ps.PodTemplateRef.Name, ps.Count, reason)}
		}
	}
	if class == provisioning.ClassCheckCapacity {
		return requestDecision{Action: checkRequest, Pods: d.Pods}
	}
	d.Action = provisionRequest
	return d
}

// freeNode returns a copy of node whose allocatable is what the Pods bound to it leave: the Node
// as the scheduler sees it for one more Pod.
func freeNode(node *corev1.Node, bound []*corev1.Pod) *corev1.Node {
	n := node.DeepCopy()
	pods := n.Status.Allocatable[corev1.ResourcePods]
	pods.Sub(*resourceQuantity(int64(len(bound))))
	n.Status.Allocatable[corev1.ResourcePods] = pods
	for _, p := range bound {
		for name, q := range podRequests(p) {
			have, ok := n.Status.Allocatable[name]
			if !ok {
				continue
			}
			have.Sub(q)
			n.Status.Allocatable[name] = have
		}
	}
	return n
}

// capacityFor reports whether the free Nodes hold every one of pods, placed first fit in order.
func capacityFor(pods []*corev1.Pod, nodes []*corev1.Node) bool {
	free := make([]*corev1.Node, len(nodes))
	copy(free, nodes)
	for _, pod := range pods {
		placed := false
		for i, n := range free {
			if k, _ := perNode(pod, n); k > 0 {
				free[i] = freeNode(n, []*corev1.Pod{pod})
				placed = true
				break
			}
		}
		if !placed {
			return false
		}
	}
	return true
}
