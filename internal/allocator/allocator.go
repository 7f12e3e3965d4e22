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
//
// The allocator only ever adds claims (docs/spec.md §10): it takes over a claim or replaces a slice
// only when a live read confirms that no live Pod holds it, and deletes a slice of another
// RayCluster UID only after a live read confirms that the request's UID is the live one. Before it
// hands out the first ID of a worker group, it records the live Pods that already carry an
// identity of the group (adoption, docs/spec.md §3.4).
package allocator

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/tombstones"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
)

// Request asks for a worker ID for one Pod of a worker group.
type Request struct {
	Namespace   string
	ClusterName string
	// ClusterUID is the RayCluster UID the Pod names (its controller ownerReference), ""
	// when it names none. The allocator checks it against the live RayCluster: a request of
	// another UID is denied.
	ClusterUID  types.UID
	GroupName   string
	Hosts       int32
	Topology    string
	Accelerator string
	// AffinityTopologyKey is the slice affinity's topologyKey the admission chose, recorded in a
	// slice this claim creates; "" for none.
	AffinityTopologyKey string
	// Placement is what decides spec.placement of a slice this claim creates; the slice records
	// the choice and every later claim of it follows the record (Assignment.Placement).
	Placement PlacementRequest
	// Claim carries KubeRay's index labels, when present.
	Claim claims.Request
	// NoReservation asks that the claim's write reserve no IDs (docs/spec.md §3.5): set by claim
	// forwarding on a claim it makes locally because the group's owner did not answer, when every
	// replica may be claiming the group's IDs at once. It never crosses the wire.
	NoReservation bool `json:"-"`
}

// PlacementRequest is what the allocator decides a new slice's spec.placement from
// (placement.DecideMode), once, when it creates the slice: only then does it look at the Nodes.
type PlacementRequest struct {
	// Mode is the --slice-placement of the admitting replica ("" is placement.DefaultMode).
	Mode tpuv1alpha1.SlicePlacement
	// Source is the placement.Decide rule that chose AffinityTopologyKey; zero (a request of a
	// replica that predates the field) places nothing.
	Source placement.Source
	// NodeSelector is the Pod's nodeSelector: the TPU Nodes its slice may land on.
	NodeSelector map[string]string
}

// Assignment is a committed (or, for a dry run, planned) claim.
type Assignment struct {
	SliceName string
	// SliceUID is the UID of the slice the claim was written to ("" for a plan, and from a peer of
	// a version before the field).
	SliceUID types.UID
	Replica  int32
	WorkerID int32
	Token    string
	// AffinityTopologyKey is the slice affinity's topologyKey the slice records ("" when it records
	// none): every Pod of a slice gets the key of the slice's first claim.
	AffinityTopologyKey string
	// Placement is the slice's spec.placement, decided when its first claim created it: every Pod
	// of the slice is placed the same way ("" for a slice the operator does not place, or one
	// created before the field existed).
	Placement tpuv1alpha1.SlicePlacement
}

// DeniedError is a claim that cannot be made. Transient denials succeed on retry.
type DeniedError struct {
	// Transient means the Pod's creator may retry as is; Message then does not say so, Error does.
	Transient bool
	Message   string
}

// TransientNote ends what the user is told of every transient denial: nothing needs fixing.
const TransientNote = "transient, the Pod's creator retries"

// Error returns the message, with TransientNote after a transient one.
func (e *DeniedError) Error() string {
	if e.Transient {
		return e.Message + "; " + TransientNote
	}
	return e.Message
}

// DefaultTimeout bounds one claim when Options.Timeout is zero: well inside the Pod webhook's 10 s
// timeout, so that a denial reaches the user instead of a webhook timeout (docs/spec.md §5).
const DefaultTimeout = 6 * time.Second

// CreateCutoff is the longest the API server lets a create, patch or delete run, admission included
// (requestTimeoutUpperBound in k8s.io/apiserver's handlers, whatever --request-timeout says): a Pod
// whose admission got an ID at t is stored by t plus CreateCutoff, or never, but for CommitSlack.
const CreateCutoff = 34 * time.Second

