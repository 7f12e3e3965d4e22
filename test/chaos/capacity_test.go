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
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/controllers/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/gate"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster/autoscaler"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// Capacity on the local cluster (issue 43). The cluster's pools are fewer than the run's slices may
// ask for at once (clusterPools), and a stand-in cluster autoscaler (internal/localcluster/
// autoscaler) runs beside it with a budget of standInMaxPools pools and scale-down of the idle
// pools it created; the operator asks for capacity with capacity Pods (--capacity-request=pods)
// after capacityWait. So slices that find no pool get one, and pools go once their slices do:
// Nodes are added and removed under the chaos. Besides:
//
//   - tpu-job: a Pod of no slice (no KubeRay labels, a Job's, say) asking for a TPU host's chips
//     is created for the scheduler to place on TPU Nodes (or the stand-in to add a pool for), and
//     deleted 2 to 9 steps later: placement must count its chips wherever it binds.
//   - The v4 cluster's worker template carries required node affinity: a label every v4 Node has
//     (its machine type) and a node pool it must not use (excludedPool, a pool that fits it in
//     every other way). The chooser must count only the Nodes its terms match, the capacity Pods
//     must carry them.
//   - The v6e pools take node-pool slices (v6e, pre) and sub-block subslices (sub) alike: the
//     sub cluster's third subslice finds no sub-block left in the v6e-sub pool and takes a whole
//     pool's, which node-pool slices use before and after it: slices of two keys over one pool,
//     kept apart by the Leases of either key (checkAcrossKeys).
//
// Invariants added:
//
//   - "No slice gated or Pending while capacity exists or can be provisioned" (checkLanded): once
//     the chaos stopped and the run settled, every slice of a current RayCluster generation whose
//     worker IDs are all held by live Pods has all of them bound and Running within landBound,
//     unless the stand-in's budget is spent (then the slice may wait; counted as budget_waits).
//   - "No Pod deleted by placement while its slice could still fit" (audit.go, judgeStrand, on
//     every deletion; checkStrandEvents, on every step): each deletion of a released, pinned Pod
//     is judged on a live read as it is sent: its Node gone, relabelled out of what the Pod
//     selects, or its chips taken by Pods bound there, of any kind; and every TPUPodStranded
//     Event names a Pod whose deletion was so judged. The judgements and the Events' notes go to
//     the run's history.
//
// A cluster run ends with a CHAOS-capacity line (reportCapacity).

// The stand-in autoscaler's and the operator's capacity settings.
const (
	// standInMaxPools is the stand-in's budget. At quiescence the run's slices need at most six
	// pools beyond the cluster's (two v4; three v6e for the node-pool slices the two v6e pools
	// leave, one for the subslice the v6e-sub pool's two sub-blocks leave), and a pool created
	// for capacity Pods that went unused, or for a TPU job, goes standInUnneeded after it is
	// idle; a 5-minute run (seed 4343) had 8 alive at quiescence.
	standInMaxPools = 12
	// standInDelay is how long after a scale-up decision a pool's Nodes appear.
	standInDelay = time.Second
	// standInUnneeded is how long a pool of the stand-in's stays idle before it deletes it: past
	// the time a released slice takes to bind after its capacity Pods are deleted.
	standInUnneeded = 10 * time.Second
	// capacityWait is the operator's --capacity-wait.
	capacityWait = 3 * time.Second
	// landBound is how long after the run settled a complete slice may take to have every Pod
	// bound and Running: the capacity wait, a pool's provisioning and Ready, a bind, with room for
	// a loaded machine.
	landBound = 90 * time.Second
	// excludedPool is the v4 pool the v4 cluster's node affinity excludes.
	excludedPool = "v4-b"
	// jobLabel marks the run's TPU jobs.
	jobLabel = "chaos.test.tpu.ray.io/tpu-job"
)

// standInGroups are the pool shapes the stand-in may create: those of the run's RayClusters whose
// pools the cluster has too few of.
var standInGroups = []autoscaler.NodeGroup{
	{Accelerator: "tpu-v6e-slice", Topology: "4x4"},
	{Accelerator: "tpu-v4-podslice", Topology: "2x2x4"},
}

