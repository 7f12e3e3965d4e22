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

// Package allocator claims TPU worker IDs in TPUSliceAssignment objects on behalf of the Pod
// webhook. The API server is the only source of truth: a claim is an append to a slice's status
// written with a resourceVersion-checked update, so two claims on one ID can never both succeed,
// whatever the number of webhook replicas. A conflict means another writer won: the allocator
// re-reads live and plans again, with jittered backoff, until its deadline.
//
// Claims for the same worker group that arrive together in one process are committed together
// (group commit): one status update carries every claim of a batch that lands in one slice. The
// batching only saves writes; it is not trusted for uniqueness.
package allocator

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrl "sigs.k8s.io/controller-runtime/pkg/log"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
)

// Request asks for a worker ID for one Pod of a worker group.
type Request struct {
	Namespace   string
	ClusterName string
	ClusterUID  types.UID
	GroupName   string
	Hosts       int32
	Topology    string
	Accelerator string
	// DesiredReplicas is the group's clamp(replicas, min, max).
	DesiredReplicas int32
	// Claim carries KubeRay's index labels, when present.
	Claim claims.Request
}

// Assignment is a committed (or, for a dry run, planned) claim.
type Assignment struct {
	SliceName string
	Replica   int32
	WorkerID  int32
	Token     string
}

// DeniedError is a claim that cannot be made. Transient denials succeed on retry.
type DeniedError struct {
	Transient bool
	Message   string
}

func (e *DeniedError) Error() string { return e.Message }

// Stats counts the allocator's work, for tests, benchmarks and metrics.
type Stats struct {
	// Claims committed, attempts (plans committed or tried), conflicts and API writes.
	Claims, Attempts, Conflicts, Writes, Denials atomic.Int64
	// LostWrites counts the writes (included in Writes) that lost a conflict to another writer.
	LostWrites atomic.Int64
	// ClaimNanos is the total time Claim calls took.
	ClaimNanos atomic.Int64
}

// Allocator claims worker IDs. The zero value is not usable: use New.
type Allocator struct {
	client  client.Client // cached reads and all writes
	reader  client.Reader // live reads
	timeout time.Duration
	now     func() time.Time
	Stats   Stats

	mu     sync.Mutex
	queues map[groupKey]*queue
}

// New returns an Allocator that reads from c (normally cached) first and from reader (live) after a
// conflict, and gives up on a claim after timeout.
func New(c client.Client, reader client.Reader, timeout time.Duration) *Allocator {
	return &Allocator{client: c, reader: reader, timeout: timeout, now: time.Now, queues: map[groupKey]*queue{}}
}

type groupKey struct {
	namespace string
	uid       types.UID
	group     string
}

type call struct {
	req    Request
	token  string
	ctx    context.Context
	result chan result
	// start, attempts and conflicts feed the claim metrics.
	start               time.Time
	attempts, conflicts int
}

// finish answers a call and records its metrics.
func (c *call) finish(r result) {
	metrics.ClaimAttempts.Observe(float64(c.attempts))
	metrics.ClaimConflicts.Observe(float64(c.conflicts))
	metrics.ClaimDuration.Observe(time.Since(c.start).Seconds())
	c.result <- r
}

type result struct {
	assignment Assignment
	err        error
}

