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

// Reservations (docs/spec.md §3.5, docs/design.md "Reservations"): a write that claims IDs of a
// slice also claims, under tokens only this process knows, up to a block of the slice's other free
// IDs. For the reservation window after that write was sent, this process hands those IDs out from
// memory to the group's next requests, with no API write: the claim each one gets was made durable,
// under its token, by the write. A token is handed out at most once, and never after the window: a
// Pod that carries it is then created within the API server's cut-off of the window's end, which
// the pending TTL covers exactly as it covers a claim written inside an admission (the window is at
// most the claim timeout). So to every other writer a reserved ID is a pending claim like any other:
// the reconciler binds it to the Pod that carries its token, and frees it after the pending TTL if
// no Pod ever does (a holder that died, or restarted with an empty memory, fences itself by
// forgetting its tokens).
//
// Only the holder knows which of its tokens are still unhanded, and only it removes them: its next
// write of the slice drops them (and reserves afresh), and, once the window has passed with tokens
// left, a give-back write drops them so that another replica (a new owner of the group) may claim
// those IDs at once.

import (
	"context"
	"maps"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
)

// Reservation block sizes: a slice's first reservation holds up to minReservation IDs; each later
// one twice what the previous one handed out (at least minReservation), at most maxReservation and
// never more than the slice's free IDs.
const (
	minReservation = 16
	maxReservation = 4096
)

// reservation is what this process may hand out of one slice: the IDs it reserved by its last write
// of the slice and has not handed out yet.
type reservation struct {
	sliceUID    types.UID
	sliceName   string
	replicaName string
	affinityKey string
	placement   tpuv1alpha1.SlicePlacement
	// sent is when the write that stored the tokens was sent: they are handed out only before
	// sent plus the window.
	sent time.Time
	// ids maps each unhanded reserved worker ID to its token, and handed counts the IDs handed
	// out since the write (the next block is twice that).
	ids    map[int32]string
	handed int
}

// unhanded is one token this process reserved and has not handed out, until a write of its slice by
// this process removes it (or the token is older than forgetUnhandedAfter).
type unhanded struct {
	replica  int32
	workerID int32
	at       time.Time
}

// forgetUnhandedAfter is how long this process remembers an unhanded token it could not give back:
// by then the reconciler has freed it (pending TTL) or a later write of its slice has dropped it.
const forgetUnhandedAfter = 5 * time.Minute

// handedOut remembers the assignment a request token got from a reservation, so that a retry with
// the same token (a forwarded claim whose answer was lost, retried on this replica) gets it back.
type handedOut struct {
	assignment Assignment
	at         time.Time
}

// reserving reports whether reservations are on.
func (a *Allocator) reserving() bool { return a.opts.ReservationWindow > 0 }

// handOut answers every call of batch that a valid reservation of q, or an earlier hand-out to its
// token, can answer, and returns the others. It runs on the queue's drain goroutine, the only one
// that touches q's reservations.
func (a *Allocator) handOut(q *queue, batch []*call) []*call {
	if len(q.reserved) == 0 && len(q.handed) == 0 {
		return batch
	}
	now := a.clock.Now()
	rest := batch[:0]
	for _, c := range batch {
		if c.giveBack || !roomToHandOut(c.ctx) {
			// A call past or near its deadline goes to the write path: its caller may give up
			// (a forwarding replica then claims locally under the same request token), and an ID
			// handed out under a reserved token would then wait for the pending TTL, whereas a
			// claim written under the request's own token is found again by that retry.
			rest = append(rest, c)
			continue
		}
		if h, ok := q.handed[c.token]; ok {
			// The same claim again: answered, but not counted as a second one.
			c.result <- result{assignment: h.assignment}
			continue
		}
		as, ok := a.take(q, c, now)
		if !ok {
			rest = append(rest, c)
			continue
		}
		a.m.Reserved.Inc()
		if q.handed == nil {
			q.handed = map[string]handedOut{}
		}
		q.handed[c.token] = handedOut{assignment: as, at: now}
		c.finish(result{assignment: as})
	}
	return rest
}