// capacityStats is what the stand-in, the TPU jobs and the capacity checks did and saw.
type capacityStats struct {
	standIn *autoscaler.Autoscaler
	// jobs are the TPU jobs alive, with the step after which each is deleted.
	jobs []tpuJob
	// capacityPods are the operator's capacity Pods seen, and boundCapacity those seen bound.
	capacityPods, boundCapacity map[types.UID]bool
	// strandEvents are the TPUPodStranded Events checked, by UID.
	strandEvents map[types.UID]bool
	// keysByPool are the keys of the ChosenDomain slices seen bound in each node pool;
	// crossReported the pairs of slices reported sharing Nodes across keys.
	keysByPool    map[string]map[string]bool
	crossReported map[string]bool
	// affinitySlices are the slices whose Pods carry the v4 cluster's node affinity seen with
	// every Pod Running.
	affinitySlices map[string]bool

	jobsCreated, jobsBound, maxAlive, requestedEvents int
	// landed counts the complete slices checkLanded found bound and Running, incomplete those it
	// left out (a worker ID not held), budgetWaits the slices excused by a spent budget,
	// unplacedWaiting the complete slices the operator does not place still waiting.
	landed, incomplete, budgetWaits, unplacedWaiting int
}

type tpuJob struct {
	name     string
	deleteAt int
}

func newCapacityStats() capacityStats {
	return capacityStats{capacityPods: map[types.UID]bool{}, boundCapacity: map[types.UID]bool{}, strandEvents: map[types.UID]bool{},
		keysByPool: map[string]map[string]bool{}, crossReported: map[string]bool{}, affinitySlices: map[string]bool{}}
}

// capacityOptions are the operator's capacity settings: capacity Pods on the local cluster, where
// the stand-in serves them; none on the bare API server, where nothing would.
func (r *runner) capacityOptions() placement.CapacityOptions {
	if !r.cluster {
		return placement.CapacityOptions{Mode: placement.CapacityNone}
	}
	return placement.CapacityOptions{Mode: placement.CapacityPods, Wait: capacityWait}
}

// startStandIn starts the stand-in autoscaler for the run; it stops when the run ends, and the
// pools it created stay.
func (r *runner) startStandIn() {
	GinkgoHelper()
	a, err := autoscaler.Start(ctx, env.Config, autoscaler.Options{
		NodeGroups: standInGroups, ProvisioningDelay: standInDelay, MaxPools: standInMaxPools, ScaleDownUnneededTime: standInUnneeded,
	})
	Expect(err).NotTo(HaveOccurred())
	r.cl.capacity.standIn = a
	DeferCleanup(a.Stop)
}

// alivePools counts the stand-in's pools decided and not deleted, as its budget counts them.
func (c *capacityStats) alivePools() int {
	n := 0
	for _, p := range c.standIn.Pools() {
		if p.Deleted.IsZero() {
			n++
		}
	}
	return n
}

// withNodeAffinity gives rc's worker template required node affinity: its own machine type (a
// label every v4 Node, the stand-in's too, has) and any node pool but excludedPool.
func withNodeAffinity(rc *rayv1.RayCluster) *rayv1.RayCluster {
	rc.Spec.WorkerGroupSpecs[0].Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"ct4p-hightpu-4t"}},
				{Key: constants.NodePoolTopologyKey, Operator: corev1.NodeSelectorOpNotIn, Values: []string{excludedPool}},
			},
		}}},
	}}
	return rc
}

// hasOwnNodeAffinity reports whether p carries the v4 cluster's node affinity.
func hasOwnNodeAffinity(p *corev1.Pod) bool {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, e := range t.MatchExpressions {
			if e.Key == constants.NodePoolTopologyKey && e.Operator == corev1.NodeSelectorOpNotIn && slices.Contains(e.Values, excludedPool) {
				return true
			}
		}
	}
	return false
}

// --- TPU jobs ---

