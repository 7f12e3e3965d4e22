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

// Condition types of a TPUSliceAssignment, and their reasons.
const (
	// ConditionReady is True when every worker ID of the slice is bound to a live Pod.
	ConditionReady = "Ready"
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
)
