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

// Event reasons (PascalCase, events.k8s.io) and the notes that go with them. Every Event the
// operator emits is listed here.
const (
	// ReasonWorkerIDAssigned is recorded on a Pod when its claim is bound to it.
	ReasonWorkerIDAssigned = "TPUWorkerIDAssigned"
	noteWorkerIDAssigned   = "TPU worker ID %d of slice %s (replica %d) is bound to this Pod"

	// ReasonClaimReleased is recorded on the RayCluster when a claim is released.
	ReasonClaimReleased = "TPUClaimReleased"
	noteClaimReleased   = "Released TPU worker ID %d of slice %s: %s"

	// ReasonStaleSliceRemoved is recorded on the RayCluster when a slice of another generation or
	// above the replica count is deleted.
	ReasonStaleSliceRemoved = "TPUSliceRemoved"
	noteStaleSliceRemoved   = "Removed TPUSliceAssignment %s: %s"

	// ReasonDuplicateWorkerDeleted is recorded on a Pod deleted because its claim expired and
	// another live Pod now holds its worker ID; its owner recreates it with a fresh ID.
	ReasonDuplicateWorkerDeleted = "TPUWorkerIDTaken"
	noteDuplicateWorkerDeleted   = "Deleting this Pod: its claim on TPU worker ID %d of slice %s expired before the Pod was created and Pod %s now holds that ID; its owner recreates it with a fresh ID"

	// ReasonClaimRepaired is recorded on a Pod whose expired claim was claimed again.
	ReasonClaimRepaired = "TPUClaimRepaired"
	noteClaimRepaired   = "TPU worker ID %d of slice %s claimed again: the Pod was created after its pending claim expired"
)