// runTPUJob creates a Pod of no slice that asks for one host's chips of a v6e 4x4 or v4 2x2x4
// pool, for the scheduler to place (or the stand-in to add a pool for), until 2 to 9 steps later.
func (r *runner) runTPUJob() {
	shapes := []struct{ accelerator, topology string }{{"tpu-v6e-slice", "4x4"}, {"tpu-v4-podslice", "2x2x4"}}
	s := shapes[r.rng.IntN(len(shapes))]
	p := testutil.MakePod("", r.ns).GenerateName("tpu-job-").Label(jobLabel, "true").Topology(s.accelerator, s.topology).TPU(4).
		Toleration(corev1.Toleration{Key: constants.TPUResourceName, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}).Obj()
	if err := k8sClient.Create(ctx, p); err != nil {
		r.errs = append(r.errs, fmt.Errorf("creating a TPU job: %w", err))
		return
	}
	job := tpuJob{name: p.Name, deleteAt: r.ops + 2 + r.rng.IntN(8)}
	r.cl.capacity.jobs = append(r.cl.capacity.jobs, job)
	r.cl.capacity.jobsCreated++
	GinkgoWriter.Printf("tpu-job: Pod %s (%s %s, 4 chips) until op %d\n", p.Name, s.accelerator, s.topology, job.deleteAt)
}

// tendJobs deletes the TPU jobs whose time has come; all of them when all is true.
func (r *runner) tendJobs(all bool) {
	c := &r.cl.capacity
	kept := c.jobs[:0]
	for _, j := range c.jobs {
		if !all && r.ops < j.deleteAt {
			kept = append(kept, j)
			continue
		}
		var p corev1.Pod
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: j.name}, &p); err != nil {
			continue
		}
		if p.Spec.NodeName != "" {
			c.jobsBound++
		}
		GinkgoWriter.Printf("tpu-job: deleting Pod %s (bound to %q)\n", j.name, p.Spec.NodeName)
		if err := k8sClient.Delete(ctx, &p); client.IgnoreNotFound(err) != nil {
			r.errs = append(r.errs, fmt.Errorf("deleting TPU job %s: %w", j.name, err))
		}
	}
	c.jobs = kept
}

// --- checks on every step ---

// checkCapacity records the capacity Pods and the stand-in's pools seen, and checks the
// TPUPodStranded Events (checkStrandEvents).
func (r *runner) checkCapacity() {
	c := &r.cl.capacity
	c.maxAlive = max(c.maxAlive, c.alivePools())
	var pods corev1.PodList
	if err := k8sClient.List(ctx, &pods, client.InNamespace(r.ns), client.HasLabels{tpuv1alpha1.CapacityForLabel}); err == nil {
		for i := range pods.Items {
			if p := &pods.Items[i]; capacityPod(p) {
				c.capacityPods[p.UID] = true
				if p.Spec.NodeName != "" {
					c.boundCapacity[p.UID] = true
				}
			}
		}
	}
	r.checkStrandEvents()
}

// checkStrandEvents checks that every TPUPodStranded Event of the run names a Pod whose deletion
// the audit judged a true strand (judgeStrand), the judgement made on a live read as the
// deletion was sent; it writes each Event's note to the run's history.
func (r *runner) checkStrandEvents() {
	var events corev1.EventList
	if err := k8sClient.List(ctx, &events, client.InNamespace(r.ns), client.MatchingFields{"reason": tpuv1alpha1.ReasonTPUPodStranded}); err != nil {
		return
	}
	for i := range events.Items {
		e := &events.Items[i]
		if r.cl.capacity.strandEvents[e.UID] {
			continue
		}
		r.cl.capacity.strandEvents[e.UID] = true
		GinkgoWriter.Printf("strand event: Pod %s: %s\n", e.InvolvedObject.Name, e.Message)
		if !audit.deletedStranded(e.InvolvedObject.UID) {
			r.violationf("§12 (stranded Pods): the operator recorded %s for Pod %s (UID %s), whose deletion was not judged a true strand "+
				"(its Node gone, relabelled, or its chips taken; see the audit's judgement in the history): %s",
				tpuv1alpha1.ReasonTPUPodStranded, e.InvolvedObject.Name, e.InvolvedObject.UID, e.Message)
		}
	}
}

