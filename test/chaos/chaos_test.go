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

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/controllers"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/localenv"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
	"github.com/ray-tpu/tpu-slice-operator/webhooks"
)

const (
	pendingTTL = 3 * time.Second
	instances  = 3
)

var _ = Describe("Chaos", Ordered, Serial, func() {
	runSeed := *seed
	if runSeed == 0 {
		runSeed = uint64(time.Now().UnixNano()) //nolint:gosec // a seed, printed for reruns.
	}
	for i, gate := range []bool{false, true} {
		It(fmt.Sprintf("keeps docs/spec.md §9 with KubeRay's RayMultiHostIndexing=%t", gate), func() {
			run(runSeed, uint64(i), gate, *duration/2)
		})
	}
})

// The RayClusters of a run, by index in runner.clusters. KubeRay manages the first kubeRayClusters;
// the test creates the Pods of the others.
const (
	kubeRayClusters = 4
	// burstCluster is filled in concurrent bursts, as admissions of one slice arrive at once
	// through several API servers.
	burstCluster = 4
	// preCluster also gets Pods that carry a TPU identity set by hand, created with the webhook
	// out of the way (docs/spec.md §3.4): they must be adopted, never duplicated.
	preCluster = 5
)

// run is one chaos run for one gate setting.
type runner struct {
	ns        string
	rng       *rand.Rand
	gate      bool
	clusters  []*rayv1.RayCluster
	instances []*framework.Instance
	retired   []*framework.Instance
	faults    *faults
	nodes     *healthNodes // health_test.go
	ops       int
	// opRNG shuffles the deck of operations (its own stream: the order of the operations does
	// not depend on what the others drew).
	opRNG *rand.Rand
	deck  []int
	// op names the operation running, for violation messages; opCounts counts each operation.
	op       string
	opCounts map[string]int
	errs     []error
	settled  bool
	// unsettled says, when the settle failed, which RayClusters were short and why (shown in the
	// failure message: CI prints only the end of a run's output).
	unsettled  string
	settleTook time.Duration // from the chaos's end until KubeRay had every Pod
	// settleRefills counts the Pods the settle re-created for the clusters without KubeRay after
	// its first refill (Pods the operator deleted as stranded, for one).
	settleRefills int

	// deletedGenerations are RayClusters deleted by a re-create, for creates of a stale UID.
	deletedGenerations []*rayv1.RayCluster
	// edited are Pods whose labels or claim token the run edited, with the values to restore.
	edited []editedPod
	// bound is the claim each live Pod was last seen bound to (docs/spec.md §8: it follows the
	// Pod until the Pod is gone, whatever happens to its labels or other requests).
	bound map[types.UID]boundClaim
	// bypassed are the Pods the run created past the webhook (handMadePod): the operator never
	// gated them, so no ChosenDomain promise covers where the scheduler put them (docs/spec.md
	// §12, "Pods that bypass admission").
	bypassed map[types.UID]bool
	// forgedClaims are the claims forged AdmissionReviews made, with when they were posted
	// (forgedMu guards appends from concurrent posts).
	forgedClaims []forgedClaim
	forgedMu     sync.Mutex
	// forged counts the AdmissionReviews posted straight to an instance.
	forged int
	// replaceTimes are how long each replacement of a Pod deleted right after its create took.
	replaceTimes []time.Duration
	// adoptedBefore is the adoption counters' sum at the start of the run; deletedBefore
	// and repairsBefore the auditor's counts.
	adoptedBefore                float64
	deletedBefore, repairsBefore int
	// releasesBefore, timedOutBefore and pinsBefore are the auditor's release counts when the run
	// started.
	releasesBefore, timedOutBefore, pinsBefore int
	// strandsBefore is the auditor's count of stranded Pods' deletions when the run started;
	// capacityBefore its count of capacity Pods' deletions.
	strandsBefore, capacityBefore int

	// What hostile_test.go's operations did and saw (issue 20).
	hostile hostileStats
	// hostListsRefs is the most live Pods seen at once taking their host lists from a ConfigMap,
	// hostListsDeleted the ConfigMaps deleteHostLists deleted (hostlists_test.go, issue 22).
	hostListsRefs, hostListsDeleted int
	// stored checks every stored version of the run's slices (stored.go).
	stored *storedWatch
	// cluster reports whether the run is on the local cluster; cl is what its operations did
	// (cluster_test.go).
	cluster bool
	cl      clusterStats
}