// handOutMargin is how much of its deadline a call must have left to be handed a reserved ID.
const handOutMargin = time.Second

// roomToHandOut reports whether ctx leaves a hand-out's answer time to reach its caller. Deadlines
// are on the real clock.
func roomToHandOut(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	d, ok := ctx.Deadline()
	return !ok || time.Until(d) >= handOutMargin
}

// take hands c an ID of a valid reservation: the one KubeRay's labels name, or else the lowest
// reserved ID of the lowest reserved replica.
func (a *Allocator) take(q *queue, c *call, now time.Time) (Assignment, bool) {
	valid := func(r *reservation) bool {
		return r != nil && len(r.ids) > 0 && now.Sub(r.sent) < a.opts.ReservationWindow
	}
	replica, id := int32(-1), int32(-1)
	if idx := c.req.Claim.ReplicaIndex; idx != nil {
		r := q.reserved[*idx]
		if !valid(r) || *idx >= c.cluster.desired || r.replicaName != c.req.Claim.ReplicaName {
			return Assignment{}, false
		}
		want := int32(0)
		if c.req.Claim.HostIndex != nil {
			want = *c.req.Claim.HostIndex
		}
		if _, ok := r.ids[want]; !ok {
			return Assignment{}, false
		}
		replica, id = *idx, want
	} else {
		for _, rep := range slices.Sorted(maps.Keys(q.reserved)) {
			if r := q.reserved[rep]; rep < c.cluster.desired && valid(r) {
				replica, id = rep, lowestKey(r.ids)
				break
			}
		}
		if replica < 0 {
			return Assignment{}, false
		}
	}
	r := q.reserved[replica]
	token := r.ids[id]
	if !a.stillStored(c.ctx, q, c.req.Namespace, replica, r, id, token) {
		// Someone else's write removed or bound the claim, or left lines that do not parse: the
		// reservation is not trusted any more, and the slow path plans on the slice as it is.
		delete(q.reserved, replica)
		return Assignment{}, false
	}
	delete(r.ids, id)
	delete(q.unhanded, token)
	r.handed++
	return Assignment{SliceName: r.sliceName, SliceUID: r.sliceUID, Replica: replica, WorkerID: id, Token: token,
		AffinityTopologyKey: r.affinityKey, Placement: r.placement}, true
}

// stillStored reports whether the slice of replica, as the cache shows it (or as this process
// last wrote it, while the cache is behind that write), still holds the reserved claim of id under
// token, not bound to a Pod, and no line that does not parse. Only another writer can have changed
// that: a status written by hand, or the reconciler binding the claim to a Pod that carries the ID
// in its spec without the token (created past the webhook). It reads the cache without a copy.
func (a *Allocator) stillStored(ctx context.Context, q *queue, namespace string, replica int32, r *reservation, id int32, token string) bool {
	slice := &tpuv1alpha1.TPUSliceAssignment{}
	err := a.client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: r.sliceName}, slice, client.UnsafeDisableDeepCopy)
	cachedVersion := slice.ResourceVersion
	switch {
	case apierrors.IsNotFound(err):
		cachedVersion = ""
	case err != nil:
		return false
	}
	if w, ok := q.written[replica]; ok && w.slice != nil && slices.Contains(w.over, cachedVersion) {
		slice = w.slice
	} else if err != nil {
		return false
	}
	if slice.UID != r.sliceUID || len(slice.Status.MalformedLines) > 0 {
		return false
	}
	i := slices.IndexFunc(slice.Status.Claims, func(c tpuv1alpha1.WorkerClaim) bool { return c.WorkerID == id })
	return i >= 0 && slice.Status.Claims[i].Token == token && slice.Status.Claims[i].PodUID == ""
}

