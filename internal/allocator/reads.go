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

package allocator

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
)

// plan is a batch's plan and the slices it was made on.
type plan struct {
	current  claims.Slices
	outcomes []claims.Outcome
	writes   map[int32]claims.Write
}

// placedIn returns the indexes of the requests the plan placed in replica.
func (p plan) placedIn(replica int32) []int {
	var out []int
	for i, o := range p.outcomes {
		if o.HasSlot() && o.Slot.Replica == replica {
			out = append(out, i)
		}
	}
	return out
}

// ownWrite is the slice this process last wrote, as the API server returned it, and every version
// its writes since the cache last caught up were made over ("" for a create): the cache showing
// any of them is behind.
type ownWrite struct {
	over  []string
	slice *tpuv1alpha1.TPUSliceAssignment
}

// maxOwnWrites bounds the versions remembered per slice; a cache further behind than that loses a
// conflict, as it would without the overlay.
const maxOwnWrites = 64

// remember records that this process's writes turned the versions over into slice. q.mu is held.
func (q *queue) remember(replica int32, over []string, slice *tpuv1alpha1.TPUSliceAssignment) {
	if q.written == nil {
		q.written = map[int32]ownWrite{}
	}
	w := q.written[replica]
	w.over = append(w.over, over...)
	if len(w.over) > maxOwnWrites {
		w.over = w.over[len(w.over)-maxOwnWrites:]
	}
	w.slice = slice
	q.written[replica] = w
}

// overlayOwnWrites replaces, in slices read from the cache, each slice the cache shows as it was
// before one of this process's recent writes of it (or not at all, for a create) with what the last
// of those writes returned: the cache is behind by our own writes, and planning on it would lose a
// conflict to ourselves. Entries the cache has caught up with (or moved past) are dropped. Only
// writes are saved: a wrong guess is a write that loses its resourceVersion check.
func overlayOwnWrites(current claims.Slices, written map[int32]ownWrite) {
	for replica, w := range written {
		cachedVersion := ""
		if cached := current[replica]; cached != nil {
			cachedVersion = cached.ResourceVersion
			// The cache has seen the slice: its absence from now on is a deletion, never a
			// create of this process's the cache is behind (docs/spec.md §3.5).
			if i := slices.Index(w.over, ""); i >= 0 {
				w.over = slices.Delete(slices.Clone(w.over), i, i+1)
				written[replica] = w
			}
		}
		if slices.Contains(w.over, cachedVersion) {
			current[replica] = w.slice.DeepCopy()
		} else {
			delete(written, replica)
		}
	}
}

// plan places the batch's requests on the group's slices as read from the cache, with this
// process's own writes that the cache has not seen yet laid over it (overlayOwnWrites). When live,
// or when the cache says the group is full or blocked, every slice the plan writes (and, for a
// full or blocked group, every slice below the desired replica count) is read again from the API
// server and the plan is made again, until it rests only on live reads. A full or blocked group is
// then planned once more with takeover of claims whose Pod is confirmed gone. A plan that would
// delete a slice of another RayCluster UID first confirms live that the request's
// UID is the current one.
//
// Live reads are Gets, not a List: a Get is a quorum read from etcd, whereas a consistent List is
// served by the watch cache once it has caught up with etcd's current revision, which, while the
// rest of the cluster writes, waits for a progress notification (measured here: a List 97 ms, a
// Get 3 ms).
func (a *Allocator) plan(ctx context.Context, q *queue, last *call, reqs []claims.Request, live bool) (plan, error) {
	req := last.req
	current, err := a.readSlices(ctx, req)
	if err != nil {
		return plan{}, err
	}
	q.mu.Lock()
	overlayOwnWrites(current, q.written)
	q.mu.Unlock()
	g := group(req, last.cluster)
	confirmed := map[int32]bool{}
	for {
		// The IDs this process reserved and has not handed out are free to it (docs/spec.md §3.5):
		// no hand-out runs while claims are committed (q.claiming).
		q.mu.Lock()
		planned := a.stripOwn(q, current, false)
		q.mu.Unlock()
		outcomes, writes := claims.Plan(g, planned, reqs, nil)
		blocked := anyBlocked(outcomes)
		stale := a.unconfirmed(g, planned, writes, confirmed, live, blocked)
		if len(stale) == 0 {
			if blocked {
				outcomes, writes = claims.Plan(g, planned, reqs, a.reclaimable(ctx, req))
			}
			if err := a.confirmUIDBeforeReplace(ctx, req, planned, writes); err != nil {
				return plan{}, err
			}
			return plan{current: planned, outcomes: outcomes, writes: writes}, nil
		}
		for _, replica := range stale {
			slice, err := a.readSlice(ctx, req, replica)
			if err != nil {
				return plan{}, err
			}
			if slice == nil {
				delete(current, replica)
			} else {
				current[replica] = slice
			}
			confirmed[replica] = true
		}
	}
}

