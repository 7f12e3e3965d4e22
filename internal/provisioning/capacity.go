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

package provisioning

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
)

// AttemptAnnotation numbers a slice's ProvisioningRequests: the first is 1, each retry the next.
const AttemptAnnotation = "tpu.ray.io/capacity-attempt"

// Retry backoff after a request ends without capacity: 1 minute, doubled per attempt, at most
// 30 minutes (Kueue's ProvisioningRequestConfig defaults).
const (
	BackoffBase = time.Minute
	BackoffMax  = 30 * time.Minute
)

// Slice is what the capacity objects are built from: the slice's identity, its host count and
// placement key, and the spec of one of its gated Pods, which all share one shape.
// +kubebuilder:object:generate=false
type Slice struct {
	Namespace string
	Name      string
	UID       types.UID
	Hosts     int32
	Key       string
	Pod       *corev1.Pod
}

// owner is the controller reference every capacity object carries: the slice's deletion deletes
// them.
func (s Slice) owner() metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: tpuv1alpha1.GroupVersion.String(), Kind: "TPUSliceAssignment", Name: s.Name, UID: s.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}
}

func (s Slice) meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Namespace: s.Namespace, Name: name,
		Labels:          map[string]string{tpuv1alpha1.CapacityForLabel: s.Name},
		OwnerReferences: []metav1.OwnerReference{s.owner()},
	}
}

// Shape is the part of a gated Pod's spec that decides where it can run: its nodeSelector,
// affinity, tolerations, priority class, scheduler, topology spread, volumes, and its containers'
// resources, ports and restart policy (sidecars). Environment, commands, probes and the
// scheduling gates are dropped: the TPU host lists alone can reach a megabyte.
func Shape(pod *corev1.Pod) corev1.PodSpec {
	in := &pod.Spec
	out := corev1.PodSpec{
		NodeSelector:              in.NodeSelector,
		Affinity:                  in.Affinity,
		Tolerations:               in.Tolerations,
		PriorityClassName:         in.PriorityClassName,
		SchedulerName:             in.SchedulerName,
		TopologySpreadConstraints: in.TopologySpreadConstraints,
		RuntimeClassName:          in.RuntimeClassName,
		Volumes:                   in.Volumes,
		RestartPolicy:             in.RestartPolicy,
		HostNetwork:               in.HostNetwork,
	}
	strip := func(cs []corev1.Container) []corev1.Container {
		out := make([]corev1.Container, 0, len(cs))
		for _, c := range cs {
			out = append(out, corev1.Container{Name: c.Name, Image: c.Image, Resources: c.Resources, Ports: c.Ports,
				RestartPolicy: c.RestartPolicy, VolumeMounts: c.VolumeMounts})
		}
		return out
	}
	out.Containers = strip(in.Containers)
	if len(in.InitContainers) > 0 {
		out.InitContainers = strip(in.InitContainers)
	}
	return *out.DeepCopy()
}

// Name is the name of a slice's ProvisioningRequest and PodTemplate of attempt n (n ≥ 1).
func Name(slice string, n int) string {
	return slice + "-capacity-" + strconv.Itoa(n)
}

// PodName is the name of a slice's capacity Pod of host i in attempt n: an attempt's Pods never
// share a name with the last one's, which may still be terminating.
func PodName(slice string, n, i int) string {
	return Name(slice, n) + "-" + strconv.Itoa(i)
}

// NewPodTemplate is the PodTemplate a slice's ProvisioningRequest of attempt n refers to.
func NewPodTemplate(s Slice, n int) *corev1.PodTemplate {
	return &corev1.PodTemplate{
		ObjectMeta: s.meta(Name(s.Name, n)),
		Template:   corev1.PodTemplateSpec{Spec: Shape(s.Pod)},
	}
}

// NewRequest is a slice's ProvisioningRequest of attempt n, of class: one pod set of the slice's
// hosts, on the PodTemplate of the same name.
func NewRequest(s Slice, n int, class string) *ProvisioningRequest {
	pr := &ProvisioningRequest{
		ObjectMeta: s.meta(Name(s.Name, n)),
		Spec: ProvisioningRequestSpec{
			ProvisioningClassName: class,
			PodSets:               []PodSet{{PodTemplateRef: Reference{Name: Name(s.Name, n)}, Count: s.Hosts}},
		},
	}
	SetAttempt(pr, n)
	return pr
}

// Attempt is a request's attempt number, 0 when it has none.
func Attempt(pr *ProvisioningRequest) int { return AttemptOf(pr) }

// AttemptOf is a capacity object's attempt number, 0 when it has none.
func AttemptOf(obj metav1.Object) int {
	n, err := strconv.Atoi(obj.GetAnnotations()[AttemptAnnotation])
	if err != nil || n < 1 {
		return 0
	}
	return n
}

// SetAttempt numbers a capacity object's attempt.
func SetAttempt(obj metav1.Object, n int) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[AttemptAnnotation] = strconv.Itoa(n)
	obj.SetAnnotations(a)
}

// Phase is where a ProvisioningRequest stands.
type Phase int

const (
	// Pending is a request the autoscaler has not decided on yet.
	Pending Phase = iota
	// Provisioned is a request whose capacity is there.
	Provisioned
	// Ended is a request that failed, lost its booking or had its capacity revoked: it will
	// not bring capacity any more.
	Ended
)

// State is what a ProvisioningRequest's conditions say.
// +kubebuilder:object:generate=false
type State struct {
	Phase Phase
	// Reason and Message are the deciding condition's, Since when it turned True.
	Reason, Message string
	Since           time.Time
}