// stripOwn returns current with every pending claim this process reserved and has not handed out
// removed: to the plan they are free, so that the write it makes of their slice drops them (or
// hands them to its requests under their own tokens). Slices are copied only where a claim is
// removed. A token not found pending in current is forgotten once it is forgetUnhandedAfter old
// (by then the pending TTL has freed it, if a write of this process has not).
func (a *Allocator) stripOwn(q *queue, current claims.Slices) claims.Slices {
	if len(q.unhanded) == 0 {
		return current
	}
	now := a.clock.Now()
	out := make(claims.Slices, len(current))
	seen := map[string]bool{}
	for replica, s := range current {
		out[replica] = s
		mine := func(c tpuv1alpha1.WorkerClaim) bool {
			u, ok := q.unhanded[c.Token]
			return ok && u.replica == replica && u.workerID == c.WorkerID && c.PodUID == ""
		}
		if !slices.ContainsFunc(s.Status.Claims, mine) {
			continue
		}
		cp := s.DeepCopy()
		cp.Status.Claims = slices.DeleteFunc(cp.Status.Claims, func(c tpuv1alpha1.WorkerClaim) bool {
			if mine(c) {
				seen[c.Token] = true
				return true
			}
			return false
		})
		out[replica] = cp
	}
	for token, u := range q.unhanded {
		if !seen[token] && now.Sub(u.at) >= forgetUnhandedAfter {
			delete(q.unhanded, token)
		}
	}
	return out
}

// reserve adds to w, the claims a write of replica will store, a block of the slice's free IDs under
// new tokens, and returns them by worker ID (nil when reservations are off or no ID is free). placed
// are the IDs the write claims for its requests: a block starts above the highest of them, the
// order KubeRay creates a replica's hosts in, and wraps around.
func (a *Allocator) reserve(q *queue, replica, hosts int32, w *claims.Write, placed []int32) map[int32]string {
	if !a.reserving() {
		return nil
	}
	size := minReservation
	if prev := q.reserved[replica]; prev != nil && prev.handed > 0 {
		size = max(minReservation, 2*prev.handed)
	}
	size = min(size, maxReservation)
	taken := make([]bool, hosts)
	for _, c := range w.Claims {
		if c.WorkerID >= 0 && c.WorkerID < hosts {
			taken[c.WorkerID] = true
		}
	}
	start := int32(0)
	if len(placed) > 0 {
		start = (slices.Max(placed) + 1) % hosts
	}
	out := map[int32]string{}
	for i := range hosts {
		id := (start + i) % hosts
		if len(out) == size {
			break
		}
		if !taken[id] {
			out[id] = NewToken()
		}
	}
	if len(out) == 0 {
		return nil
	}
	claimsOut := slices.Clone(w.Claims)
	for id, token := range out {
		claimsOut = append(claimsOut, tpuv1alpha1.WorkerClaim{WorkerID: id, Token: token})
	}
	w.Claims = claimsOut
	return out
}

// recordReservation records, after the write of replica sent at sent returned written, the
// reservation it made (ids; nil for none) and forgets the unhanded tokens of that slice the write
// dropped. A write whose answer did not come back (err) may or may not have stored ids: they are
// remembered as unhanded, to drop later, but never handed out.
func (a *Allocator) recordReservation(q *queue, replica int32, ids map[int32]string, sent time.Time,
	written *tpuv1alpha1.TPUSliceAssignment, err error) {
	delete(q.reserved, replica)
	if err == nil {
		// The write stored exactly its claims: every older unhanded token of the slice is gone.
		for token, u := range q.unhanded {
			if u.replica == replica {
				delete(q.unhanded, token)
			}
		}
	}
	if len(ids) == 0 {
		return
	}
	if q.unhanded == nil {
		q.unhanded = map[string]unhanded{}
	}
	for id, token := range ids {
		q.unhanded[token] = unhanded{replica: replica, workerID: id, at: sent}
	}
	if err != nil {
		return
	}
	if q.reserved == nil {
		q.reserved = map[int32]*reservation{}
	}
	q.reserved[replica] = &reservation{sliceUID: written.UID, sliceName: written.Name, replicaName: written.Spec.ReplicaName,
		affinityKey: written.Spec.AffinityTopologyKey, placement: written.Spec.Placement,
		sent: sent, ids: ids}
	a.scheduleGiveBack(q, sent)
}

