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

// Package claims decides where TPU worker Pods go: which slice (replica) of a worker group and which
// worker ID inside it (docs/spec.md §3). It is pure: the caller reads the slices, asks Plan for a
// decision and commits it with resourceVersion-checked writes; a conflict means the snapshot was
// stale, and the caller re-reads and plans again. Uniqueness never rests on this package's view
// being fresh.
//
// Plan only ever adds claims (docs/spec.md §10). It replaces a slice, or takes over one of its
// claims, only when the caller's Reclaimable confirms that no live Pod holds what is replaced, or
// when the slice belongs to another RayCluster UID, which the caller must have confirmed
// with a live read of the RayCluster.
package claims

import (
	"fmt"
	"slices"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
)

// Group describes the worker group every request of a Plan call belongs to.
type Group struct {
	// ClusterUID is the live RayCluster's UID; slices recorded for another UID are dead.
	ClusterUID types.UID
	// Hosts is the number of hosts per slice, from the requests' topology.
	Hosts int32
	// DesiredReplicas bounds the replica indexes of the group's slices (clamp(replicas, min, max)
	// of the group): the indexes the operator chooses itself and those KubeRay's index labels
	// name (a label is a hint anyone can write, docs/spec.md §10).
	DesiredReplicas int32
}

// Request asks for one worker ID for one Pod.
type Request struct {
	// Token identifies the claim; the webhook writes it onto the Pod.
	Token string
	// ReplicaIndex and HostIndex are KubeRay's labels (RayMultiHostIndexing), nil when absent.
	// When ReplicaIndex is set the slice is fixed; the worker ID is HostIndex, or 0 for a
	// single-host group.
	ReplicaIndex *int32
	HostIndex    *int32
	// ReplicaName is KubeRay's replica name; a slice recorded with another name holds an earlier
	// (or later) KubeRay replica at that index.
	ReplicaName string
}

// Slot is where a request goes: a replica (slice) and a worker ID in it.
type Slot struct {
	Replica  int32
	WorkerID int32
}

// Reason says why a request could not be placed.
type Reason string

const (
	// ReasonFull means every slice the group asks for is full, or the requested ID or replica is
	// held. Transient: a live check may find claims to take over, the reconciler releases stale
	// ones, and the Pod's creator retries.
	ReasonFull Reason = "Full"
	// ReasonInvalid means the request can never be placed (an index outside the slice).
	ReasonInvalid Reason = "Invalid"
	// ReasonHostsMismatch means a slice of the group holds live Pods of another host count: the
	// group's topology changed while the old replicas still run.
	ReasonHostsMismatch Reason = "HostsMismatch"
	// ReasonOlderReplica means the request's KubeRay replica name is one its slice has already
	// replaced: a create of an older replica name, which KubeRay never goes back to.
	ReasonOlderReplica Reason = "OlderReplica"
	// ReasonBeyondDesired means KubeRay's labels name a replica index the group does not ask for
	// (at or above its desired replicas). Transient: the caller's view of the RayCluster may
	// predate a scale-up that KubeRay already acts on.
	ReasonBeyondDesired Reason = "BeyondDesired"
)

// Transient reports whether a denial for reason may succeed when the Pod's creator retries as is.
func (r Reason) Transient() bool { return r == ReasonFull || r == ReasonBeyondDesired }

// Outcome is Plan's answer for one request: a slot, or a reason with a message.
type Outcome struct {
	Slot Slot
	// Takeover is the claim the slot's new claim replaces, when it takes over a reclaimable claim.
	Takeover *tpuv1alpha1.WorkerClaim
	Reason   Reason
	Message  string
}

// HasSlot reports whether the request got a slot.
func (o Outcome) HasSlot() bool { return o.Reason == "" }

// Reclaimable reports whether a claim's Pod is known to be gone, terminating or finished (for a
// pending claim: its Pod was seen and is gone), so that its ID may be taken over or its slice
// replaced. Plan calls it only when a slice would otherwise be full or blocked; nil means nothing
// is reclaimable.
type Reclaimable func(replica int32, claim *tpuv1alpha1.WorkerClaim) bool

