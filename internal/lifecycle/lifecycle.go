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

// Package lifecycle decides what happens to a slice's claims given the Pods that may hold its worker
// IDs (docs/spec.md §8): bind pending claims, release claims whose Pod is gone or finished, release
// pending claims past their TTL, record live Pods that hold an ID without a claim (late Pods and
// Pods from before the operator ran), and resolve two live Pods with one ID.
//
// What links a claim to a Pod is the Pod's immutable identity: its UID once bound, and before
// that the worker ID and slice its spec names (package identity). The claim-token annotation only
// chooses between Pods that the spec already qualifies; labels are not read at all. So a label or
// annotation edit never releases, moves or duplicates an ID.
//
// The package is pure; the reconciler feeds it a cached view first and, when the decision would
// release, add or delete anything, a live view whose resourceVersion the resulting write is
// conditioned on.
package lifecycle

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
)

// Release reasons.
const (
	ReasonPodGone        = "PodGone"
	ReasonPodTerminating = "PodTerminating"
	ReasonPodFinished    = "PodFinished"
	ReasonPendingExpired = "PendingExpired"
)

// Release is a claim to remove, and why.
type Release struct {
	Claim  tpuv1alpha1.WorkerClaim
	Reason string
}

// Duplicate is a live Pod that this operator admitted (it carries a claim token) whose worker ID
// another live Pod of the slice holds: its create committed after its claim was released, or it
// is a second Pod carrying one claim's token. It must be deleted; its owner recreates it and the
// new Pod gets a fresh ID.
type Duplicate struct {
	Pod      *corev1.Pod
	WorkerID int32
	Holder   string
}

// Conflict is a live Pod with a TPU identity of this slice that the slice cannot record and that
// this operator did not admit (no claim token): it is reported, never deleted.
type Conflict struct {
	Pod      *corev1.Pod
	WorkerID int32
	// Why says what the identity conflicts with.
	Why string
}

// Decision is what the reconciler should write.
type Decision struct {
	// Claims is the slice's new claim list; Changed reports whether it differs from the current one.
	Claims  []tpuv1alpha1.WorkerClaim
	Changed bool
	// Bound, Released, Repaired and Adopted list what changed, for Events and metrics. Repaired
	// claims are of Pods the operator admitted whose claim had been released (a create that
	// committed late, or whose slice was deleted meanwhile); Adopted claims are of Pods that carry
	// an identity but no claim token (created before the operator ran, or by hand).
	Bound    []tpuv1alpha1.WorkerClaim
	Released []Release
	Repaired []tpuv1alpha1.WorkerClaim
	Adopted  []tpuv1alpha1.WorkerClaim
	// Duplicates are Pods to delete; Conflicts are Pods to report.
	Duplicates []Duplicate
	Conflicts  []Conflict
	// Destructive reports whether the decision releases or adds claims or deletes Pods: it must
	// then be made on a live read.
	Destructive bool
	// RequeueAfter is when a pending claim's TTL runs out, zero when none waits.
	RequeueAfter time.Duration
	// Claimed and Conflict are the slice's conditions of those types (docs/spec.md §7).
	Claimed, Conflict metav1.Condition
	// MalformedLines are the slice's stored lines that did not parse (its status's
	// MalformedLines). The decision drops them: Claims is the slice's valid claims with the live
	// Pods its spec identity places in the slice, as any repair. Malformed is then the condition
	// that names them (Type "" when there are none).
	MalformedLines []string
	Malformed      metav1.Condition
}

// View is what Decide decides on.
type View struct {
	Slice *tpuv1alpha1.TPUSliceAssignment
	// Pods are every Pod that may hold one of the slice's worker IDs: those whose spec identity
	// names the slice and those its bound claims name. Others are ignored.
	Pods []corev1.Pod
	// Gone reports whether the Pod that carried a claim token has been seen and is gone. A Pod
	// that only left a label-selected view is not gone: a decision that releases anything must be
	// made on a View whose Gone a read of the Pod by name confirmed (docs/spec.md §8). Nil means
	// nothing is known.
	Gone func(token string) bool
	// PendingFor returns how long the observer has known a pending claim, on its own clock. Nil
	// means every pending claim was seen just now.
	PendingFor func(claim tpuv1alpha1.WorkerClaim) time.Duration
}

// PodLive reports whether a Pod counts as live (docs/spec.md §9): not terminating, not Failed or
// Succeeded.
func PodLive(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodFailed && pod.Status.Phase != corev1.PodSucceeded
}

// member is a Pod whose spec identity places it in the slice.
type member struct {
	pod *corev1.Pod
	id  identity.Identity
}

