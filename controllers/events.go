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

import (
	"fmt"
	"maps"
	"slices"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/health"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/slicectrl"
)

// The notes of the claim reconciler's Events, next to their reasons (api/v1alpha1/events.go);
// placement's are in controllers/placement/events.go.
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

	// The notes of the host lists ConfigMaps (hostlists.go).
	noteTPUSliceHostListsRecreated = "Re-created ConfigMap %s, which live Pods of slice %s take their host lists from"
	noteTPUSliceHostListsForeign   = "ConfigMap %s, which live Pods of slice %s take their host lists from, is not the slice's (%s): delete it, and the operator writes the slice's own"
	noteTPUSliceHostListsReplaced  = "ConfigMap %s, which live Pods of slice %s take their host lists from, is controlled by the slice but %s: replacing it with the slice's own"

	noteTPUIdentityConflict = "This Pod carries TPU worker ID %d of slice %s, which the slice cannot record: %s; the operator leaves it running, delete the Pod that should go"
)

// maxClaimEvents is the most Events on single claims of one kind (bound, adopted, repaired, released
// for one reason) one reconcile records; above it, one Event on the RayCluster names their worker
// IDs as ranges (docs/spec.md §8). A 1,024-host slice binds hundreds of claims in one reconcile,
// and an Event on each Pod was an API write each, posted at once beside KubeRay's creates: `make
// bench` S7 took 1.70 times the baseline with them and 1.35 with this bound (medians of 11 runs on
// a busy machine, docs/performance.md).
const maxClaimEvents = 8

// The notes of the Events that sum up more than maxClaimEvents claims: their count, their worker
// IDs as ranges, the slice.
const (
	noteTPUWorkerIDsAssigned = "TPU worker IDs %s of slice %s (replica %d) are bound to their %d Pods"
	noteTPUClaimsReleased    = "Released %d TPU worker IDs of slice %s (%s): %s"
	noteTPUClaimsRepaired    = "%d TPU worker IDs of slice %s (%s) claimed again: their Pods were created after their pending claims were released"
	noteTPUWorkersAdopted    = "%d TPU worker IDs of slice %s (%s) recorded for the Pods that carried them in their spec before the operator claimed them"
)

// claimEvent is an Event the reconciler records about claims it changed.
type claimEvent struct {
	regarding                       runtime.Object
	eventType, reason, action, note string
}

// claimEvents returns the Events of the claims decision d changed in slice of rc: one on each Pod
// (one on rc for each release) when there are at most maxClaimEvents of a kind, and otherwise one on
// rc for the kind, in the order bound, repaired, adopted, released (by reason).
func claimEvents(rc *rayv1.RayCluster, slice *tpuv1alpha1.TPUSliceAssignment, d lifecycle.Decision) []claimEvent {
	podOf := func(c tpuv1alpha1.WorkerClaim) *corev1.Pod {
		pod := &corev1.Pod{}
		pod.Name, pod.Namespace, pod.UID = c.PodName, slice.Namespace, c.PodUID
		return pod
	}
	var out []claimEvent
	add := func(regarding runtime.Object, eventType, reason, action, note string) {
		out = append(out, claimEvent{regarding: regarding, eventType: eventType, reason: reason, action: action, note: slicectrl.BoundedNote(note)})
	}
	onPod := func(c tpuv1alpha1.WorkerClaim) runtime.Object { return podOf(c) }
	onCluster := func(tpuv1alpha1.WorkerClaim) runtime.Object { return rc }
	// each records an Event per claim, on what regarding names, or one on rc for them all.
	each := func(claims []tpuv1alpha1.WorkerClaim, regarding func(tpuv1alpha1.WorkerClaim) runtime.Object, eventType, reason, action string,
		one func(tpuv1alpha1.WorkerClaim) string, many func(ids string, n int) string) {
		if len(claims) <= maxClaimEvents {
			for _, c := range claims {
				add(regarding(c), eventType, reason, action, one(c))
			}
			return
		}
		add(rc, eventType, reason, action, many(health.Ranges(workerIDs(claims)), len(claims)))
	}
	each(d.Bound, onPod, corev1.EventTypeNormal, tpuv1alpha1.ReasonTPUWorkerIDAssigned, "Bind",
		func(c tpuv1alpha1.WorkerClaim) string {
			return fmt.Sprintf(noteTPUWorkerIDAssigned, c.WorkerID, slice.Name, slice.Spec.ReplicaIndex)
		},
		func(ids string, n int) string {
			return fmt.Sprintf(noteTPUWorkerIDsAssigned, ids, slice.Name, slice.Spec.ReplicaIndex, n)
		})
	each(d.Repaired, onPod, corev1.EventTypeWarning, tpuv1alpha1.ReasonTPUClaimRepaired, "Claim",
		func(c tpuv1alpha1.WorkerClaim) string {
			return fmt.Sprintf(noteTPUClaimRepaired, c.WorkerID, slice.Name)
		},
		func(ids string, n int) string { return fmt.Sprintf(noteTPUClaimsRepaired, n, slice.Name, ids) })
	each(d.Adopted, onPod, corev1.EventTypeNormal, tpuv1alpha1.ReasonTPUWorkerAdopted, "Adopt",
		func(c tpuv1alpha1.WorkerClaim) string {
			return fmt.Sprintf(noteTPUWorkerAdopted, c.WorkerID, slice.Name)
		},
		func(ids string, n int) string { return fmt.Sprintf(noteTPUWorkersAdopted, n, slice.Name, ids) })
	released := map[string][]tpuv1alpha1.WorkerClaim{}
	for _, rel := range d.Released {
		released[rel.Reason] = append(released[rel.Reason], rel.Claim)
	}
	for _, why := range slices.Sorted(maps.Keys(released)) {
		each(released[why], onCluster, corev1.EventTypeNormal, tpuv1alpha1.ReasonTPUClaimReleased, "Release",
			func(c tpuv1alpha1.WorkerClaim) string {
				return fmt.Sprintf(noteTPUClaimReleased, c.WorkerID, slice.Name, why)
			},
			func(ids string, n int) string { return fmt.Sprintf(noteTPUClaimsReleased, n, slice.Name, ids, why) })
	}
	return out
}

// workerIDs returns the worker IDs of claims.
func workerIDs(claims []tpuv1alpha1.WorkerClaim) []int32 {
	ids := make([]int32, 0, len(claims))
	for _, c := range claims {
		ids = append(ids, c.WorkerID)
	}
	return ids
}