// scheduleGiveBack queues, for just after the window of a reservation sent at sent ends, a
// give-back call on q: if the reservation still holds unhanded IDs then, and no later write renewed
// it, they are written back as free.
func (a *Allocator) scheduleGiveBack(q *queue, sent time.Time) {
	key, ok := q.key, q.key != (groupKey{})
	if !ok {
		return
	}
	delay := a.opts.ReservationWindow - a.clock.Since(sent) + 50*time.Millisecond
	time.AfterFunc(max(delay, 0), func() {
		ctx, cancel := context.WithTimeout(context.Background(), a.opts.Timeout)
		c := &call{giveBack: true, ctx: ctx, cancel: cancel, result: make(chan result, 1), m: a.m}
		a.enqueueCall(key, c)
	})
}

// giveBack writes back as free the unhanded IDs of every reservation of q whose window has ended,
// for the group of the request req (any request of the queue names its slices). A reservation still
// valid is left alone: its window's own give-back comes later. A write that loses a conflict is
// retried on a live read (giveBackSlice); past that, the next write of the slice or the pending TTL
// frees them.
func (a *Allocator) giveBack(ctx context.Context, q *queue, req Request) {
	now := a.clock.Now()
	for replica, r := range q.reserved {
		if now.Sub(r.sent) >= a.opts.ReservationWindow && len(r.ids) == 0 {
			delete(q.reserved, replica)
		}
	}
	var replicas []int32
	for _, u := range q.unhanded {
		if r := q.reserved[u.replica]; (r == nil || now.Sub(r.sent) >= a.opts.ReservationWindow) && !slices.Contains(replicas, u.replica) {
			replicas = append(replicas, u.replica)
		}
	}
	if len(replicas) == 0 {
		return
	}
	current, err := a.readSlices(ctx, req)
	if err != nil {
		logf.FromContext(ctx).V(1).Info("Reading slices to give back reserved worker IDs failed; the pending TTL frees them", "err", err)
		return
	}
	overlayOwnWrites(current, q.written)
	for _, replica := range replicas {
		a.giveBackSlice(ctx, q, req, replica, current[replica])
	}
}

// giveBackAttempts bounds the writes of one slice's give-back: a conflict (the reconciler binding
// the Pods that took the reservation's other IDs, most often) is retried on a live read.
const giveBackAttempts = 5

// giveBackSlice writes the slice of replica, as current shows it, without this process's unhanded
// reserved claims, retrying conflicts on live reads.
func (a *Allocator) giveBackSlice(ctx context.Context, q *queue, req Request, replica int32, current *tpuv1alpha1.TPUSliceAssignment) {
	log := logf.FromContext(ctx)
	for attempt := 0; current != nil && attempt < giveBackAttempts; attempt++ {
		stripped := a.stripOwn(q, claims.Slices{replica: current})[replica]
		if stripped == current {
			return // nothing of ours is stored there (any more).
		}
		w := claims.Write{Claims: stripped.Status.Claims, ReplicaName: current.Spec.ReplicaName}
		sent := a.clock.Now()
		written, over, err := a.writeSlice(ctx, req, replica, current, w)
		a.recordReservation(q, replica, nil, sent, written, err)
		if err == nil {
			a.m.GiveBacks.Inc()
			q.remember(replica, over, written)
			return
		}
		if !isConflict(err) {
			log.V(1).Info("Giving back reserved worker IDs failed; the next write of the slice or the pending TTL frees them",
				"slice", naming.SliceName(req.ClusterName, req.GroupName, replica), "err", err)
			return
		}
		a.m.LostWrites.Inc()
		a.backoff(ctx, attempt)
		if current, err = a.readSlice(ctx, req, replica); err != nil {
			return
		}
	}
}

// forgetHanded drops hand-outs older than the claim timeout: no retry of their request comes later.
func (a *Allocator) forgetHanded(q *queue) {
	now := a.clock.Now()
	for token, h := range q.handed {
		if now.Sub(h.at) >= a.opts.Timeout {
			delete(q.handed, token)
		}
	}
}

// lowestKey returns the lowest key of a non-empty m, in one pass.
func lowestKey(m map[int32]string) int32 {
	lowest, first := int32(0), true
	for k := range m {
		if first || k < lowest {
			lowest, first = k, false
		}
	}
	return lowest
}
