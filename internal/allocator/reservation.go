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
// Only the holder knows which of its tokens are still unhanded, and only it removes them. Its
// writes of a slice on a claim's path, made while no hand-out runs (the queue is claiming), drop
// them all and reserve afresh. Before a reservation runs out or its window ends, while Pods are
// still being handed its IDs, the holder renews it with a write of its own, off the admission path
// (renew): that write reserves a new block, drops the tokens whose window has ended and keeps every
// token it may still hand out, since hand-outs go on while it is in flight. Once the window has
// passed with tokens left, a give-back write drops them so that another replica (a new owner of
// the group) may claim those IDs at once.

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
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
)

// Reservation block sizes: a slice's first reservation holds up to minReservation IDs; each later
// one twice what the previous one handed out (at least minReservation), at most maxReservation and
// never more than the slice's free IDs.
const (
	minReservation = 16
	maxReservation = 4096
)

// reservation is what this process may hand out of one slice: the IDs it reserved by its writes of
// the slice and has not handed out yet, each until the window after the write that stored it.
type reservation struct {
	sliceUID    types.UID
	sliceName   string
	replicaName string
	affinityKey string
	placement   tpuv1alpha1.SlicePlacement
	// newest is when the write that stored the newest of ids was sent: a renewal is due once
	// renewAfter of its window has passed.
	newest time.Time
	// ids maps each unhanded reserved worker ID to its token and the time its write was sent; an ID
	// is handed out only before that time plus the window. handed counts the IDs handed out since
	// the reservation began (a block is twice that), and exhausted says that its last block found
	// fewer free IDs than it asked for: no renewal is due for running low.
	ids       map[int32]reservedID
	handed    int
	exhausted bool
	// sinceRenewal counts the IDs handed out since the reservation's last renewal was planned.
	sinceRenewal int
}

// retire keeps in r, for hand-outs while a renewal's write is in flight, only the bridge lowest
// IDs still inside their window at now (the next ones KubeRay asks for): the others are never
// handed out from now on, so the renewal's write may drop their tokens and reserve the IDs again
// under new ones. The bridge is half the IDs handed out since the last renewal, at least one: a
// write takes a few tens of milliseconds, the interval between renewals a quarter of the window or
// more.
func (r *reservation) retire(now time.Time, window time.Duration) {
	bridge := max(1, r.sinceRenewal/2)
	r.sinceRenewal = 0
	live := make([]int32, 0, len(r.ids))
	for id, ri := range r.ids {
		if now.Sub(ri.sent) < window {
			live = append(live, id)
		}
	}
	slices.Sort(live)
	keep := map[int32]bool{}
	for _, id := range live[:min(bridge, len(live))] {
		keep[id] = true
	}
	for id := range r.ids {
		if !keep[id] {
			delete(r.ids, id)
		}
	}
}

// reservedID is one reserved, unhanded worker ID: its token and when the write that stored it was
// sent.
type reservedID struct {
	token string
	sent  time.Time
}

// renewAfter is how much of the newest block's window passes before its reservation is renewed:
// the renewal has the rest of the window (0.5 s by default, some 25 status writes) to land before
// the block's IDs can no longer be handed out.
const renewAfter = 3.0 / 4

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
// token, can answer, and returns the others, and whether a reservation is due for renewal. It runs
// on the queue's drain goroutine, with q.mu held.
func (a *Allocator) handOut(q *queue, batch []*call) ([]*call, bool) {
	if len(q.reserved) == 0 && len(q.handed) == 0 {
		return batch, false
	}
	now := a.clock.Now()
	rest := batch[:0]
	renew := false
	for _, c := range batch {
		answered, due := a.handOutOne(q, c, now)
		renew = renew || due
		if !answered {
			rest = append(rest, c)
		}
	}
	return rest, renew
}