// Slices is the caller's view of the group's slices, by replica index.
type Slices map[int32]*tpuv1alpha1.TPUSliceAssignment

// SameClusterUID reports whether a slice belongs to the RayCluster of UID clusterUID and, when
// both are known, to the KubeRay replica replicaName.
func SameClusterUID(slice *tpuv1alpha1.TPUSliceAssignment, clusterUID types.UID, replicaName string) bool {
	if slice == nil || slice.Spec.RayClusterUID != clusterUID {
		return false
	}
	return replicaName == "" || slice.Spec.ReplicaName == "" || slice.Spec.ReplicaName == replicaName
}

// Write is what committing a plan must make one replica's slice hold.
type Write struct {
	// Claims is the slice's whole claim list after the commit.
	Claims []tpuv1alpha1.WorkerClaim
	// Replace is set when the existing slice cannot take claims as it is (another RayCluster UID,
	// another host count, a replaced KubeRay replica) and is deleted and created anew (with
	// ReplicaName and ReplacedReplicaNames).
	Replace bool
	// ReplicaName is the KubeRay replica name a new slice records.
	ReplicaName string
	// ReplacedReplicaNames are the KubeRay replica names a new slice records as replaced.
	ReplacedReplicaNames []string
}

// MaxReplacedReplicaNames bounds the replaced replica names a slice remembers.
const MaxReplacedReplicaNames = 16

// Plan places every request, in order, as if they were committed one after the other: a later
// request sees the IDs given to earlier ones. It does not modify slices. It returns, for each
// replica it touched, what the slice must hold after the commit.
func Plan(g Group, current Slices, reqs []Request, reclaimable Reclaimable) ([]Outcome, map[int32]Write) {
	p := &planner{group: g, current: current, reclaimable: reclaimable, state: map[int32]*replicaState{}}
	for replica, s := range current {
		p.state[replica] = p.classify(s)
	}
	outcomes := make([]Outcome, len(reqs))
	if msg, blocked := p.hostsMismatch(); blocked {
		for i := range outcomes {
			outcomes[i] = Outcome{Reason: ReasonHostsMismatch, Message: msg}
		}
		return outcomes, map[int32]Write{}
	}
	touched := map[int32]Write{}
	for i := range reqs {
		req := &reqs[i]
		out := p.place(req)
		outcomes[i] = out
		if !out.HasSlot() {
			continue
		}
		st := p.replica(out.Slot.Replica)
		if !st.usable {
			// A new slice, or one that replaces a dead one.
			st.usable, st.claims = true, nil
			st.write = Write{Replace: st.slice != nil, ReplicaName: req.ReplicaName, ReplacedReplicaNames: st.replacedNames(g.ClusterUID, req.ReplicaName)}
		}
		next := slices.Clone(st.claims)
		// A request whose claim is already there (a retry after a write whose answer was lost)
		// keeps it as it is: appending it again would put two claims on one ID.
		if held := st.claim(out.Slot.WorkerID); held == nil || held.Token != req.Token {
			if out.Takeover != nil {
				next = slices.DeleteFunc(next, func(c tpuv1alpha1.WorkerClaim) bool { return c.WorkerID == out.Slot.WorkerID })
			}
			next = append(next, tpuv1alpha1.WorkerClaim{WorkerID: out.Slot.WorkerID, Token: req.Token})
		}
		st.claims = next
		st.write.Claims = next
		if st.write.ReplicaName == "" && st.slice != nil && !st.write.Replace {
			st.write.ReplicaName = st.slice.Spec.ReplicaName
		}
		touched[out.Slot.Replica] = st.write
	}
	return outcomes, touched
}

// replicaState is the planner's view of one replica's slice.
type replicaState struct {
	slice *tpuv1alpha1.TPUSliceAssignment
	// usable reports whether claims may be added to the slice as it is (current RayCluster UID,
	// same host count); claims are its claims as planned so far.
	usable bool
	claims []tpuv1alpha1.WorkerClaim
	// otherHosts is set for a slice of the current RayCluster UID recorded with another host count.
	otherHosts bool
	// write is what the plan writes to the slice so far.
	write Write
}

