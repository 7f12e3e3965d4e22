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

// Package testutil holds the builders, comparison options and timeouts shared by every test layer.
package testutil

import (
	"maps"
	"slices"
	"strconv"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
)

// Timeouts and intervals of the integration tests.
const (
	Timeout          = 30 * time.Second
	LongTimeout      = 2 * time.Minute
	ConsistentlyTime = 2 * time.Second
	Interval         = 100 * time.Millisecond
)

// multiKueueController is a RayCluster spec.managedBy value KubeRay's controller leaves alone.
const multiKueueController = "kueue.x-k8s.io/multikueue"

// rayImage is the image of every container the builders make.
const rayImage = "rayproject/ray:2.49.0"

// PodWrapper builds Pods shaped like KubeRay's worker Pods.
type PodWrapper struct{ corev1.Pod }

// MakePod returns a Pod with a name (use GenerateName for KubeRay's shape) and one container.
func MakePod(name, namespace string) *PodWrapper {
	return &PodWrapper{corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{}, Annotations: map[string]string{}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "ray-worker", Image: rayImage}},
		},
	}}
}

// MakeWorkerPod returns a worker Pod of a RayCluster group as KubeRay creates it: generateName
// <cluster>-<group>-worker-, KubeRay's labels and a controller ownerReference to the cluster.
func MakeWorkerPod(namespace, cluster string, clusterUID types.UID, group string) *PodWrapper {
	p := MakePod("", namespace).
		GenerateName(rayutils.PodName(cluster+"-"+group, rayv1.WorkerNode, true)).
		Label(rayutils.RayNodeLabelKey, "yes").
		Label(rayutils.RayClusterLabelKey, cluster).
		Label(rayutils.RayNodeTypeLabelKey, string(rayv1.WorkerNode)).
		Label(rayutils.RayNodeGroupLabelKey, group).
		Label(rayutils.RayIDLabelKey, rayutils.GenerateIdentifier(cluster, rayv1.WorkerNode))
	p.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: rayv1.GroupVersion.String(), Kind: "RayCluster", Name: cluster, UID: clusterUID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
	return p
}

// Obj returns the built Pod.
func (p *PodWrapper) Obj() *corev1.Pod { return &p.Pod }

// Clone returns a deep copy of the wrapper.
func (p *PodWrapper) Clone() *PodWrapper { return &PodWrapper{*p.DeepCopy()} }

// GenerateName sets generateName and clears the name.
func (p *PodWrapper) GenerateName(prefix string) *PodWrapper {
	p.Name, p.ObjectMeta.GenerateName = "", prefix
	return p
}

// Label sets a label.
func (p *PodWrapper) Label(k, v string) *PodWrapper {
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[k] = v
	return p
}

// Annotation sets an annotation.
func (p *PodWrapper) Annotation(k, v string) *PodWrapper {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[k] = v
	return p
}

// Containers replaces the Pod's containers (MakePod's one included) by copies of containers.
func (p *PodWrapper) Containers(containers ...corev1.Container) *PodWrapper {
	p.Spec.Containers = make([]corev1.Container, 0, len(containers))
	for i := range containers {
		p.Spec.Containers = append(p.Spec.Containers, *containers[i].DeepCopy())
	}
	return p
}

// Hostname sets spec.hostname and spec.subdomain.
func (p *PodWrapper) Hostname(hostname, subdomain string) *PodWrapper {
	p.Spec.Hostname, p.Spec.Subdomain = hostname, subdomain
	return p
}

// Claim sets the labels and the annotation that tie a Pod to its claim, as tpuenv.Apply writes
// them: replicaIndex, the slice and worker ID labels and the claim token.
func (p *PodWrapper) Claim(replicaIndex, slice, workerID, token string) *PodWrapper {
	return p.Label(constants.ReplicaIndexLabel, replicaIndex).
		Label(tpuv1alpha1.SliceLabel, slice).
		Label(tpuv1alpha1.WorkerIDLabel, workerID).
		Annotation(tpuv1alpha1.ClaimTokenAnnotation, token)
}

// UID sets the UID.
func (p *PodWrapper) UID(uid types.UID) *PodWrapper {
	p.ObjectMeta.UID = uid
	return p
}