// --- at quiescence ---

// checkLanded checks "no slice gated or Pending while capacity exists or can be provisioned": once
// the run settled (the chaos stopped, every Node restored, the TPU jobs deleted, every RayCluster
// with its Pods), each slice of a current RayCluster generation whose worker IDs are all held by
// live Pods has every one of them bound and Running within landBound. A slice still waiting then
// is a violation, unless the stand-in's pools are at its budget (the slice may wait for one to go;
// counted as budget_waits). A slice missing an ID waits for its assembly (docs/spec.md §12): it is
// counted (incomplete) and not judged. So is a slice the operator does not place (docs/spec.md
// §12 is for ChosenDomain slices): one adoption created for Pods made past the webhook keeps the
// inter-pod terms, and where the scheduler put those Pods ("Pods that bypass admission") may leave
// no room for a sibling that must join them, which no new pool can fix (counted as
// unplaced_waiting, and described in a CHAOS-unplaced line).
func (r *runner) checkLanded() {
	deadline := time.Now().Add(landBound)
	start := time.Now()
	var waiting []string
	for {
		waiting = r.unlanded(false)
		if len(waiting) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	r.unlanded(true) // counts what the check saw last
	c := &r.cl.capacity
	GinkgoWriter.Printf("landed: %d complete slices bound and Running %v after the settle, %d incomplete, %d waiting\n",
		c.landed, time.Since(start).Round(100*time.Millisecond), c.incomplete, len(waiting))
	if len(waiting) == 0 {
		return
	}
	if alive := c.alivePools(); alive >= standInMaxPools {
		// Excused, and printed where a passing run shows it: what holds every pool.
		c.budgetWaits += len(waiting)
		fmt.Fprintf(os.Stdout, "CHAOS-budget the stand-in is at its budget of %d pools (%s); waiting: %s\n", alive, r.poolSummary(), strings.Join(waiting, "; "))
		return
	}
	r.violationf("§12 (capacity): %v after the run settled, with the stand-in autoscaler at %d of its %d pools (%s), these slices still wait: %s",
		landBound, c.alivePools(), standInMaxPools, r.poolSummary(), strings.Join(waiting, "; "))
}

// unlanded describes the complete slices of current RayCluster generations with a Pod not bound
// and Running; with count, it records the slices it saw in r.cl.capacity.
func (r *runner) unlanded(count bool) []string {
	list, err := r.listSlices()
	if err != nil {
		return []string{"listing slices: " + err.Error()}
	}
	var pods corev1.PodList
	if err := k8sClient.List(ctx, &pods, client.InNamespace(r.ns)); err != nil {
		return []string{"listing Pods: " + err.Error()}
	}
	var waiting []string
	landed, incomplete, unplaced := 0, 0, 0
	for i := range list.Items {
		s := &list.Items[i]
		var mine []*corev1.Pod
		ids := map[int32]bool{}
		for j := range pods.Items {
			p := &pods.Items[j]
			id, ok := identity.FromPod(p)
			if !ok || !lifecycle.PodLive(p) || !r.current(p) || id.SliceName() != s.Name || !id.OfClusterUID(s.Spec.RayClusterUID) {
				continue
			}
			mine = append(mine, p)
			ids[id.WorkerID] = true
		}
		if len(mine) == 0 {
			continue
		}
		if len(ids) < int(s.Spec.Hosts) {
			incomplete++
			continue
		}
		var stuck []string
		affinity := true
		for _, p := range mine {
			affinity = affinity && hasOwnNodeAffinity(p)
			if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
				stuck = append(stuck, describeWaiting(p))
			}
		}
		if len(stuck) == 0 {
			landed++
			if count && affinity {
				r.cl.capacity.affinitySlices[s.Name+"@"+string(s.Spec.RayClusterUID)] = true
			}
			continue
		}
		if s.Spec.Placement != tpuv1alpha1.PlacementChosenDomain {
			unplaced++
			if count {
				// Printed where a passing run shows it, as CHAOS-budget is.
				fmt.Fprintf(os.Stdout, "CHAOS-unplaced slice %s (placement %q) waits, not judged: %s; its Pods' Nodes: %s\n", s.Name, s.Spec.Placement,
					strings.Join(stuck, ", "), podNodes(mine))
			}
			continue
		}
		waiting = append(waiting, fmt.Sprintf("slice %s (%s, %s=%q; %s): %s; in its domain: %s", s.Name, s.Spec.Placement, s.Spec.AffinityTopologyKey, s.Status.Domain,
			conditionNotes(s.Status.Conditions, tpuv1alpha1.ConditionDomainChosen, tpuv1alpha1.ConditionCapacity), strings.Join(stuck, ", "),
			domainOccupants(s.Spec.AffinityTopologyKey, s.Status.Domain)))
	}
	if count {
		r.cl.capacity.landed, r.cl.capacity.incomplete, r.cl.capacity.unplacedWaiting = landed, incomplete, unplaced
	}
	return waiting
}

