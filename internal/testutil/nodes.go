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
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
)

// NodeWrapper builds Nodes shaped like GKE's.
type NodeWrapper struct{ corev1.Node }

// MakeNode returns a Node named name with the labels every GKE Node has and no TPU.
func MakeNode(name string) *NodeWrapper {
	return &NodeWrapper{corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"kubernetes.io/hostname":               name,
		"kubernetes.io/os":                     "linux",
		"kubernetes.io/arch":                   "amd64",
		"node.kubernetes.io/instance-type":     "e2-standard-8",
		"topology.kubernetes.io/region":        "us-central1",
		"topology.kubernetes.io/zone":          "us-central1-b",
		"cloud.google.com/gke-os-distribution": "cos",
		"cloud.google.com/gke-boot-disk":       "pd-balanced",
		"cloud.google.com/machine-family":      "e2",
	}}}}
}

// Obj returns the Node.
func (n *NodeWrapper) Obj() *corev1.Node { return &n.Node }

// TPU labels the Node with GKE's TPU labels, as a host of the TPU node pool named pool.
func (n *NodeWrapper) TPU(accelerator, topology, pool string) *NodeWrapper {
	n.Labels[constants.AcceleratorNodeSelectorKey] = accelerator
	n.Labels[constants.TopologyNodeSelectorKey] = topology
	n.Labels[constants.NodePoolTopologyKey] = pool
	n.Labels["node.kubernetes.io/instance-type"] = "ct6e-standard-4t"
	return n
}

// TPUTaint taints the Node as GKE taints every TPU node: google.com/tpu=present:NoSchedule. A Pod
// asking for google.com/tpu tolerates it (the API server's ExtendedResourceToleration admission
// plugin adds the toleration, as on GKE); other Pods land elsewhere.
func (n *NodeWrapper) TPUTaint() *NodeWrapper {
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: string(constants.TPUResourceName), Value: "present", Effect: corev1.TaintEffectNoSchedule})
	return n
}

// CPUCapacity gives the Node the capacity and allocatable of an e2-standard-8 (8 CPUs, 32 GiB,
// 110 Pods).
func (n *NodeWrapper) CPUCapacity() *NodeWrapper {
	n.Status.Capacity = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods: resource.MustParse("110"),
	}
	n.Status.Allocatable = n.Status.Capacity.DeepCopy()
	return n
}

// GCE labels the Node with the GCE topology domains it is in; the host domain is the Node's name.
func (n *NodeWrapper) GCE(block, subblock string) *NodeWrapper {
	n.Labels[constants.GCETopologyBlockKey] = block
	n.Labels[constants.GCETopologySubblockKey] = subblock
	n.Labels[constants.GCETopologyHostKey] = n.Name
	return n
}

// TPUCapacity gives the Node the capacity and allocatable of a TPU host VM with chips TPU chips
// (google.com/tpu) and room for 110 Pods; cpu and memory are a ct6e-standard-4t's whatever the
// chips.
func (n *NodeWrapper) TPUCapacity(chips int64) *NodeWrapper {
	n.Status.Capacity = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("180"), corev1.ResourceMemory: resource.MustParse("720Gi"),
		corev1.ResourcePods: resource.MustParse("110"), constants.TPUResourceName: *resource.NewQuantity(chips, resource.DecimalSI),
	}
	n.Status.Allocatable = n.Status.Capacity.DeepCopy()
	return n
}

// GKEStatus gives the Node a status as large as a running GKE Node's: capacity, conditions,
// addresses and the list of images it has pulled (about 15 KiB as JSON).
func (n *NodeWrapper) GKEStatus() *NodeWrapper {
	n.TPUCapacity(4)
	for _, t := range []corev1.NodeConditionType{"FrequentKubeletRestart", "KernelDeadlock", "ReadonlyFilesystem",
		corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeNetworkUnavailable} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: t, Status: corev1.ConditionFalse,
			Reason: "NoProblem", Message: fmt.Sprintf("node has no %s problem", t)})
	}
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady,
		Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"})
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.128.0.2"},
		{Type: corev1.NodeHostName, Address: n.Name}}
	for i := range 40 {
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{SizeBytes: 1 << 30, Names: []string{
			fmt.Sprintf("us-docker.pkg.dev/cloud-tpu-images/ray/ray-tpu-%d@sha256:%064d", i, i),
			fmt.Sprintf("us-docker.pkg.dev/cloud-tpu-images/ray/ray-tpu-%d:2.52.0-py311", i),
		}})
	}
	return n
}
