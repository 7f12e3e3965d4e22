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

package placement

// The notes of placement's Events, next to their reasons (api/v1alpha1/events.go); the claim
// reconciler's are in controllers/events.go.
const (
	noteTPUSliceDomainChosen     = "Released %d gated Pods of slice %s with nodeSelector %s=%s, %d of them pinned to a free Node each: %s"
	noteTPUPodStranded           = "Deleting this Pod of slice %s: it was released onto %s=%s pinned to Node %s, and can never bind there: %s; its owner re-creates it and it is released onto a free Node of the domain"
	noteTPUSliceNoDomain         = "The Pods of slice %s stay gated: %s"
	noteTPUSliceCapacity         = "No domain fits slice %s: %s"
	noteTPUSliceGated            = "The Pods of slice %s wait behind the scheduling gate: %s"
	noteTPUSliceInterPodAffinity = "Slice %s is kept in one %s domain by inter-pod affinity, not a chosen domain: no TPU Node matching its Pods' nodeSelector had that label when it was created"

	// msgWaitingForPods is DomainChosen's message while a slice's Pods assemble: the gated Pods, the
	// missing worker IDs and when the assembly timeout ends (a time, so that the message, and the
	// status, stay the same from one reconcile to the next).
	msgWaitingForPods = "%d Pods gated, waiting for %s until %s at the latest (--slice-assembly-timeout)"
)
