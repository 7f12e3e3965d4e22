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

// Package lifecycle decides what happens to a slice's claims given the Pods that carry its label
// (docs/spec.md §8): bind pending claims, release claims whose Pod is gone or finished, release pending
// claims past their TTL, repair Pods created after their claim expired. It is pure; the reconciler
// feeds it a cached view first and, when the decision would release or delete anything, a live view
// whose resourceVersion the resulting write is conditioned on.
package lifecycle

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
)

// Release reasons.
const (
	ReasonPodGone        = "PodGone"
	ReasonPodTerminating = "PodTerminating"
	ReasonPodFinished    = "PodFinished"
	ReasonPendingExpired = "PendingExpired"
)

// ConditionReady is True when every host ID of the slice is bound to a live Pod.
const ConditionReady = "Ready"

// Release is a claim to remove, and why.
type Release struct {
	Claim  tpuv1alpha1.WorkerClaim
	Reason string
}

// Duplicate is a live Pod whose claim is no longer in the slice and whose worker ID another live
// Pod holds: it must be deleted (its owner recreates it with a fresh ID).
type Duplicate struct {
	Pod      *corev1.Pod
	WorkerID int32
	Holder   string
}

// Decision is what the reconciler should write.
type Decision struct {
	// Claims is the slice's new claim list; Changed reports whether it differs from the current one.
	Claims  []tpuv1alpha1.WorkerClaim
	Changed bool
	// Bound, Released and Repaired list what changed, for Events and metrics.
	Bound    []tpuv1alpha1.WorkerClaim
	Released []Release
	Repaired []tpuv1alpha1.WorkerClaim
	// Duplicates are Pods to delete.
	Duplicates []Duplicate
	// Destructive reports whether the decision releases claims or deletes Pods: it must then be
	// made on a live read.
	Destructive bool
	// RequeueAfter is when a pending claim's TTL runs out, zero when none waits.
	RequeueAfter time.Duration
	// Ready is the slice's Ready condition.
	Ready metav1.Condition
}

// Live reports whether a Pod counts as live (docs/spec.md §9): not terminating, not Failed or Succeeded.
func Live(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodFailed && pod.Status.Phase != corev1.PodSucceeded
}

// Decide computes the decision for slice given every Pod labeled with it.
func Decide(slice *tpuv1alpha1.TPUSliceAssignment, pods []corev1.Pod, now time.Time, ttl time.Duration) Decision {
	var d Decision
	byUID := make(map[string]*corev1.Pod, len(pods))
	byToken := make(map[string]*corev1.Pod, len(pods))
	for i := range pods {
		p := &pods[i]
		byUID[string(p.UID)] = p
		if t := p.Annotations[constants.ClaimTokenAnnotation]; t != "" {
			byToken[t] = p
		}
	}
	tokens := map[string]bool{}
	for _, c := range slice.Status.Claims {
		tokens[c.Token] = true
		if c.PodUID != "" {
			pod := byUID[string(c.PodUID)]
			switch {
			case pod == nil:
				d.release(c, ReasonPodGone)
			case pod.DeletionTimestamp != nil:
				d.release(c, ReasonPodTerminating)
			case !Live(pod):
				d.release(c, ReasonPodFinished)
			default:
				d.Claims = append(d.Claims, c)
			}
			continue
		}
		pod := byToken[c.Token]
		switch {
		case pod != nil && Live(pod):
			c.PodName, c.PodUID = pod.Name, pod.UID
			d.Claims = append(d.Claims, c)
			d.Bound = append(d.Bound, c)
			d.Changed = true
		case pod != nil && pod.DeletionTimestamp != nil:
			d.release(c, ReasonPodTerminating)
		case pod != nil:
			d.release(c, ReasonPodFinished)
		default:
			if age := now.Sub(c.ClaimedAt.Time); age < ttl {
				d.Claims = append(d.Claims, c)
				if wait := ttl - age; d.RequeueAfter == 0 || wait < d.RequeueAfter {
					d.RequeueAfter = wait
				}
			} else {
				d.release(c, ReasonPendingExpired)
			}
		}
	}
	d.repairLatePods(slice, pods, tokens, now)
	slices.SortFunc(d.Claims, func(a, b tpuv1alpha1.WorkerClaim) int { return cmp.Compare(a.WorkerID, b.WorkerID) })
	d.Ready = readyCondition(slice, d.Claims)
	return d
}

