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

// Event reasons (PascalCase, events.k8s.io) of every Event the operator records, on Pods and on
// RayClusters; each constant is named after its value. Users filter on them
// (kubectl get events --field-selector reason=TPUWorkerIDTaken).
const (
	// ReasonTPUWorkerIDAssigned is recorded on a Pod when its claim is bound to it. A reconcile that
	// binds more than 8 claims records it once, on the RayCluster, instead (docs/spec.md §8); so do
	// the reasons of released, repaired and adopted claims.
	ReasonTPUWorkerIDAssigned = "TPUWorkerIDAssigned"

	// ReasonTPUClaimReleased is recorded on the RayCluster when a claim is released (once for all
	// the claims of one reason when a reconcile releases more than 8).
	ReasonTPUClaimReleased = "TPUClaimReleased"

	// ReasonTPUSliceRemoved is recorded on the RayCluster when a slice of another RayCluster UID or
	// above the replica count is deleted.
	ReasonTPUSliceRemoved = "TPUSliceRemoved"

	// ReasonTPUWorkerIDTaken is recorded on a Pod this operator admitted that is deleted because
	// another live Pod of its slice holds its worker ID: its create committed after its claim was
	// released, or it is a second Pod carrying one claim's token. Its owner recreates it with a
	// fresh ID.
	ReasonTPUWorkerIDTaken = "TPUWorkerIDTaken"

	// ReasonTPUPodStranded is recorded (Warning) on a released Pod of a ChosenDomain slice that is
	// deleted because it can never bind where it is pinned: its Node is gone, or Pods bound to it
	// took its TPU chips (docs/spec.md §12, "Stranded Pods"). Its owner re-creates it.
	ReasonTPUPodStranded = "TPUPodStranded"

	// ReasonTPUClaimRepaired is recorded on a Pod this operator admitted whose released claim was
	// claimed again for it.
	ReasonTPUClaimRepaired = "TPUClaimRepaired"

	// ReasonTPUWorkerAdopted is recorded on a live Pod that carried a TPU identity in its spec but no
	// claim (created before the operator ran, by the reference webhook, or by hand) when its worker
	// ID is recorded as a bound claim.
	ReasonTPUWorkerAdopted = "TPUWorkerAdopted"

	// ReasonTPUIdentityConflict is recorded on a live Pod whose TPU identity the slice cannot
	// record (its worker ID is held by another live Pod, or is outside the slice) and which the
	// operator did not admit: it is reported, never deleted.
	ReasonTPUIdentityConflict = "TPUIdentityConflict"

	// ReasonTPUSliceMalformed is recorded (Warning) on the RayCluster when the reconciler drops
	// stored lines of a slice that do not parse and rebuilds its claims from the live Pods; the
	// note names the lines (condition Malformed).
	ReasonTPUSliceMalformed = "TPUSliceMalformed"
)

// Event reasons of slice health, recorded on the RayCluster when a condition of the slice changes
// status (docs/spec.md §11). The note is the condition's message.
const (
	// ReasonTPUSliceScheduled: every worker ID's Pod is bound to a node (Scheduled turned True).
	ReasonTPUSliceScheduled = "TPUSliceScheduled"
	// ReasonTPUSliceUnscheduled: Scheduled turned False after it was True.
	ReasonTPUSliceUnscheduled = "TPUSliceUnscheduled"
	// ReasonTPUSlicePlaced: the scheduled hosts are in one domain (Placed turned True).
	ReasonTPUSlicePlaced = "TPUSlicePlaced"
	// ReasonTPUSliceNotPlaced: the hosts are split over domains, or one has none (Placed turned False).
	ReasonTPUSliceNotPlaced = "TPUSliceNotPlaced"
	// ReasonTPUSliceReady: every host is Ready (Ready turned True).
	ReasonTPUSliceReady = "TPUSliceReady"
	// ReasonTPUSliceNotReady: Ready turned False after it was True.
	ReasonTPUSliceNotReady = "TPUSliceNotReady"
	// ReasonTPUSliceDegraded: Degraded turned True.
	ReasonTPUSliceDegraded = "TPUSliceDegraded"
	// ReasonTPUSliceRecovered: Degraded turned False after it was True.
	ReasonTPUSliceRecovered = "TPUSliceRecovered"

	// ReasonTPUSliceDomainChosen: the reconciler chose the ChosenDomain slice's domain and
	// released its gated Pods with a nodeSelector on it (the note names the domain and why).
	ReasonTPUSliceDomainChosen = "TPUSliceDomainChosen"
	// ReasonTPUSliceNoDomain: a Warning that no domain has room for the whole ChosenDomain slice;
	// its Pods wait gated (the note names the domains and what each lacks).
	ReasonTPUSliceNoDomain = "TPUSliceNoDomain"
	// ReasonTPUSliceGated: the ChosenDomain slice's Pods wait behind the operator's scheduling
	// gate for the rest of the slice's Pods.
	ReasonTPUSliceGated = "TPUSliceGated"
	// ReasonTPUSliceInterPodAffinity: a Warning that the slice is placed with inter-pod affinity
	// instead of a chosen domain, because no TPU Node matching its Pods' nodeSelector has a value
	// of its affinity key (the note says which).
	ReasonTPUSliceInterPodAffinity = "TPUSliceInterPodAffinity"
	// ReasonTPUSliceHostListsRecreated: the reconciler re-created the slice's host lists
	// ConfigMap, which live Pods of the slice reference, after it went missing (docs/spec.md §4).
	ReasonTPUSliceHostListsRecreated = "TPUSliceHostListsRecreated"
	// ReasonTPUSliceHostListsForeign: a Warning that a ConfigMap the slice's Pods reference for
	// their host lists is not the slice's (another owner or other data); the operator leaves it.
	ReasonTPUSliceHostListsForeign = "TPUSliceHostListsForeign"
	// ReasonTPUSliceHostListsReplaced: a Warning that a ConfigMap the slice's Pods reference for
	// their host lists was controlled by the slice but did not hold the slice's data or was not
	// immutable; the reconciler deleted it and created the slice's own (docs/spec.md §4).
	ReasonTPUSliceHostListsReplaced = "TPUSliceHostListsReplaced"
	// ReasonTPUSliceCapacityRequested: no domain fits the ChosenDomain slice and the operator
	// asked the cluster for capacity, by a ProvisioningRequest or by capacity Pods (the note says
	// which and what it waits for; docs/spec.md §12, "Capacity").
	ReasonTPUSliceCapacityRequested = "TPUSliceCapacityRequested"
	// ReasonTPUSliceCapacityFailed: a Warning that the slice's ProvisioningRequest failed, lost
	// its booking or capacity, or was not Provisioned in time (the note says when it is retried).
	ReasonTPUSliceCapacityFailed = "TPUSliceCapacityFailed"
)