func run(seed, stream uint64, gate bool, d time.Duration) {
	was, err := localenv.SetMultiHostIndexing(gate)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { _, _ = localenv.SetMultiHostIndexing(was) })

	r := &runner{
		rng:      rand.New(rand.NewPCG(seed, stream)), //nolint:gosec // reproducible chaos, not security.
		gate:     gate,
		opRNG:    rand.New(rand.NewPCG(seed, stream+200)), //nolint:gosec // reproducible chaos, not security.
		opCounts: map[string]int{},
		bound:    map[types.UID]boundClaim{},
		bypassed: map[types.UID]bool{},
		cluster:  runsOnCluster(gate),
		cl:       newClusterStats(),
		faults: &faults{
			rng:          rand.New(rand.NewPCG(seed, stream+100)), //nolint:gosec // reproducible faults.
			conflictRate: 0.05, serverErrorRate: 0.02, ghostRate: 0.02, slowRate: 0.03, slowDelay: 150 * time.Millisecond,
		},
	}
	if r.cluster {
		startCluster()
		r.nodes = clusterNodes()
	}
	r.ns = framework.CreateNamespace(ctx, k8sClient, "chaos")
	watchCtx, stopWatch := context.WithCancel(ctx)
	DeferCleanup(stopWatch)
	Expect(audit.watchNamespace(watchCtx, watchClient, r.ns)).To(Succeed())
	r.stored, err = watchStored(watchCtx, watchClient, r.ns)
	Expect(err).NotTo(HaveOccurred())
	r.adoptedBefore = adoptions(append(r.retired, r.instances...))
	r.deletedBefore, r.repairsBefore = audit.counts()
	r.releasesBefore, r.timedOutBefore, r.pinsBefore = audit.releaseCounts()
	r.strandsBefore = audit.strandCount()
	r.capacityBefore = audit.capacityDeletions()
	if r.cluster {
		r.startStandIn() // capacity_test.go
	}
	for i := range instances {
		r.instances = append(r.instances, r.startInstance(i))
	}
	env.ServeWebhooksFrom(r.instances...)
	DeferCleanup(func() {
		for _, inst := range r.instances {
			Expect(inst.Stop()).To(Succeed())
		}
		if r.cluster {
			r.restoreNodes()
		} else {
			r.deleteNodes()
		}
	})
	r.clusters = []*rayv1.RayCluster{
		r.createCluster(testutil.MakeRayCluster("v6e", r.ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 2).Obj()),
		r.createCluster(r.v4Cluster()),
		r.createCluster(testutil.MakeRayCluster("v5e", r.ns).TPUGroup("tpu", "tpu-v5-lite-podslice", "2x4", 8, 1, 3).Obj()),
		// A GKE subslice: 2x4 slices of a 4x4 node pool, 2 hosts each (docs/spec.md §2).
		r.createCluster(testutil.MakeRayCluster("sub", r.ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 2, 2).
			GroupAnnotation(0, constants.SliceTopologyAnnotation, "2x4").Obj()),
		// KubeRay leaves these alone: the test creates their Pods.
		r.createCluster(testutil.MakeRayCluster("burst", r.ns).TPUGroup("tpu", "tpu-v6e-slice", "8x8", 4, 16, 2).ManagedByMultiKueue().Obj()),
		r.createCluster(testutil.MakeRayCluster("pre", r.ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 2).ManagedByMultiKueue().Obj()),
	}

	start := time.Now()
	for time.Since(start) < d {
		r.tendUnlabeled()
		if r.cluster {
			r.tendNodes(false)
			r.tendJobs(false)
		}
		r.step()
		r.ops++
		time.Sleep(time.Duration(100+r.rng.IntN(500)) * time.Millisecond)
		r.check(false)
	}

	By("letting activity stop, then checking every invariant")
	r.op = "settle"
	if r.cluster {
		// Failures past kube-controller-manager's eviction delay would evict Pods.
		r.tendNodes(true)
		r.tendJobs(true)
	}
	r.settle()
	r.check(true)
	r.checkHealth()
	r.checkDryRun()
	r.waitCollected()
	if r.cluster {
		r.measureOnePool()
		r.checkSideNamespaces(true)
		r.checkPinsBind()
		// Every Node restored (the health checks above judged the taints and cordons the run left):
		// a 16-host burst slice whose pool kept one has no domain and no stand-in shape.
		r.clearNodeProblems()
		r.checkLanded() // capacity_test.go
		r.checkCapacity()
		r.countRequestedEvents()
	}

	c := framework.TotalCounts(append(r.retired, r.instances...))
	admitted, denials, attempts, forwarded, fallbacks := c.Committed, c.Denied, c.Attempts, c.Forwarded, c.Fallbacks
	adopted := int64(adoptions(append(r.retired, r.instances...)) - r.adoptedBefore)
	podsDeleted, repairs := audit.counts()
	gateName := map[bool]string{false: "off", true: "on"}[gate]
	var reserved, renewals int64
	for _, inst := range append(r.retired, r.instances...) {
		reserved += inst.ReservedCount()
		renewals += inst.RenewalCount()
	}
	found, versions := r.stored.take()
	for _, v := range found {
		r.violationf("%s", v)
	}
	h := r.hostile
	line := fmt.Sprintf("CHAOS seed=%d duration=%.0f gate=%s ops=%d admitted=%d denials=%d retries=%d violations=%d forwarded=%d fallbacks=%d"+
		" adopted=%d max_replace_s=%.2f forged=%d pods_deleted=%d"+
		" unlabeled=%d mixed_denials=%d max_mixed_denial_s=%.2f malformed_tokens=%d stored_versions=%d"+
		" absurd_denials=%d max_absurd_s=%.2f absurd_heap_mib=%d forged_indexes=%d hostlists_refs=%d hostlists_deleted=%d reserved=%d renewals=%d",
		seed, d.Seconds(), gateName, r.ops, admitted, denials, max(attempts-admitted-denials, 0), len(r.errs), forwarded, fallbacks,
		adopted, slices.Max(append(r.replaceTimes, 0)).Seconds(), r.forged, podsDeleted-r.deletedBefore,
		h.unlabeled, h.mixedDenials, h.maxMixedDenial.Seconds(), h.malformed, versions,
		h.absurdDenials, h.maxAbsurd.Seconds(), h.absurdHeap>>20, h.forgedIndexes, r.hostListsRefs, r.hostListsDeleted, reserved, renewals)
	fmt.Fprintln(os.Stdout, line)
	GinkgoWriter.Println(line, "faults_injected:", r.faults.injected.Load())
	fmt.Fprintf(os.Stdout, "CHAOS-OPS gate=%s %v judged_repairs=%d settle_s=%.1f settle_refills=%d\n", gateName, r.opCounts, repairs-r.repairsBefore, r.settleTook.Seconds(), r.settleRefills)
	GinkgoWriter.Println("replacements:", r.replaceTimes)
	releases, pins := -1, -1
	if r.cluster {
		r.deleteRunNamespace()
		releases, pins = r.reportCluster(gateName)
		r.reportCapacity(gateName, audit.capacityDeletions()-r.capacityBefore)
	}
	Expect(errors.Join(r.errs...)).NotTo(HaveOccurred(), "docs/spec.md §9 violations (rerun with -chaos.seed=%d)", seed)
	// A run that admits nothing, or never settles, would pass the invariants vacuously.
	Expect(admitted).To(BeNumerically(">", 0), "no Pod was admitted")
	Expect(r.hostListsRefs).To(BeNumerically(">", 0), "no Pod took its host lists from a ConfigMap: checkHostLists checked only inline lists")
	Expect(reserved).To(BeNumerically(">", 0), "no ID was handed out from a reservation: the invariants checked only IDs claimed by their own write")
	if r.cluster && r.slicePlacement() == tpuv1alpha1.PlacementChosenDomain {
		// Otherwise "no partial binding" (release.go) held vacuously.
		Expect(releases).To(BeNumerically(">", 0), "no gated Pod was released: the run judged no ChosenDomain release")
		Expect(pins).To(BeNumerically(">", 0), "no released Pod was pinned to a Node: the run judged no pin")
	}
	Expect(r.settled).To(BeTrue(), "KubeRay did not get every Pod the RayClusters ask for within two minutes of the chaos ending (seed %d): %s", seed, r.unsettled)
}