// handOutNow answers c from a reservation of q, outside the drain goroutine, unless the queue is
// committing claims (their writes drop the unhanded tokens): a group's Pods are handed IDs while a
// renewal or a give-back of the group is in flight. A due renewal is queued.
func (a *Allocator) handOutNow(q *queue, c *call) bool {
	q.mu.Lock()
	if q.claiming || (len(q.reserved) == 0 && len(q.handed) == 0) {
		q.mu.Unlock()
		return false
	}
	answered, renew := a.handOutOne(q, c, a.clock.Now())
	q.mu.Unlock()
	if renew {
		a.queueRenewal(q)
	}
	return answered
}

// handOutOne answers c from a valid reservation of q, or from an earlier hand-out to its token, and
// reports whether it did, and whether the reservation it took from is due for renewal (one is then
// marked as queued). q.mu is held.
func (a *Allocator) handOutOne(q *queue, c *call, now time.Time) (answered, renew bool) {
	if c.housekeeping() || !roomToHandOut(c.ctx) {
		// A call past or near its deadline goes to the write path: its caller may give up
		// (a forwarding replica then claims locally under the same request token), and an ID
		// handed out under a reserved token would then wait for the pending TTL, whereas a
		// claim written under the request's own token is found again by that retry.
		return false, false
	}
	if h, ok := q.handed[c.token]; ok {
		// The same claim again: answered, but not counted as a second one.
		c.result <- result{assignment: h.assignment}
		return true, false
	}
	as, ok := a.take(q, c, now)
	if !ok {
		return false, false
	}
	a.m.Reserved.Inc()
	if q.handed == nil {
		q.handed = map[string]handedOut{}
	}
	q.handed[c.token] = handedOut{assignment: as, at: now}
	c.finish(result{assignment: as})
	if r := q.reserved[as.Replica]; r != nil && !q.renewing && a.renewalDue(r, now) {
		q.renewing = true
		return true, true
	}
	return true, false
}

// renewalDue reports whether r should be renewed now: renewAfter of its newest block's window has
// passed, or it holds no more IDs than it has handed out (unless its last block found no more free).
func (a *Allocator) renewalDue(r *reservation, now time.Time) bool {
	if now.Sub(r.newest) >= time.Duration(renewAfter*float64(a.opts.ReservationWindow)) {
		return true
	}
	return !r.exhausted && len(r.ids) <= r.handed
}

// queueRenewal queues a renewal call on q (q.mu not held).
func (a *Allocator) queueRenewal(q *queue) {
	ctx, cancel := context.WithTimeout(context.Background(), a.opts.Timeout)
	a.enqueueCall(q.key, &call{renew: true, ctx: ctx, cancel: cancel, result: make(chan result, 1), m: a.m})
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
// reserved ID of the lowest reserved replica, among the IDs still inside their window.
func (a *Allocator) take(q *queue, c *call, now time.Time) (Assignment, bool) {
	live := func(ri reservedID) bool { return now.Sub(ri.sent) < a.opts.ReservationWindow }
	replica, id := int32(-1), int32(-1)
	if idx := c.req.Claim.ReplicaIndex; idx != nil {
		r := q.reserved[*idx]
		if r == nil || *idx >= c.cluster.desired || r.replicaName != c.req.Claim.ReplicaName {
			return Assignment{}, false
		}
		want := int32(0)
		if c.req.Claim.HostIndex != nil {
			want = *c.req.Claim.HostIndex
		}
		if ri, ok := r.ids[want]; !ok || !live(ri) {
			return Assignment{}, false
		}
		replica, id = *idx, want
	} else {
		for _, rep := range slices.Sorted(maps.Keys(q.reserved)) {
			if rep >= c.cluster.desired {
				continue
			}
			if low, ok := lowestLive(q.reserved[rep], live); ok {
				replica, id = rep, low
				break
			}
		}
		if replica < 0 {
			return Assignment{}, false
		}
	}
	r := q.reserved[replica]
	token := r.ids[id].token
	secret, known := q.secrets[token]
	if !known {
		// Reserved by a write whose secrets were forgotten (never by this process's hand-outs):
		// the Pod could not carry a token that proves the claim.
		return Assignment{}, false
	}
	if !a.stillStored(c.ctx, q, c.req.Namespace, replica, r, id, token) {
		// Someone else's write removed or bound the claim, or left lines that do not parse: the
		// reservation is not trusted any more, and the slow path plans on the slice as it is.
		delete(q.reserved, replica)
		return Assignment{}, false
	}
	delete(r.ids, id)
	q.forgetUnhanded(token)
	r.handed++
	r.sinceRenewal++
	return Assignment{SliceName: r.sliceName, SliceUID: r.sliceUID, Replica: replica, WorkerID: id, Token: secret,
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
	w, ok := q.written[replica]
	switch {
	case ok && w.slice != nil && err == nil:
		// The cache has seen the slice: from now on its absence there means it was deleted, not
		// that the cache is behind this process's create of it (docs/spec.md §3.5).
		if i := slices.Index(w.over, ""); i >= 0 {
			w.over = slices.Delete(slices.Clone(w.over), i, i+1)
			q.written[replica] = w
		}
		if slices.Contains(w.over, cachedVersion) {
			slice = w.slice
		}
	case ok && w.slice != nil && slices.Contains(w.over, ""):
		// The cache shows no slice, and this process created it: the cache may not have seen the
		// create yet, or the slice was deleted since (by hand, or by the reconciler). Memory
		// cannot tell the two apart, so a live read decides: an ID is handed out only from a
		// slice that is there (docs/spec.md §3.5).
		live := &tpuv1alpha1.TPUSliceAssignment{}
		if err := a.reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: r.sliceName}, live); err != nil {
			return false
		}
		slice = live
	case err != nil:
		return false
	}
	if slice.UID != r.sliceUID || len(slice.Status.MalformedLines) > 0 {
		return false
	}
	i := slices.IndexFunc(slice.Status.Claims, func(c tpuv1alpha1.WorkerClaim) bool { return c.WorkerID == id })
	return i >= 0 && slice.Status.Claims[i].Token == token && slice.Status.Claims[i].PodUID == ""
}