// CommitSlack is how much later than CreateCutoff an etcd write the API server sent before the
// cut-off may still commit: its client gave up, the write did not.
const CommitSlack = 2 * time.Second

// DefaultReservationWindow is the reservation window of the operator's replicas
// (--claim-reservation-window): inside the claim timeout, so that a reserved ID is handed out no
// later after the write that made it durable than a claimed one is, and short, because it adds to
// the pending TTL (the default TTL is CreateCutoff + DefaultReservationWindow + CommitSlack), which
// bounds how long the IDs a crashed holder reserved stay out of reach (docs/spec.md §3.5).
const DefaultReservationWindow = 2 * time.Second

// Options configure an Allocator.
type Options struct {
	// Timeout bounds one claim; past it the claim is denied as transient (DefaultTimeout when zero).
	Timeout time.Duration
	// MaxSliceHosts bounds the hosts of a slice (topology.DefaultMaxSliceHosts when zero).
	MaxSliceHosts int32
	// Tombstones are the claim tokens of Pods seen deleted: a pending claim whose Pod is among
	// them may be taken over at once. Nil means none is known.
	Tombstones *tombstones.Tombstones
	// Metrics receive the claims' counts and times (metrics.Default, the served set, when nil).
	Metrics *metrics.Metrics
	// Clock tells the time of contention windows, adoption memos, claim durations and reservation
	// windows (clock.RealClock when nil). Waits (backoff, deadlines) run on contexts and timers.
	Clock clock.PassiveClock
	// ReservationWindow, when positive, turns reservations on (docs/spec.md §3.5): every write that
	// claims IDs of a slice also reserves a block of its free IDs, which this process hands out
	// with no write of their own until ReservationWindow after the write was sent. It is at most
	// Timeout (a larger value is lowered to it), so that a reserved ID is handed out no later after
	// its write than a claimed one is. Zero or negative: every claim makes its own write.
	ReservationWindow time.Duration
}

// Allocator claims worker IDs. The zero value is not usable: use New.
type Allocator struct {
	client client.Client // cached reads and all writes
	reader client.Reader // live reads
	opts   Options
	clock  clock.PassiveClock
	m      *metrics.Metrics

	mu     sync.Mutex
	queues map[groupKey]*queue
	// adopted records when this process last adopted each group's Pods.
	adopted map[groupKey]time.Time
}

// New returns an Allocator that reads from c (normally cached) first and from reader (live) when
// the cache may be stale.
func New(c client.Client, reader client.Reader, opts Options) *Allocator {
	if opts.MaxSliceHosts <= 0 {
		opts.MaxSliceHosts = topology.DefaultMaxSliceHosts
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	opts.ReservationWindow = min(opts.ReservationWindow, opts.Timeout)
	m := opts.Metrics
	if m == nil {
		m = metrics.Default
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Allocator{client: c, reader: reader, opts: opts, clock: clk, m: m,
		queues: map[groupKey]*queue{}, adopted: map[groupKey]time.Time{}}
}

// groupKey names a queue: the claims of one worker group of one slice shape (keyOf).
type groupKey struct {
	namespace string
	uid       types.UID
	group     string
	shape     shape
}

type call struct {
	// giveBack marks a call that asks the queue's drain to give back the unhanded IDs of expired
	// reservations (scheduleGiveBack), renew one that asks it to renew the reservations due
	// (queueRenewal); neither carries a request or wants an answer.
	giveBack, renew bool
	cancel          context.CancelFunc
	req             Request
	// cluster is req's RayCluster as resolved when the call was made.
	cluster clusterInfo
	token   string
	ctx     context.Context
	result  chan result
	// m receives, and attempts and conflicts feed, the claim metrics.
	m                   *metrics.Metrics
	attempts, conflicts int
}

// housekeeping reports whether c is a give-back or a renewal, not a claim.
func (c *call) housekeeping() bool { return c.giveBack || c.renew }

// finish answers a call and records its metrics.
func (c *call) finish(r result) {
	c.m.Attempts.Observe(float64(c.attempts))
	c.m.Conflicts.Observe(float64(c.conflicts))
	if r.err == nil {
		c.m.Results.WithLabelValues(metrics.ClaimCommitted).Inc()
	}
	c.result <- r
}

type result struct {
	assignment Assignment
	err        error
}

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
	ctx, cancel := context.WithTimeout(ctx, a.opts.Timeout)
	defer cancel()
	start := a.clock.Now()
	defer func() { a.m.Duration.Observe(a.clock.Since(start).Seconds()) }()
	cluster, err := a.prepare(ctx, &req)
	if err != nil {
		return Assignment{}, err
	}
	token := req.Claim.Token
	if token == "" {
		token = NewToken()
	}
	c := &call{req: req, cluster: cluster, token: token, ctx: ctx, result: make(chan result, 1), m: a.m}
	a.enqueue(c)

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
		return Assignment{}, a.deny(true, "timed out after %s claiming a worker ID (API server slow or heavily contended)", a.opts.Timeout)
	}
}