// decider holds the state of one Decide call.
type decider struct {
	View
	ttl     time.Duration
	d       Decision
	byUID   map[types.UID]*corev1.Pod
	members []member
	// strangers are Pods whose identity names the slice but whose topology gives another host count.
	strangers []member
	// holders are the UIDs of Pods that hold a claim after this decision.
	holders map[types.UID]bool
}

// Decide computes the decision for a slice given the Pods that may hold its worker IDs.
func Decide(v View, ttl time.Duration) Decision {
	dc := &decider{View: v, ttl: ttl, byUID: make(map[types.UID]*corev1.Pod, len(v.Pods)), holders: map[types.UID]bool{}}
	dc.index()
	if lines := v.Slice.Status.MalformedLines; len(lines) > 0 {
		// Only this write may drop them (the status refuses to encode otherwise): made on a live
		// read, conditional on its resourceVersion, never delayed.
		dc.d.MalformedLines = slices.Clone(lines)
		dc.d.Changed, dc.d.Destructive = true, true
	}
	for _, c := range v.Slice.Status.Claims {
		if c.PodUID != "" {
			dc.bound(c)
		}
	}
	for _, c := range v.Slice.Status.Claims {
		if c.PodUID == "" {
			dc.pending(c)
		}
	}
	dc.unclaimed()
	d := &dc.d
	slices.SortFunc(d.Claims, func(a, b tpuv1alpha1.WorkerClaim) int { return cmp.Compare(a.WorkerID, b.WorkerID) })
	d.Claimed = claimedCondition(v.Slice, d.Claims)
	d.Conflict = conflictCondition(v.Slice, d.Conflicts)
	if len(d.MalformedLines) > 0 {
		d.Malformed = malformedCondition(v.Slice, d.MalformedLines)
	}
	return *d
}

// index sorts the Pods whose identity places them in the slice, oldest first, so that every choice
// between Pods is deterministic and favors the Pod that was there first.
func (dc *decider) index() {
	s := dc.Slice
	for i := range dc.Pods {
		p := &dc.Pods[i]
		dc.byUID[p.UID] = p
		id, ok := identity.FromPod(p)
		// A Pod whose name or UID cannot be stored in a claim line cannot hold a claim (the API
		// server never makes one; a fake or forged object could).
		if !ok || !tpuv1alpha1.ValidPodName(p.Name) || !tpuv1alpha1.ValidPodUID(string(p.UID)) || id.Cluster != s.Spec.RayClusterName || id.Group != s.Spec.GroupName || id.Replica != s.Spec.ReplicaIndex {
			continue
		}
		// A Pod of a deleted RayCluster (same names, another owner UID) awaits the
		// garbage collector: it never holds an ID of the re-created one.
		if !id.OfClusterUID(s.Spec.RayClusterUID) {
			continue
		}
		if id.Hosts != 0 && id.Hosts != s.Spec.Hosts {
			dc.strangers = append(dc.strangers, member{pod: p, id: id})
			continue
		}
		dc.members = append(dc.members, member{pod: p, id: id})
	}
	slices.SortStableFunc(dc.members, oldestFirst)
	slices.SortStableFunc(dc.strangers, oldestFirst)
}

