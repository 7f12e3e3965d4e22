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

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TPUSliceAssignmentSpec identifies one slice: one replica of a RayCluster worker group.
// The spec is written once, when the slice is first claimed, and never changes: the API server
// refuses any change to it. A slice of a re-created RayCluster (a new UID) is a new object.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: a slice of another generation is a new TPUSliceAssignment"
type TPUSliceAssignmentSpec struct {
	// rayClusterName is the name of the RayCluster that owns the slice.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	RayClusterName string `json:"rayClusterName"`

	// rayClusterUID is the UID of the RayCluster the slice belongs to. A RayCluster deleted
	// and re-created with the same name is a different cluster: its Pods never join this slice.
	// +required
	RayClusterUID types.UID `json:"rayClusterUID"`

	// groupName is the RayCluster worker group (spec.workerGroupSpecs[].groupName).
	// +kubebuilder:validation:MinLength=1
	// +required
	GroupName string `json:"groupName"`

	// replicaIndex is the index of the slice inside its worker group.
	// +kubebuilder:validation:Minimum=0
	// +required
	ReplicaIndex int32 `json:"replicaIndex"`

	// replicaName is KubeRay's replica name (label ray.io/worker-group-replica-name), set when KubeRay
	// indexes multi-host replicas itself. A Pod with another replica name belongs to a newer replica.
	// +optional
	ReplicaName string `json:"replicaName,omitempty"`

	// replacedReplicaNames are the KubeRay replica names this replica had before,
	// oldest first. KubeRay never goes back to a replaced replica, so a Pod naming one of them is a
	// create of an older replica name still in flight, and is refused.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	ReplacedReplicaNames []string `json:"replacedReplicaNames,omitempty"`

	// hosts is the number of hosts (worker Pods) in the slice; worker IDs are 0..hosts-1. The
	// schema's maximum is a backstop far above any TPU slice; the operator's --max-slice-hosts is
	// the real bound.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	// +required
	Hosts int32 `json:"hosts"`

	// topology is the TPU topology of the slice, e.g. 4x4 or 2x2x4.
	// +kubebuilder:validation:Pattern=`^[0-9]+(x[0-9]+){0,2}$`
	// +required
	Topology string `json:"topology"`

	// accelerator is the GKE TPU accelerator type (cloud.google.com/gke-tpu-accelerator), if set.
	// +optional
	Accelerator string `json:"accelerator,omitempty"`

	// affinityTopologyKey is the topologyKey of the required pod affinity and anti-affinity the
	// operator gives the slice's Pods (cloud.google.com/gke-nodepool, or a GCE topology level for a
	// subslice), chosen at the slice's first claim so that every Pod of the slice gets the same one.
	// Empty when the operator adds no slice affinity (single-host, Kueue or GKE dynamic slicing),
	// or for a slice created before the field existed.
	// +optional
	AffinityTopologyKey string `json:"affinityTopologyKey,omitempty"`

	// placement is how the operator keeps the slice's Pods in one domain of affinityTopologyKey,
	// chosen at the slice's first claim so that every Pod of the slice is placed the same way
	// (docs/spec.md §4):
	//   - ChosenDomain: the Pods are admitted with the scheduling gate tpu.ray.io/slice-placement
	//     and no inter-pod terms; the reconciler chooses one domain with room for the whole slice,
	//     records it in status.domain, and releases the Pods with a nodeSelector on it;
	//   - InterPodAffinity: required pod affinity to the slice and anti-affinity to every other
	//     slice, placed by the scheduler alone: the operator runs with
	//     --slice-placement=InterPodAffinity, or no TPU Node matching the Pods' nodeSelector had a
	//     value of the key when the slice was created.
	// Empty for a slice without slice affinity (single-host, Kueue, GKE dynamic slicing, a user's
	// own term) and for a slice created before the field existed, whose Pods keep inter-pod
	// affinity when affinityTopologyKey is set.
	// +kubebuilder:validation:Enum=ChosenDomain;InterPodAffinity
	// +optional
	Placement SlicePlacement `json:"placement,omitempty"`
}

// SlicePlacement is how the operator keeps a slice's Pods in one domain (spec.placement).
type SlicePlacement string

const (
	// PlacementChosenDomain means the operator chooses the slice's domain and releases its gated Pods
	// with a nodeSelector on it.
	PlacementChosenDomain SlicePlacement = "ChosenDomain"
	// PlacementInterPodAffinity means the slice's Pods carry required pod affinity and anti-affinity.
	PlacementInterPodAffinity SlicePlacement = "InterPodAffinity"
)

// WorkerClaim records that one worker ID of the slice is taken.
type WorkerClaim struct {
	// WorkerID is the claimed TPU_WORKER_ID (the host ID).
	WorkerID int32
	// Token is the random value the admission webhook wrote onto the Pod (annotation
	// tpu.ray.io/claim-token). At admission a generateName Pod has neither name nor UID, so the
	// token names the claim until the claim is bound. An adopted Pod's claim has the Pod's UID.
	Token string
	// PodName and PodUID are the Pod holding the claim, once bound.
	PodName string
	PodUID  types.UID
}

// ClaimList is the claims of a slice, at most one per worker ID. It is stored as one string
// with one line per claim, sorted by worker ID:
//
//	<workerID> <token>                    a pending claim
//	<workerID> <token> <podName> <podUID> a claim bound to its Pod
//
// One string rather than a list of objects because the API server's work on a custom resource
// grows with its number of fields (decoding, schema validation, pruning, managed fields): a claim
// in a 2,240-host slice cost ten times more as a list of objects (docs/design.md, "How claims are
// stored"). Uniqueness still rests on the resourceVersion-checked update, and decoding refuses a
// string that names a worker ID twice. Objects stored by earlier versions, as a list of objects,
// decode too; the next write stores them as a string.
type ClaimList []WorkerClaim