// stripOwn returns current with every pending claim this process reserved and has not handed out
// removed, except, when keepLive, the claims it may still hand out (inside their window, in a
// reservation it trusts): to the plan the others are free, so that the write it makes of their
// slice drops them (or hands them to its requests under their own tokens). Slices are copied only
// where a claim is removed. A token not found pending in current is forgotten once it is
// forgetUnhandedAfter old (by then the pending TTL has freed it, if a write of this process has
// not). q.mu is held.
func (a *Allocator) stripOwn(q *queue, current claims.Slices, keepLive bool) claims.Slices {
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
			if !ok || u.replica != replica || u.workerID != c.WorkerID || c.PodUID != "" {
				return false
			}
			if keepLive {
				if r := q.reserved[replica]; r != nil && r.sliceUID == s.UID {
					if ri, ok := r.ids[c.WorkerID]; ok && ri.token == c.Token && now.Sub(ri.sent) < a.opts.ReservationWindow {
						return false
					}
				}
			}
			return true
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
			q.forgetUnhanded(token)
		}
	}
	return out
}

// reserve adds to w, the claims a write of replica will store, a block of the slice's free IDs under
// new tokens, and returns them by worker ID (nil when reservations are off or no ID is free), and
// whether the block is smaller than asked for (the slice had no more free IDs). placed are the IDs
// the write claims for its requests: a block starts above the highest of them, the order KubeRay
// creates a replica's hosts in, and wraps around (without them, at the lowest free ID). q.mu is
// held.
func (a *Allocator) reserve(q *queue, replica, hosts int32, w *claims.Write, placed []int32) (map[int32]string, bool) {
	if !a.reserving() {
		return nil, false
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
			// The claim is stored under the seal of a secret only the Pod it is handed out to
			// will carry (docs/spec.md §3.5): reading the slice tells no one the token.
			secret := identity.NewSecret()
			out[id] = identity.Seal(secret)
			if q.secrets == nil {
				q.secrets = map[string]string{}
			}
			q.secrets[out[id]] = secret
		}
	}
	if len(out) == 0 {
		return nil, true
	}
	claimsOut := slices.Clone(w.Claims)
	for id, token := range out {
		claimsOut = append(claimsOut, tpuv1alpha1.WorkerClaim{WorkerID: id, Token: token})
	}
	w.Claims = claimsOut
	return out, len(out) < size
}