// podNodes names the Nodes pods are bound to, with their node pools.
func podNodes(pods []*corev1.Pod) string {
	var out []string
	for _, p := range pods {
		if p.Spec.NodeName == "" {
			continue
		}
		var n corev1.Node
		pool := "gone"
		if k8sClient.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, &n) == nil {
			pool = n.Labels[constants.NodePoolTopologyKey]
		}
		out = append(out, fmt.Sprintf("%s on %s (pool %s)", p.Name, p.Spec.NodeName, pool))
	}
	return strings.Join(out, ", ")
}

// describeWaiting says where a Pod that is not bound and Running stands.
func describeWaiting(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Pod %s (phase %s, node %q, gated=%t, pinned=%q, selector=%v", p.Name, p.Status.Phase, p.Spec.NodeName, tpuenv.HasGate(p),
		gate.PinnedNode(p), p.Spec.NodeSelector)
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			fmt.Fprintf(&b, ", %s: %q", c.Reason, c.Message)
		}
	}
	b.WriteString(")")
	return b.String()
}

// domainOccupants names the Nodes of domain key=value and the live Pods bound to each, of any
// namespace and kind, with the TPU chips they request.
func domainOccupants(key, value string) string {
	if key == "" || value == "" {
		return "no domain"
	}
	var nodes corev1.NodeList
	if err := k8sClient.List(ctx, &nodes, client.MatchingLabels{key: value}); err != nil {
		return err.Error()
	}
	var pods corev1.PodList
	if err := k8sClient.List(ctx, &pods); err != nil {
		return err.Error()
	}
	on := map[string][]string{}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Spec.NodeName != "" && lifecycle.PodLive(p) {
			on[p.Spec.NodeName] = append(on[p.Spec.NodeName], fmt.Sprintf("%s/%s (%d chips)", p.Namespace, p.Name, gate.PodChips(p)))
		}
	}
	out := make([]string, 0, len(nodes.Items))
	for _, n := range nodes.Items {
		out = append(out, fmt.Sprintf("%s (Ready=%t, %s chips): %v", n.Name, nodeReady(&n), n.Status.Allocatable.Name(constants.TPUResourceName, resource.DecimalSI), on[n.Name]))
	}
	return strings.Join(out, "; ")
}

// conditionNotes is the status, reason and message of each of the named conditions present.
func conditionNotes(conds []metav1.Condition, types ...string) string {
	var out []string
	for _, t := range types {
		if c := apimeta.FindStatusCondition(conds, t); c != nil {
			out = append(out, fmt.Sprintf("%s=%s/%s %q", c.Type, c.Status, c.Reason, c.Message))
		}
	}
	return strings.Join(out, ", ")
}

// poolSummary names the stand-in's pools, what each was for and where it stands.
func (r *runner) poolSummary() string {
	pools := r.cl.capacity.standIn.Pools()
	out := make([]string, 0, len(pools))
	for _, p := range pools {
		state := "decided"
		switch {
		case !p.Deleted.IsZero():
			state = "deleted"
		case !p.Ready.IsZero():
			state = "ready"
		case !p.Created.IsZero():
			state = "created"
		}
		out = append(out, fmt.Sprintf("%s %s (%s, %d Pods)", p.Name, state, p.For, len(p.Pods)))
	}
	return strings.Join(out, ", ")
}