// TPUSliceAssignmentStatus holds the claims: which worker IDs of the slice are taken, and by whom.
type TPUSliceAssignmentStatus struct {
	// workers lists the claimed worker IDs, one line per claim sorted by worker ID:
	// "<workerID> <token>" while pending, "<workerID> <token> <podName> <podUID>" once bound.
	// Every change is written with a resourceVersion-checked update, so two claims on one ID can
	// never both succeed.
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=1048576
	// +optional
	Claims ClaimList `json:"workers,omitempty"`

	// claims is the list form of the claims that versions before the workers string stored. It is
	// read (into workers) when workers is absent and never written: the next status write of the
	// slice stores workers instead.
	//
	// Deprecated: read workers.
	// +listType=atomic
	// +optional
	LegacyClaims []LegacyWorkerClaim `json:"claims,omitempty"`

	// domain is the value of spec.affinityTopologyKey (e.g. the node pool) that the reconciler
	// chose for a ChosenDomain slice, recorded before any of its Pods is released with a
	// nodeSelector on it (condition DomainChosen says why). Empty while none is chosen, and for a
	// slice of another placement.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Domain string `json:"domain,omitempty"`

	// hostListsConfigMaps names the ConfigMaps the slice's live Pods take TPU_WORKER_HOSTNAMES and
	// the other lists of the slice's hosts from (docs/spec.md §4): a slice of more hosts than the
	// webhook's --host-lists-configmap-above has one; it is owned by the slice, and the reconciler
	// re-creates it while a live Pod references it. Only the reconciler writes this field.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=set
	// +optional
	HostListsConfigMaps []string `json:"hostListsConfigMaps,omitempty"`

	// claimed is the number of claims, shown by kubectl.
	// +optional
	Claimed int32 `json:"claimed"`

	// hosts lists what the reconciler observed of each host whose Pod is bound to a node, one line
	// per host sorted by worker ID: "<workerID> <node> <domain> Ready|NotReady", where domain is
	// the value of the slice's placement key on the node ("-" for none). The host's Pod is the claim
	// of that worker ID in workers. Only the reconciler writes it.
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=1048576
	// +optional
	Hosts HostList `json:"hosts,omitempty"`

	// conditions describe the state of the slice (docs/spec.md §7, §11): Claimed (every host ID is
	// bound to a live Pod), Scheduled (every host's Pod is bound to a node), Placed (the hosts'
	// nodes share one value of the placement key), Ready (every host's Pod and node are Ready),
	// Degraded (a host's node is failing or going, or a host stopped being Ready after the slice
	// was), and Conflict (live Pods carry an identity of the slice that it cannot record).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// MalformedLines are the stored lines of workers and hosts (or entries of the legacy claims)
	// that did not parse when the object was decoded, each an error naming the line. Such lines
	// are never stored by this operator's encoder; they come from a hand-written status, an older
	// version or a bug. The object still decodes with every line that parses, so that one bad
	// object never stops the operator's list and watch; the reconciler reports the lines
	// (condition Malformed, Event TPUSliceMalformed) and repairs the slice from its live Pods. A
	// status that holds them cannot be encoded (MarshalJSON), so no write drops them silently;
	// the allocator claims nothing in the slice's group until the repair. Never serialized.
	MalformedLines []string `json:"-"`
}

// LegacyWorkerClaim is a claim as versions before the workers string stored it.
type LegacyWorkerClaim struct {
	// +kubebuilder:validation:Minimum=0
	// +required
	WorkerID int32 `json:"workerID"`
	// +kubebuilder:validation:MinLength=1
	// +required
	Token string `json:"token"`
	// +optional
	PodName string `json:"podName,omitempty"`
	// +optional
	PodUID types.UID `json:"podUID,omitempty"`
	// +optional
	ClaimedAt metav1.Time `json:"claimedAt,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="!has(self.status) || !has(self.status.claimed) || self.status.claimed <= self.spec.hosts",message="a slice cannot hold more claims than hosts"
// +kubebuilder:resource:shortName=tsa;tpuslice,categories=ray
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.rayClusterName`
// +kubebuilder:printcolumn:name="Group",type=string,JSONPath=`.spec.groupName`
// +kubebuilder:printcolumn:name="Replica",type=integer,JSONPath=`.spec.replicaIndex`
// +kubebuilder:printcolumn:name="Topology",type=string,JSONPath=`.spec.topology`
// +kubebuilder:printcolumn:name="Claimed",type=integer,JSONPath=`.status.claimed`
// +kubebuilder:printcolumn:name="Hosts",type=integer,JSONPath=`.spec.hosts`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Domain",type=string,JSONPath=`.status.domain`,priority=1
// +kubebuilder:printcolumn:name="Placed",type=string,JSONPath=`.status.conditions[?(@.type=="Placed")].status`,priority=1
// +kubebuilder:printcolumn:name="Degraded",type=string,JSONPath=`.status.conditions[?(@.type=="Degraded")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// TPUSliceAssignment records the TPU worker IDs claimed in one multi-host TPU slice: one replica of a
// KubeRay RayCluster worker group. The operator's Pod webhook writes the claims; its reconciler binds
// them to Pods and releases them when the Pods go.
type TPUSliceAssignment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec TPUSliceAssignmentSpec `json:"spec"`
	// +optional
	Status TPUSliceAssignmentStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// TPUSliceAssignmentList contains a list of TPUSliceAssignment.
type TPUSliceAssignmentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TPUSliceAssignment `json:"items"`
}
