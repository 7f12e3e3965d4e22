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
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
)

// shape is what a slice is made of. Only requests of one shape share a queue, and so a batch: a
// batch's plan and the slices it creates take these values from its requests.
type shape struct {
	hosts       int32
	topology    string
	accelerator string
}

// keyOf returns the queue of req: its worker group and RayCluster UID, and its slice shape. A request
// of another shape than the group's own Pods (a stray or hand-made Pod, a forged review, a
// template changed while its old Pods are still being created) never joins their batch, so every
// request is planned with its own host count and topology, and neither can deny or misplace the
// other (docs/spec.md §10).
func keyOf(req Request) groupKey {
	return groupKey{namespace: req.Namespace, uid: req.ClusterUID, group: req.GroupName,
		shape: shape{hosts: req.Hosts, topology: req.Topology, accelerator: req.Accelerator}}
}

// queue holds the calls of one worker group and slice shape (keyOf) waiting for, or in, a commit.
type queue struct {
	pending []*call
	running bool
	// contended is when a write of this group last lost a conflict, and wrote when one last
	// landed (guarded by Allocator.mu).
	contended, wrote time.Time
	// key is the queue's own key, and last the last request it committed (it names the group's
	// slices for a give-back or a renewal; used only by the drain goroutine).
	key  groupKey
	last Request

	// mu guards what hand-outs outside the drain goroutine (handOutNow) share with it; it is never
	// held across an API call, and a.mu is never taken while it is held.
	mu sync.Mutex
	// claiming is set while the drain goroutine commits claims: their writes drop every unhanded
	// token, so no hand-out runs meanwhile. renewing is set while a renewal is queued or running.
	claiming, renewing bool
	// written holds, by replica, the slices this process last wrote for the group, until the cache
	// has seen them.
	written map[int32]ownWrite
	// reserved holds this process's reservations of the group's slices by replica, unhanded every
	// token it reserved and has not handed out, by token, and handed what request tokens got from a
	// reservation (docs/spec.md §3.5).
	reserved map[int32]*reservation
	unhanded map[string]unhanded
	handed   map[string]handedOut
	// secrets holds, by the token a reserved claim is stored under, the secret its Pod is handed
	// (identity.Seal), while the token is unhanded.
	secrets map[string]string
}