// reportCapacity prints what the capacity side of a cluster run did and saw:
//
//	CHAOS-capacity gate=<on|off> pools_added=<n> pools_removed=<n> max_pools_alive=<n> max_pools=<n> capacity_pods=<n> capacity_pods_bound=<n> capacity_pods_deleted=<n> capacity_requested_events=<n> tpu_jobs=<n> tpu_jobs_bound=<n> affinity_slices=<n> cross_key_pools=<n> landed_slices=<n> incomplete_slices=<n> budget_waits=<n> unplaced_waiting=<n> strand_events=<n>
//
// pools_added and pools_removed are the stand-in's pools created and scaled down, max_pools_alive
// the most seen alive at a step against its budget max_pools; capacity_pods the operator's
// capacity Pods seen (capacity_pods_bound of them bound), capacity_pods_deleted those the
// operator deleted, capacity_requested_events its TPUSliceCapacityRequested Events; tpu_jobs the
// Pods of no slice created (tpu_jobs_bound of them seen bound when deleted); affinity_slices the
// slices with the v4 cluster's node affinity found bound and Running at quiescence;
// cross_key_pools the node pools that held slices of both keys in the run; landed_slices the
// complete slices checkLanded found bound and Running, incomplete_slices those it left out,
// budget_waits those excused by the spent budget (each excuse prints a CHAOS-budget line with
// the stand-in's pools and the waiting slices), and unplaced_waiting the complete slices the
// operator does not place that still waited (not judged); strand_events the TPUPodStranded Events
// checked against the audit's judgements.
func (r *runner) reportCapacity(gateName string, capacityDeleted int) {
	c := &r.cl.capacity
	added, removed := 0, 0
	for _, p := range c.standIn.Pools() {
		if !p.Created.IsZero() {
			added++
		}
		if !p.Deleted.IsZero() {
			removed++
		}
	}
	crossKey := 0
	for _, keys := range c.keysByPool {
		if len(keys) > 1 {
			crossKey++
		}
	}
	GinkgoWriter.Printf("stand-in pools: %s\n", r.poolSummary())
	fmt.Fprintf(os.Stdout, "CHAOS-capacity gate=%s pools_added=%d pools_removed=%d max_pools_alive=%d max_pools=%d capacity_pods=%d capacity_pods_bound=%d capacity_pods_deleted=%d capacity_requested_events=%d tpu_jobs=%d tpu_jobs_bound=%d affinity_slices=%d cross_key_pools=%d landed_slices=%d incomplete_slices=%d budget_waits=%d unplaced_waiting=%d strand_events=%d\n",
		gateName, added, removed, c.maxAlive, standInMaxPools, len(c.capacityPods), len(c.boundCapacity), capacityDeleted, c.requestedEvents,
		c.jobsCreated, c.jobsBound, len(c.affinitySlices), crossKey, c.landed, c.incomplete, c.budgetWaits, c.unplacedWaiting, len(c.strandEvents))
	for _, pool := range slices.Sorted(maps.Keys(c.keysByPool)) {
		GinkgoWriter.Printf("pool %s held slices of %v\n", pool, slices.Sorted(maps.Keys(c.keysByPool[pool])))
	}
}

// countRequestedEvents counts the operator's TPUSliceCapacityRequested Events of the run (before
// its namespace goes).
func (r *runner) countRequestedEvents() {
	var events corev1.EventList
	if err := k8sClient.List(ctx, &events, client.InNamespace(r.ns), client.MatchingFields{"reason": tpuv1alpha1.ReasonTPUSliceCapacityRequested}); err != nil {
		return
	}
	for _, e := range events.Items {
		n := 1
		if e.Series != nil {
			n = max(int(e.Series.Count), 1)
		}
		r.cl.capacity.requestedEvents += n
	}
}