// startInstance starts instance i, the first with the reconciler. The even instances put the host
// lists of every multi-host slice in a ConfigMap, the odd ones write them inline
// (--host-lists-configmap-above=1 and -1): one slice's Pods get both forms, and copies, late
// creates and restarts meet both (checkHostLists).
func (r *runner) startInstance(i int) *framework.Instance {
	GinkgoHelper()
	hostListsAbove := int32(1)
	if i%2 == 1 {
		hostListsAbove = -1
	}
	inst, err := env.StartInstance(ctx, framework.InstanceOptions{
		Operator: operator.Options{
			DisableControllers: i != 0,
			Controllers:        controllers.Options{PendingTTL: pendingTTL, Capacity: r.capacityOptions()},
			SlicePlacement:     r.slicePlacement(),
			Webhooks:           webhooks.Options{HostListsConfigMapAbove: hostListsAbove},
		},
		// Faults outside, the audit inside: the audit sees the requests that reach the server.
		Config: r.faults.wrap(audit.wrap(env.Config, actorOperator)),
		// As in production: claims go to their group's owner, and to a local claim when it is gone.
		Forward: true,
	})
	Expect(err).NotTo(HaveOccurred())
	return inst
}

// slicePlacement is the run's --slice-placement. On the bare API server the runner binds the Pods
// itself (healthStep), which the API server refuses for a gated Pod (a conflict the runner
// ignores, so such Pods would silently never bind), so its slices keep the inter-pod terms; on the
// local cluster the scheduler binds what the reconciler releases.
func (r *runner) slicePlacement() tpuv1alpha1.SlicePlacement {
	if r.cluster {
		return tpuv1alpha1.PlacementChosenDomain
	}
	return tpuv1alpha1.PlacementInterPodAffinity
}

