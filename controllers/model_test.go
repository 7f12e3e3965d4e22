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

package controllers

// The model-based test layer (docs/development.md): a rapid state machine drives the real allocator
// (the Pod webhook's claims), the real reconciler and the tombstones against the fake API server of
// model_world_test.go, whose cached views lag, drop events and filter Pods by label, and checks
// docs/spec.md §9's I1, I2, I3 and I6 after every step. The Pods are those KubeRay makes of two
// RayClusters, a 4-host and a 16-host group, with or without its multi-host index labels
// (model_kuberay_test.go), and every answer is checked against what §3, §5 and §10 promise. The whole run is inside a synctest bubble:
// time.Now is a fake clock that the model advances, so the pending TTL and the bind settle are the
// operator's defaults and every wait is instant.

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"pgregory.net/rapid"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tombstones"
)

var (
	modelLabelExits = flag.Bool("model.label-exits", true,
		"model test: edit KubeRay's selector labels (ray.io/group, ray.io/node-type) so that Pods leave and re-enter the operator's Pod cache")
	modelMixedHosts = flag.Bool("model.mixed-hosts", true,
		"model test: admit 2-host Pods (topology 2x4) into the 4-host group, alone and in concurrent bursts")
	modelCopiedTokens = flag.Bool("model.copied-tokens", true,
		"model test: set a Pod's claim-token annotation to another Pod's token")
	modelWriteFaults = flag.Bool("model.write-faults", true,
		"model test: fail the operator's next writes to slices, refused or applied with the answer lost")
	modelReservations = flag.Bool("model.reservations", true,
		"model test: the allocator reserves blocks of IDs and hands them out from memory for the operator's default window (docs/spec.md §3.5)")
	modelSecondReplica = flag.Bool("model.second-replica", true,
		"model test: a second webhook replica with its own allocator and reservations admits beside the first (docs/spec.md §3.5, I5)")
	modelHandDeletes = flag.Bool("model.hand-deletes", true,
		"model test: a user deletes a slice by hand while its owner holds a reservation (issue 44)")
	modelCopiedReserved = flag.Bool("model.copied-reserved", true,
		"model test: a user creates, past the webhook, a worker Pod carrying a reserved token copied from a slice's status (issue 44)")
	modelHeldWrites = flag.Bool("model.held-writes", true,
		"model test: hold the operator's status writes in flight, unapplied, while admissions go on (a renewal's write with hand-outs beside it, a claim's write answered late)")
	modelIndexing = flag.Bool("model.indexing", true,
		"model test: KubeRay labels a RayCluster's Pods with replica index, replica name and host index (RayMultiHostIndexing) in about half the histories, and replaces indexed replicas whole")
)

// reservationsFired counts, over all histories, the IDs handed out from reservations, the
// renewals written, and the admissions answered while an operator write was held in flight.
var reservationsFired struct{ handed, renewals, whileHeld atomic.Int64 }

// defaultModelChecks is the model test's budget in `make test` when -rapid.checks is not given.
const defaultModelChecks = 150

const (
	modelNS = "team-m"
	// createCutoff is how long after its admission a Pod's create can still commit (the API
	// server's 34 s cut-off, docs/spec.md §8): a parked create older than that has failed.
	createCutoff = 34 * time.Second
)

// The failures, one per invariant (details go to the log).
const (
	invI1     = "I1 broken: two live Pods of one slice run with one TPU_WORKER_ID"
	invRepair = "a slice with a malformed stored line was never repaired"
	invI2     = "I2 broken: a Pod was given an ID outside its host count, or in a slice of another host count"
	invI3Live = "I3 broken: the claim of a live admitted Pod was released"
	invI3     = "I3 broken: after the quiesce the claims differ from the live Pods"
	invI6     = "I6 broken: the operator deleted a live Pod whose ID no other live Pod holds"
	invStored = "an admission was answered with a claim its slice does not store (a hand-out from a deleted slice)"
)

// modelTopologies maps a Pod's topology to its host count (v6e and v5p, 4 chips per host).
var modelTopologies = map[string]int32{"4x4": 4, "2x4": 2, "4x4x4": 16}

// admittedPod is a Pod the webhook admitted, as the model knows it.
type admittedPod struct {
	name     string
	uid      types.UID
	topology string
	hosts    int32
	// ask is what the admission asked for: the group, and KubeRay's index labels.
	ask ask
	a   allocator.Assignment
	at  time.Time
	// staleCache: answered from a slice a user had deleted by hand, which the operator's cache
	// still showed (docs/spec.md §3.5 hands out on the cache's view).
	staleCache bool
}

func (p *admittedPod) String() string {
	return fmt.Sprintf("%s (%s, %s ID %d, token %s)", p.name, p.ask, shortSlice(p.a.SliceName), p.a.WorkerID, short(p.a.Token))
}

// operatorProcess is one incarnation of the operator: its allocator, reconciler and tombstones.
type operatorProcess struct {
	counts *metrics.Metrics
	alloc  *allocator.Allocator
	// peer is a second webhook replica's allocator (-model.second-replica): its own memory and
	// reservations, the same caches and API server.
	peer    *allocator.Allocator
	rec     *TPUSliceAssignmentReconciler
	deleted *tombstones.Tombstones
}

type model struct {
	// groups are the worker groups of the model's RayClusters, as KubeRay makes their Pods.
	groups []*workerGroup
	w      *world
	user   client.Client // KubeRay and users: writes to the truth, logged, unchecked
	op     operatorProcess
	// pods are the Pods created, by name; parked the admitted Pods whose create has not committed.
	pods   map[string]*admittedPod
	parked []*admittedPod
	// answered and refused are the admissions of the current step, checked once it is logged.
	answered []*admittedPod
	refused  []refusal
	// full16 records that a 16-host slice held all its IDs at an admission.
	full16  bool
	next    int
	tokens  int
	history []string
	ctx     context.Context
	// handDeleted records when a user deleted each slice by hand: the Pods admitted before hold no
	// claim until the reconciler repairs them (docs/spec.md §8), which quiesce checks.
	handDeleted map[string]time.Time
	// handMade are the Pods a user created past the webhook with a copied reserved token, and
	// handMadeIn the slices they name.
	handMade   map[string]bool
	handMadeIn map[string]bool
	// unsealed are the IDs (idKey) of hand-made Pods whose copied token a user then edited.
	unsealed map[string]bool
}

// idKey names worker ID id of slice.
func idKey(slice string, id int32) string { return fmt.Sprintf("%s/%d", slice, id) }