// Topology sets the TPU topology nodeSelector, and the accelerator one when accelerator is not empty.
func (p *PodWrapper) Topology(accelerator, topology string) *PodWrapper {
	if p.Spec.NodeSelector == nil {
		p.Spec.NodeSelector = map[string]string{}
	}
	p.Spec.NodeSelector[constants.TopologyNodeSelectorKey] = topology
	if accelerator != "" {
		p.Spec.NodeSelector[constants.AcceleratorNodeSelectorKey] = accelerator
	}
	return p
}

// NodeSelector adds a nodeSelector term.
func (p *PodWrapper) NodeSelector(k, v string) *PodWrapper {
	if p.Spec.NodeSelector == nil {
		p.Spec.NodeSelector = map[string]string{}
	}
	p.Spec.NodeSelector[k] = v
	return p
}

// TPU sets the first container's google.com/tpu request and limit.
func (p *PodWrapper) TPU(chips int64) *PodWrapper {
	setTPU(&p.Spec.Containers[0], chips)
	return p
}

// Container appends a container requesting chips TPUs (none when 0).
func (p *PodWrapper) Container(name string, chips int64) *PodWrapper {
	c := corev1.Container{Name: name, Image: rayImage}
	if chips > 0 {
		setTPU(&c, chips)
	}
	p.Spec.Containers = append(p.Spec.Containers, c)
	return p
}

// Env appends an environment variable to container i.
func (p *PodWrapper) Env(i int, name, value string) *PodWrapper {
	p.Spec.Containers[i].Env = append(p.Spec.Containers[i].Env, corev1.EnvVar{Name: name, Value: value})
	return p
}

// KubeRayIndexes sets KubeRay's RayMultiHostIndexing labels; hostIndex < 0 omits the multi-host ones.
func (p *PodWrapper) KubeRayIndexes(replica int32, replicaName string, hostIndex int32) *PodWrapper {
	p.Label(rayutils.RayWorkerReplicaIndexKey, strconv.Itoa(int(replica)))
	if hostIndex >= 0 {
		p.Label(rayutils.RayWorkerReplicaNameKey, replicaName)
		p.Label(rayutils.RayHostIndexKey, strconv.Itoa(int(hostIndex)))
	}
	return p
}

// Phase sets the status phase.
func (p *PodWrapper) Phase(phase corev1.PodPhase) *PodWrapper {
	p.Status.Phase = phase
	return p
}

// Terminating marks the Pod as being deleted.
func (p *PodWrapper) Terminating() *PodWrapper {
	p.DeletionTimestamp = ptr.To(metav1.Now())
	return p
}

func setTPU(c *corev1.Container, chips int64) {
	q := *resource.NewQuantity(chips, resource.DecimalSI)
	c.Resources.Requests = corev1.ResourceList{constants.TPUResourceName: q}
	c.Resources.Limits = corev1.ResourceList{constants.TPUResourceName: q}
}

// RayClusterWrapper builds RayClusters.
type RayClusterWrapper struct{ rayv1.RayCluster }

// MakeRayCluster returns a RayCluster with a head group and no worker groups.
func MakeRayCluster(name, namespace string) *RayClusterWrapper {
	return &RayClusterWrapper{rayv1.RayCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: rayv1.RayClusterSpec{
			HeadGroupSpec: rayv1.HeadGroupSpec{
				RayStartParams: map[string]string{},
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "ray-head", Image: rayImage}},
				}},
			},
		},
	}}
}

// Obj returns the built RayCluster.
func (r *RayClusterWrapper) Obj() *rayv1.RayCluster { return &r.RayCluster }

// UID sets the UID.
func (r *RayClusterWrapper) UID(uid types.UID) *RayClusterWrapper {
	r.ObjectMeta.UID = uid
	return r
}

// ManagedByMultiKueue makes KubeRay's controller skip the cluster (tests that create Pods by hand).
func (r *RayClusterWrapper) ManagedByMultiKueue() *RayClusterWrapper {
	r.Spec.ManagedBy = ptr.To(multiKueueController)
	return r
}