func (st *replicaState) claim(id int32) *tpuv1alpha1.WorkerClaim {
	if !st.usable {
		return nil
	}
	for i := range st.claims {
		if st.claims[i].WorkerID == id {
			return &st.claims[i]
		}
	}
	return nil
}

// replacedNames are the replica names a slice that replaces this one records as replaced: those of
// the old slice when it is of the same RayCluster UID, and its own replica name unless no status
// was ever written to it. KubeRay's replica names say nothing of their order: an older replica's
// create still in flight may find the slice a newer replica's first create has just made, before
// that create's claim is stored, and take it over. Recording the newer name then would refuse every
// Pod of the newer replica as an older one (docs/spec.md §3.1, §5; found by the model-based test).
func (st *replicaState) replacedNames(clusterUID types.UID, newName string) []string {
	if st.slice == nil || st.slice.Spec.RayClusterUID != clusterUID {
		return nil
	}
	old := st.slice.Spec
	names := slices.Clone(old.ReplacedReplicaNames)
	if old.ReplicaName != "" && old.ReplicaName != newName && statusWritten(st.slice) {
		names = append(names, old.ReplicaName)
	}
	return names[max(0, len(names)-MaxReplacedReplicaNames):]
}

// statusWritten reports whether anyone wrote slice's status since it was created: a claim (every
// claim write stores one) or a condition (every status write of the reconciler, releases included,
// sets Claimed). A slice without either was created by its replica's first claim, whose status
// write has not landed.
func statusWritten(slice *tpuv1alpha1.TPUSliceAssignment) bool {
	return len(slice.Status.Claims) > 0 || len(slice.Status.Conditions) > 0
}

type planner struct {
	group       Group
	current     Slices
	reclaimable Reclaimable
	state       map[int32]*replicaState
}

func (p *planner) classify(s *tpuv1alpha1.TPUSliceAssignment) *replicaState {
	st := &replicaState{slice: s}
	if s == nil || s.Spec.RayClusterUID != p.group.ClusterUID {
		return st
	}
	if s.Spec.Hosts != p.group.Hosts {
		st.otherHosts = true
		return st
	}
	st.usable, st.claims = true, s.Status.Claims
	return st
}

func (p *planner) replica(r int32) *replicaState {
	st := p.state[r]
	if st == nil {
		st = &replicaState{}
		p.state[r] = st
	}
	return st
}

// hostsMismatch reports whether a slice of the group, of the current RayCluster UID, recorded with
// another host count still holds a claim no Reclaimable confirms gone: its Pods run with the old
// topology, and a Pod of the new one would split the group (docs/spec.md §10). A slice whose
// claims are all gone is replaced.
func (p *planner) hostsMismatch() (string, bool) {
	for _, r := range p.sortedReplicas() {
		st := p.state[r]
		if !st.otherHosts {
			continue
		}
		if held := p.held(r, st.slice.Status.Claims); held > 0 {
			return fmt.Sprintf(
				"this Pod's topology gives %d hosts per slice, but replica %d of its worker group is a slice of %d hosts that still holds %d claims of live or starting Pods; "+
					"delete the group's old replicas (or the RayCluster) before changing its topology, or keep the template's topology",
				p.group.Hosts, r, st.slice.Spec.Hosts, held), true
		}
	}
	return "", false
}

// held counts the claims of a slice that no Reclaimable confirms gone.
func (p *planner) held(replica int32, list []tpuv1alpha1.WorkerClaim) int {
	n := 0
	for i := range list {
		if p.reclaimable == nil || !p.reclaimable(replica, &list[i]) {
			n++
		}
	}
	return n
}