// newModel starts a history: the RayClusters applied, KubeRay's indexing of each drawn
// (-model.indexing), the operator started.
func newModel(ctx context.Context, t *rapid.T) *model {
	groups := newModelGroups()
	clusters := make([]client.Object, 0, len(groups))
	for _, g := range groups {
		g.indexed = *modelIndexing && rapid.Bool().Draw(t, "indexing of "+g.cluster)
		g.names, g.given = map[int32][]string{}, map[string]map[int32]bool{}
		clusters = append(clusters, g.rayCluster())
	}
	w := newWorld(clusters...)
	m := &model{groups: groups, w: w, user: w.writer(false), pods: map[string]*admittedPod{}, ctx: ctx,
		handDeleted: map[string]time.Time{}, handMade: map[string]bool{}, handMadeIn: map[string]bool{}, unsealed: map[string]bool{}}
	for _, g := range groups {
		gate := "off"
		if g.indexed {
			gate = "on"
		}
		m.logf("RayCluster %s: group %s of %d replicas of %s (%d hosts), KubeRay's RayMultiHostIndexing %s", g.cluster, g.name, g.replicas, g.topology, g.hosts, gate)
	}
	m.start()
	return m
}

// start runs a fresh operator process: empty memory, caches listed anew.
func (m *model) start() {
	deleted := tombstones.New(0)
	counts := metrics.New()
	cache, live := m.w.cacheClient(), m.w.writer(true)
	m.w.mu.Lock()
	m.w.tombstones = deleted
	m.w.mu.Unlock()
	m.w.relist()
	m.tallyReservations()
	m.op = operatorProcess{
		counts:  counts,
		deleted: deleted,
		alloc: allocator.New(cache, live, allocator.Options{
			Timeout: allocator.DefaultTimeout, Tombstones: deleted, Metrics: counts,
			ReservationWindow: reservationWindow(),
		}),
		peer: allocator.New(cache, live, allocator.Options{
			Timeout: allocator.DefaultTimeout, Tombstones: tombstones.New(0), Metrics: metrics.New(),
			ReservationWindow: reservationWindow(),
		}),
		rec: &TPUSliceAssignmentReconciler{
			client: cache, reader: live, recorder: &events.FakeRecorder{}, tombstones: deleted,
			pendingTTL: DefaultPendingTTL, bindSettleTime: DefaultBindSettle, clock: clock.RealClock{}, metrics: counts,
			seen: newObservations(DefaultBindSettle),
		},
	}
}

// reservationWindow is the allocator's reservation window in the model: the operator's default,
// or none with -model.reservations=false.
func reservationWindow() time.Duration {
	if *modelReservations {
		return allocator.DefaultReservationWindow
	}
	return 0
}

func (m *model) logf(format string, args ...any) {
	m.history = append(m.history, fmt.Sprintf("%3d. ", len(m.history)+1)+fmt.Sprintf(format, args...))
}

// fail reports a broken invariant: the details, the history and the state in the log, and as the
// failure only which invariant broke. rapid keeps a smaller history only while it fails with the
// same message, and a shorter history names other Pods and IDs.
func (m *model) failf(t *rapid.T, invariant, format string, args ...any) {
	t.Helper()
	t.Logf("%s\n\nhistory (clock starts at 0):\n%s\n\nstate:\n%s", fmt.Sprintf(format, args...),
		strings.Join(m.history, "\n"), m.describe())
	t.Fatal(invariant)
}

// request is an admission's claim request, with KubeRay's index labels as the webhook reads them.
// Its token is the model's, as a webhook may pass one, so that a replayed history is the same
// history and prints the same: rapid shrinks a failure only while its message stays the same.
func (m *model) request(a ask) allocator.Request {
	m.tokens++
	req := allocator.Request{
		Namespace: modelNS, ClusterName: a.g.cluster, ClusterUID: a.g.uid, GroupName: a.g.name,
		Hosts: modelTopologies[a.topology], Topology: a.topology, Accelerator: a.g.accel,
		Claim: a.claim,
	}
	req.Claim.Token = "t" + strconv.Itoa(m.tokens)
	return req
}

// drawReplica draws the webhook replica an admission lands on: the first, or (with
// -model.second-replica) the second, as the API server's connections spread them.
func (m *model) drawReplica(t *rapid.T) (*allocator.Allocator, string) {
	if *modelSecondReplica && rapid.IntRange(0, 2).Draw(t, "second replica") == 0 {
		return m.op.peer, " at replica B"
	}
	return m.op.alloc, ""
}

// admitted turns a committed claim into a Pod: created now, or parked (a create still in flight
// that commits later, or never).
func (m *model) admitted(t *rapid.T, asked ask, a allocator.Assignment, park bool) string {
	m.next++
	p := &admittedPod{name: fmt.Sprintf("w%d", m.next), topology: asked.topology, hosts: modelTopologies[asked.topology], ask: asked, a: a, at: time.Now()}
	p.uid = types.UID("uid-" + p.name)
	if claim := asked.claim; claim.ReplicaIndex != nil {
		if asked.g.given[claim.ReplicaName] == nil {
			asked.g.given[claim.ReplicaName] = map[int32]bool{}
		}
		asked.g.given[claim.ReplicaName][ptr.Deref(claim.HostIndex, 0)] = true
	}
	m.answered = append(m.answered, p)
	if park {
		m.parked = append(m.parked, p)
		return p.String() + ", create in flight"
	}
	m.create(t, p)
	return p.String() + ", created"
}

// checkAnswered checks the admissions of the step that just ran, once it is in the history.
func (m *model) checkAnswered(t *rapid.T) {
	answered, refused := m.answered, m.refused
	m.answered, m.refused = nil, nil
	for _, p := range answered {
		m.checkAdmission(t, p)
	}
	for _, r := range refused {
		m.checkRefusal(t, r)
	}
}

// userBroke reports whether a user deleted slice name by hand, or created a Pod past the webhook
// with one of its IDs: the spec promises no convergence there. A Pod whose claim went with the
// slice and whose token a user also edited, or a hand-made duplicate of a live Pod's ID, is
// reported and left running (docs/spec.md §8), and a duplicate holds up the repair of a malformed
// line. What the model checks of such slices is that no answer is a claim no slice stores, I1
// for the Pods the operator admitted after the deletion, and that the operator never deletes a
// Pod it admitted in favor of a hand-made one.
func (m *model) userBroke(name string) bool {
	_, deleted := m.handDeleted[name]
	return deleted || m.handMadeIn[name]
}