func (d *Decision) release(c tpuv1alpha1.WorkerClaim, reason string) {
	d.Released = append(d.Released, Release{Claim: c, Reason: reason})
	d.Changed, d.Destructive = true, true
}

// repairLatePods handles live Pods whose token is not in the slice: their create committed after
// the claim was released. The ID is claimed again when free; otherwise the Pod is a duplicate.
func (d *Decision) repairLatePods(slice *tpuv1alpha1.TPUSliceAssignment, pods []corev1.Pod, tokens map[string]bool, now time.Time) {
	for i := range pods {
		p := &pods[i]
		token := p.Annotations[constants.ClaimTokenAnnotation]
		if token == "" || tokens[token] || !Live(p) || !sameGeneration(p, slice) {
			continue
		}
		d.Destructive = true
		id, err := strconv.ParseInt(p.Labels[constants.WorkerIDLabel], 10, 32)
		if err != nil || id < 0 || id >= int64(slice.Spec.Hosts) {
			d.Duplicates = append(d.Duplicates, Duplicate{Pod: p, WorkerID: -1})
			continue
		}
		holder := slices.IndexFunc(d.Claims, func(c tpuv1alpha1.WorkerClaim) bool { return c.WorkerID == int32(id) })
		if holder < 0 {
			c := tpuv1alpha1.WorkerClaim{WorkerID: int32(id), Token: token, PodName: p.Name, PodUID: p.UID, ClaimedAt: metav1.NewTime(now)}
			d.Claims = append(d.Claims, c)
			d.Repaired = append(d.Repaired, c)
			d.Changed = true
			continue
		}
		name := d.Claims[holder].PodName
		if name == "" {
			name = "(pending claim " + d.Claims[holder].Token + ")"
		}
		d.Duplicates = append(d.Duplicates, Duplicate{Pod: p, WorkerID: int32(id), Holder: name})
	}
}

// sameGeneration reports whether pod belongs to the RayCluster generation the slice records. A Pod
// of a deleted generation (same cluster name, other UID) carries the same slice label but awaits
// the garbage collector: it must never take an ID of the new generation.
func sameGeneration(pod *corev1.Pod, slice *tpuv1alpha1.TPUSliceAssignment) bool {
	ref := metav1.GetControllerOfNoCopy(pod)
	return ref == nil || ref.Kind != "RayCluster" || ref.UID == slice.Spec.RayClusterUID
}

func readyCondition(slice *tpuv1alpha1.TPUSliceAssignment, claims []tpuv1alpha1.WorkerClaim) metav1.Condition {
	bound := 0
	for _, c := range claims {
		if c.PodUID != "" {
			bound++
		}
	}
	cond := metav1.Condition{Type: ConditionReady, ObservedGeneration: slice.Generation}
	if int32(bound) == slice.Spec.Hosts { //nolint:gosec // bound <= len(claims) <= Hosts.
		cond.Status, cond.Reason = metav1.ConditionTrue, "AllHostsBound"
	} else {
		cond.Status, cond.Reason = metav1.ConditionFalse, "HostsMissing"
	}
	cond.Message = fmt.Sprintf("%d of %d hosts bound to a Pod, %d claimed", bound, slice.Spec.Hosts, len(claims))
	return cond
}

// ApplyStatus writes the decision into status and reports whether status changed.
func ApplyStatus(status *tpuv1alpha1.TPUSliceAssignmentStatus, d Decision) bool {
	changed := d.Changed
	if d.Changed {
		status.Claims = d.Claims
	}
	if n := int32(len(status.Claims)); status.Claimed != n { //nolint:gosec // at most Hosts claims.
		status.Claimed = n
		changed = true
	}
	if apimeta.SetStatusCondition(&status.Conditions, d.Ready) {
		changed = true
	}
	return changed
}