// TPUGroup appends a TPU worker group: replicas slices of numOfHosts Pods, each requesting chips.
func (r *RayClusterWrapper) TPUGroup(name, accelerator, topology string, chips int64, numOfHosts, replicas int32) *RayClusterWrapper {
	c := corev1.Container{Name: "ray-worker", Image: rayImage}
	setTPU(&c, chips)
	selector := map[string]string{constants.TopologyNodeSelectorKey: topology}
	if accelerator != "" {
		selector[constants.AcceleratorNodeSelectorKey] = accelerator
	}
	r.Spec.WorkerGroupSpecs = append(r.Spec.WorkerGroupSpecs, rayv1.WorkerGroupSpec{
		GroupName:      name,
		Replicas:       ptr.To(replicas),
		MinReplicas:    ptr.To[int32](0),
		MaxReplicas:    ptr.To(max(replicas, 1) * 4),
		NumOfHosts:     numOfHosts,
		RayStartParams: map[string]string{},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers:   []corev1.Container{c},
			NodeSelector: selector,
		}},
	})
	return r
}

// CPUGroup appends a worker group without TPUs.
func (r *RayClusterWrapper) CPUGroup(name string, replicas int32) *RayClusterWrapper {
	r.Spec.WorkerGroupSpecs = append(r.Spec.WorkerGroupSpecs, rayv1.WorkerGroupSpec{
		GroupName:      name,
		Replicas:       ptr.To(replicas),
		MinReplicas:    ptr.To[int32](0),
		MaxReplicas:    ptr.To(max(replicas, 1) * 4),
		NumOfHosts:     1,
		RayStartParams: map[string]string{},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "ray-worker", Image: rayImage}},
		}},
	})
	return r
}

// Replicas sets the replica count of group i.
func (r *RayClusterWrapper) Replicas(i int, n int32) *RayClusterWrapper {
	r.Spec.WorkerGroupSpecs[i].Replicas = ptr.To(n)
	return r
}

// SliceWrapper builds TPUSliceAssignments.
type SliceWrapper struct{ tpuv1alpha1.TPUSliceAssignment }

// MakeSlice returns a slice of replica of a cluster's group with hosts hosts.
func MakeSlice(name, namespace, cluster string, clusterUID types.UID, group string, replica, hosts int32) *SliceWrapper {
	return &SliceWrapper{tpuv1alpha1.TPUSliceAssignment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: tpuv1alpha1.TPUSliceAssignmentSpec{
			RayClusterName: cluster, RayClusterUID: clusterUID, GroupName: group,
			ReplicaIndex: replica, Hosts: hosts, Topology: "4x4",
		},
	}}
}

// Obj returns the built slice.
func (s *SliceWrapper) Obj() *tpuv1alpha1.TPUSliceAssignment { return &s.TPUSliceAssignment }

// ReplicaName sets KubeRay's replica name.
func (s *SliceWrapper) ReplicaName(name string) *SliceWrapper {
	s.Spec.ReplicaName = name
	return s
}

// Claim appends a claim; podName and podUID empty make it pending.
func (s *SliceWrapper) Claim(id int32, token, podName string, podUID types.UID) *SliceWrapper {
	return s.Claims(tpuv1alpha1.WorkerClaim{WorkerID: id, Token: token, PodName: podName, PodUID: podUID})
}

// Claims appends claims as they are.
func (s *SliceWrapper) Claims(claims ...tpuv1alpha1.WorkerClaim) *SliceWrapper {
	s.Status.Claims = append(s.Status.Claims, claims...)
	s.Status.Claimed = int32(len(s.Status.Claims)) //nolint:gosec // test data.
	return s
}

// Unclaim removes the claim of worker ID id.
func (s *SliceWrapper) Unclaim(id int32) *SliceWrapper {
	s.Status.Claims = slices.DeleteFunc(s.Status.Claims, func(c tpuv1alpha1.WorkerClaim) bool { return c.WorkerID == id })
	s.Status.Claimed = int32(len(s.Status.Claims)) //nolint:gosec // test data.
	return s
}

// ReplacedReplicaNames sets the KubeRay replica names the slice has replaced.
func (s *SliceWrapper) ReplacedReplicaNames(names ...string) *SliceWrapper {
	s.Spec.ReplacedReplicaNames = names
	return s
}