// handDeletedAt reports whether a user has deleted slice name by hand.
func (m *model) handDeletedAt(name string) bool {
	_, ok := m.handDeleted[name]
	return ok
}

// handDeletedUnder reports whether a user deleted p's slice by hand after p was admitted.
func (m *model) handDeletedUnder(p *admittedPod) bool {
	deleted, ok := m.handDeleted[p.a.SliceName]
	return p.staleCache || (ok && !p.at.After(deleted))
}

// checkAdmission checks I2 on an answer (an ID in [0, H) of the Pod's own host count, in a slice
// of that host count), and where it went against docs/spec.md §3 (checkPlace).
func (m *model) checkAdmission(t *rapid.T, p *admittedPod) {
	if p.a.WorkerID < 0 || p.a.WorkerID >= p.hosts {
		m.failf(t, invI2, "I2: Pod %s with %d hosts was given worker ID %d", p, p.hosts, p.a.WorkerID)
	}
	slice := &tpuv1alpha1.TPUSliceAssignment{}
	err := m.w.base.Get(m.ctx, types.NamespacedName{Namespace: modelNS, Name: p.a.SliceName}, slice)
	if err == nil && slice.Spec.Hosts != p.hosts {
		m.failf(t, invI2, "I2: Pod %s with %d hosts was given an ID in slice %s of %d hosts", p, p.hosts, shortSlice(p.a.SliceName), slice.Spec.Hosts)
	}
	if err != nil {
		slice = nil
	}
	m.checkPlace(t, p, slice)
	// Every answer is a claim the API server holds (docs/spec.md §3.3, §3.5): written by the
	// admission, or reserved by an earlier write and still stored, or, while the operator's cache
	// has not yet seen a user delete the slice, stored as the cache shows it. A hand-out from the
	// memory of a slice the cache shows deleted is none of these (issue 44).
	m.w.mu.Lock()
	_, cached := m.w.slices.objs[types.NamespacedName{Namespace: modelNS, Name: p.a.SliceName}]
	m.w.mu.Unlock()
	if !m.holdsClaim(p) && cached && m.handDeletedAt(p.a.SliceName) {
		p.staleCache = true // I1 and I3 for it as for the Pods admitted before the deletion
	} else if !m.holdsClaim(p) {
		m.failf(t, invStored, "Pod %s was answered with a claim its slice does not store; stored %s", p, m.claimsOf(p.a.SliceName))
	}
}

// create commits a Pod's create with the env and labels the webhook gave it.
func (m *model) create(t *rapid.T, p *admittedPod) {
	g, replica := p.ask.g, strconv.Itoa(int(p.a.Replica))
	pod := kubeRayLabels(testutil.MakeWorkerPod(modelNS, g.cluster, g.uid, g.name), p.ask.claim).Named(p.name).UID(p.uid).
		TPU(4).Topology(g.accel, p.topology).TPUIdentity(g.name, p.a.Replica, p.a.WorkerID).
		Claim(g.name+"-"+replica, p.a.SliceName, strconv.Itoa(int(p.a.WorkerID)), p.a.Token).
		Created(time.Now()).Phase(corev1.PodRunning).Obj()
	if err := m.user.Create(m.ctx, pod); err != nil {
		m.failf(t, "creating a Pod failed", "creating Pod %s: %v", p, err)
	}
	m.pods[p.name] = p
}

// actions are the steps of the state machine; "" checks the invariants after each.
func (m *model) actions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"":                m.check,
		"admit":           m.admit,
		"burst":           m.burst,
		"commitParked":    m.commitParked,
		"deliverPods":     func(t *rapid.T) { m.deliver(t, "Pod", m.w.pods) },
		"deliverSlices":   func(t *rapid.T) { m.deliver(t, "slice", m.w.slices) },
		"reconcile":       m.reconcile,
		"advance":         m.advance,
		"deletePod":       m.deletePod,
		"finishPod":       m.finishPod,
		"editToken":       m.editToken,
		"editLabels":      m.editLabels,
		"corruptSlice":    m.corruptSlice,
		"faultWrites":     m.faultWrites,
		"admitAfterPause": m.admitAfterPause,
		"holdWrites":      m.holdWrites,
		"releaseWrites":   m.releaseWrites,
		"renewBeside":     m.renewBeside,
		"deleteSlice":     m.deleteSlice,
		"copyReserved":    m.copyReserved,
		"createReplica":   m.createReplica,
		"replaceReplica":  m.replaceReplica,
		"restart": func(*rapid.T) {
			m.start()
			m.logf("restart: a fresh operator (no tombstones, no memory), caches listed anew")
		},
	}
}

func (m *model) admit(t *rapid.T) {
	asked := m.drawAsk(t, m.drawGroup(t), map[string]map[int32]bool{})
	park := rapid.IntRange(0, 4).Draw(t, "park") == 0
	alloc, at := m.drawReplica(t)
	a, err := alloc.Claim(m.ctx, m.request(asked))
	// What the admission set off in the background (a renewal, a give-back) runs until it waits,
	// before the next step: a history replays the same.
	synctest.Wait()
	if err != nil {
		m.logf("admit %s%s: denied: %v", asked, at, err)
		m.refused = append(m.refused, refusal{asked, err})
		m.replaceRefused(t, m.refused)
		m.checkAnswered(t)
		return
	}
	m.w.mu.Lock()
	held := m.w.hold != nil && m.w.held > 0
	m.w.mu.Unlock()
	if held {
		reservationsFired.whileHeld.Add(1)
	}
	m.logf("admit%s %s", at, m.admitted(t, asked, a, park))
	m.checkAnswered(t)
}

// admitAfterPause admits a Pod after a pause that leaves the last write's reservation less than a
// quarter of its window: the hand-out renews it (docs/spec.md §3.5).
func (m *model) admitAfterPause(t *rapid.T) {
	d := rapid.SampledFrom([]time.Duration{1500 * time.Millisecond, 1900 * time.Millisecond}).Draw(t, "pause")
	pass(d)
	m.logf("clock +%s", d)
	m.expireParked()
	m.admit(t)
}

// holdWrites holds the operator's next status writes to slices in flight, unapplied, until
// releaseWrites: a reservation's renewal with hand-outs going on beside it, or a claim's write
// whose admission times out before it lands.
func (m *model) holdWrites(t *rapid.T) {
	if !*modelHeldWrites {
		t.Skip("-model.held-writes=false")
	}
	m.w.mu.Lock()
	defer m.w.mu.Unlock()
	if m.w.hold == nil {
		m.w.hold, m.w.held = make(chan struct{}), 0
		m.logf("the operator's next status writes to slices are held in flight")
	}
}