// StateOf reads a request's conditions, as the autoscaler's documentation defines them: Failed,
// BookingExpired or CapacityRevoked True ends it; Provisioned True is capacity; anything else
// waits.
func StateOf(pr *ProvisioningRequest) State {
	for _, t := range []string{ConditionFailed, ConditionCapacityRevoked, ConditionBookingExpired} {
		if c := apimeta.FindStatusCondition(pr.Status.Conditions, t); c != nil && c.Status == metav1.ConditionTrue {
			return State{Phase: Ended, Reason: t, Message: c.Message, Since: c.LastTransitionTime.Time}
		}
	}
	if c := apimeta.FindStatusCondition(pr.Status.Conditions, ConditionProvisioned); c != nil && c.Status == metav1.ConditionTrue {
		return State{Phase: Provisioned, Reason: ConditionProvisioned, Message: c.Message, Since: c.LastTransitionTime.Time}
	}
	return State{Phase: Pending, Since: pr.CreationTimestamp.Time}
}

// Backoff is how long after attempt n ended the next request is created.
func Backoff(n int) time.Duration {
	d := BackoffBase
	for i := 1; i < n && d < BackoffMax; i++ {
		d *= 2
	}
	return min(d, BackoffMax)
}

// capacityContainer is the one container of a capacity Pod: it only holds the resources.
const capacityContainer = "capacity"

// NewCapacityPods are a slice's capacity Pods of attempt n, one per host, for a cluster without the
// ProvisioningRequest API: ungated Pods of the slice's shape, so the scheduler marks them
// Unschedulable and the cluster autoscaler scales up for them, that
//   - request what one of the slice's Pods requests (its effective requests, as requests and,
//     for resources other than CPU and memory, limits), running image;
//   - land in one domain of the key, by required pod affinity among themselves;
//   - stay out of every domain in existing, which were judged not to fit (a partly free one
//     would take some of them and never the rest), by node affinity on the key;
//   - stay out of the domains of other slices' capacity Pods, by required pod anti-affinity.
//
// When all are bound the slice takes their domain and releases its Pods there, and they are
// deleted. A gated Pod can never gain pod affinity, so the slice's own Pods cannot carry this.
func NewCapacityPods(s Slice, n int, existing []string, image string) []*corev1.Pod {
	shape := Shape(s.Pod)
	requests := resourcehelper.PodRequests(s.Pod, resourcehelper.PodResourcesOptions{})
	limits := corev1.ResourceList{}
	for name, q := range requests {
		if name != corev1.ResourceCPU && name != corev1.ResourceMemory && name != corev1.ResourceEphemeralStorage {
			limits[name] = q
		}
	}
	spec := corev1.PodSpec{
		NodeSelector:                  shape.NodeSelector,
		Tolerations:                   shape.Tolerations,
		PriorityClassName:             shape.PriorityClassName,
		SchedulerName:                 shape.SchedulerName,
		TerminationGracePeriodSeconds: ptr.To[int64](0),
		AutomountServiceAccountToken:  ptr.To(false),
		EnableServiceLinks:            ptr.To(false),
		RestartPolicy:                 corev1.RestartPolicyAlways,
		Containers: []corev1.Container{{
			Name: capacityContainer, Image: image,
			Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits},
		}},
	}
	affinity := &corev1.Affinity{}
	if shape.Affinity != nil {
		affinity = shape.Affinity.DeepCopy()
	}
	if len(existing) > 0 {
		out := corev1.NodeSelectorRequirement{Key: s.Key, Operator: corev1.NodeSelectorOpNotIn, Values: slices.Sorted(slices.Values(existing))}
		if affinity.NodeAffinity == nil {
			affinity.NodeAffinity = &corev1.NodeAffinity{}
		}
		req := affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		if req == nil || len(req.NodeSelectorTerms) == 0 {
			req = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{}}}
		}
		// Terms are ORed: each must exclude the existing domains.
		for i := range req.NodeSelectorTerms {
			req.NodeSelectorTerms[i].MatchExpressions = append(req.NodeSelectorTerms[i].MatchExpressions, out)
		}
		affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = req
	}
	mine := &metav1.LabelSelector{MatchLabels: map[string]string{tpuv1alpha1.CapacityForLabel: s.Name}}
	others := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: tpuv1alpha1.CapacityForLabel, Operator: metav1.LabelSelectorOpExists},
		{Key: tpuv1alpha1.CapacityForLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{s.Name}},
	}}
	if affinity.PodAffinity == nil {
		affinity.PodAffinity = &corev1.PodAffinity{}
	}
	affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution,
		corev1.PodAffinityTerm{LabelSelector: mine, TopologyKey: s.Key})
	if affinity.PodAntiAffinity == nil {
		affinity.PodAntiAffinity = &corev1.PodAntiAffinity{}
	}
	affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution,
		corev1.PodAffinityTerm{LabelSelector: others, TopologyKey: s.Key, NamespaceSelector: &metav1.LabelSelector{}})
	spec.Affinity = affinity
	pods := make([]*corev1.Pod, 0, s.Hosts)
	for i := range s.Hosts {
		p := &corev1.Pod{ObjectMeta: s.meta(PodName(s.Name, n, int(i))), Spec: *spec.DeepCopy()}
		SetAttempt(p, n)
		pods = append(pods, p)
	}
	return pods
}

// Describe names what a slice waits for, for conditions and Events.
func Describe(pr *ProvisioningRequest) string {
	return fmt.Sprintf("ProvisioningRequest %s (class %s, %d Pods)", pr.Name, pr.Spec.ProvisioningClassName, pr.Spec.PodSets[0].Count)
}
