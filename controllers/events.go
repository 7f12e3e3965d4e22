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

package controllers

import "strings"

// The notes of the operator's Events, next to their reasons (api/v1alpha1/events.go). Every Event
// the operator emits has its note here.
const (
	noteTPUWorkerIDAssigned = "TPU worker ID %d of slice %s (replica %d) is bound to this Pod"

	noteTPUClaimReleased = "Released TPU worker ID %d of slice %s: %s"

	noteTPUSliceRemoved = "Removed TPUSliceAssignment %s: %s"

	noteTPUWorkerIDTaken = "Deleting this Pod: its TPU worker ID %d of slice %s is held by Pod %s (this Pod's claim was released before its create committed, or it carries another Pod's claim token); its owner recreates it with a fresh ID"

	noteTPUClaimRepaired = "TPU worker ID %d of slice %s claimed again: the Pod was created after its pending claim was released"

	noteTPUSliceMalformed = "Slice %s held stored claim or host lines that do not parse: %s"

	noteTPUWorkerAdopted = "TPU worker ID %d of slice %s recorded for this Pod, which carried it in its spec before the operator claimed it"

	// The notes of slice health (health.go): the slice, its replica index, the condition's message.
	noteTPUSliceScheduled   = "Every host of slice %s (replica %d) is bound to a node: %s"
	noteTPUSliceUnscheduled = "Slice %s (replica %d) has hosts not bound to a node: %s"
	noteTPUSlicePlaced      = "Every scheduled host of slice %s (replica %d) is in one placement domain: %s"
	noteTPUSliceNotPlaced   = "Slice %s (replica %d) is not in one placement domain: %s"
	noteTPUSliceReady       = "Every host of slice %s (replica %d) is Ready: %s"
	noteTPUSliceNotReady    = "Slice %s (replica %d) is no longer Ready: %s"
	noteTPUSliceDegraded    = "Slice %s (replica %d) is degraded: %s"
	noteTPUSliceRecovered   = "Slice %s (replica %d) is no longer degraded: %s"

	// The notes of the placement step (placement.go).
	noteTPUSliceDomainChosen     = "Released %d gated Pods of slice %s with nodeSelector %s=%s, %d of them pinned to a free Node each: %s"
	noteTPUPodStranded           = "Deleting this Pod of slice %s: it was released onto %s=%s pinned to Node %s, and can never bind there: %s; its owner re-creates it and it is released onto a free Node of the domain"
	noteTPUSliceNoDomain         = "The Pods of slice %s stay gated: %s"
	noteTPUSliceGated            = "The Pods of slice %s wait behind the scheduling gate: %s"
	noteTPUSliceInterPodAffinity = "Slice %s is kept in one %s domain by inter-pod affinity, not a chosen domain: no TPU Node matching its Pods' nodeSelector had that label when it was created"

	// msgWaitingForPods is DomainChosen's message while a slice's Pods assemble: the gated Pods, the
	// missing worker IDs and when the assembly timeout ends (a time, so that the message, and the
	// status, stay the same from one reconcile to the next).
	msgWaitingForPods = "%d Pods gated, waiting for %s until %s at the latest (--slice-assembly-timeout)"

	// The notes of the host lists ConfigMaps (hostlists.go).
	noteTPUSliceHostListsRecreated = "Re-created ConfigMap %s, which live Pods of slice %s take their host lists from"
	noteTPUSliceHostListsForeign   = "ConfigMap %s, which live Pods of slice %s take their host lists from, is not the slice's (%s): delete it, and the operator writes the slice's own"

	noteTPUIdentityConflict = "This Pod carries TPU worker ID %d of slice %s, which the slice cannot record: %s; the operator leaves it running, delete the Pod that should go"
)

// maxNoteBytes is the longest note an events.k8s.io Event may carry (the API server refuses more
// than 1 kB).
const maxNoteBytes = 1024

// boundedNote cuts a note that may be longer than an Event allows (it quotes stored lines).
func boundedNote(note string) string {
	if len(note) <= maxNoteBytes {
		return note
	}
	return strings.ToValidUTF8(note[:maxNoteBytes-3], "") + "..."
}