// renewBeside holds the operator's writes, admits a Pod after a pause that makes its hand-out
// queue a renewal (held in flight), admits one more beside it, and lets the writes land: the
// interleaving of docs/spec.md §3.5's "Renewal, off the admission path" in one step. Left to
// holdWrites, admitAfterPause and admit drawn in that order, 150 histories sometimes had none
// (a CI run: 0 admissions answered while a write was held).
func (m *model) renewBeside(t *rapid.T) {
	m.holdWrites(t)
	m.admitAfterPause(t)
	m.admit(t)
	m.releaseWrites(t)
}

// releaseWrites lets the held writes land, and what follows them run until it waits.
func (m *model) releaseWrites(*rapid.T) {
	m.w.mu.Lock()
	hold, held := m.w.hold, m.w.held
	m.w.hold = nil
	m.w.mu.Unlock()
	if hold == nil {
		return
	}
	close(hold)
	synctest.Wait()
	m.logf("%d held status writes land", held)
}

// settle lets the operator's background work (a renewal or a give-back retrying a conflict, a
// held write) finish before the history ends, however it ends: time stops in the bubble once the
// history's goroutine has exited, and a goroutine still asleep then fails the run as a deadlock,
// which hid the history's own failure (found with a mutant that drops a renewal's bridge).
func (m *model) settle() {
	m.w.mu.Lock()
	m.w.faults = nil
	m.w.mu.Unlock()
	m.releaseWrites(nil)
	time.Sleep(2 * allocator.DefaultTimeout)
	synctest.Wait()
}

// tallyReservations adds the current operator process's reservation counts to reservationsFired.
func (m *model) tallyReservations() {
	if m.op.counts == nil {
		return
	}
	reservationsFired.handed.Add(int64(metrics.Value(m.op.counts.Reserved)))
	reservationsFired.renewals.Add(int64(metrics.Value(m.op.counts.Renewals)))
}

// burst admits 2-4 Pods of one group at once (admitAll).
func (m *model) burst(t *rapid.T) {
	g := m.drawGroup(t)
	n := rapid.IntRange(2, 4).Draw(t, "burst size")
	busy := map[string]map[int32]bool{}
	asks := make([]ask, n)
	for i := range asks {
		asks[i] = m.drawAsk(t, g, busy)
	}
	m.admitAll(t, asks, fmt.Sprintf("burst of %d concurrent admissions", n))
}

// admitAll admits the asks at once. Their claims are made deterministic in order: at each webhook
// replica, the first one's commit is held at its slice read until every other call has queued
// behind it, so the rest are committed as one batch (group commit), in the order drawn; then the
// first replica's batches run until they wait, then the second's. Released together, the two
// replicas' writes raced in whichever order the Go scheduler ran them, and a failing history did
// not replay (rapid: "flaky test, can not reproduce a failure").
func (m *model) admitAll(t *rapid.T, asks []ask, what string) {
	n := len(asks)
	parks := make([]bool, n)
	allocs := make([]*allocator.Allocator, n)
	ats := make([]string, n)
	for i := range n {
		parks[i] = rapid.IntRange(0, 4).Draw(t, "park") == 0
		allocs[i], ats[i] = m.drawReplica(t)
	}
	replicas := []*allocator.Allocator{m.op.alloc, m.op.peer}
	gates := map[*allocator.Allocator]chan struct{}{m.op.alloc: make(chan struct{}), m.op.peer: make(chan struct{})}
	type answer struct {
		a   allocator.Assignment
		err error
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	reqs := make([]allocator.Request, n)
	for i := range n {
		reqs[i] = m.request(asks[i])
	}
	for i := range n {
		ctx := withGate(m.ctx, gates[allocs[i]])
		wg.Go(func() {
			a, err := allocs[i].Claim(ctx, reqs[i])
			answers[i] = answer{a, err}
		})
		synctest.Wait()
	}
	for _, replica := range replicas {
		close(gates[replica])
		synctest.Wait()
	}
	wg.Wait()
	lines := make([]string, 0, n)
	for i, ans := range answers {
		if ans.err != nil {
			lines = append(lines, fmt.Sprintf("%s%s denied: %v", asks[i], ats[i], ans.err))
			m.refused = append(m.refused, refusal{asks[i], ans.err})
			continue
		}
		lines = append(lines, m.admitted(t, asks[i], ans.a, parks[i])+ats[i])
	}
	m.logf("%s (the first alone, then the rest as one batch):\n       %s", what, strings.Join(lines, "\n       "))
	m.replaceRefused(t, m.refused)
	m.checkAnswered(t)
}

func (m *model) commitParked(t *rapid.T) {
	if len(m.parked) == 0 {
		t.Skip("nothing in flight")
	}
	i := rapid.IntRange(0, len(m.parked)-1).Draw(t, "parked")
	p := m.parked[i]
	m.parked = slices.Delete(m.parked, i, i+1)
	m.create(t, p)
	m.logf("late create commits: %s, %s after its admission", p, time.Since(p.at))
}

func (m *model) deliver(t *rapid.T, kind string, v *view) {
	mode := rapid.SampledFrom([]string{"one", "all", "drop"}).Draw(t, "delivery")
	switch mode {
	case "one":
		m.logf("cache: %d %s event delivered", m.w.deliver(v, 1), kind)
	case "all":
		m.logf("cache: %d %s events delivered one by one", m.w.deliver(v, -1), kind)
	default:
		m.logf("cache: %d %s events dropped, the view relisted", m.w.drop(v), kind)
	}
}

func (m *model) reconcile(t *rapid.T) {
	g := m.drawGroup(t)
	replica := rapid.Int32Range(0, g.replicas-1).Draw(t, "replica")
	name := g.sliceName(replica)
	res, err := m.op.rec.Reconcile(notHeld(m.ctx), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: modelNS, Name: name}})
	outcome := "done"
	switch {
	case err != nil:
		outcome = "error: " + err.Error()
	case res.RequeueAfter > 0:
		outcome = "requeue after " + res.RequeueAfter.String()
	}
	if deleted := m.w.takeDeletions(); len(deleted) > 0 {
		outcome += ", deleted Pods " + strings.Join(deleted, ", ")
	}
	m.logf("reconcile %s: %s; stored %s", shortSlice(name), outcome, m.claimsOf(name))
}