func (p *planner) sortedReplicas() []int32 {
	out := make([]int32, 0, len(p.state))
	for r := range p.state {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// free reports whether a new slice may be started at replica r: no slice, a slice of another
// RayCluster UID, or one of another host count whose claims are all gone.
func (p *planner) free(r int32) bool {
	st := p.state[r]
	return st == nil || (!st.usable && (st.slice == nil || st.slice.Spec.RayClusterUID != p.group.ClusterUID || st.otherHosts))
}

func (p *planner) place(req *Request) Outcome {
	if req.ReplicaIndex != nil {
		return p.placeIndexed(req)
	}
	// 0. A request whose token already holds a claim (a retry after a write whose answer was lost)
	// gets that claim back rather than a second ID.
	if r, id, ok := p.claimOf(req.Token); ok {
		return Outcome{Slot: Slot{Replica: r, WorkerID: id}}
	}
	// 1. The lowest-index existing slice with a free ID (finish slices already started).
	for _, r := range p.usableReplicas() {
		if r >= p.group.DesiredReplicas {
			break
		}
		if id, ok := p.lowestFree(r); ok {
			return Outcome{Slot: Slot{Replica: r, WorkerID: id}}
		}
	}
	// 2. The lowest unused replica index: holes are refilled.
	for r := range p.group.DesiredReplicas {
		if p.free(r) {
			return Outcome{Slot: Slot{Replica: r, WorkerID: 0}}
		}
	}
	// 3. Every slice is full: take over the lowest claim whose Pod is gone.
	for _, r := range p.usableReplicas() {
		if r >= p.group.DesiredReplicas {
			break
		}
		if c := p.lowestReclaimable(r); c != nil {
			return Outcome{Slot: Slot{Replica: r, WorkerID: c.WorkerID}, Takeover: c}
		}
	}
	if p.group.DesiredReplicas == 0 {
		return Outcome{Reason: ReasonFull, Message: "the worker group asks for no replicas (suspended or scaled to zero), so no slice may be opened"}
	}
	return Outcome{Reason: ReasonFull, Message: fmt.Sprintf(
		"all %d slices of %d hosts the worker group asks for are fully claimed; a claim of a Pod that was just created or deleted may still be settling",
		p.group.DesiredReplicas, p.group.Hosts)}
}

func (p *planner) placeIndexed(req *Request) Outcome {
	replica, id := *req.ReplicaIndex, int32(0)
	if req.HostIndex != nil {
		id = *req.HostIndex
	}
	if replica < 0 || id < 0 || id >= p.group.Hosts {
		return Outcome{Reason: ReasonInvalid, Message: fmt.Sprintf(
			"KubeRay labels place the Pod at replica %d, host %d, outside a slice of %d hosts", replica, id, p.group.Hosts)}
	}
	if replica >= p.group.DesiredReplicas {
		return Outcome{Reason: ReasonBeyondDesired, Message: BeyondDesiredMessage(replica, p.group.DesiredReplicas)}
	}
	if out, done := p.newReplicaName(replica, req.ReplicaName); done {
		return out
	}
	st := p.replica(replica)
	held := st.claim(id)
	switch {
	case held == nil:
		return Outcome{Slot: Slot{Replica: replica, WorkerID: id}}
	case req.Token != "" && held.Token == req.Token:
		return Outcome{Slot: Slot{Replica: replica, WorkerID: id}}
	case p.reclaimable != nil && p.reclaimable(replica, held):
		return Outcome{Slot: Slot{Replica: replica, WorkerID: id}, Takeover: held}
	}
	return Outcome{Reason: ReasonFull, Message: fmt.Sprintf(
		"worker ID %d of replica %d is held by another Pod (%s); it is released once that Pod is gone", id, replica, describe(held))}
}

// newReplicaName handles a request whose KubeRay replica name differs from the one its
// slice records, or the one an earlier request of this plan creates or replaces it under. KubeRay replaces a replica whole under a new name and never goes back to an old
// one, so a name the slice has already replaced is an older replica (a create still in flight
// from before the replacement) and is denied. Any other name replaces the slice's replica,
// but only once every claim of the old one is confirmed gone: a request cannot, by naming a
// replica, take IDs from live Pods (docs/spec.md §10).
func (p *planner) newReplicaName(replica int32, name string) (Outcome, bool) {
	st := p.replica(replica)
	if !st.usable || name == "" {
		return Outcome{}, false
	}
	// The replica name as planned so far: an earlier request of this plan may have replaced the
	// slice, or be creating it under its own replica name (the model-based test found a Pod of an
	// older replica name and one of the newer one, in one batch, both given IDs of the slice the
	// first created).
	var current string
	var replaced []string
	switch {
	case st.write.Claims != nil && (st.write.Replace || st.slice == nil):
		current, replaced = st.write.ReplicaName, st.write.ReplacedReplicaNames
	case st.slice != nil:
		current, replaced = st.slice.Spec.ReplicaName, st.slice.Spec.ReplacedReplicaNames
	}
	if current == "" || current == name {
		return Outcome{}, false
	}
	if slices.Contains(replaced, name) {
		return Outcome{Reason: ReasonOlderReplica, Message: fmt.Sprintf(
			"the Pod belongs to KubeRay replica %s, which replica %d has already replaced with %s; a create of the older replica is refused (KubeRay recreates what it still wants)",
			name, replica, current)}, true
	}
	if held := p.held(replica, st.claims); held > 0 {
		return Outcome{Reason: ReasonFull, Message: fmt.Sprintf(
			"replica %d is still held by %d claims of KubeRay replica %s; it is replaced by %s once those Pods are gone",
			replica, held, current, name)}, true
	}
	st.usable, st.claims = false, nil
	return Outcome{}, false
}

// BeyondDesiredMessage says that KubeRay's labels name replica, at or above the desired replicas
// of the group: no slice is opened there.
func BeyondDesiredMessage(replica, desired int32) string {
	return fmt.Sprintf("KubeRay labels place the Pod at replica %d, but the worker group asks for %d replicas (replicas clamped by minReplicas and maxReplicas), so no slice is opened there",
		replica, desired)
}

func describe(c *tpuv1alpha1.WorkerClaim) string {
	if c.PodName != "" {
		return "Pod " + c.PodName
	}
	return "a claim whose Pod has not been seen yet"
}

// usableReplicas returns the replica indexes of usable slices, ascending.
func (p *planner) usableReplicas() []int32 {
	out := make([]int32, 0, len(p.state))
	for r, st := range p.state {
		if st.usable {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// claimOf returns where a usable replica holds a claim with token.
func (p *planner) claimOf(token string) (replica, id int32, ok bool) {
	if token == "" {
		return 0, 0, false
	}
	for _, r := range p.usableReplicas() {
		for _, c := range p.state[r].claims {
			if c.Token == token {
				return r, c.WorkerID, true
			}
		}
	}
	return 0, 0, false
}

// lowestFree returns the lowest worker ID of a usable replica that no claim holds.
func (p *planner) lowestFree(replica int32) (int32, bool) {
	taken := make([]bool, p.group.Hosts)
	for _, c := range p.state[replica].claims {
		if c.WorkerID >= 0 && c.WorkerID < p.group.Hosts {
			taken[c.WorkerID] = true
		}
	}
	for id, t := range taken {
		if !t {
			return int32(id), true //nolint:gosec // id < Hosts, an int32.
		}
	}
	return 0, false
}

func (p *planner) lowestReclaimable(replica int32) *tpuv1alpha1.WorkerClaim {
	if p.reclaimable == nil {
		return nil
	}
	var best *tpuv1alpha1.WorkerClaim
	list := p.state[replica].claims
	for i := range list {
		c := &list[i]
		if (best == nil || c.WorkerID < best.WorkerID) && p.reclaimable(replica, c) {
			best = c
		}
	}
	return best
}

// DesiredReplicas returns the replica count of a RayCluster worker group, clamped by min and max
// (and 0 when the group or the whole cluster is suspended) exactly as KubeRay computes it; ok is
// false when the group does not exist.
func DesiredReplicas(rc *rayv1.RayCluster, group string) (replicas int32, ok bool) {
	for _, g := range rc.Spec.WorkerGroupSpecs {
		if g.GroupName == group {
			if ptr.Deref(rc.Spec.Suspend, false) {
				return 0, true
			}
			g.NumOfHosts = 1 // KubeRay multiplies by hosts; we want slices.
			return rayutils.GetWorkerGroupDesiredReplicas(g), true
		}
	}
	return 0, false
}