type queue struct {
	pending []*call
	running bool
	// contended is when a write of this group last lost a conflict, and wrote when one last
	// landed (guarded by Allocator.mu).
	contended, wrote time.Time
	// written holds, by replica, the slices this process last wrote for the group, until the cache
	// has seen them (used only by the queue's drain goroutine).
	written map[int32]ownWrite
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

// idle reports whether the queue may be forgotten: nothing recent to remember about its group.
func (q *queue) idle() bool {
	return time.Since(q.contended) >= contentionWindow && time.Since(q.wrote) >= contentionWindow
}

// contentionWindow is how long after a lost conflict a group's batches confirm the slices they write
// with live reads: while other writers are active on the group the cache is nearly always one write
// behind, and a live read costs less than a write that is bound to lose.
const contentionWindow = time.Second

// NewToken returns a random claim token.
func NewToken() string {
	b := make([]byte, 8)
	_, _ = crand.Read(b) // never fails (crypto/rand).
	return hex.EncodeToString(b)
}

// Claim claims a worker ID for req and returns the assignment, or a *DeniedError. The claim's token
// is req.Claim.Token, or a new one when it is empty: a request whose token already holds a claim
// (an earlier attempt whose answer was lost) gets that claim back.
func (a *Allocator) Claim(ctx context.Context, req Request) (Assignment, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	start := a.now()
	defer func() { a.Stats.ClaimNanos.Add(int64(time.Since(start))) }()
	token := req.Claim.Token
	if token == "" {
		token = NewToken()
	}
	c := &call{req: req, token: token, ctx: ctx, result: make(chan result, 1), start: time.Now()}
	key := groupKey{namespace: req.Namespace, uid: req.ClusterUID, group: req.GroupName}

	a.mu.Lock()
	q := a.queues[key]
	if q == nil {
		q = &queue{}
		a.queues[key] = q
	}
	q.pending = append(q.pending, c)
	if !q.running {
		q.running = true
		go a.drain(key, q)
	}
	a.mu.Unlock()

	select {
	case r := <-c.result:
		return r.assignment, r.err
	case <-ctx.Done():
		// A commit may have landed just as the deadline passed: take it rather than leave a
		// claim behind for the TTL to clean up.
		select {
		case r := <-c.result:
			return r.assignment, r.err
		default:
		}
		return Assignment{}, a.deny(true, "timed out after %s claiming a worker ID (API server slow or heavily contended); transient, the Pod's creator retries", a.timeout)
	}
}

// Plan returns where req would go without writing anything (dry run).
func (a *Allocator) Plan(ctx context.Context, req Request) (Assignment, error) {
	current, err := a.readSlices(ctx, req)
	if err != nil {
		return Assignment{}, a.deny(true, "reading TPUSliceAssignments: %v; transient, retry", err)
	}
	outcomes, _ := claims.Plan(group(req), current, []claims.Request{req.Claim}, nil)
	if o := outcomes[0]; !o.Placed() {
		return Assignment{}, a.deny(o.Reason == claims.ReasonFull, "%s", o.Message)
	}
	p := outcomes[0].Placement
	return Assignment{SliceName: naming.SliceName(req.ClusterName, req.GroupName, p.Replica), Replica: p.Replica, WorkerID: p.WorkerID}, nil
}

func (a *Allocator) deny(transient bool, format string, args ...any) error {
	a.Stats.Denials.Add(1)
	return &DeniedError{Transient: transient, Message: fmt.Sprintf(format, args...)}
}

// drain commits the queue's calls in batches until it is empty.
func (a *Allocator) drain(key groupKey, q *queue) {
	for {
		a.mu.Lock()
		batch := q.pending
		q.pending = nil
		if len(batch) == 0 {
			q.running = false
			if q.idle() {
				delete(a.queues, key)
			} else {
				// Forget it once the window has passed, unless it is in use again by then.
				time.AfterFunc(contentionWindow, func() {
					a.mu.Lock()
					defer a.mu.Unlock()
					if a.queues[key] == q && !q.running && q.idle() {
						delete(a.queues, key)
					}
				})
			}
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		a.commit(q, batch)
	}
}

// commit places and writes a batch of calls for one worker group, retrying conflicts until each
// call is answered or its deadline passes.
func (a *Allocator) commit(q *queue, batch []*call) {
	log := ctrl.FromContext(batch[0].ctx)
	pending := batch
	a.mu.Lock()
	live := time.Since(q.contended) < contentionWindow
	a.mu.Unlock()
	for attempt := 0; ; attempt++ {
		pending = a.dropExpired(pending)
		if len(pending) == 0 {
			return
		}
		ctx := latestDeadline(pending)
		req := pending[len(pending)-1].req
		reqs := make([]claims.Request, len(pending))
		for i, c := range pending {
			reqs[i] = c.req.Claim
			reqs[i].Token = c.token
		}
		current, outcomes, touched, err := a.plan(ctx, req, reqs, live, q.written)
		if err != nil {
			log.V(1).Info("Reading slices failed, retrying", "err", err, "attempt", attempt)
			live = true
			a.backoff(ctx, attempt)
			continue
		}
		a.Stats.Attempts.Add(int64(len(pending)))
		for _, c := range pending {
			c.attempts++
		}

		var retry []*call
		for replica, list := range touched {
			var placed []int
			replicaName := ""
			for i, o := range outcomes {
				if o.Placed() && o.Placement.Replica == replica {
					placed = append(placed, i)
					if n := pending[i].req.Claim.ReplicaName; n != "" {
						replicaName = n
					}
				}
			}
			written, over, err := a.writeSlice(ctx, req, replica, replicaName, current[replica], list)
			if err != nil {
				switch {
				case isConflict(err):
					a.Stats.LostWrites.Add(1)
					metrics.ClaimWritesLost.Inc()
					a.Stats.Conflicts.Add(int64(len(placed)))
					a.mu.Lock()
					q.contended = time.Now()
					a.mu.Unlock()
					for _, i := range placed {
						pending[i].conflicts++
					}
				case isPermanent(err):
					// The API server refuses the write itself (invalid, forbidden): retrying
					// cannot help, and the Pod must not wait for the deadline to learn that.
					for _, i := range placed {
						pending[i].finish(result{err: a.deny(false, "the API server refused the TPUSliceAssignment write: %v", err)})
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
			q.remember(replica, over, written)
			a.mu.Lock()
			q.wrote = time.Now()
			a.mu.Unlock()
			for _, i := range placed {
				a.Stats.Claims.Add(1)
				pending[i].finish(result{assignment: Assignment{
					SliceName: naming.SliceName(req.ClusterName, req.GroupName, replica),
					Replica:   replica,
					WorkerID:  outcomes[i].Placement.WorkerID,
					Token:     pending[i].token,
				}})
			}
		}
		for i, o := range outcomes {
			switch {
			case o.Placed():
			case o.Reason == claims.ReasonFull && len(retry) > 0:
				// IDs planned for calls whose write failed may be free after all: plan again.
				retry = append(retry, pending[i])
			default:
				pending[i].finish(result{err: a.deny(o.Reason == claims.ReasonFull, "%s", transientSuffix(o))})
			}
		}
		if len(retry) == 0 {
			return
		}
		// Claims that queued while this batch was writing join its retry: one write carries them all.
		a.mu.Lock()
		pending = append(retry, q.pending...)
		q.pending = nil
		a.mu.Unlock()
		live = true
		a.backoff(ctx, attempt)
	}
}

func transientSuffix(o claims.Outcome) string {
	if o.Reason == claims.ReasonFull {
		return o.Message + "; transient, the Pod's creator retries"
	}
	return o.Message
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

func anyFull(outcomes []claims.Outcome) bool {
	for _, o := range outcomes {
		if o.Reason == claims.ReasonFull {
			return true
		}
	}
	return false
}

func (a *Allocator) dropExpired(calls []*call) []*call {
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

func group(req Request) claims.Group {
	return claims.Group{ClusterUID: req.ClusterUID, Hosts: req.Hosts, DesiredReplicas: req.DesiredReplicas}
}

// remember records that this process's writes turned the versions over into slice.
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
		}
		if slices.Contains(w.over, cachedVersion) {
			current[replica] = w.slice.DeepCopy()
		} else {
			delete(written, replica)
		}
	}
}

// plan places reqs on the group's slices as read from the cache, with this process's own writes
// that the cache has not seen yet laid over it (overlayOwnWrites). When live, or when the cache says
// the group is full, every slice the plan writes (and, for a full group, every slice below the
// desired replica count) is read again from the API server and the plan is made again, until it
// rests only on live reads. A full group is then planned once more with takeover of bound claims
// whose Pod is gone.
//
// Live reads are Gets, not a List: a Get is a quorum read from etcd, whereas a consistent List is
// served by the watch cache once it has caught up with etcd's current revision, which, while the
// rest of the cluster writes, waits for a progress notification (measured here: a List 97 ms, a
// Get 3 ms).
func (a *Allocator) plan(ctx context.Context, req Request, reqs []claims.Request, live bool,
	written map[int32]ownWrite) (claims.Slices, []claims.Outcome, map[int32][]tpuv1alpha1.WorkerClaim, error) {
	current, err := a.readSlices(ctx, req)
	if err != nil {
		return nil, nil, nil, err
	}
	overlayOwnWrites(current, written)
	confirmed := map[int32]bool{}
	for {
		outcomes, touched := claims.Plan(group(req), current, reqs, nil)
		full := anyFull(outcomes)
		var stale []int32
		if live || full {
			for replica := range touched {
				if !confirmed[replica] {
					stale = append(stale, replica)
				}
			}
		}
		if full {
			for replica := range req.DesiredReplicas {
				if _, listed := touched[replica]; !confirmed[replica] && !listed {
					stale = append(stale, replica)
				}
			}
		}
		if len(stale) == 0 {
			if full {
				outcomes, touched = claims.Plan(group(req), current, reqs, a.reclaimable(ctx, req.Namespace))
			}
			return current, outcomes, touched, nil
		}
		for _, replica := range stale {
			slice, err := a.readSlice(ctx, req, replica)
			if err != nil {
				return nil, nil, nil, err
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

// readSlice reads the slice of one replica of req's group from the API server; nil if there is none.
func (a *Allocator) readSlice(ctx context.Context, req Request, replica int32) (*tpuv1alpha1.TPUSliceAssignment, error) {
	// A fresh object: decoding into a reused one would keep fields the live object omits.
	slice := &tpuv1alpha1.TPUSliceAssignment{}
	key := types.NamespacedName{Namespace: req.Namespace, Name: naming.SliceName(req.ClusterName, req.GroupName, replica)}
	if err := a.reader.Get(ctx, key, slice); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if !sliceOf(slice, req) || slice.Spec.ReplicaIndex != replica {
		return nil, nil
	}
	return slice, nil
}

// sliceOf reports whether slice is one of req's group's slices, under the name it must have.
func sliceOf(slice *tpuv1alpha1.TPUSliceAssignment, req Request) bool {
	return slice.Spec.RayClusterName == req.ClusterName && slice.Spec.GroupName == req.GroupName &&
		slice.Name == naming.SliceName(req.ClusterName, req.GroupName, slice.Spec.ReplicaIndex)
}

// readSlices returns the group's slices by replica index, from the cache.
func (a *Allocator) readSlices(ctx context.Context, req Request) (claims.Slices, error) {
	var list tpuv1alpha1.TPUSliceAssignmentList
	if err := a.client.List(ctx, &list, client.InNamespace(req.Namespace), client.MatchingLabels{
		constants.ClusterLabel: naming.LabelValue(req.ClusterName),
		constants.GroupLabel:   naming.LabelValue(req.GroupName),
	}); err != nil {
		return nil, err
	}
	out := claims.Slices{}
	for i := range list.Items {
		if s := &list.Items[i]; sliceOf(s, req) {
			out[s.Spec.ReplicaIndex] = s
		}
	}
	return out, nil
}

// reclaimable returns a check that a bound claim's Pod is gone, terminating or finished. The cache
// answers "alive" cheaply; any other answer is confirmed by a live read.
func (a *Allocator) reclaimable(ctx context.Context, namespace string) claims.Reclaimable {
	return func(_ int32, claim *tpuv1alpha1.WorkerClaim) bool {
		key := types.NamespacedName{Namespace: namespace, Name: claim.PodName}
		var cached corev1.Pod
		if err := a.client.Get(ctx, key, &cached); err == nil && PodHolds(&cached, claim) {
			return false
		}
		// A fresh object for the live read: client-go's JSON decoding fills the object it is given
		// without zeroing it, so fields the live Pod omits (no deletionTimestamp on a new Pod that
		// reuses the name) would keep the cached Pod's values.
		var live corev1.Pod
		err := a.reader.Get(ctx, key, &live)
		if apierrors.IsNotFound(err) {
			return true
		}
		return err == nil && !PodHolds(&live, claim)
	}
}

// PodHolds reports whether pod is the live holder of a bound claim: same UID and live as the
// reconciler counts it (lifecycle.Live), so that the webhook takes over exactly the claims the
// reconciler would release.
func PodHolds(pod *corev1.Pod, claim *tpuv1alpha1.WorkerClaim) bool {
	return pod.UID == claim.PodUID && lifecycle.Live(pod)
}

// writeSlice makes the slice of replica hold exactly list, conditional on the state it was planned
// on: a create (AlreadyExists if someone was first), a delete with UID and resourceVersion
// preconditions for a dead generation, and a resourceVersion-checked status update. It returns the
// slice as the API server stored it, and the versions its writes went over ("" for none), which a
// cache may still show.
func (a *Allocator) writeSlice(ctx context.Context, req Request, replica int32, replicaName string,
	current *tpuv1alpha1.TPUSliceAssignment, list []tpuv1alpha1.WorkerClaim) (*tpuv1alpha1.TPUSliceAssignment, []string, error) {
	slice := current
	var over []string
	if slice != nil {
		over = append(over, slice.ResourceVersion)
	}
	if slice != nil && !claims.Current(slice, group(req), replicaName) {
		a.countWrite()
		if err := a.client.Delete(ctx, slice, client.Preconditions{UID: &slice.UID, ResourceVersion: &slice.ResourceVersion}); err != nil {
			return nil, nil, fmt.Errorf("removing dead generation of slice %s: %w", slice.Name, err)
		}
		slice = nil
	}
	if slice == nil {
		slice = NewSlice(req, replica, replicaName)
		a.countWrite()
		if err := a.client.Create(ctx, slice); err != nil {
			return nil, nil, fmt.Errorf("creating slice: %w", err)
		}
		over = append(over, "", slice.ResourceVersion)
	} else {
		slice = slice.DeepCopy()
	}
	now := metav1.NewTime(a.now())
	for i := range list {
		if list[i].ClaimedAt.IsZero() {
			list[i].ClaimedAt = now
		}
	}
	slice.Status.Claims = list
	slice.Status.Claimed = int32(len(list)) //nolint:gosec // at most Hosts claims.
	a.countWrite()
	if err := a.client.Status().Update(ctx, slice); err != nil {
		return nil, nil, err
	}
	return slice, over, nil
}

// NewSlice returns the TPUSliceAssignment of one replica of req's worker group.
func NewSlice(req Request, replica int32, replicaName string) *tpuv1alpha1.TPUSliceAssignment {
	return &tpuv1alpha1.TPUSliceAssignment{
		ObjectMeta: metav1.ObjectMeta{
			Name:      naming.SliceName(req.ClusterName, req.GroupName, replica),
			Namespace: req.Namespace,
			Labels: map[string]string{
				constants.ClusterLabel: naming.LabelValue(req.ClusterName),
				constants.GroupLabel:   naming.LabelValue(req.GroupName),
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "ray.io/v1",
				Kind:       "RayCluster",
				Name:       req.ClusterName,
				UID:        req.ClusterUID,
				Controller: ptr.To(false),
			}},
		},
		Spec: tpuv1alpha1.TPUSliceAssignmentSpec{
			RayClusterName: req.ClusterName,
			RayClusterUID:  req.ClusterUID,
			GroupName:      req.GroupName,
			ReplicaIndex:   replica,
			ReplicaName:    replicaName,
			Hosts:          req.Hosts,
			Topology:       req.Topology,
			Accelerator:    req.Accelerator,
		},
	}
}

func (a *Allocator) countWrite() {
	a.Stats.Writes.Add(1)
	metrics.ClaimWrites.Inc()
}

func isPermanent(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err)
}

func isConflict(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err)
}