func (m *model) advance(t *rapid.T) {
	d := rapid.SampledFrom([]time.Duration{200 * time.Millisecond, time.Second, 1500 * time.Millisecond, 5 * time.Second, 20 * time.Second, 61 * time.Second}).Draw(t, "advance")
	pass(d)
	m.logf("clock +%s", d)
	m.expireParked()
}

// pass moves the fake clock d on and lets what it woke (a give-back, a renewal, a claim's retry)
// run until it waits: every step leaves no goroutine running, so a history replays the same.
func pass(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// expireParked drops the parked creates past the API server's cut-off: they failed.
func (m *model) expireParked() {
	m.parked = slices.DeleteFunc(m.parked, func(p *admittedPod) bool {
		if time.Since(p.at) < createCutoff {
			return false
		}
		m.logf("create of %s failed (past the API server's cut-off)", p)
		return true
	})
}

// livePod draws a Pod the model created that exists in the truth.
func (m *model) livePod(t *rapid.T) *corev1.Pod {
	var pods corev1.PodList
	if err := m.w.base.List(m.ctx, &pods, client.InNamespace(modelNS)); err != nil {
		t.Fatalf("listing Pods: %v", err)
	}
	pods.Items = slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return !lifecycle.PodLive(&p) })
	if len(pods.Items) == 0 {
		t.Skip("no live Pod")
	}
	i := rapid.IntRange(0, len(pods.Items)-1).Draw(t, "pod")
	return &pods.Items[i]
}

func (m *model) deletePod(t *rapid.T) {
	pod := m.livePod(t)
	if err := m.user.Delete(m.ctx, pod); err != nil {
		t.Fatalf("deleting Pod %s: %v", pod.Name, err)
	}
	m.logf("delete Pod %s (KubeRay or a user)", pod.Name)
}

func (m *model) finishPod(t *rapid.T) {
	pod := m.livePod(t)
	pod.Status.Phase = rapid.SampledFrom([]corev1.PodPhase{corev1.PodFailed, corev1.PodSucceeded}).Draw(t, "phase")
	if err := m.user.Status().Update(m.ctx, pod); err != nil {
		t.Fatalf("finishing Pod %s: %v", pod.Name, err)
	}
	m.logf("Pod %s is %s", pod.Name, pod.Status.Phase)
}

// editToken edits a live Pod's claim-token annotation: removed, a fresh token, or (with
// -model.copied-tokens) another Pod's.
func (m *model) editToken(t *rapid.T) {
	pod := m.livePod(t)
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	edits := 3
	if *modelCopiedTokens {
		edits = 4
	}
	var what string
	switch rapid.IntRange(0, edits-1).Draw(t, "token edit") {
	case 0:
		delete(pod.Annotations, tpuv1alpha1.ClaimTokenAnnotation)
		what = "removed"
	case 1:
		m.tokens++
		pod.Annotations[tpuv1alpha1.ClaimTokenAnnotation] = "fresh" + strconv.Itoa(m.tokens)
		what = "set to a fresh token " + short(pod.Annotations[tpuv1alpha1.ClaimTokenAnnotation])
	case 2:
		// Defect 1's tokens: a space splits a stored line, line breaks inject claims.
		bad := rapid.SampledFrom([]string{"a b", "x\n1 y\n2 z", "x\n0 y"}).Draw(t, "malformed token")
		pod.Annotations[tpuv1alpha1.ClaimTokenAnnotation] = bad
		what = "set to the malformed " + strconv.Quote(bad)
	default:
		if len(m.pods) == 0 {
			t.Skip("no admitted Pod's token to copy")
		}
		other := rapid.SampledFrom(slices.Sorted(maps.Keys(m.pods))).Draw(t, "token of")
		pod.Annotations[tpuv1alpha1.ClaimTokenAnnotation] = m.pods[other].a.Token
		what = "set to " + other + "'s token " + short(m.pods[other].a.Token)
	}
	if err := m.user.Update(m.ctx, pod); err != nil {
		t.Fatalf("editing Pod %s: %v", pod.Name, err)
	}
	if m.handMade[pod.Name] {
		// The hand-made Pod no longer carries the seal it copied: docs/spec.md §8 promises that
		// such a Pod is never bound to a pending claim by its spec only while its annotation is the
		// seal, so from now on the claim of the Pod its ID was handed to may be bound to it.
		id, _ := identity.FromPod(pod)
		m.unsealed[idKey(id.SliceName(), id.WorkerID)] = true
		m.w.mu.Lock()
		m.w.unsealed[pod.Name] = true
		m.w.mu.Unlock()
	}
	m.logf("Pod %s: claim token %s", pod.Name, what)
}

// deleteSlice deletes a slice by hand, whatever it holds (-model.hand-deletes): its owner may hold
// a reservation of it, and the caches learn of the deletion only when delivered. No ID of the
// deleted slice may be handed out from memory (docs/spec.md §3.5), the live Pods' claims are
// repaired by the reconciler (§8), and I1 holds throughout.
func (m *model) deleteSlice(t *rapid.T) {
	if !*modelHandDeletes {
		t.Skip("-model.hand-deletes=false")
	}
	var list tpuv1alpha1.TPUSliceAssignmentList
	if err := m.w.base.List(m.ctx, &list, client.InNamespace(modelNS)); err != nil {
		t.Fatalf("listing slices: %v", err)
	}
	if len(list.Items) == 0 {
		t.Skip("no slice")
	}
	slice := &list.Items[rapid.IntRange(0, len(list.Items)-1).Draw(t, "slice")]
	if err := m.user.Delete(m.ctx, slice); err != nil {
		t.Fatalf("deleting slice %s: %v", slice.Name, err)
	}
	m.handDeleted[slice.Name] = time.Now()
	m.w.mu.Lock()
	delete(m.w.corrupt, client.ObjectKeyFromObject(slice)) // its bad lines went with it
	m.w.handDeleted[slice.Name] = true
	m.w.mu.Unlock()
	m.logf("a user deletes slice %s by hand (it held %s)", shortSlice(slice.Name), describeClaims(slice))
}