// recordReservation records, after a claim's write of replica sent at sent returned written, the
// reservation it made (ids; nil for none) and forgets the unhanded tokens of that slice the write
// dropped (all of them: no hand-out runs while claims are committed). A write whose answer did not
// come back (err) may or may not have stored ids: they are remembered as unhanded, to drop later,
// but never handed out. q.mu is held.
func (a *Allocator) recordReservation(q *queue, replica int32, ids map[int32]string, exhausted bool, sent time.Time,
	written *tpuv1alpha1.TPUSliceAssignment, err error) {
	prev := q.reserved[replica]
	delete(q.reserved, replica)
	if err == nil {
		// The write stored exactly its claims: every older unhanded token of the slice is gone.
		for token, u := range q.unhanded {
			if u.replica == replica {
				q.forgetUnhanded(token)
			}
		}
	}
	if len(ids) == 0 {
		return
	}
	a.rememberUnhanded(q, replica, ids, sent)
	if err != nil {
		return
	}
	if q.reserved == nil {
		q.reserved = map[int32]*reservation{}
	}
	r := &reservation{sliceUID: written.UID, sliceName: written.Name, replicaName: written.Spec.ReplicaName,
		affinityKey: written.Spec.AffinityTopologyKey, placement: written.Spec.Placement,
		ids: map[int32]reservedID{}}
	if prev != nil && prev.sliceUID == written.UID {
		// The same burst goes on: the next block keeps growing with it.
		r.handed = prev.handed
	}
	a.addBlock(q, r, ids, exhausted, sent)
	q.reserved[replica] = r
}

// recordRenewal records, after a renewal's (or a give-back's) write of replica sent at sent returned
// written, storing exactly stored when it succeeded, the block it reserved (ids; nil for none): the
// unhanded tokens of the slice it dropped are forgotten, the ones it kept (those that could still
// be handed out when it was planned, and may have been since) stay. The reservation is kept
// whatever the outcome: every ID it may still hand out is stored by the write as by the state
// before it. q.mu is held.
func (a *Allocator) recordRenewal(q *queue, replica int32, ids map[int32]string, exhausted bool, sent time.Time,
	written *tpuv1alpha1.TPUSliceAssignment, stored []tpuv1alpha1.WorkerClaim, err error) {
	r := q.reserved[replica]
	if err == nil {
		kept := make(map[string]int32, len(stored))
		for _, c := range stored {
			if c.PodUID == "" {
				kept[c.Token] = c.WorkerID
			}
		}
		for token, u := range q.unhanded {
			if id, ok := kept[token]; u.replica == replica && (!ok || id != u.workerID) {
				q.forgetUnhanded(token)
			}
		}
		if r != nil {
			for id, ri := range r.ids {
				if keptID, ok := kept[ri.token]; !ok || keptID != id {
					delete(r.ids, id)
				}
			}
			if len(r.ids) == 0 && len(ids) == 0 && r.sliceUID == written.UID {
				delete(q.reserved, replica)
			}
		}
	}
	if len(ids) == 0 {
		return
	}
	a.rememberUnhanded(q, replica, ids, sent)
	if err != nil || r == nil || r.sliceUID != written.UID {
		return
	}
	a.addBlock(q, r, ids, exhausted, sent)
}

// forgetUnhanded forgets the unhanded token and its secret. q.mu is held.
func (q *queue) forgetUnhanded(token string) {
	delete(q.unhanded, token)
	delete(q.secrets, token)
}

// forgetSecrets forgets the secrets of the tokens of ids a write did not leave unhanded (a write
// the API server refused stored none of them). q.mu is held.
func (q *queue) forgetSecrets(ids map[int32]string) {
	for _, token := range ids {
		if _, ok := q.unhanded[token]; !ok {
			delete(q.secrets, token)
		}
	}
}