// v4Cluster is the v4 RayCluster; on the local cluster its workers carry required node affinity
// (withNodeAffinity).
func (r *runner) v4Cluster() *rayv1.RayCluster {
	rc := testutil.MakeRayCluster("v4", r.ns).TPUGroup("tpu", "tpu-v4-podslice", "2x2x4", 4, 4, 2).Obj()
	if r.cluster {
		withNodeAffinity(rc)
	}
	return rc
}

func (r *runner) createCluster(rc *rayv1.RayCluster) *rayv1.RayCluster {
	GinkgoHelper()
	Expect(k8sClient.Create(ctx, rc)).To(Succeed())
	return rc
}

// operation is one kind of step, chosen with probability weight/100.
type operation struct {
	name   string
	weight int
	run    func(*runner)
}

// operations are the kinds of step. Steps are dealt from a shuffled deck that holds each kind
// weight times (129 cards, 162 with clusterOperations on the local cluster; a fresh deck when it
// runs out), so that each kind runs about weight times every 120 steps: `make test`'s two minutes
// (40 to 100 steps per gate setting) see most kinds several times, and the kinds' order depends on
// the seed alone.
var operations = []operation{
	{"delete", 17, (*runner).deleteRandomPod},
	{"replicas", 12, (*runner).changeReplicas},
	{"recreate", 6, func(r *runner) { r.recreate(r.rng.IntN(len(r.clusters))) }},
	{"restart", 5, func(r *runner) { r.restartInstance(r.rng.IntN(len(r.instances))) }},
	{"burst", 8, func(r *runner) { r.burst(burstCluster + r.rng.IntN(2)) }},
	{"trickle", 6, (*runner).trickle}, // one Pod at a time across renewals of a reservation
	{"labels", 10, (*runner).editLabels},
	{"copies", 6, (*runner).createCopies},
	{"preexisting", 7, (*runner).createPreexisting},
	{"replace", 7, (*runner).deleteAfterCreate},
	{"odd-topology", 5, (*runner).createOddTopology},
	{"stale-uid", 5, (*runner).createStaleUID},
	{"forged", 6, (*runner).postForged},
	{"health", 5, (*runner).healthStep}, // health_test.go: schedule and ready Pods, move hosts, flap Nodes
	// hostile_test.go (issue 20): what no label, token, topology or index may do.
	{"unlabel-burst", 6, (*runner).unlabelDuringBurst},
	{"mixed-hosts", 5, (*runner).mixedHostCounts},
	{"malformed-token", 4, (*runner).createMalformedToken},
	{"absurd-topology", 2, (*runner).createAbsurdTopology},
	{"forged-index", 3, (*runner).postForgedIndexes},
	// hostlists_test.go (issue 22): the host lists ConfigMaps deleted under running Pods.
	{"delete-hostlists", 3, (*runner).deleteHostLists},
	// Let KubeRay and the operator run undisturbed for this step.
	{"idle", 1, func(*runner) {}},
}

// operations returns the kinds of step of the run.
func (r *runner) operations() []operation {
	if r.cluster {
		return append(slices.Clip(operations), clusterOperations...)
	}
	return operations
}