// copyReserved creates, past the webhook, a worker Pod carrying a reserved, unhanded claim's token
// and ID as a slice's status shows them (-model.copied-reserved). The Pod the ID is then handed out
// to is never deleted in favor of it (docs/spec.md §8; the world checks every delete).
func (m *model) copyReserved(t *rapid.T) {
	if !*modelCopiedReserved {
		t.Skip("-model.copied-reserved=false")
	}
	var list tpuv1alpha1.TPUSliceAssignmentList
	if err := m.w.base.List(m.ctx, &list, client.InNamespace(modelNS)); err != nil {
		t.Fatalf("listing slices: %v", err)
	}
	type reserved struct {
		slice *tpuv1alpha1.TPUSliceAssignment
		claim tpuv1alpha1.WorkerClaim
	}
	var candidates []reserved
	for i := range list.Items {
		for _, c := range list.Items[i].Status.Claims {
			if c.PodUID == "" && strings.HasPrefix(c.Token, identity.SealPrefix) {
				candidates = append(candidates, reserved{&list.Items[i], c})
			}
		}
	}
	if len(candidates) == 0 {
		t.Skip("no reserved claim")
	}
	pick := candidates[rapid.IntRange(0, len(candidates)-1).Draw(t, "reserved claim")]
	m.next++
	name := fmt.Sprintf("hand%d", m.next)
	spec := pick.slice.Spec
	pod := testutil.MakeWorkerPod(modelNS, spec.RayClusterName, spec.RayClusterUID, spec.GroupName).Named(name).UID(types.UID("uid-"+name)).
		TPU(4).Topology(spec.Accelerator, spec.Topology).TPUIdentity(spec.GroupName, spec.ReplicaIndex, pick.claim.WorkerID).
		Claim(spec.GroupName+"-"+strconv.Itoa(int(spec.ReplicaIndex)), pick.slice.Name, strconv.Itoa(int(pick.claim.WorkerID)), pick.claim.Token).
		Created(time.Now()).Phase(corev1.PodRunning).Obj()
	if err := m.user.Create(m.ctx, pod); err != nil {
		t.Fatalf("creating Pod %s: %v", name, err)
	}
	m.handMade[name] = true
	m.handMadeIn[pick.slice.Name] = true
	m.w.mu.Lock()
	m.w.handMade[name] = true
	m.w.mu.Unlock()
	m.logf("a user creates Pod %s past the webhook with %s ID %d and its reserved token %s copied from the status",
		name, shortSlice(pick.slice.Name), pick.claim.WorkerID, short(pick.claim.Token))
}