// rememberUnhanded records the tokens of a block a write sent at sent may have stored.
func (a *Allocator) rememberUnhanded(q *queue, replica int32, ids map[int32]string, sent time.Time) {
	if q.unhanded == nil {
		q.unhanded = map[string]unhanded{}
	}
	for id, token := range ids {
		q.unhanded[token] = unhanded{replica: replica, workerID: id, at: sent}
	}
}

// addBlock adds to r a block the write sent at sent stored, and schedules its give-back.
func (a *Allocator) addBlock(q *queue, r *reservation, ids map[int32]string, exhausted bool, sent time.Time) {
	for id, token := range ids {
		r.ids[id] = reservedID{token: token, sent: sent}
	}
	r.newest, r.exhausted = sent, exhausted
	a.scheduleGiveBack(q, sent)
}

// writeOwn makes a write of replica that hand-outs may run beside (a renewal's or a give-back's):
// w, planned on current, with ids the block it reserves (nil for none). It records the outcome
// (recordRenewal) and, when it landed, the slice it left (remember).
func (a *Allocator) writeOwn(ctx context.Context, q *queue, req Request, replica int32, current *tpuv1alpha1.TPUSliceAssignment,
	w claims.Write, ids map[int32]string, exhausted bool) error {
	sent := a.clock.Now()
	written, over, err := a.writeSlice(ctx, req, replica, current, w)
	q.mu.Lock()
	defer q.mu.Unlock()
	a.recordRenewal(q, replica, maybeStored(ids, err), exhausted, sent, written, w.Claims, err)
	q.forgetSecrets(ids)
	if err == nil {
		q.remember(replica, over, written)
	}
	return err
}

// renewAttempts bounds the writes of one slice's renewal: a conflict (the reconciler binding the
// Pods handed the reservation's IDs, most often) is retried on a live read.
const renewAttempts = 5

// renew renews the reservations of q that are still inside their window, for the group of the
// request req (the queue's last committed request names the group's slices): each slice is
// written once, off the admission path, with a new block reserved, its tokens whose window has
// ended dropped, and every token that may still be handed out kept (docs/spec.md §3.5). Hand-outs
// go on from the reservation while the write is in flight.
func (a *Allocator) renew(ctx context.Context, q *queue, req Request) {
	defer func() {
		q.mu.Lock()
		q.renewing = false
		q.mu.Unlock()
	}()
	now := a.clock.Now()
	q.mu.Lock()
	a.forgetHanded(q) // a burst served by hand-outs and renewals alone commits no claim batch.
	var replicas []int32
	for replica, r := range q.reserved {
		if now.Sub(r.newest) < a.opts.ReservationWindow {
			replicas = append(replicas, replica)
		}
	}
	q.mu.Unlock()
	if len(replicas) == 0 {
		return
	}
	current, err := a.readSlices(ctx, req)
	if err != nil {
		logf.FromContext(ctx).V(1).Info("Reading slices to renew a reservation failed; the next claim writes", "err", err)
		return
	}
	q.mu.Lock()
	overlayOwnWrites(current, q.written)
	q.mu.Unlock()
	for _, replica := range slices.Sorted(slices.Values(replicas)) {
		a.renewSlice(ctx, q, req, replica, current[replica])
	}
}