// step performs the next operation of the deck.
func (r *runner) step() {
	ops := r.operations()
	if len(r.deck) == 0 {
		for i, op := range ops {
			for range op.weight {
				r.deck = append(r.deck, i)
			}
		}
		r.opRNG.Shuffle(len(r.deck), func(i, j int) { r.deck[i], r.deck[j] = r.deck[j], r.deck[i] })
	}
	op := ops[r.deck[0]]
	r.deck = r.deck[1:]
	r.op = op.name
	r.opCounts[op.name]++
	start := time.Now()
	op.run(r)
	GinkgoWriter.Printf("op %d %s took %v\n", r.ops, op.name, time.Since(start).Round(time.Millisecond))
}

// deleteRandomPod deletes a random live worker Pod.
func (r *runner) deleteRandomPod() {
	pods := r.workerPods(nil)
	if len(pods) > 0 {
		p := pods[r.rng.IntN(len(pods))]
		_ = client.IgnoreNotFound(k8sClient.Delete(ctx, &p))
	}
}

// changeReplicas sets a KubeRay-managed cluster's replicas (nobody would remove the extra Pods of
// the others).
func (r *runner) changeReplicas() {
	rc := r.clusters[r.rng.IntN(kubeRayClusters)]
	n := int32(1 + r.rng.IntN(3))
	_ = r.update(rc, func(rc *rayv1.RayCluster) { rc.Spec.WorkerGroupSpecs[0].Replicas = ptr.To(n) })
}

func (r *runner) update(rc *rayv1.RayCluster, mutate func(*rayv1.RayCluster)) error {
	for range 5 {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(rc), rc); err != nil {
			return err
		}
		mutate(rc)
		if err := k8sClient.Update(ctx, rc); !apierrors.IsConflict(err) {
			return err
		}
	}
	return nil
}

// recreate deletes a RayCluster and creates it again at once under the same name (a new UID).
func (r *runner) recreate(i int) {
	old := r.clusters[i].DeepCopy()
	r.deleteGeneration(i)
	r.createGeneration(i, old)
}

// deleteGeneration deletes cluster i's RayCluster and, on a bare API server, standing in for the
// garbage collector, its Pods; on the local cluster the garbage collector deletes them.
// checkCollected then expects its Pods and slices gone within gcBound.
func (r *runner) deleteGeneration(i int) bool {
	old := r.clusters[i]
	r.deletedGenerations = append(r.deletedGenerations, old.DeepCopy())
	if r.cluster {
		audit.ownerDeleted(old.UID)
	}
	if err := k8sClient.Delete(ctx, old); err != nil {
		return false
	}
	r.cl.collecting[old.UID] = collecting{name: old.Name, at: time.Now()}
	if !r.cluster {
		_ = k8sClient.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(r.ns), client.MatchingLabels{rayutils.RayClusterLabelKey: old.Name})
	}
	return true
}

// createGeneration creates cluster i again from old, under its name (a new UID).
func (r *runner) createGeneration(i int, old *rayv1.RayCluster) {
	fresh := old.DeepCopy()
	fresh.ObjectMeta = metav1.ObjectMeta{Name: old.Name, Namespace: old.Namespace}
	for range 50 {
		if err := k8sClient.Create(ctx, fresh); err == nil {
			r.clusters[i] = fresh
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.errs = append(r.errs, fmt.Errorf("could not re-create RayCluster %s", old.Name))
}

// burst creates, all at once, the Pods cluster i (one KubeRay leaves alone) is missing, then checks
// I1 and I2 at once, before the reconciler could clean anything up.
func (r *runner) burst(i int) {
	r.createMissing(i, nil)
	r.check(false)
}

// createMissing creates, all at once, the Pods cluster i (one KubeRay leaves alone) is missing.
// after, when not nil, runs in the creating goroutine right after each admitted create returned,
// while the claims of the burst are still pending.
// It returns the refusals.
func (r *runner) createMissing(i int, after func(*corev1.Pod)) []error {
	rc := r.clusters[i]
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(rc), rc); err != nil {
		return []error{err}
	}
	return createAll(rc, r.missing(i), after)
}

// missing is how many Pods cluster i lacks of those its RayCluster asks for.
func (r *runner) missing(i int) int {
	return int(rayutils.GetWorkerGroupDesiredReplicas(r.clusters[i].Spec.WorkerGroupSpecs[0])) - len(r.podsOf(i))
}

// createAll creates n worker Pods of rc at once (see createMissing) and returns the refusals.
func createAll(rc *rayv1.RayCluster, n int, after func(*corev1.Pod)) []error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range n {
		wg.Go(func() {
			// Bounded: client-go retries a transient refusal ten times, each up to the webhook's
			// timeout, and an operator whose cache froze would hold the run for minutes.
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			p := testutil.WorkerPodFor(rc, group).Obj()
			if err := k8sClient.Create(cctx, p); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			if after != nil {
				after(p)
			}
		})
	}
	wg.Wait()
	return errs
}