// Plan returns where req would go without writing anything (dry run). It plans on the cache only,
// takes nothing over and adopts nothing, so it may deny a Pod that a real create would admit
// after live reads, or show an ID that a concurrent create takes first. Its reads share one
// deadline, Options.Timeout, as a claim's do.
func (a *Allocator) Plan(ctx context.Context, req Request) (Assignment, error) {
	ctx, cancel := context.WithTimeout(ctx, a.opts.Timeout)
	defer cancel()
	cluster, err := a.prepare(ctx, &req)
	if err != nil {
		return Assignment{}, err
	}
	current, err := a.readSlices(ctx, req)
	if err != nil {
		return Assignment{}, a.deny(true, "reading TPUSliceAssignments: %v", err)
	}
	outcomes, _ := claims.Plan(group(req, cluster), current, []claims.Request{req.Claim}, nil)
	if o := outcomes[0]; !o.HasSlot() {
		return Assignment{}, a.deny(o.Reason.Transient(), "%s", o.Message)
	}
	p := outcomes[0].Slot
	key := req.AffinityTopologyKey
	var mode tpuv1alpha1.SlicePlacement
	if s := current[p.Replica]; s != nil && claims.SameClusterUID(s, req.ClusterUID, "") {
		key, mode = cmp.Or(s.Spec.AffinityTopologyKey, key), s.Spec.Placement
	} else {
		// The claim would create the slice: decide as it would.
		choice, err := a.slicePlacement(ctx, req)
		if err != nil {
			return Assignment{}, a.deny(true, "deciding the slice's placement: %v", err)
		}
		mode = choice.Placement
	}
	return Assignment{SliceName: naming.SliceName(req.ClusterName, req.GroupName, p.Replica), Replica: p.Replica, WorkerID: p.WorkerID,
		AffinityTopologyKey: key, Placement: mode}, nil
}

// prepare checks req's bounds and resolves its RayCluster, setting req.ClusterUID to the live
// RayCluster's UID.
func (a *Allocator) prepare(ctx context.Context, req *Request) (clusterInfo, error) {
	if req.Claim.Token != "" && !tpuv1alpha1.ValidToken(req.Claim.Token) {
		return clusterInfo{}, a.deny(false, "claim token %q is not 1 to 64 characters without spaces", req.Claim.Token)
	}
	if req.Hosts > a.opts.MaxSliceHosts {
		return clusterInfo{}, a.deny(false, "topology %s gives a slice of %d hosts, more than this operator allows (--max-slice-hosts=%d)",
			req.Topology, req.Hosts, a.opts.MaxSliceHosts)
	}
	cluster, err := a.cluster(ctx, req)
	if err != nil {
		return clusterInfo{}, err
	}
	req.ClusterUID = cluster.uid
	if err := a.checkReplicaIndex(ctx, req, &cluster); err != nil {
		return clusterInfo{}, err
	}
	return cluster, nil
}

func (a *Allocator) deny(transient bool, format string, args ...any) error {
	a.m.Results.WithLabelValues(metrics.ClaimDenied).Inc()
	return &DeniedError{Transient: transient, Message: fmt.Sprintf(format, args...)}
}

func group(req Request, cluster clusterInfo) claims.Group {
	return claims.Group{ClusterUID: req.ClusterUID, Hosts: req.Hosts, DesiredReplicas: cluster.desired}
}