// unconfirmed returns the replicas whose slices the plan must read live before it is trusted: the
// ones it writes, when live, and for a blocked group also every replica below the desired count.
func (a *Allocator) unconfirmed(g claims.Group, current claims.Slices, writes map[int32]claims.Write,
	confirmed map[int32]bool, live, blocked bool) []int32 {
	var stale []int32
	if live || blocked {
		for replica := range writes {
			if !confirmed[replica] {
				stale = append(stale, replica)
			}
		}
	}
	if blocked {
		for replica := range g.DesiredReplicas {
			if _, listed := writes[replica]; !confirmed[replica] && !listed {
				stale = append(stale, replica)
			}
		}
		for replica := range current {
			if _, listed := writes[replica]; replica >= g.DesiredReplicas && !confirmed[replica] && !listed {
				stale = append(stale, replica)
			}
		}
	}
	return stale
}

// confirmUIDBeforeReplace confirms, before a plan replaces a slice of another RayCluster UID, that
// the request's UID is the live one.
func (a *Allocator) confirmUIDBeforeReplace(ctx context.Context, req Request, current claims.Slices, writes map[int32]claims.Write) error {
	for replica, w := range writes {
		if s := current[replica]; w.Replace && s != nil && s.Spec.RayClusterUID != req.ClusterUID {
			return a.confirmLiveClusterUID(ctx, req)
		}
	}
	return nil
}

// anyBlocked reports whether some request could not be placed for a reason a live look at the
// claims may change: every slice full, a replica still held by an older replica name, a slice of
// another host count that may have no live Pods left.
func anyBlocked(outcomes []claims.Outcome) bool {
	for _, o := range outcomes {
		if o.Reason == claims.ReasonFull || o.Reason == claims.ReasonHostsMismatch {
			return true
		}
	}
	return false
}

// readSlice reads the slice of one replica of req's group from the API server; nil if there is
// none. An object under that name that belongs to another group is a *collisionError.
func (a *Allocator) readSlice(ctx context.Context, req Request, replica int32) (*tpuv1alpha1.TPUSliceAssignment, error) {
	// A fresh object: decoding into a reused one would keep fields the live object omits.
	slice := &tpuv1alpha1.TPUSliceAssignment{}
	name := naming.SliceName(req.ClusterName, req.GroupName, replica)
	if err := a.reader.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: name}, slice); err != nil {
		if isPermanent(err) {
			return nil, a.deny(false, "reading TPUSliceAssignment %s: %v", name, err)
		}
		return nil, client.IgnoreNotFound(err)
	}
	if err := a.refuseMalformed(slice); err != nil {
		return nil, err
	}
	if !claims.IsSliceOf(slice, req.ClusterName, req.GroupName, replica) {
		return nil, a.deny(false,
			"TPUSliceAssignment %s/%s, the name of replica %d of RayCluster %s group %s, is taken by replica %d of RayCluster %s group %s; rename the worker group or the RayCluster",
			req.Namespace, name, replica, req.ClusterName, req.GroupName,
			slice.Spec.ReplicaIndex, slice.Spec.RayClusterName, slice.Spec.GroupName)
	}
	return slice, nil
}

// readSlices returns the group's slices by replica index, from the cache. The objects are the
// cache's own (no deep copy, which would cost a copy of every claim of a large slice per
// admission): nothing here modifies them, and writeSlice writes a copy.
func (a *Allocator) readSlices(ctx context.Context, req Request) (claims.Slices, error) {
	var list tpuv1alpha1.TPUSliceAssignmentList
	if err := a.client.List(ctx, &list, client.InNamespace(req.Namespace), client.MatchingLabels{
		tpuv1alpha1.ClusterLabel: naming.LabelValue(req.ClusterName),
		tpuv1alpha1.GroupLabel:   naming.LabelValue(req.GroupName),
	}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	out := claims.Slices{}
	for i := range list.Items {
		if s := &list.Items[i]; claims.IsSliceOf(s, req.ClusterName, req.GroupName, s.Spec.ReplicaIndex) {
			if err := a.refuseMalformed(s); err != nil {
				return nil, err
			}
			out[s.Spec.ReplicaIndex] = s
		}
	}
	return out, nil
}

// refuseMalformed denies, as transient, a claim in a group one of whose slices holds stored lines
// that do not parse (tpuv1alpha1.TPUSliceAssignmentStatus.MalformedLines): a worker ID named only
// by such a line may be held, so nothing is planned in the group, and no write drops the lines,
// until the reconciler has repaired the slice from its live Pods.
func (a *Allocator) refuseMalformed(slice *tpuv1alpha1.TPUSliceAssignment) error {
	if len(slice.Status.MalformedLines) == 0 {
		return nil
	}
	return a.deny(true, "slice %s has malformed claims being repaired by the operator (%s)", slice.Name, slice.Status.MalformedLines[0])
}