func oldestFirst(a, b member) int {
	if c := a.pod.CreationTimestamp.Compare(b.pod.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Compare(a.pod.Name, b.pod.Name)
}

// bound keeps a bound claim while its Pod (same UID) is live.
func (dc *decider) bound(c tpuv1alpha1.WorkerClaim) {
	pod := dc.byUID[c.PodUID]
	switch {
	case pod == nil:
		dc.release(c, ReasonPodGone)
	case pod.DeletionTimestamp != nil:
		dc.release(c, ReasonPodTerminating)
	case !PodLive(pod):
		dc.release(c, ReasonPodFinished)
	default:
		dc.d.Claims = append(dc.d.Claims, c)
		dc.holders[pod.UID] = true
	}
}

// pending binds a pending claim to the live Pod whose spec holds its worker ID (the one carrying
// its token first), releases it when its Pod is known to be gone or finished, or past its TTL, and
// otherwise keeps it.
func (dc *decider) pending(c tpuv1alpha1.WorkerClaim) {
	var byToken, bySpec *corev1.Pod
	finished := ""
	for _, m := range dc.members {
		if m.id.WorkerID != c.WorkerID || dc.holders[m.pod.UID] {
			continue
		}
		token := identity.Token(m.pod)
		switch {
		case PodLive(m.pod) && token == c.Token && byToken == nil:
			byToken = m.pod
		case PodLive(m.pod) && bySpec == nil && !identity.CarriesSeal(m.pod):
			// The Pod holds the ID by its spec without this claim's token: its annotation was
			// removed or edited, it was created before the operator, or its own claim was
			// released before its create committed. It is there; the claim's own Pod, if it
			// ever appears, is the late one.
			bySpec = m.pod
		case !PodLive(m.pod) && token == c.Token:
			finished = ReasonPodFinished
			if m.pod.DeletionTimestamp != nil {
				finished = ReasonPodTerminating
			}
		}
	}
	if pod := cmp.Or(byToken, bySpec); pod != nil {
		c.PodName, c.PodUID = pod.Name, pod.UID
		dc.d.Claims = append(dc.d.Claims, c)
		dc.d.Bound = append(dc.d.Bound, c)
		dc.d.Changed = true
		dc.holders[pod.UID] = true
		return
	}
	switch {
	case finished != "":
		dc.release(c, finished)
		return
	case dc.Gone != nil && dc.Gone(c.Token):
		dc.release(c, ReasonPodGone)
		return
	}
	age := dc.pendingFor(c)
	if age >= dc.ttl {
		dc.release(c, ReasonPendingExpired)
		return
	}
	dc.d.Claims = append(dc.d.Claims, c)
	if wait := dc.ttl - age; dc.d.RequeueAfter == 0 || wait < dc.d.RequeueAfter {
		dc.d.RequeueAfter = wait
	}
}

func (dc *decider) pendingFor(c tpuv1alpha1.WorkerClaim) time.Duration {
	if dc.PendingFor != nil {
		return dc.PendingFor(c)
	}
	return 0
}

// unclaimed handles the live Pods whose spec places them in the slice but that hold no claim: a
// free worker ID is claimed for them; a taken one makes a Pod this operator admitted a duplicate
// (deleted) and any other Pod a conflict (reported).
func (dc *decider) unclaimed() {
	hosts := dc.Slice.Spec.Hosts
	for _, m := range dc.strangers {
		if PodLive(m.pod) {
			dc.conflict(m.pod, m.id.WorkerID, fmt.Sprintf("its topology gives %d hosts, the slice has %d", m.id.Hosts, hosts))
		}
	}
	// The Pods this operator admitted (they carry a token) first: of two live Pods that hold one
	// ID and no claim, the one it admitted gets the claim, never one made past it (docs/spec.md §8).
	members := slices.Clone(dc.members)
	slices.SortStableFunc(members, func(a, b member) int {
		return cmp.Compare(boolInt(identity.Token(a.pod) == ""), boolInt(identity.Token(b.pod) == ""))
	})
	for _, m := range members {
		p, id := m.pod, m.id.WorkerID
		if dc.holders[p.UID] || !PodLive(p) {
			continue
		}
		token := identity.Token(p)
		if identity.CarriesSeal(p) {
			// Its token was copied from the slice's status: a Pod made past the webhook, which
			// no claim is bound or adopted to (docs/spec.md §8).
			dc.conflict(p, id, "it carries a claim token copied from the slice's status")
			continue
		}
		if id >= hosts {
			dc.conflict(p, id, fmt.Sprintf("worker ID %d is outside a slice of %d hosts", id, hosts))
			continue
		}
		holder := slices.IndexFunc(dc.d.Claims, func(c tpuv1alpha1.WorkerClaim) bool { return c.WorkerID == id })
		if holder < 0 {
			c := tpuv1alpha1.WorkerClaim{WorkerID: id, Token: cmp.Or(token, string(p.UID)), PodName: p.Name, PodUID: p.UID}
			dc.d.Claims = append(dc.d.Claims, c)
			if token != "" {
				dc.d.Repaired = append(dc.d.Repaired, c)
			} else {
				dc.d.Adopted = append(dc.d.Adopted, c)
			}
			dc.holders[p.UID] = true
			dc.d.Changed, dc.d.Destructive = true, true
			continue
		}
		name := dc.d.Claims[holder].PodName
		if held := dc.d.Claims[holder]; token == "" || (held.PodUID != "" && held.Token == string(held.PodUID)) {
			// A Pod the operator admitted is never deleted in favor of one it adopted, which
			// it never admitted (its claim's token is its UID): both are reported.
			dc.conflict(p, id, "Pod "+name+" holds that worker ID")
			continue
		}
		dc.d.Duplicates = append(dc.d.Duplicates, Duplicate{Pod: p, WorkerID: id, Holder: name})
		dc.d.Destructive = true
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (dc *decider) release(c tpuv1alpha1.WorkerClaim, reason string) {
	dc.d.Released = append(dc.d.Released, Release{Claim: c, Reason: reason})
	dc.d.Changed, dc.d.Destructive = true, true
}

func (dc *decider) conflict(p *corev1.Pod, id int32, why string) {
	dc.d.Conflicts = append(dc.d.Conflicts, Conflict{Pod: p, WorkerID: id, Why: why})
}

// claimedCondition: True when every worker ID is bound to a live Pod. Versions before slice health
// (docs/spec.md §11) called it Ready.
func claimedCondition(slice *tpuv1alpha1.TPUSliceAssignment, claims []tpuv1alpha1.WorkerClaim) metav1.Condition {
	bound := 0
	for _, c := range claims {
		if c.PodUID != "" {
			bound++
		}
	}
	cond := metav1.Condition{Type: tpuv1alpha1.ConditionClaimed, ObservedGeneration: slice.Generation}
	if int32(bound) == slice.Spec.Hosts { //nolint:gosec // bound <= len(claims) <= Hosts.
		cond.Status, cond.Reason = metav1.ConditionTrue, tpuv1alpha1.ReasonAllHostsBound
	} else {
		cond.Status, cond.Reason = metav1.ConditionFalse, tpuv1alpha1.ReasonHostsMissing
	}
	cond.Message = fmt.Sprintf("%d of %d hosts bound to a Pod, %d claimed", bound, slice.Spec.Hosts, len(claims))
	return cond
}

// maxConflictsNamed bounds the Pods a Conflict condition's message names.
const maxConflictsNamed = 5

func conflictCondition(slice *tpuv1alpha1.TPUSliceAssignment, conflicts []Conflict) metav1.Condition {
	cond := metav1.Condition{Type: tpuv1alpha1.ConditionConflict, ObservedGeneration: slice.Generation,
		Status: metav1.ConditionFalse, Reason: tpuv1alpha1.ReasonNoConflict, Message: "every live Pod's TPU identity is recorded"}
	if len(conflicts) == 0 {
		return cond
	}
	named := make([]string, 0, min(len(conflicts), maxConflictsNamed))
	for _, c := range conflicts[:min(len(conflicts), maxConflictsNamed)] {
		named = append(named, fmt.Sprintf("Pod %s (worker ID %d: %s)", c.Pod.Name, c.WorkerID, c.Why))
	}
	more := ""
	if n := len(conflicts) - len(named); n > 0 {
		more = fmt.Sprintf(" and %d more", n)
	}
	cond.Status, cond.Reason = metav1.ConditionTrue, tpuv1alpha1.ReasonIdentityConflict
	cond.Message = fmt.Sprintf("%d live Pods carry a TPU identity of this slice that it cannot record: %s%s; "+
		"they were not given it by this operator and are left running: delete the one that should go",
		len(conflicts), strings.Join(named, ", "), more)
	return cond
}

// maxMalformedNamed and maxMalformedChars bound the lines a Malformed condition's message names,
// and the characters it shows of each.
const (
	maxMalformedNamed = 5
	maxMalformedChars = 200
)

// malformedCondition names the malformed lines the decision drops.
func malformedCondition(slice *tpuv1alpha1.TPUSliceAssignment, lines []string) metav1.Condition {
	named := make([]string, 0, min(len(lines), maxMalformedNamed))
	for _, l := range lines[:min(len(lines), maxMalformedNamed)] {
		if len(l) > maxMalformedChars {
			l = l[:maxMalformedChars] + "..."
		}
		named = append(named, l)
	}
	more := ""
	if n := len(lines) - len(named); n > 0 {
		more = fmt.Sprintf(" and %d more", n)
	}
	return metav1.Condition{Type: tpuv1alpha1.ConditionMalformed, ObservedGeneration: slice.Generation,
		Status: metav1.ConditionFalse, Reason: tpuv1alpha1.ReasonMalformedLinesDropped,
		Message: fmt.Sprintf("dropped %d stored lines that do not parse and rebuilt the claims from the live Pods: %s%s",
			len(lines), strings.Join(named, "; "), more)}
}

// ApplyStatus writes the decision into status and reports whether status changed.
func ApplyStatus(status *tpuv1alpha1.TPUSliceAssignmentStatus, d Decision) bool {
	changed := d.Changed
	if d.Changed {
		status.Claims = d.Claims
	}
	if len(d.MalformedLines) > 0 {
		status.MalformedLines = nil
		changed = true
	}
	if n := int32(len(status.Claims)); status.Claimed != n { //nolint:gosec // at most Hosts claims.
		status.Claimed = n
		changed = true
	}
	for _, cond := range []metav1.Condition{d.Claimed, d.Conflict, d.Malformed} {
		if cond.Type != "" && apimeta.SetStatusCondition(&status.Conditions, cond) {
			changed = true
		}
	}
	return changed
}