// idle reports whether the queue may be forgotten at now: nothing recent to remember about its
// group. a.mu is held.
func (q *queue) idle(now time.Time) bool {
	if now.Sub(q.contended) < contentionWindow || now.Sub(q.wrote) < contentionWindow {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	// Reserved tokens not handed out are dropped by the queue's next write or give-back; forgetting
	// the queue before then would leave them to the pending TTL.
	for _, u := range q.unhanded {
		if now.Sub(u.at) < forgetUnhandedAfter {
			return false
		}
	}
	return true
}

// contentionWindow is how long after a lost conflict a group's batches confirm the slices they write
// with live reads: while other writers are active on the group the cache is nearly always one write
// behind, and a live read costs less than a write that is bound to lose.
const contentionWindow = time.Second

// enqueue adds c to the queue of its group and shape and starts the queue's drain goroutine if
// none runs.
func (a *Allocator) enqueue(c *call) {
	a.enqueueCall(keyOf(c.req), c)
}

// enqueueCall adds c to the queue of key, unless a reservation of the queue answers it at once
// (handOutNow). A give-back or renewal call joins only a queue that still exists: a forgotten queue
// holds no reservation.
func (a *Allocator) enqueueCall(key groupKey, c *call) {
	if !c.housekeeping() && a.reserving() {
		a.mu.Lock()
		q := a.queues[key]
		a.mu.Unlock()
		if q != nil && a.handOutNow(q, c) {
			return
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	q := a.queues[key]
	if q == nil {
		if c.housekeeping() {
			c.cancel()
			return
		}
		q = &queue{key: key}
		a.queues[key] = q
	}
	q.pending = append(q.pending, c)
	if !q.running {
		q.running = true
		go a.drain(key, q)
	}
}

// drain commits the queue's calls in batches until it is empty.
func (a *Allocator) drain(key groupKey, q *queue) {
	for {
		a.mu.Lock()
		batch := q.pending
		q.pending = nil
		if len(batch) == 0 {
			q.running = false
			a.forgetLater(key, q)
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		a.commit(key, q, batch)
	}
}

// forgetLater drops an idle queue now, or once the contention window has passed unless it is in
// use again by then; a.mu is held.
func (a *Allocator) forgetLater(key groupKey, q *queue) {
	if q.idle(a.clock.Now()) {
		delete(a.queues, key)
		return
	}
	time.AfterFunc(contentionWindow, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.queues[key] == q && !q.running && q.idle(a.clock.Now()) {
			delete(a.queues, key)
		}
	})
}

// commit places and writes a batch of calls for one worker group, retrying conflicts until each
// call is answered or its deadline passes; then it runs the batch's give-backs and renewals, and
// those that queued while it retried, with hand-outs free to run beside them.
func (a *Allocator) commit(key groupKey, q *queue, batch []*call) {
	batch, housekeeping := splitGiveBacks(batch)
	if len(batch) > 0 {
		housekeeping = append(housekeeping, a.commitClaims(key, q, batch)...)
	}
	if len(housekeeping) > 0 {
		a.runGiveBacks(q, housekeeping)
	}
}

// commitClaims commits a batch of claim calls with no hand-out running beside it (q.claiming), and
// returns the give-backs and renewals that queued while it retried.
func (a *Allocator) commitClaims(key groupKey, q *queue, batch []*call) []*call {
	q.mu.Lock()
	q.claiming = true
	a.forgetHanded(q)
	batch, renew := a.handOut(q, batch)
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		q.claiming = false
		q.mu.Unlock()
	}()
	var housekeeping []*call
	if renew {
		ctx, cancel := context.WithTimeout(context.Background(), a.opts.Timeout)
		housekeeping = append(housekeeping, &call{renew: true, ctx: ctx, cancel: cancel, result: make(chan result, 1), m: a.m})
	}
	if len(batch) == 0 {
		return housekeeping
	}
	q.last = batch[len(batch)-1].req
	log := logf.FromContext(batch[0].ctx)
	pending := batch
	a.mu.Lock()
	live := a.clock.Since(q.contended) < contentionWindow
	a.mu.Unlock()
	readopted := false
	for attempt := 0; ; attempt++ {
		pending = dropExpired(pending)
		if len(pending) == 0 {
			return housekeeping
		}
		ctx := latestDeadline(pending)
		// Every call of the queue has its group, RayCluster UID and shape (keyOf), so any of them
		// names the slices to plan on; the last resolved the RayCluster's replica count last.
		last := pending[len(pending)-1]
		err := a.ensureAdopted(ctx, key, q, last.req)
		var p plan
		if err == nil {
			p, err = a.plan(ctx, q, last, tokensOf(pending), live)
		}
		if err == nil && !readopted && createsSlice(p) {
			// A slice this write would create may have been deleted (by hand) under live Pods
			// that hold its IDs by their spec: adopt them first, as on the group's first
			// admission (docs/spec.md §3.4), once per drain, and plan again.
			readopted = true
			a.mu.Lock()
			delete(a.adopted, key)
			a.mu.Unlock()
			continue
		}
		if err != nil {
			if d := (*DeniedError)(nil); errors.As(err, &d) {
				a.answerAll(pending, d)
				return housekeeping
			}
			log.V(1).Info("Reading slices failed, retrying", "err", err, "attempt", attempt)
			live = true
			a.backoff(ctx, attempt)
			continue
		}
		for _, c := range pending {
			c.attempts++
		}
		retry := a.apply(ctx, q, pending, p)
		if len(retry) == 0 {
			return housekeeping
		}
		// Claims that queued while this batch was writing join its retry: one write carries them
		// all. A give-back that queued meanwhile runs after the batch, as the batch's own do: it
		// names no request, so among the claims it would become the call whose request names the
		// group (last, below), and the retry would plan the claims for a slice of 0 hosts and an
		// empty RayCluster UID (denied for good, or the slice replaced). Found by make bench S7.
		a.mu.Lock()
		queued, queuedHousekeeping := splitGiveBacks(q.pending)
		q.pending = nil
		a.mu.Unlock()
		pending = append(retry, queued...)
		housekeeping = append(housekeeping, queuedHousekeeping...)
		live = true
		a.backoff(ctx, attempt)
	}
}

// splitGiveBacks separates the give-back and renewal calls of a batch from its claims.
func splitGiveBacks(batch []*call) (claims, housekeeping []*call) {
	for _, c := range batch {
		if c.housekeeping() {
			housekeeping = append(housekeeping, c)
		} else {
			claims = append(claims, c)
		}
	}
	return claims, housekeeping
}

// runGiveBacks renews the reservations due (once for any number of renewal calls), then gives back
// the unhanded IDs of expired reservations (once for any number of give-back calls), within the
// first call's deadline.
func (a *Allocator) runGiveBacks(q *queue, calls []*call) {
	defer func() {
		for _, c := range calls {
			c.cancel()
		}
	}()
	renew := slices.ContainsFunc(calls, func(c *call) bool { return c.renew })
	giveBack := slices.ContainsFunc(calls, func(c *call) bool { return c.giveBack })
	if q.last.GroupName == "" {
		if renew {
			q.mu.Lock()
			q.renewing = false
			q.mu.Unlock()
		}
		return
	}
	if renew {
		a.renew(calls[0].ctx, q, q.last)
	}
	if giveBack {
		a.giveBack(calls[0].ctx, q, q.last)
	}
}

// tokensOf returns the claim requests of calls, each with its call's token.
func tokensOf(calls []*call) []claims.Request {
	reqs := make([]claims.Request, len(calls))
	for i, c := range calls {
		reqs[i] = c.req.Claim
		reqs[i].Token = c.token
	}
	return reqs
}

// apply writes a plan, slice by slice, answers the calls it placed or denied for good and returns
// those to retry: calls whose write failed, and calls denied as full while some write failed (the
// IDs planned for them may be free after all). A slice the plan creates is made from the first
// request placed in it, the slice's first claim.
func (a *Allocator) apply(ctx context.Context, q *queue, pending []*call, p plan) []*call {
	log := logf.FromContext(ctx)
	var retry []*call
	for replica, w := range p.writes {
		placed := p.placedIn(replica)
		if len(placed) == 0 {
			continue // Plan writes only the slices it places requests in.
		}
		req := pending[placed[0]].req
		var ids map[int32]string
		exhausted := false
		if !anyNoReservation(pending, placed) {
			q.mu.Lock()
			ids, exhausted = a.reserve(q, replica, req.Hosts, &w, placedIDs(p, placed))
			q.mu.Unlock()
		}
		sent := a.clock.Now()
		written, over, err := a.writeSlice(ctx, req, replica, p.current[replica], w)
		q.mu.Lock()
		a.recordReservation(q, replica, maybeStored(ids, err), exhausted, sent, written, err)
		q.forgetSecrets(ids)
		if err == nil {
			q.remember(replica, over, written)
		}
		q.mu.Unlock()
		if err != nil {
			var denied *DeniedError
			switch {
			case errors.As(err, &denied):
				for _, i := range placed {
					pending[i].finish(result{err: denied})
				}
				continue
			case isConflict(err):
				a.lostWrite(q, pending, placed)
			case isPermanent(err):
				// The API server refuses the write itself (invalid, forbidden, too large):
				// retrying cannot help, and the Pod must not wait for the deadline to learn that.
				d := &DeniedError{Message: "the API server refused the TPUSliceAssignment write: " + err.Error()}
				for _, i := range placed {
					a.m.Results.WithLabelValues(metrics.ClaimDenied).Inc()
					pending[i].finish(result{err: d})
				}
				continue
			default:
				log.Info("Writing TPUSliceAssignment failed, retrying", "err", err, "replica", replica)
			}
			for _, i := range placed {
				retry = append(retry, pending[i])
			}
			continue
		}
		a.mu.Lock()
		q.wrote = a.clock.Now()
		a.mu.Unlock()
		for _, i := range placed {
			pending[i].finish(result{assignment: Assignment{
				SliceName:           naming.SliceName(req.ClusterName, req.GroupName, replica),
				SliceUID:            written.UID,
				Replica:             replica,
				WorkerID:            p.outcomes[i].Slot.WorkerID,
				Token:               pending[i].token,
				AffinityTopologyKey: written.Spec.AffinityTopologyKey,
				Placement:           written.Spec.Placement,
			}})
		}
	}
	for i, o := range p.outcomes {
		switch {
		case o.HasSlot():
		case o.Reason == claims.ReasonFull && len(retry) > 0:
			retry = append(retry, pending[i])
		default:
			pending[i].finish(result{err: a.deny(o.Reason.Transient(), "%s", o.Message)})
		}
	}
	return retry
}

// anyNoReservation reports whether a call placed asks for no reservation.
func anyNoReservation(pending []*call, placed []int) bool {
	for _, i := range placed {
		if pending[i].req.NoReservation {
			return true
		}
	}
	return false
}

// placedIDs returns the worker IDs the plan gives the requests placed.
func placedIDs(p plan, placed []int) []int32 {
	ids := make([]int32, len(placed))
	for i, j := range placed {
		ids[i] = p.outcomes[j].Slot.WorkerID
	}
	return ids
}

// createsSlice reports whether p writes a slice it planned on none of (a create).
func createsSlice(p plan) bool {
	for replica := range p.writes {
		if p.current[replica] == nil {
			return true
		}
	}
	return false
}

// maybeStored returns the reserved ids a write that returned err may have stored: all of them
// unless the API server refused the write (a conflict, a refusal, or a denial before it was sent).
func maybeStored(ids map[int32]string, err error) map[int32]string {
	var denied *DeniedError
	if err != nil && (isConflict(err) || isPermanent(err) || errors.As(err, &denied)) {
		return nil
	}
	return ids
}

// lostWrite records that a write carrying the calls placed lost a conflict.
func (a *Allocator) lostWrite(q *queue, pending []*call, placed []int) {
	a.m.LostWrites.Inc()
	a.mu.Lock()
	q.contended = a.clock.Now()
	a.mu.Unlock()
	for _, i := range placed {
		pending[i].conflicts++
	}
}

func (a *Allocator) answerAll(calls []*call, d *DeniedError) {
	for _, c := range calls {
		c.finish(result{err: d})
	}
}

// latestDeadline returns the context of the call whose deadline is the latest: the batch works
// until then.
func latestDeadline(calls []*call) context.Context {
	latest := calls[0]
	for _, c := range calls[1:] {
		if d, _ := c.ctx.Deadline(); d.After(deadline(latest.ctx)) {
			latest = c
		}
	}
	return latest.ctx
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

func dropExpired(calls []*call) []*call {
	out := calls[:0]
	for _, c := range calls {
		if c.ctx.Err() == nil {
			out = append(out, c)
		}
	}
	return out
}

// backoff sleeps 10 ms × 2^attempt, at most 250 ms, with ±50% jitter, or until ctx ends.
func (a *Allocator) backoff(ctx context.Context, attempt int) {
	d := 10 * time.Millisecond << min(attempt, 5)
	d = min(d, 250*time.Millisecond)
	d = d/2 + time.Duration(rand.Int64N(int64(d)))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