// renewSlice renews the reservation of replica on the slice as current shows it, retrying
// conflicts on live reads. It first retires all but a bridge of the reservation's IDs
// (reservation.retire): the write drops their tokens and reserves them again, with a new block,
// under new tokens whose window starts with it, and keeps the bridge's, which may be handed out
// while it is in flight.
func (a *Allocator) renewSlice(ctx context.Context, q *queue, req Request, replica int32, current *tpuv1alpha1.TPUSliceAssignment) {
	q.mu.Lock()
	if r := q.reserved[replica]; r != nil {
		r.retire(a.clock.Now(), a.opts.ReservationWindow)
	}
	q.mu.Unlock()
	for attempt := 0; current != nil && attempt < renewAttempts; attempt++ {
		q.mu.Lock()
		r := q.reserved[replica]
		// The slice the reservation was made in, of the queue's shape: its host count is the
		// request's, bounded by --max-slice-hosts before any claim was made (the stored spec's
		// schema bound is far larger).
		if r == nil || r.sliceUID != current.UID || current.Spec.ReplicaName != r.replicaName || current.Spec.Hosts != req.Hosts {
			q.mu.Unlock()
			return
		}
		stripped := a.stripOwn(q, claims.Slices{replica: current}, true)[replica]
		w := claims.Write{Claims: stripped.Status.Claims, ReplicaName: current.Spec.ReplicaName}
		ids, exhausted := a.reserve(q, replica, req.Hosts, &w, nil)
		q.mu.Unlock()
		if len(ids) == 0 && stripped == current {
			return // nothing to reserve, nothing to drop.
		}
		err := a.writeOwn(ctx, q, req, replica, current, w, ids, exhausted)
		if err == nil {
			a.m.Renewals.Inc()
			return
		}
		if !isConflict(err) {
			logf.FromContext(ctx).V(1).Info("Renewing a reservation failed; the next claim writes",
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
	q.mu.Lock()
	for replica, r := range q.reserved {
		if now.Sub(r.newest) >= a.opts.ReservationWindow && len(r.ids) == 0 {
			delete(q.reserved, replica)
		}
	}
	var replicas []int32
	for _, u := range q.unhanded {
		if r := q.reserved[u.replica]; (r == nil || now.Sub(r.newest) >= a.opts.ReservationWindow) && !slices.Contains(replicas, u.replica) {
			replicas = append(replicas, u.replica)
		}
	}
	q.mu.Unlock()
	if len(replicas) == 0 {
		return
	}
	current, err := a.readSlices(ctx, req)
	if err != nil {
		logf.FromContext(ctx).V(1).Info("Reading slices to give back reserved worker IDs failed; the pending TTL frees them", "err", err)
		return
	}
	q.mu.Lock()
	overlayOwnWrites(current, q.written)
	q.mu.Unlock()
	for _, replica := range replicas {
		a.giveBackSlice(ctx, q, req, replica, current[replica])
	}
}

// giveBackAttempts bounds the writes of one slice's give-back: a conflict (the reconciler binding
// the Pods that took the reservation's other IDs, most often) is retried on a live read.
const giveBackAttempts = 5

// giveBackSlice writes the slice of replica, as current shows it, without this process's unhanded
// reserved claims that can no longer be handed out, retrying conflicts on live reads. Hand-outs may
// run meanwhile: a claim that a renewal since made live again is kept.
func (a *Allocator) giveBackSlice(ctx context.Context, q *queue, req Request, replica int32, current *tpuv1alpha1.TPUSliceAssignment) {
	log := logf.FromContext(ctx)
	for attempt := 0; current != nil && attempt < giveBackAttempts; attempt++ {
		q.mu.Lock()
		stripped := a.stripOwn(q, claims.Slices{replica: current}, true)[replica]
		q.mu.Unlock()
		if stripped == current {
			return // nothing of ours is stored there (any more).
		}
		w := claims.Write{Claims: stripped.Status.Claims, ReplicaName: current.Spec.ReplicaName}
		err := a.writeOwn(ctx, q, req, replica, current, w, nil, false)
		if err == nil {
			a.m.GiveBacks.Inc()
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
// q.mu is held.
func (a *Allocator) forgetHanded(q *queue) {
	now := a.clock.Now()
	for token, h := range q.handed {
		if now.Sub(h.at) >= a.opts.Timeout {
			delete(q.handed, token)
		}
	}
}

// lowestLive returns the lowest ID of r that live accepts, in one pass, dropping from r the IDs
// whose window has ended (they are never handed out; the next write of the slice drops them).
func lowestLive(r *reservation, live func(reservedID) bool) (int32, bool) {
	lowest, found := int32(0), false
	for id, ri := range r.ids {
		switch {
		case !live(ri):
			delete(r.ids, id)
		case !found || id < lowest:
			lowest, found = id, true
		}
	}
	return lowest, found
}
