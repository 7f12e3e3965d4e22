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

// Condition types of a TPUSliceAssignment, and their reasons (docs/spec.md §7, §11).
const (
	// ConditionClaimed is True when every worker ID of the slice is bound to a live Pod. Versions
	// before slice health called this condition Ready.
	ConditionClaimed = "Claimed"
	// ReasonAllHostsBound: every worker ID is bound to a live Pod.
	ReasonAllHostsBound = "AllHostsBound"
	// ReasonHostsMissing: some worker ID is not claimed, or claimed but not yet bound.
	ReasonHostsMissing = "HostsMissing"

	// ConditionConflict is True when live Pods carry a TPU identity of this slice that the slice
	// cannot record: a worker ID another live Pod holds, or one outside [0, hosts). Such Pods were
	// not given their identity by this operator (they were created before it ran, by hand, or by
	// another webhook); the operator reports them and never deletes them for it.
	ConditionConflict = "Conflict"
	// ReasonIdentityConflict: at least one live Pod's identity conflicts (the message names them).
	ReasonIdentityConflict = "IdentityConflict"
	// ReasonNoConflict: every live Pod's identity is recorded.
	ReasonNoConflict = "NoConflict"

	// ConditionScheduled is True when every worker ID is held by a Pod bound to a node.
	ConditionScheduled = "Scheduled"
	// ReasonAllHostsScheduled: every worker ID's Pod is bound to a node.
	ReasonAllHostsScheduled = "AllHostsScheduled"
	// ReasonHostsUnscheduled: some worker ID has no Pod, or its Pod is not bound to a node yet.
	ReasonHostsUnscheduled = "HostsUnscheduled"

	// ReasonSchedulingGated: Scheduled is False because Pods of the ChosenDomain slice wait behind
	// the operator's scheduling gate for a domain (condition DomainChosen says for what).
	ReasonSchedulingGated = "SchedulingGated"

	// ConditionDomainChosen is present on a ChosenDomain slice (spec.placement) once it has Pods:
	// True when status.domain names a domain with room for the whole slice (the message says why
	// it was chosen), False while the slice's Pods wait behind the operator's scheduling gate.
	ConditionDomainChosen = "DomainChosen"
	// ReasonDomainFits: status.domain has room for every host of the slice and no other slice
	// holds it.
	ReasonDomainFits = "DomainFits"
	// ReasonPodsBound: status.domain no longer fits the slice, but its Pods are bound to it and
	// stay: a nodeSelector never changes.
	ReasonPodsBound = "PodsBound"
	// ReasonWaitingForPods: some of the slice's Pods do not exist yet; the ones that do wait gated
	// until the rest arrive or the assembly timeout passes (--slice-assembly-timeout).
	ReasonWaitingForPods = "WaitingForPods"
	// ReasonNoDomainFits: no domain has room for the whole slice now; the message names the
	// domains and what each lacks. The Pods wait gated and the choice is made again when Nodes,
	// Pods or other slices change.
	ReasonNoDomainFits = "NoDomainFits"

	// ConditionCapacity is present on a ChosenDomain slice once no domain fitted it and the
	// operator asked the cluster for capacity (docs/spec.md §12, "Capacity"): False while the
	// request waits or failed, True once the capacity is there.
	ConditionCapacity = "Capacity"
	// ReasonProvisioningRequested: a ProvisioningRequest for the slice's Pods waits for the
	// cluster autoscaler (the message names it and its class).
	ReasonProvisioningRequested = "ProvisioningRequested"
	// ReasonProvisioned: the slice's ProvisioningRequest is Provisioned.
	ReasonProvisioned = "Provisioned"
	// ReasonProvisioningFailed: the slice's ProvisioningRequest failed, lost its booking or its
	// capacity, or was not Provisioned in time; the message says why and when it is asked again.
	ReasonProvisioningFailed = "ProvisioningFailed"
	// ReasonCapacityPodsPending: the slice's capacity Pods wait for the scheduler (and the
	// cluster autoscaler) to bind them in one new domain.
	ReasonCapacityPodsPending = "CapacityPodsPending"
	// ReasonCapacityPodsBound: every capacity Pod of the slice is bound, in one domain.
	ReasonCapacityPodsBound = "CapacityPodsBound"

	// ConditionPlaced is True when every scheduled host's node has the same value of the slice's
	// placement key (one ICI domain), False when they differ or a node has no value, and Unknown
	// while no host is scheduled.
	ConditionPlaced = "Placed"
	// ReasonOneDomain: every scheduled host is in one domain.
	ReasonOneDomain = "OneDomain"
	// ReasonSplitDomains: the scheduled hosts are in two or more domains (the message names them).
	ReasonSplitDomains = "SplitDomains"
	// ReasonDomainUnknown: a scheduled host's node has no value of the placement key, or is not known.
	ReasonDomainUnknown = "DomainUnknown"
	// ReasonNoHostScheduled: no host is scheduled yet.
	ReasonNoHostScheduled = "NoHostScheduled"

	// ConditionReady is True when every worker ID is held by a Pod that is Ready on a node that is
	// Ready: the slice can run.
	ConditionReady = "Ready"
	// ReasonAllHostsReady: every host's Pod and node are Ready.
	ReasonAllHostsReady = "AllHostsReady"
	// ReasonHostsNotReady: the slice has not been Ready yet.
	ReasonHostsNotReady = "HostsNotReady"
	// ReasonReadinessLost: the slice was Ready and a host stopped being Ready; the reason stays
	// until every host is Ready again.
	ReasonReadinessLost = "ReadinessLost"

	// ConditionDegraded is True when a scheduled host's node is failing or about to go (not Ready,
	// unschedulable, being deleted, gone, tainted for maintenance, preemption or removal), or a
	// host stopped being Ready after the slice was Ready. The message names the hosts. When several
	// apply, the reason is the first of this list.
	ConditionDegraded = "Degraded"
	// ReasonNodeMissing: a host's Pod is bound to a node that does not exist (any more).
	ReasonNodeMissing = "NodeMissing"
	// ReasonNodeDeleting: a host's node is being deleted.
	ReasonNodeDeleting = "NodeDeleting"
	// ReasonNodeNotReady: a host's node Ready condition is False or Unknown, or missing.
	ReasonNodeNotReady = "NodeNotReady"
	// ReasonNodeTainted: a host's node carries a taint of maintenance, preemption or removal.
	ReasonNodeTainted = "NodeTainted"
	// ReasonNodeUnschedulable: a host's node is cordoned (spec.unschedulable).
	ReasonNodeUnschedulable = "NodeUnschedulable"
	// ReasonPodNotReady: a host's Pod stopped being Ready, or went, after the slice was Ready.
	ReasonPodNotReady = "PodNotReady"
	// ReasonHostsHealthy: nothing above applies.
	ReasonHostsHealthy = "HostsHealthy"

	// ConditionMalformed is present once the slice's stored status held lines that do not parse
	// (status.workers or status.hosts written by hand, by an older version, or by a bug; see
	// TPUSliceAssignmentStatus.MalformedLines). The reconciler drops them in the write that
	// rebuilds the claims from the live Pods, and that write sets this condition False with
	// reason MalformedLinesDropped, its message naming the lines: the slice holds none now, and
	// the condition says which were dropped and when (lastTransitionTime). Slices that never held
	// one have no such condition.
	ConditionMalformed = "Malformed"
	// ReasonMalformedLinesDropped: stored lines that did not parse were dropped and the claims
	// rebuilt from the live Pods (the message names the lines).
	ReasonMalformedLinesDropped = "MalformedLinesDropped"
)