// Finalizer adds a finalizer (the fake client only accepts a Terminating object that has one).
func (p *PodWrapper) Finalizer(name string) *PodWrapper {
	p.Finalizers = append(p.Finalizers, name)
	return p
}

// NumOfHosts sets numOfHosts of group i.
func (r *RayClusterWrapper) NumOfHosts(i int, n int32) *RayClusterWrapper {
	r.Spec.WorkerGroupSpecs[i].NumOfHosts = n
	return r
}

// GroupName renames group i.
func (r *RayClusterWrapper) GroupName(i int, name string) *RayClusterWrapper {
	r.Spec.WorkerGroupSpecs[i].GroupName = name
	return r
}

// NodeSelector sets a nodeSelector entry of group i's Pod template.
func (r *RayClusterWrapper) NodeSelector(i int, key, value string) *RayClusterWrapper {
	spec := &r.Spec.WorkerGroupSpecs[i].Template.Spec
	if spec.NodeSelector == nil {
		spec.NodeSelector = map[string]string{}
	}
	spec.NodeSelector[key] = value
	return r
}

// WithoutNodeSelector removes a nodeSelector entry of group i's Pod template.
func (r *RayClusterWrapper) WithoutNodeSelector(i int, key string) *RayClusterWrapper {
	delete(r.Spec.WorkerGroupSpecs[i].Template.Spec.NodeSelector, key)
	return r
}

// GroupContainer appends a container requesting chips TPUs (none when 0) to group i's Pod template.
func (r *RayClusterWrapper) GroupContainer(i int, name string, chips int64) *RayClusterWrapper {
	c := corev1.Container{Name: name, Image: rayImage}
	if chips > 0 {
		setTPU(&c, chips)
	}
	spec := &r.Spec.WorkerGroupSpecs[i].Template.Spec
	spec.Containers = append(spec.Containers, c)
	return r
}

// SelectorLabels sets the cluster and group labels, from the spec, that the allocator and the
// reconciler list a group's slices by (as allocator.NewSlice sets them).
func (s *SliceWrapper) SelectorLabels() *SliceWrapper {
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[tpuv1alpha1.ClusterLabel] = naming.LabelValue(s.Spec.RayClusterName)
	s.Labels[tpuv1alpha1.GroupLabel] = naming.LabelValue(s.Spec.GroupName)
	return s
}

// Named sets the name (and clears generateName), as the API server does when it creates a
// generateName Pod. (Not "Name": that would shadow the embedded ObjectMeta.Name field.)
func (p *PodWrapper) Named(name string) *PodWrapper {
	p.Name, p.ObjectMeta.GenerateName = name, ""
	return p
}

// WorkerPodFor returns a worker Pod of rc's group exactly as KubeRay would create it from the
// group's template (its spec and annotations, without KubeRay's index labels), or nil when the
// group does not exist.
func WorkerPodFor(rc *rayv1.RayCluster, group string) *PodWrapper {
	for _, g := range rc.Spec.WorkerGroupSpecs {
		if g.GroupName == group {
			p := MakeWorkerPod(rc.Namespace, rc.Name, rc.UID, group)
			p.Spec = *g.Template.Spec.DeepCopy()
			maps.Copy(p.Annotations, g.Template.Annotations) // KubeRay copies the template's annotations
			return p
		}
	}
	return nil
}

// EnvFieldRef appends to container i an environment variable whose value comes from a Pod field
// (valueFrom.fieldRef), as users set TPU_WORKER_ID from a downward API field.
func (p *PodWrapper) EnvFieldRef(i int, name, fieldPath string) *PodWrapper {
	p.Spec.Containers[i].Env = append(p.Spec.Containers[i].Env, corev1.EnvVar{
		Name:      name,
		ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: fieldPath}},
	})
	return p
}

// Affinity sets the Pod's affinity (a deep copy of a).
func (p *PodWrapper) Affinity(a *corev1.Affinity) *PodWrapper {
	p.Spec.Affinity = a.DeepCopy()
	return p
}

