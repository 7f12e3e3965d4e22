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
// worker ID inside it (docs/spec.md §3). It is pure: the caller reads the slices, asks Plan for a decision
// and commits it with resourceVersion-checked writes; a conflict means the snapshot was stale, and
// the caller re-reads and plans again. Uniqueness never rests on this package's view being fresh.
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
	// ClusterUID is the RayCluster generation; slices recorded for another UID are dead.
	ClusterUID types.UID
	// Hosts is the number of hosts per slice.
	Hosts int32
	// DesiredReplicas bounds the replica indexes the operator may choose itself (clamp(replicas,
	// min, max) of the group). Requests with KubeRay's index labels are not bound by it.
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
	// ReplicaName is KubeRay's replica name; a slice recorded with another name is dead.
	ReplicaName string
}

// Placement is where a request goes.
type Placement struct {
	Replica  int32
	WorkerID int32
}

// Reason says why a request could not be placed.
type Reason string

const (
	// ReasonFull means every slice the group asks for is full, or the requested ID is held. Transient:
	// a live check may find claims to take over, the reconciler releases stale ones, and the
	// Pod's creator retries.
	ReasonFull Reason = "Full"
	// ReasonInvalid means the request can never be placed (an index outside the slice).
	ReasonInvalid Reason = "Invalid"
)

// Outcome is Plan's answer for one request: a placement, or a reason with a message.
type Outcome struct {
	Placement Placement
	// Takeover is the claim the placement replaces, when it takes over a reclaimable claim.
	Takeover *tpuv1alpha1.WorkerClaim
	Reason   Reason
	Message  string
}

// Placed reports whether the request got a placement.
func (o Outcome) Placed() bool { return o.Reason == "" }

// Reclaimable reports whether a bound claim's Pod is known to be gone, terminating or finished, so
// that its ID may be taken over. Plan calls it only when a slice would otherwise be full.
type Reclaimable func(replica int32, claim *tpuv1alpha1.WorkerClaim) bool

// Slices is the caller's view of the group's slices, by replica index.
type Slices map[int32]*tpuv1alpha1.TPUSliceAssignment

// Live reports whether a slice belongs to the current generation: same RayCluster UID and, when
// both are known, the same KubeRay replica name.
func Live(slice *tpuv1alpha1.TPUSliceAssignment, clusterUID types.UID, replicaName string) bool {
	if slice == nil || slice.Spec.RayClusterUID != clusterUID {
		return false
	}
	return replicaName == "" || slice.Spec.ReplicaName == "" || slice.Spec.ReplicaName == replicaName
}

// Current reports whether a slice belongs to the group's current generation: Live, and recorded
// with the group's host count. A slice recorded with another host count (the group's topology or
// chips changed) is a dead generation too: its IDs would not number the new slices' hosts.
func Current(slice *tpuv1alpha1.TPUSliceAssignment, g Group, replicaName string) bool {
	return Live(slice, g.ClusterUID, replicaName) && slice.Spec.Hosts == g.Hosts
}

// Plan places every request, in order, as if they were committed one after the other: a later
// request sees the IDs given to earlier ones. It does not modify slices. The returned state holds,
// for each replica it touched, the claims the slice must hold after the commit (dead generations
// start empty).
func Plan(g Group, current Slices, reqs []Request, reclaimable Reclaimable) ([]Outcome, map[int32][]tpuv1alpha1.WorkerClaim) {
	p := planner{group: g, reclaimable: reclaimable, claims: map[int32][]tpuv1alpha1.WorkerClaim{}, live: map[int32]bool{}}
	for replica, s := range current {
		if Current(s, g, "") {
			p.live[replica] = true
			p.claims[replica] = s.Status.Claims
		}
	}
	touched := map[int32][]tpuv1alpha1.WorkerClaim{}
	outcomes := make([]Outcome, len(reqs))
	for i := range reqs {
		req := &reqs[i]
		if req.ReplicaIndex != nil && req.ReplicaName != "" {
			// KubeRay replaced the replica: a slice recorded under another name is dead.
			if s := current[*req.ReplicaIndex]; s != nil && p.live[*req.ReplicaIndex] && !Current(s, g, req.ReplicaName) {
				if _, seen := touched[*req.ReplicaIndex]; !seen {
					p.live[*req.ReplicaIndex] = false
					p.claims[*req.ReplicaIndex] = nil
				}
			}
		}
		out := p.place(req)
		outcomes[i] = out
		if !out.Placed() {
			continue
		}
		r := out.Placement.Replica
		next := slices.Clone(p.claims[r])
		// A request whose claim is already there (a retry after a write whose answer was lost)
		// keeps it as it is: appending it again would put two claims on one ID.
		if held := p.claim(r, out.Placement.WorkerID); held == nil || held.Token != req.Token {
			if out.Takeover != nil {
				next = slices.DeleteFunc(next, func(c tpuv1alpha1.WorkerClaim) bool { return c.WorkerID == out.Placement.WorkerID })
			}
			next = append(next, tpuv1alpha1.WorkerClaim{WorkerID: out.Placement.WorkerID, Token: req.Token})
		}
		p.claims[r] = next
		p.live[r] = true
		touched[r] = next
	}
	return outcomes, touched
}