// restartInstance stops one webhook instance and starts a fresh one in its place. Half the time the
// instance crashes while the proxy still sends it admissions and its peers still forward claims to
// it, else it is drained first and its endpoint removed before it stops.
func (r *runner) restartInstance(i int) {
	GinkgoHelper()
	old := r.instances[i]
	if r.rng.IntN(2) == 0 {
		rest := append(append([]*framework.Instance{}, r.instances[:i]...), r.instances[i+1:]...)
		env.ServeWebhooksFrom(rest...)
		Expect(old.Stop()).To(Succeed())
	} else {
		// A crash: its peers still list it, and forward to it, until its endpoint goes.
		Expect(old.Crash()).To(Succeed())
	}
	r.retired = append(r.retired, old)
	r.instances[i] = r.startInstance(i)
	env.ServeWebhooksFrom(r.instances...)
}

// workerPods returns the live TPU worker Pods of current RayCluster generations.
func (r *runner) workerPods(keep func(*corev1.Pod) bool) []corev1.Pod {
	var pods corev1.PodList
	if err := k8sClient.List(ctx, &pods, client.InNamespace(r.ns), client.MatchingLabels{rayutils.RayNodeTypeLabelKey: "worker"}); err != nil {
		return nil
	}
	var out []corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; lifecycle.PodLive(p) && r.current(p) && (keep == nil || keep(p)) {
			out = append(out, *p)
		}
	}
	return out
}

// current reports whether a Pod belongs to a RayCluster generation that still exists.
func (r *runner) current(p *corev1.Pod) bool {
	ref := metav1.GetControllerOfNoCopy(p)
	for _, rc := range r.clusters {
		if ref != nil && ref.UID == rc.UID {
			return true
		}
	}
	return false
}

// collectGarbage deletes the worker Pods whose RayCluster generation is gone, as the garbage
// collector envtest lacks would (the ownerReference points at a deleted UID). A re-create that
// races KubeRay can leave such a Pod behind after recreate's own clean-up, and so does one of a Pod
// whose ray.io/cluster label was removed (recreate deletes by that label). The local cluster has a
// garbage collector, and kubelets (kwok): it does nothing there.
func (r *runner) collectGarbage() {
	if r.cluster {
		return
	}
	r.finishTerminating() // health_test.go: the kubelets' part for bound Pods
	var pods corev1.PodList
	if err := k8sClient.List(ctx, &pods, client.InNamespace(r.ns)); err != nil {
		return
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		worker := p.Labels[rayutils.RayNodeTypeLabelKey] == "worker" || metav1.GetControllerOfNoCopy(p) != nil
		if worker && !r.current(p) {
			_ = client.IgnoreNotFound(k8sClient.Delete(ctx, p))
		}
	}
}