// SchedulingGate appends the scheduling gate name to the Pod.
func (p *PodWrapper) SchedulingGate(name string) *PodWrapper {
	p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: name})
	return p
}

// WithoutLabel removes a label.
func (p *PodWrapper) WithoutLabel(k string) *PodWrapper {
	delete(p.Labels, k)
	return p
}

// TPUIdentity sets, on the first TPU container (which must exist), the TPU identity the reference
// webhook or this operator writes: TPU_WORKER_ID=workerID and TPU_NAME=<group>-<replica>, replacing
// existing entries.
func (p *PodWrapper) TPUIdentity(group string, replica, workerID int32) *PodWrapper {
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		if _, ok := c.Resources.Requests[constants.TPUResourceName]; !ok {
			continue
		}
		c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == constants.EnvWorkerID || e.Name == constants.EnvName
		})
		c.Env = append(c.Env,
			corev1.EnvVar{Name: constants.EnvWorkerID, Value: strconv.Itoa(int(workerID))},
			corev1.EnvVar{Name: constants.EnvName, Value: group + "-" + strconv.Itoa(int(replica))})
		return p
	}
	panic("TPUIdentity: the Pod has no TPU container")
}

// Created sets the creation timestamp.
func (p *PodWrapper) Created(at time.Time) *PodWrapper {
	p.CreationTimestamp = metav1.NewTime(at)
	return p
}

// Label sets a label of the RayCluster.
func (r *RayClusterWrapper) Label(k, v string) *RayClusterWrapper {
	if r.Labels == nil {
		r.Labels = map[string]string{}
	}
	r.Labels[k] = v
	return r
}

// GroupAnnotation sets an annotation of group i's Pod template.
func (r *RayClusterWrapper) GroupAnnotation(i int, k, v string) *RayClusterWrapper {
	meta := &r.Spec.WorkerGroupSpecs[i].Template.ObjectMeta
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	meta.Annotations[k] = v
	return r
}

// GroupLabel sets a label of group i's Pod template.
func (r *RayClusterWrapper) GroupLabel(i int, k, v string) *RayClusterWrapper {
	meta := &r.Spec.WorkerGroupSpecs[i].Template.ObjectMeta
	if meta.Labels == nil {
		meta.Labels = map[string]string{}
	}
	meta.Labels[k] = v
	return r
}

// Label sets a label of the slice.
func (s *SliceWrapper) Label(k, v string) *SliceWrapper {
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[k] = v
	return s
}

// Placement sets spec.placement and spec.affinityTopologyKey.
func (s *SliceWrapper) Placement(placement tpuv1alpha1.SlicePlacement, key string) *SliceWrapper {
	s.Spec.Placement, s.Spec.AffinityTopologyKey = placement, key
	return s
}

// Domain sets status.domain.
func (s *SliceWrapper) Domain(domain string) *SliceWrapper {
	s.Status.Domain = domain
	return s
}

// Toleration appends a toleration.
func (p *PodWrapper) Toleration(t corev1.Toleration) *PodWrapper {
	p.Spec.Tolerations = append(p.Spec.Tolerations, t)
	return p
}

// BoundTo sets the Node the Pod is bound to (spec.nodeName).
func (p *PodWrapper) BoundTo(node string) *PodWrapper {
	p.Spec.NodeName = node
	return p
}

// Priority sets the Pod's resolved priority (spec.priority, as the Priority admission plugin
// writes it).
func (p *PodWrapper) Priority(v int32) *PodWrapper {
	p.Spec.Priority = &v
	return p
}

// PinnedTo gives the Pod the operator's pin on node (a required node affinity on metadata.name,
// and the annotation that says the operator wrote it), as a release leaves it.
func (p *PodWrapper) PinnedTo(node string) *PodWrapper {
	p.OwnNodeTerm(node)
	return p.Annotation(tpuv1alpha1.PinnedNodeAnnotation, node)
}

// OwnNodeTerm gives the Pod a required node affinity on node by name of its own (a user's
// matchFields term, without the operator's annotation).
func (p *PodWrapper) OwnNodeTerm(node string) *PodWrapper {
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{}
	}
	p.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
		}}}},
	}}
	return p
}