func describeClaims(slice *tpuv1alpha1.TPUSliceAssignment) string {
	parts := make([]string, 0, len(slice.Status.Claims))
	for _, c := range slice.Status.Claims {
		holder := "pending"
		if c.PodUID != "" {
			holder = c.PodName
		}
		parts = append(parts, fmt.Sprintf("%d:%s(%s)", c.WorkerID, short(c.Token), holder))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// corruptSlice writes a line that does not parse into a slice's stored status (by hand, an older
// version, a bug): in place of one claim's line, or beside them. Until the operator's repair, no ID
// named only by the bad line may be handed out (I1 sees it), and quiesce requires the repair.
func (m *model) corruptSlice(t *rapid.T) {
	var list tpuv1alpha1.TPUSliceAssignmentList
	if err := m.w.base.List(m.ctx, &list, client.InNamespace(modelNS)); err != nil {
		t.Fatalf("listing slices: %v", err)
	}
	if len(list.Items) == 0 {
		t.Skip("no slice to corrupt")
	}
	slice := rapid.SampledFrom(list.Items).Draw(t, "slice")
	bad := corruption{id: -1, line: rapid.SampledFrom([]string{"0 a b", "x", "7 t pod"}).Draw(t, "bad line")}
	if len(slice.Status.Claims) > 0 && rapid.Bool().Draw(t, "replaces a claim") {
		bad.id = rapid.SampledFrom(slice.Status.Claims).Draw(t, "claim").WorkerID
	}
	m.w.mu.Lock()
	m.w.corrupt[client.ObjectKeyFromObject(&slice)] = bad
	m.w.mu.Unlock()
	m.w.record(m.ctx, &slice)
	if bad.id >= 0 {
		m.logf("slice %s: the line of worker ID %d overwritten with %q", shortSlice(slice.Name), bad.id, bad.line)
	} else {
		m.logf("slice %s: a line %q added", shortSlice(slice.Name), bad.line)
	}
}

// editLabels edits a live Pod's labels. Labels outside the cache's selector are always edited; the
// selector's own (defect 2's history) only with -model.label-exits.
func (m *model) editLabels(t *rapid.T) {
	pod := m.livePod(t)
	keys := []string{tpuv1alpha1.SliceLabel, tpuv1alpha1.WorkerIDLabel, constants.ReplicaIndexLabel, rayutils.RayNodeLabelKey}
	if *modelLabelExits {
		keys = append(keys, rayutils.RayNodeGroupLabelKey, rayutils.RayNodeTypeLabelKey)
	}
	key := rapid.SampledFrom(keys).Draw(t, "label")
	// A restored label gets a plausible value: KubeRay's own, or another slice's hint.
	id, _ := identity.FromPod(pod)
	want := map[string]string{
		tpuv1alpha1.SliceLabel: naming.SliceName(id.Cluster, id.Group, 1), tpuv1alpha1.WorkerIDLabel: "0",
		constants.ReplicaIndexLabel: id.Group + "-0", rayutils.RayNodeLabelKey: "yes",
		rayutils.RayNodeTypeLabelKey: "worker", rayutils.RayNodeGroupLabelKey: id.Group,
	}[key]
	what := "removed"
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	if _, has := pod.Labels[key]; has {
		delete(pod.Labels, key)
	} else {
		pod.Labels[key] = want
		what = "restored to " + strconv.Quote(want)
	}
	if err := m.user.Update(m.ctx, pod); err != nil {
		t.Fatalf("editing Pod %s: %v", pod.Name, err)
	}
	m.logf("Pod %s: label %s %s", pod.Name, key, what)
}

// check checks, after every step, the invariants of docs/spec.md §9 that hold at every instant:
// I1 (no two live Pods of one slice with one TPU_WORKER_ID), I6 (seen inside the operator's Pod
// deletions) and I3's part that needs no quiet: the claim of a live admitted Pod is never released.
func (m *model) check(t *rapid.T) {
	synctest.Wait() // what the step set off in the background runs until it waits
	if v := m.w.takeViolations(); len(v) > 0 {
		m.failf(t, invI6, "%s", strings.Join(v, "\n"))
	}
	pods := m.truePods(t)
	holder := map[string]string{}
	for i := range pods {
		p := &pods[i]
		id, ok := identity.FromPod(p)
		if !ok || !lifecycle.PodLive(p) || m.handMade[p.Name] || (m.pods[p.Name] != nil && m.handDeletedUnder(m.pods[p.Name])) {
			// A Pod created past the webhook with a copied identity may share an ID: the user's
			// doing, reported, never the operator's. So may a Pod whose slice a user deleted under
			// it, until the reconciler repairs its claim or deletes it as late (docs/spec.md §8).
			continue
		}
		key := fmt.Sprintf("%s ID %d", shortSlice(id.SliceName()), id.WorkerID)
		if other, dup := holder[key]; dup {
			m.failf(t, invI1, "I1: live Pods %s and %s both run with %s", other, p.Name, key)
		}
		holder[key] = p.Name
	}
	// The IDs live Pods admitted before a user deleted their slice by hand still hold: with the
	// slice went the record of them, the ID may have been handed out again, and of two live Pods
	// on one ID and no claim the repair gives it to the one carrying a token, the older first
	// (docs/spec.md §8), whichever the operator admitted later.
	orphaned := map[string]bool{}
	for i := range pods {
		if ap := m.pods[pods[i].Name]; ap != nil && lifecycle.PodLive(&pods[i]) && m.handDeletedUnder(ap) {
			orphaned[idKey(ap.a.SliceName, ap.a.WorkerID)] = true
		}
	}
	for i := range pods {
		p := &pods[i]
		ap := m.pods[p.Name]
		if ap == nil || !lifecycle.PodLive(p) {
			continue
		}
		if m.handDeletedUnder(ap) || orphaned[idKey(ap.a.SliceName, ap.a.WorkerID)] {
			continue // its claim went with the slice a user deleted; quiesce checks the repair
		}
		if m.unsealed[idKey(ap.a.SliceName, ap.a.WorkerID)] {
			continue // binding by spec may have given its claim to a hand-made Pod (editToken)
		}
		if !m.holdsClaim(ap) {
			m.failf(t, invI3Live, "I3: the claim of live Pod %s was released; stored %s", ap, m.claimsOf(ap.a.SliceName))
		}
	}
}

// holdsClaim reports whether the Pod's slice holds its worker ID for it: pending with its token, or
// bound to its UID.
func (m *model) holdsClaim(p *admittedPod) bool {
	slice := &tpuv1alpha1.TPUSliceAssignment{}
	if err := m.w.base.Get(m.ctx, types.NamespacedName{Namespace: modelNS, Name: p.a.SliceName}, slice); err != nil {
		return false
	}
	// A reserved ID's Pod carries the secret its claim's seal is stored under (docs/spec.md §3.5).
	stored := p.a.Token
	if strings.HasPrefix(stored, identity.SecretPrefix) {
		stored = identity.Seal(stored)
	}
	for _, c := range slice.Status.Claims {
		if c.WorkerID == p.a.WorkerID && (c.PodUID == p.uid || (c.PodUID == "" && c.Token == stored)) {
			return true
		}
	}
	return false
}

func (m *model) truePods(t *rapid.T) []corev1.Pod {
	var pods corev1.PodList
	if err := m.w.base.List(m.ctx, &pods, client.InNamespace(modelNS)); err != nil {
		t.Fatalf("listing Pods: %v", err)
	}
	return pods.Items
}

// quiesce ends the history: no more admissions, every parked create fails, the caches catch up,
// the clock passes twice the pending TTL while every slice is reconciled; then the claims must equal
// the live Pods (I3): every live Pod's ID bound to it, nothing else claimed.
// faultWrites makes the operator's next 1-3 writes to slices fail: refused, or applied with the
// answer lost (a timeout after etcd committed), whatever makes them: a claim, a reservation, its
// give-back, a new slice or a reconcile. A writer that retries after a lost answer finds its own
// write there; one that gives up leaves it stored.
func (m *model) faultWrites(t *rapid.T) {
	if !*modelWriteFaults {
		return
	}
	n := rapid.IntRange(1, 3).Draw(t, "faults")
	faults := make([]writeFault, n)
	for i := range faults {
		faults[i] = writeFault(rapid.IntRange(int(faultRefused), int(faultLost)).Draw(t, "fault"))
	}
	m.w.mu.Lock()
	m.w.faults = append(m.w.faults, faults...)
	m.w.mu.Unlock()
	m.logf("the operator's next %d writes to slices fail: %v", n, faults)
}

func (m *model) quiesce(t *rapid.T) {
	m.w.mu.Lock()
	m.w.faults = nil
	m.w.mu.Unlock()
	m.releaseWrites(t)
	defer m.tallyReservations()
	for _, p := range m.parked {
		m.logf("create of %s failed (quiesce)", p)
	}
	m.parked = nil
	m.logf("quiesce: caches catch up, the clock passes 2 × the pending TTL, every slice is reconciled")
	for round := range 8 {
		m.w.deliver(m.w.pods, -1)
		m.w.deliver(m.w.slices, -1)
		for _, g := range m.groups {
			for replica := range g.replicas {
				_, _ = m.op.rec.Reconcile(notHeld(m.ctx), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: modelNS, Name: g.sliceName(replica)}})
			}
		}
		m.check(t)
		if round%2 == 0 {
			pass(DefaultPendingTTL/2 + time.Second)
		} else {
			pass(2 * DefaultBindSettle)
		}
	}
	m.w.mu.Lock()
	unrepaired := make([]string, 0, len(m.w.corrupt))
	for key := range m.w.corrupt {
		if !m.userBroke(key.Name) {
			unrepaired = append(unrepaired, key.Name)
		}
	}
	m.w.mu.Unlock()
	slices.Sort(unrepaired)
	if len(unrepaired) > 0 {
		m.failf(t, invRepair, "after quiesce the stored status of %v still holds a malformed line", unrepaired)
	}
	want := map[string][]string{}
	for _, p := range m.truePods(t) {
		if id, ok := identity.FromPod(&p); ok && lifecycle.PodLive(&p) {
			want[id.SliceName()] = append(want[id.SliceName()], fmt.Sprintf("%d:%s", id.WorkerID, p.UID))
		}
	}
	var list tpuv1alpha1.TPUSliceAssignmentList
	if err := m.w.base.List(m.ctx, &list, client.InNamespace(modelNS)); err != nil {
		t.Fatalf("listing slices: %v", err)
	}
	got := map[string][]string{}
	for _, s := range list.Items {
		for _, c := range s.Status.Claims {
			got[s.Name] = append(got[s.Name], fmt.Sprintf("%d:%s", c.WorkerID, c.PodUID))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(mergeKeys(want, got))) {
		if m.userBroke(name) {
			continue
		}
		slices.Sort(want[name])
		slices.Sort(got[name])
		if !slices.Equal(want[name], got[name]) {
			m.failf(t, invI3, "I3 after quiesce: slice %s claims %v (ID:Pod UID), its live Pods are %v", shortSlice(name), got[name], want[name])
		}
	}
}

func mergeKeys(a, b map[string][]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// claimsOf describes a slice's stored claims: ID, token, and the Pod bound (or "pending").
func (m *model) claimsOf(name string) string {
	slice := &tpuv1alpha1.TPUSliceAssignment{}
	if err := m.w.base.Get(m.ctx, types.NamespacedName{Namespace: modelNS, Name: name}, slice); err != nil {
		return "no slice"
	}
	parts := make([]string, 0, len(slice.Status.Claims))
	for _, c := range slice.Status.Claims {
		holder := "pending"
		if c.PodUID != "" {
			holder = c.PodName
		}
		parts = append(parts, fmt.Sprintf("%d:%s(%s)", c.WorkerID, short(c.Token), holder))
	}
	return fmt.Sprintf("%d hosts [%s]", slice.Spec.Hosts, strings.Join(parts, " "))
}

// describe is the final state: the live Pods, the slices, and how far the caches lag.
func (m *model) describe() string {
	var b strings.Builder
	for _, p := range m.truePodsNoFail() {
		id, _ := identity.FromPod(&p)
		fmt.Fprintf(&b, "  Pod %s: %s ID %d, phase %s, token %s, labels group=%q node-type=%q\n", p.Name, shortSlice(id.SliceName()),
			id.WorkerID, p.Status.Phase, short(identity.Token(&p)), p.Labels[rayutils.RayNodeGroupLabelKey], p.Labels[rayutils.RayNodeTypeLabelKey])
	}
	for _, g := range m.groups {
		for replica := range g.replicas {
			name := g.sliceName(replica)
			fmt.Fprintf(&b, "  slice %s (replica name %q): %s\n", shortSlice(name), m.replicaNameOf(name), m.claimsOf(name))
		}
	}
	podLag, sliceLag := m.w.lag()
	fmt.Fprintf(&b, "  cache behind by %d Pod and %d slice events", podLag, sliceLag)
	return b.String()
}

func (m *model) truePodsNoFail() []corev1.Pod {
	var pods corev1.PodList
	_ = m.w.base.List(m.ctx, &pods, client.InNamespace(modelNS))
	return pods.Items
}

// shortSlices are the short names of the slices of the model's groups, up to one replica beyond
// the desired ones, by slice name.
var shortSlices = func() map[string]string {
	out := map[string]string{}
	for _, g := range newModelGroups() {
		for replica := range g.replicas + 1 {
			out[g.sliceName(replica)] = fmt.Sprintf("%s-%s-%d", g.cluster, g.name, replica)
		}
	}
	return out
}()

// shortSlice names a slice of one of the model's groups by its cluster, group and replica
// (rc-tpu-<replica>).
func shortSlice(name string) string {
	if short, ok := shortSlices[name]; ok {
		return short
	}
	return name
}

// replicaNameOf is the KubeRay replica name a slice records ("" for none, or no slice).
func (m *model) replicaNameOf(name string) string {
	slice := &tpuv1alpha1.TPUSliceAssignment{}
	if err := m.w.base.Get(m.ctx, types.NamespacedName{Namespace: modelNS, Name: name}, slice); err != nil {
		return ""
	}
	return slice.Spec.ReplicaName
}

func short(token string) string {
	if len(token) > 6 {
		return token[:6]
	}
	return token
}

// TestModel is the model-based test (docs/development.md, "Model-based"). Rerun a failure with the
// -rapid.seed (or -rapid.failfile) it prints; -rapid.checks and -rapid.steps set the budget.
func TestModel(t *testing.T) {
	if f := flag.Lookup("rapid.checks"); f != nil && !flagSet("rapid.checks") {
		_ = f.Value.Set(strconv.Itoa(defaultModelChecks))
		t.Cleanup(func() { _ = f.Value.Set(f.DefValue) })
	}
	rapid.Check(t, func(t *rapid.T) {
		rapid.SyncTest(t, func(t *rapid.T) {
			ctx := ctrl.LoggerInto(context.Background(), logr.Discard())
			m := newModel(ctx, t)
			defer m.settle()
			t.Repeat(m.actions())
			m.quiesce(t)
			if m.full16 {
				indexingFired.full16.Add(1)
			}
		})
	})
	// Otherwise the histories held up without reservations, or without hand-outs beside a write in
	// flight, vacuously.
	if *modelReservations && !t.Failed() {
		handed, renewals, whileHeld := reservationsFired.handed.Load(), reservationsFired.renewals.Load(), reservationsFired.whileHeld.Load()
		t.Logf("reservations: %d IDs handed out, %d renewals, %d admissions answered while a write was held", handed, renewals, whileHeld)
		if handed == 0 || renewals == 0 || (*modelHeldWrites && whileHeld == 0) {
			t.Errorf("the histories handed out %d reserved IDs, renewed %d times and answered %d admissions while a write was held, want some of each", handed, renewals, whileHeld)
		}
	}
	// Otherwise the histories held up without indexed admissions, or without a full 16-host slice,
	// vacuously.
	if *modelIndexing && !t.Failed() {
		admitted, denied, replaced, full := indexingFired.admitted.Load(), indexingFired.denied.Load(), indexingFired.replaced.Load(), indexingFired.full16.Load()
		t.Logf("KubeRay's indexing: %d indexed Pods admitted, %d denied, %d replicas replaced; %d histories filled a 16-host slice", admitted, denied, replaced, full)
		if admitted == 0 || denied == 0 || replaced == 0 || full == 0 {
			t.Errorf("the histories admitted %d indexed Pods, denied %d, replaced %d replicas and filled a 16-host slice in %d, want some of each", admitted, denied, replaced, full)
		}
	}
	// Otherwise the histories held up under failing writes vacuously.
	if *modelWriteFaults && !t.Failed() {
		refused, lost := faultsFired[faultRefused].Load(), faultsFired[faultLost].Load()
		t.Logf("failed writes of the operator: %d refused, %d applied with the answer lost", refused, lost)
		if refused == 0 || lost == 0 {
			t.Errorf("the histories failed %d of the operator's writes as refused and %d as applied with the answer lost, want some of each", refused, lost)
		}
	}
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