type planner struct {
	group       Group
	reclaimable Reclaimable
	// claims of each live replica as planned so far.
	claims map[int32][]tpuv1alpha1.WorkerClaim
	live   map[int32]bool
}

func (p *planner) place(req *Request) Outcome {
	if req.ReplicaIndex != nil {
		return p.placeIndexed(req)
	}
	// 0. A request whose token already holds a claim (a retry after a write whose answer was lost)
	// gets that claim back rather than a second ID.
	if r, id, ok := p.claimOf(req.Token); ok {
		return Outcome{Placement: Placement{Replica: r, WorkerID: id}}
	}
	// 1. The lowest-index existing slice with a free ID (finish slices already started).
	for _, r := range p.liveReplicas() {
		if r >= p.group.DesiredReplicas {
			break
		}
		if id, ok := p.lowestFree(r); ok {
			return Outcome{Placement: Placement{Replica: r, WorkerID: id}}
		}
	}
	// 2. The lowest unused replica index: holes are refilled.
	for r := range p.group.DesiredReplicas {
		if !p.live[r] {
			return Outcome{Placement: Placement{Replica: r, WorkerID: 0}}
		}
	}
	// 3. Every slice is full: take over the lowest claim whose Pod is gone.
	for _, r := range p.liveReplicas() {
		if r >= p.group.DesiredReplicas {
			break
		}
		if c := p.lowestReclaimable(r); c != nil {
			return Outcome{Placement: Placement{Replica: r, WorkerID: c.WorkerID}, Takeover: c}
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
	held := p.claim(replica, id)
	switch {
	case held == nil:
		return Outcome{Placement: Placement{Replica: replica, WorkerID: id}}
	case req.Token != "" && held.Token == req.Token:
		return Outcome{Placement: Placement{Replica: replica, WorkerID: id}}
	case held.PodUID != "" && p.reclaimable != nil && p.reclaimable(replica, held):
		return Outcome{Placement: Placement{Replica: replica, WorkerID: id}, Takeover: held}
	}
	return Outcome{Reason: ReasonFull, Message: fmt.Sprintf(
		"worker ID %d of replica %d is held by another Pod (%s); it is released once that Pod is gone", id, replica, describe(held))}
}

func describe(c *tpuv1alpha1.WorkerClaim) string {
	if c.PodName != "" {
		return "Pod " + c.PodName
	}
	return "a claim whose Pod has not been seen yet"
}

// liveReplicas returns the replica indexes of live slices, ascending.
func (p *planner) liveReplicas() []int32 {
	out := make([]int32, 0, len(p.live))
	for r, live := range p.live {
		if live {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

func (p *planner) claim(replica, id int32) *tpuv1alpha1.WorkerClaim {
	if !p.live[replica] {
		return nil
	}
	for i := range p.claims[replica] {
		if p.claims[replica][i].WorkerID == id {
			return &p.claims[replica][i]
		}
	}
	return nil
}

// claimOf returns where a live replica holds a claim with token.
func (p *planner) claimOf(token string) (replica, id int32, ok bool) {
	if token == "" {
		return 0, 0, false
	}
	for _, r := range p.liveReplicas() {
		for _, c := range p.claims[r] {
			if c.Token == token {
				return r, c.WorkerID, true
			}
		}
	}
	return 0, 0, false
}

// lowestFree returns the lowest worker ID of a live replica that no claim holds.
func (p *planner) lowestFree(replica int32) (int32, bool) {
	taken := make([]bool, p.group.Hosts)
	for _, c := range p.claims[replica] {
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
	for i := range p.claims[replica] {
		c := &p.claims[replica][i]
		if c.PodUID != "" && (best == nil || c.WorkerID < best.WorkerID) && p.reclaimable(replica, c) {
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
