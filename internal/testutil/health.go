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

package testutil

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
)

// The builders slice health tests use: where a Pod runs and whether it is Ready, a Node's state.

// NodeName binds the Pod to a node, as the scheduler's binding does.
func (p *PodWrapper) NodeName(node string) *PodWrapper {
	p.Spec.NodeName = node
	return p
}

// Ready sets the Pod's phase Running and its Ready condition, as the kubelet reports it.
func (p *PodWrapper) Ready(ready bool) *PodWrapper {
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = SetPodReady(p.Status.Conditions, ready)
	return p
}

// SetPodReady returns conds with the Pod's Ready condition set to ready, as the kubelet writes it.
func SetPodReady(conds []corev1.PodCondition, ready bool) []corev1.PodCondition {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	for i := range conds {
		if conds[i].Type == corev1.PodReady {
			if conds[i].Status != status {
				conds[i].Status, conds[i].LastTransitionTime = status, metav1.Now()
			}
			return conds
		}
	}
	return append(conds, corev1.PodCondition{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()})
}

// Ready sets the Node's Ready condition, as the kubelet reports it.
func (n *NodeWrapper) Ready(ready bool) *NodeWrapper {
	n.Status.Conditions = SetNodeReady(n.Status.Conditions, ready)
	return n
}

// SetNodeReady returns conds with the Node's Ready condition set to ready.
func SetNodeReady(conds []corev1.NodeCondition, ready bool) []corev1.NodeCondition {
	status, reason := corev1.ConditionFalse, "KubeletNotReady"
	if ready {
		status, reason = corev1.ConditionTrue, "KubeletReady"
	}
	for i := range conds {
		if conds[i].Type == corev1.NodeReady {
			conds[i].Status, conds[i].Reason = status, reason
			return conds
		}
	}
	return append(conds, corev1.NodeCondition{Type: corev1.NodeReady, Status: status, Reason: reason, LastTransitionTime: metav1.Now()})
}

// Taint adds a NoSchedule taint.
func (n *NodeWrapper) Taint(key string) *NodeWrapper {
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule})
	return n
}

// Unschedulable cordons the Node.
func (n *NodeWrapper) Unschedulable() *NodeWrapper {
	n.Spec.Unschedulable = true
	return n
}

// Deleting marks the Node as being deleted.
func (n *NodeWrapper) Deleting() *NodeWrapper {
	now := metav1.Now()
	n.DeletionTimestamp = &now
	return n
}

// UID sets the Node's UID.
func (n *NodeWrapper) UID(uid types.UID) *NodeWrapper {
	n.ObjectMeta.UID = uid
	return n
}

// AffinityTopologyKey sets the topologyKey of the slice's affinity.
func (s *SliceWrapper) AffinityTopologyKey(key string) *SliceWrapper {
	s.Spec.AffinityTopologyKey = key
	return s
}

// Condition sets a stored condition of the slice.
func (s *SliceWrapper) Condition(condType string, status metav1.ConditionStatus, reason string) *SliceWrapper {
	s.Status.Conditions = append(s.Status.Conditions, metav1.Condition{Type: condType, Status: status, Reason: reason})
	return s
}

// Bound returns the slice's claims, all bound, of Pods named <prefix>-<id> with UID uid-<prefix>-<id>.
func Bound(hosts int32, prefix string) []tpuv1alpha1.WorkerClaim {
	out := make([]tpuv1alpha1.WorkerClaim, 0, hosts)
	for id := range hosts {
		name := prefix + "-" + strconv.Itoa(int(id))
		out = append(out, tpuv1alpha1.WorkerClaim{WorkerID: id, Token: "t-" + name, PodName: name, PodUID: types.UID("uid-" + name)})
	}
	return out
}