// check verifies I1 and I2 now, I6 on every Pod deletion since the last check, that bound claims
// follow their live Pods, that forged claims are held no longer than the pending TTL and, at the
// end, I3.
func (r *runner) check(final bool) {
	r.collectGarbage()
	if _, err := framework.CheckAdmittedPods(ctx, k8sClient, r.ns, r.current); err != nil {
		r.violationf("%w", err)
	}
	for _, v := range audit.takeViolations() {
		r.violationf("%s", v)
	}
	r.checkClaimsFollowPods()
	r.checkForgedClaims()
	if err := r.checkHostLists(false); err != nil { // hostlists_test.go
		r.violationf("%w", err)
	}
	r.checkHostile() // hostile_test.go
	r.checkCollected()
	r.checkFinishedReleased()
	if r.cluster {
		r.checkNodeFailures()
		r.checkSideNamespaces(false)
		r.checkChosenDomains() // placement_test.go
		r.checkCapacity()      // capacity_test.go
	}
	if final {
		var last error
		deadline := time.Now().Add(2*pendingTTL + 30*time.Second)
		for time.Now().Before(deadline) {
			r.collectGarbage()
			if last = framework.CheckClaimsMatchPods(ctx, k8sClient, r.ns); last == nil {
				if last = r.checkHostLists(true); last == nil {
					return
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		r.errs = append(r.errs, fmt.Errorf("at the end: %w", last))
	}
}

// settle waits until KubeRay has the Pods every RayCluster asks for, for at most two minutes
// (KubeRay may be backing off after refused creates).
func (r *runner) settle() {
	// Pods whose KubeRay labels are still removed get them back: KubeRay counts its Pods by them.
	r.restoreUnlabeled(true)
	// The burst and pre clusters have no KubeRay: the test is their owner, and re-creates what they
	// lack at the start and every 10 s, as KubeRay does for its own. The operator deletes a Pod
	// stranded where it is pinned (docs/spec.md §12) and leaves its re-creation to the owner; one
	// refill at the start missed a strand deleted just after it (a run failed so).
	var refused []error
	start := time.Now()
	deadline := start.Add(2 * time.Minute)
	var nudged time.Time
	for time.Now().Before(deadline) {
		r.collectGarbage()
		if time.Since(nudged) > 10*time.Second {
			refused = nil
			for _, i := range []int{burstCluster, preCluster} {
				if n := r.missing(i); n > 0 {
					if !nudged.IsZero() {
						r.settleRefills += n
					}
					refused = append(refused, r.createMissing(i, nil)...)
					r.check(false)
				}
			}
			r.nudgeKubeRay()
			nudged = time.Now()
		}
		done := true
		for _, rc := range r.clusters {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(rc), rc); err != nil {
				done = false
				continue
			}
			want := int(rayutils.GetWorkerGroupDesiredReplicas(rc.Spec.WorkerGroupSpecs[0]))
			uid := rc.UID
			got := len(r.workerPods(func(p *corev1.Pod) bool { return metav1.GetControllerOfNoCopy(p).UID == uid }))
			done = done && got == want
		}
		if done {
			r.settled, r.settleTook = true, time.Since(start)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	r.unsettled = r.dumpState() + fmt.Sprintf("; the last refill's refusals: %v", refused)
}

// nudgeKubeRay touches every KubeRay-managed RayCluster so that KubeRay reconciles it now. After a
// run of refused creates KubeRay's controller backs off exponentially (minutes); in a cluster it
// would retry when the backoff expires. The settle check is about the operator not blocking
// KubeRay, not about KubeRay's backoff, so it does not wait for it.
func (r *runner) nudgeKubeRay() {
	for _, rc := range r.clusters[:kubeRayClusters] {
		_ = r.update(rc, func(rc *rayv1.RayCluster) {
			if rc.Annotations == nil {
				rc.Annotations = map[string]string{}
			}
			rc.Annotations["chaos.test.tpu.ray.io/nudge"] = time.Now().Format(time.RFC3339Nano)
		})
	}
}

// checkDryRun verifies I4 while nothing else runs: a dry-run create changes no slice.
func (r *runner) checkDryRun() {
	before, err := r.sliceVersions()
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("I4: listing the TPUSliceAssignments: %w", err))
		return
	}
	pod := testutil.WorkerPodFor(r.clusters[0], "tpu").Obj()
	if err := k8sClient.Create(ctx, pod, client.DryRunAll); err != nil && !strings.Contains(err.Error(), "transient") {
		r.errs = append(r.errs, fmt.Errorf("I4: dry run refused: %w", err))
	}
	switch after, err := r.sliceVersions(); {
	case err != nil:
		r.errs = append(r.errs, fmt.Errorf("I4: listing the TPUSliceAssignments after a dry run: %w", err))
	case fmt.Sprint(after) != fmt.Sprint(before):
		r.errs = append(r.errs, fmt.Errorf("I4: a dry run changed TPUSliceAssignments: %v -> %v", before, after))
	}
}

// listSlices lists the run's TPUSliceAssignments.
func (r *runner) listSlices() (*tpuv1alpha1.TPUSliceAssignmentList, error) {
	list := &tpuv1alpha1.TPUSliceAssignmentList{}
	return list, k8sClient.List(ctx, list, client.InNamespace(r.ns))
}

// sliceVersions returns the resourceVersion of each of the run's slices, read as stored (a typed
// List fails on a malformed stored line, which stored.go reports). On the local cluster, where kwok
// and kube-controller-manager keep changing Pods and Nodes and slice health follows them, it
// returns each slice's claims (status.workers) instead.
func (r *runner) sliceVersions() (map[string]string, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(sliceListGVK)
	if err := k8sClient.List(ctx, list, client.InNamespace(r.ns)); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range list.Items {
		out[s.GetName()] = s.GetResourceVersion()
		if r.cluster {
			workers, _, _ := unstructured.NestedString(s.Object, "status", "workers")
			out[s.GetName()] = workers
		}
	}
	return out, nil
}

// dumpState writes what a failed settle needs for diagnosis: per RayCluster the Pods it asks for and
// has, and every slice's claims with the state of the Pod holding each. It returns the short
// RayClusters, with the Pods of each that do not count (finished, or of no current generation)
// and the claims of their slices, in one line.
func (r *runner) dumpState() string {
	var pods corev1.PodList
	_ = k8sClient.List(ctx, &pods, client.InNamespace(r.ns))
	byUID := map[string]*corev1.Pod{}
	for i := range pods.Items {
		byUID[string(pods.Items[i].UID)] = &pods.Items[i]
	}
	var short []string
	shortUIDs := map[types.UID]bool{}
	for _, rc := range r.clusters {
		uid := rc.UID
		want := rayutils.GetWorkerGroupDesiredReplicas(rc.Spec.WorkerGroupSpecs[0])
		got := len(r.workerPods(func(p *corev1.Pod) bool { return metav1.GetControllerOfNoCopy(p).UID == uid }))
		GinkgoWriter.Printf("STATE cluster=%s uid=%s replicas=%d want=%d have=%d\n", rc.Name, rc.UID,
			ptr.Deref(rc.Spec.WorkerGroupSpecs[0].Replicas, 0), want, got)
		if got == int(want) {
			continue
		}
		shortUIDs[uid] = true
		var others []string
		for i := range pods.Items {
			p := &pods.Items[i]
			if ref := metav1.GetControllerOfNoCopy(p); ref != nil && ref.Name == rc.Name && (!lifecycle.PodLive(p) || ref.UID != uid) {
				others = append(others, fmt.Sprintf("%s(%s,owner %s,deleting=%t)", p.Name, p.Status.Phase, ref.UID, p.DeletionTimestamp != nil))
			}
		}
		short = append(short, fmt.Sprintf("%s uid=%s want=%d have=%d not counted=%v last warnings=%v", rc.Name, uid, want, got, others, lastWarnings(r.ns, uid, 3)))
	}
	var list tpuv1alpha1.TPUSliceAssignmentList
	_ = k8sClient.List(ctx, &list, client.InNamespace(r.ns))
	for _, s := range list.Items {
		var states []string
		for _, c := range s.Status.Claims {
			state := "pending"
			if p := byUID[string(c.PodUID)]; p != nil {
				state = fmt.Sprintf("pod=%s live=%t current=%t", p.Name, lifecycle.PodLive(p), r.current(p))
			} else if c.PodUID != "" {
				state = "pod gone"
			}
			GinkgoWriter.Printf("STATE slice=%s uid=%s replica=%d id=%d %s\n", s.Name, s.Spec.RayClusterUID, s.Spec.ReplicaIndex, c.WorkerID, state)
			states = append(states, fmt.Sprintf("%d:%s", c.WorkerID, state))
		}
		if shortUIDs[s.Spec.RayClusterUID] {
			short = append(short, fmt.Sprintf("slice %s replica %d claims %v conditions %v", s.Name, s.Spec.ReplicaIndex, states, conditionSummary(s.Status.Conditions)))
		}
	}
	return strings.Join(short, "; ")
}

// lastWarnings returns the messages of the last n Warning Events about the object with uid (KubeRay
// records a refused Pod create on the RayCluster), oldest first.
func lastWarnings(ns string, uid types.UID, n int) []string {
	var events corev1.EventList
	if err := k8sClient.List(ctx, &events, client.InNamespace(ns)); err != nil {
		return []string{err.Error()}
	}
	var out []corev1.Event
	for _, e := range events.Items {
		if e.InvolvedObject.UID == uid && e.Type == corev1.EventTypeWarning {
			out = append(out, e)
		}
	}
	// The operator records through events.k8s.io (EventTime set, LastTimestamp and Count zero),
	// KubeRay through core/v1 (LastTimestamp set).
	at := func(e corev1.Event) time.Time {
		if !e.EventTime.IsZero() {
			return e.EventTime.Time
		}
		return e.LastTimestamp.Time
	}
	slices.SortFunc(out, func(a, b corev1.Event) int { return at(a).Compare(at(b)) })
	msgs := make([]string, 0, n)
	for _, e := range out[max(len(out)-n, 0):] {
		msgs = append(msgs, fmt.Sprintf("%s: %s", e.Reason, e.Message))
	}
	return msgs
}

// conditionSummary is each condition's type, status and reason.
func conditionSummary(conds []metav1.Condition) []string {
	out := make([]string, 0, len(conds))
	for _, c := range conds {
		out = append(out, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return out
}
