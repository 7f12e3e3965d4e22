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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The cluster autoscaler's ProvisioningRequest API, autoscaling.x-k8s.io/v1, as its documentation
// and CRD define it: the fields this operator writes and reads, with the CRD's own validation so
// that the CRD generated from them (test/crds, for the local cluster's stand-in autoscaler)
// refuses what the autoscaler's refuses.

// GroupVersion is the API's group and version.
var GroupVersion = schema.GroupVersion{Group: "autoscaling.x-k8s.io", Version: "v1"}

// Resource is the API's resource, for discovery.
const Resource = "provisioningrequests"

// Provisioning classes (spec.provisioningClassName).
const (
	// ClassBestEffortAtomicScaleUp: the autoscaler adds all the capacity at once or none, and
	// retries with backoff until the request's ValidUntilSeconds.
	ClassBestEffortAtomicScaleUp = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
	// ClassCheckCapacity: the autoscaler only checks whether the capacity exists.
	ClassCheckCapacity = "check-capacity.autoscaling.x-k8s.io"
	// ClassQueuedProvisioning: GKE's Dynamic Workload Scheduler queues the request until the
	// capacity can be had at once.
	ClassQueuedProvisioning = "queued-provisioning.gke.io"
)

// Condition types the autoscaler sets on a request's status.
const (
	ConditionAccepted        = "Accepted"
	ConditionProvisioned     = "Provisioned"
	ConditionFailed          = "Failed"
	ConditionBookingExpired  = "BookingExpired"
	ConditionCapacityRevoked = "CapacityRevoked"
)

// Pod annotations that say which request's capacity a Pod consumes: the autoscaler stops booking
// the capacity for the Pods that carry them.
const (
	ConsumeAnnotation = "autoscaling.x-k8s.io/consume-provisioning-request"
	ClassAnnotation   = "autoscaling.x-k8s.io/provisioning-class-name"
)

// ProvisioningRequest asks the cluster autoscaler for capacity for a set of Pods.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=provreq;provreqs
type ProvisioningRequest struct { //nolint:revive // the Kind, as the API names it
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ProvisioningRequestSpec `json:"spec"`
	// +optional
	Status ProvisioningRequestStatus `json:"status,omitempty"`
}

// ProvisioningRequestSpec is immutable: a change is a new request.
type ProvisioningRequestSpec struct { //nolint:revive // as the API names it
	// PodSets lists the groups of Pods to provision capacity for.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	// +listType=atomic
	PodSets []PodSet `json:"podSets"`

	// ProvisioningClassName names how the capacity is provisioned.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	ProvisioningClassName string `json:"provisioningClassName"`

	// Parameters holds what a class may need, such as ValidUntilSeconds.
	// +kubebuilder:validation:MaxProperties=100
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	// +optional
	Parameters map[string]Parameter `json:"parameters,omitempty"`
}

// Parameter is one class parameter's value.
// +kubebuilder:validation:MaxLength=255
type Parameter string

// PodSet is a group of identical Pods.
type PodSet struct {
	// PodTemplateRef names a PodTemplate in the request's namespace.
	PodTemplateRef Reference `json:"podTemplateRef"`
	// Count is the number of Pods.
	// +kubebuilder:validation:Minimum=1
	Count int32 `json:"count"`
}

// Reference names an object in the request's namespace.
type Reference struct {
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
	Name string `json:"name"`
}

// ProvisioningRequestStatus is written by the autoscaler.
type ProvisioningRequestStatus struct { //nolint:revive // as the API names it
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	ProvisioningClassDetails map[string]Detail `json:"provisioningClassDetails,omitempty"`
}

// Detail is one value a class reports.
// +kubebuilder:validation:MaxLength=32768
type Detail string

// ProvisioningRequestList is a list of ProvisioningRequests.
//
// +kubebuilder:object:root=true
type ProvisioningRequestList struct { //nolint:revive // the list Kind, as the API names it
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProvisioningRequest `json:"items"`
}

// AddToScheme registers the types with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &ProvisioningRequest{}, &ProvisioningRequestList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
