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
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/gate"
	"github.com/ray-tpu/tpu-slice-operator/internal/health"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// What only a real cluster does (issue 21). On the local cluster (internal/localcluster:
// kube-scheduler, kube-controller-manager and kwok TPU Nodes) the runner stops standing in for the
// scheduler, the kubelets and the garbage collector, and adds what those components make possible:
//
//   - node-fail: kwok reports a TPU Node NotReady (half the time while a burst of creates is being
//     admitted), and reports it Ready again a few steps later. Every slice with a host on it must
//     turn Degraded within degradedBound (docs/spec.md §11).
//   - pod-fail: kwok fails the containers of a running worker Pod (phase Failed): its ID is freed
//     (§8); KubeRay deletes and replaces it, while the Pods of the clusters KubeRay leaves alone
//     stay Failed.
//   - gc-delete: a RayCluster is deleted and its Pods and slices are left to the garbage collector;
//     all must be gone within gcBound (§8: no claim survives its RayCluster), then it is created
//     again. recreate does the same without waiting.
//   - ns-delete: a namespace with a KubeRay RayCluster is deleted while its Pods are being admitted
//     or run, and left to the namespace controller: it must be gone within nsBound, and I1 holds in
//     it meanwhile.
//
// Once activity stops, every slice's health conditions agree with an oracle written from §11
// (healthAgrees), and the run measures whether each slice's Running hosts that carry the
// operator's affinity are in one domain of its affinity key (§4, measureOnePool). At the end the run's namespace is deleted with the operator running and
// must be gone within nsBound.

// Bounds of the cluster's own work.
const (
	// degradedBound is how long after kwok reports a Node NotReady every slice with a host on it
	// may take to say Degraded: the bind settle, a reconcile, and the faults the instances see.
	degradedBound = 15 * time.Second
	// gcBound is how long after its RayCluster's deletion its Pods and slices may live.
	gcBound = 30 * time.Second
	// nsBound is how long a deleted namespace may stay Terminating.
	nsBound = 90 * time.Second
	// releaseBound is how long a Pod may be Failed or Succeeded while a claim is still bound to it
	// (docs/spec.md §8: it frees its ID at once; releases never wait for the bind settle).
	releaseBound = 10 * time.Second
	// maxNodeFailure bounds a kwok Node failure: kube-controller-manager evicts the Pods of a Node
	// NotReady for 300 s (DefaultTolerationSeconds), which the run does not attribute.
	maxNodeFailure = 2 * time.Minute
)

// clusterPools are the node pools of a chaos run on the local cluster, and CPU Nodes for the heads.
// The operator's Leases keep slices apart on cloud.google.com/gke-nodepool, or on the GCE sub-block
// for subslices, and the pools are fewer than the run's RayClusters may ask for at once (issue 43):
// the v6e clusters (v6e up to 3 slices, pre 2) share two v6e pools and the v6e-sub pool with
// the sub cluster's subslices (up to 3; slices of two keys over one pool), and the v4 cluster (up to 3
// slices, with node affinity that excludes v4-b) has one pool it may use. What is missing the
// stand-in autoscaler adds for the slices' capacity Pods (capacity_test.go).
func clusterPools() []localcluster.Pool {
	var pools []localcluster.Pool
	add := func(prefix, accelerator, topology string, n, subBlocks, slices int) {
		for i := range n {
			pools = append(pools, localcluster.Pool{Name: fmt.Sprintf("%s-%c", prefix, 'a'+i), Accelerator: accelerator, Topology: topology,
				SubBlocks: subBlocks, Slices: slices})
		}
	}
	add("v6e", "tpu-v6e-slice", "4x4", 2, 0, 0)         // the v6e cluster and pre, and sub's subslices
	add("v6e-sub", "tpu-v6e-slice", "4x4", 1, 2, 0)     // two 2x4 sub-blocks: subslices, or one node-pool slice
	add("v4", "tpu-v4-podslice", "2x2x4", 2, 0, 0)      // the v4 cluster, v4-b excluded by its node affinity
	add("v5e", "tpu-v5-lite-podslice", "2x4", 1, 0, 4)  // the v5e cluster: single-host slices
	add("v6e-8x8", "tpu-v6e-slice", "8x8", 2, 0, 0)     // burst: 2 slices of 16 hosts
	add("v4-side", "tpu-v4-podslice", "2x2x2", 2, 0, 0) // ns-delete's RayClusters
	return append(pools, localcluster.CPUPool(2))
}

// clusterOperations are the operations only the local cluster has, dealt with the others.
var clusterOperations = []operation{
	{"node-fail", 8, (*runner).failRandomNode},
	{"pod-fail", 6, (*runner).failRandomPod},
	{"gc-delete", 4, (*runner).deleteForCollection},
	{"ns-delete", 3, (*runner).deleteSideNamespace},
	{"late-host", 3, (*runner).lateHost},
	{"node-replace", 4, (*runner).replaceRandomNode},
	{"tpu-job", 5, (*runner).runTPUJob}, // capacity_test.go: a Pod of no slice on TPU Nodes
}

// clusterStats is what the cluster operations did and saw.
type clusterStats struct {
	// failed are the Nodes kwok reports NotReady now, by name.
	failed map[string]*failedNode
	// collecting are the deleted RayCluster generations whose Pods and slices must go, with when
	// they were deleted.
	collecting map[types.UID]collecting
	// lateHosts counts the late-host operations.
	lateHosts int
	// sides are the namespaces ns-delete created.
	sides []*sideNamespace
	// finished are the run's Pods seen Failed or Succeeded, by UID.
	finished map[types.UID]*finishedPod
	// labelTouched are the slices a label edit named (editLabels): their Pods' labels no longer
	// say what the scheduler placed them by.
	labelTouched map[string]bool
	// chosen are the ChosenDomain slices seen with live Pods bound (checkChosenDomains).
	chosen map[types.UID]bool
	// bypassedElsewhere are the Pods created past the webhook seen bound outside their
	// ChosenDomain slice's domain (checkChosenDomains leaves them out of its check).
	bypassedElsewhere map[types.UID]bool
	// capacity is what the stand-in autoscaler, the TPU jobs and the capacity checks did and saw
	// (capacity_test.go).
	capacity capacityStats

	nodeFails, nodeRecoveries, nodeReplaces, podFails, gcDeletes, nsDeletes int
	// degradedChecks counts the slices checked Degraded on a failed Node; onePool and split the
	// slices found in one domain, and in several, at the end (measureOnePool).
	degradedChecks, onePool, split int
	maxGC, maxNSDelete, maxRelease time.Duration
}

type failedNode struct {
	at        time.Time
	recoverAt int
	// notReadyAt is when the run first saw the Node NotReady; checked once its slices were.
	notReadyAt time.Time
	checked    bool
}

type finishedPod struct {
	name, phase string
	at          time.Time
	reported    bool
}

type collecting struct {
	name string
	at   time.Time
}

type sideNamespace struct {
	name      string
	deletedAt time.Time
	gone      bool
}

func newClusterStats() clusterStats {
	return clusterStats{failed: map[string]*failedNode{}, collecting: map[types.UID]collecting{}, labelTouched: map[string]bool{},
		finished: map[types.UID]*finishedPod{}, chosen: map[types.UID]bool{},
		bypassedElsewhere: map[types.UID]bool{}, capacity: newCapacityStats()}
}

// clusterNodes groups the local cluster's TPU Nodes by pool, for the health operations.
func clusterNodes() *healthNodes {
	byPool := map[string][]string{}
	for _, n := range localCluster.Nodes {
		if _, tpu := n.Labels[constants.AcceleratorNodeSelectorKey]; tpu {
			pool := n.Labels[constants.NodePoolTopologyKey]
			byPool[pool] = append(byPool[pool], n.Name)
		}
	}
	h := &healthNodes{}
	for _, pool := range slices.Sorted(maps.Keys(byPool)) {
		h.pools = append(h.pools, byPool[pool])
	}
	return h
}

// --- node failures ---

// failRandomNode fails a TPU Node through kwok: two times in three one that hosts a live worker Pod
// of the run, and half the time while the burst cluster's missing Pods are being admitted. It
// recovers 3 to 14 steps later, once checkNodeFailures checked its slices (tendNodes).
func (r *runner) failRandomNode() {
	var candidates []string
	if r.rng.IntN(3) > 0 {
		for _, p := range r.workerPods(func(p *corev1.Pod) bool { return p.Spec.NodeName != "" }) {
			candidates = append(candidates, p.Spec.NodeName)
		}
	}
	if len(candidates) == 0 {
		for _, pool := range r.nodes.pools {
			candidates = append(candidates, pool...)
		}
	}
	slices.Sort(candidates)
	name := candidates[r.rng.IntN(len(candidates))]
	if r.rng.IntN(2) == 0 {
		r.makeRoom(burstCluster, 1+r.rng.IntN(8))
		var wg sync.WaitGroup
		wg.Go(func() { r.createMissing(burstCluster, nil) })
		time.Sleep(time.Duration(r.rng.IntN(300)) * time.Millisecond)
		r.failNode(name)
		wg.Wait()
		r.check(false)
		return
	}
	r.failNode(name)
}

// failNode makes kwok report the Node NotReady until tendNodes recovers it.
func (r *runner) failNode(name string) {
	if _, ok := r.cl.failed[name]; ok {
		return
	}
	if err := localcluster.FailNode(ctx, k8sClient, name, true); err != nil {
		r.errs = append(r.errs, fmt.Errorf("failing Node %s: %w", name, err))
		return
	}
	r.cl.nodeFails++
	r.cl.failed[name] = &failedNode{at: time.Now(), recoverAt: r.ops + 3 + r.rng.IntN(12)}
	GinkgoWriter.Printf("node-fail: Node %s fails until op %d\n", name, r.cl.failed[name].recoverAt)
}

// recoverNode makes kwok report a failed Node Ready again.
func (r *runner) recoverNode(name string) {
	if _, ok := r.cl.failed[name]; !ok {
		return
	}
	if err := localcluster.FailNode(ctx, k8sClient, name, false); err != nil {
		r.errs = append(r.errs, fmt.Errorf("recovering Node %s: %w", name, err))
		return
	}
	delete(r.cl.failed, name)
	r.cl.nodeRecoveries++
}

// tendNodes recovers the failed Nodes whose time has come, once their slices were checked
// (checkNodeFailures); all of them when all is true.
func (r *runner) tendNodes(all bool) {
	for _, name := range slices.Sorted(maps.Keys(r.cl.failed)) {
		if f := r.cl.failed[name]; all || (r.ops >= f.recoverAt && f.checked) || time.Since(f.at) > maxNodeFailure {
			r.recoverNode(name)
		}
	}
}

// checkNodeFailures checks, once per failure, that degradedBound after kwok reported a failed Node
// NotReady every slice holding a claim bound to a live Pod on that Node says Degraded (docs/spec.md
// §11, I8 while the failure lasts). Slices are read before Pods: a Pod seen on the Node was there
// when its claim was read.
func (r *runner) checkNodeFailures() {
	for _, name := range slices.Sorted(maps.Keys(r.cl.failed)) {
		f := r.cl.failed[name]
		if f.checked {
			continue
		}
		if f.notReadyAt.IsZero() {
			var n corev1.Node
			if k8sClient.Get(ctx, client.ObjectKey{Name: name}, &n) == nil && !localcluster.Ready(&n) {
				f.notReadyAt = time.Now()
			}
			continue
		}
		if time.Since(f.notReadyAt) < degradedBound {
			continue
		}
		f.checked = true
		list, err := r.listSlices()
		if err != nil {
			continue
		}
		var pods corev1.PodList
		if err := k8sClient.List(ctx, &pods, client.InNamespace(r.ns)); err != nil {
			continue
		}
		onNode := map[types.UID]*corev1.Pod{}
		for i := range pods.Items {
			if p := &pods.Items[i]; p.Spec.NodeName == name && lifecycle.PodLive(p) {
				onNode[p.UID] = p
			}
		}
		for i := range list.Items {
			s := &list.Items[i]
			for _, c := range s.Status.Claims {
				p, ok := onNode[c.PodUID]
				if !ok {
					continue
				}
				r.cl.degradedChecks++
				// The reason is the first of §11's list that applies: a NotReady node comes before
				// any taint, cordon or Pod that stopped being Ready.
				if got := apimeta.FindStatusCondition(s.Status.Conditions, tpuv1alpha1.ConditionDegraded); got == nil || got.Status != metav1.ConditionTrue ||
					slices.Index(degradedReasons, got.Reason) < 0 || slices.Index(degradedReasons, got.Reason) > slices.Index(degradedReasons, tpuv1alpha1.ReasonNodeNotReady) {
					r.violationf("§11: Node %s has been NotReady for %v, but slice %s, whose worker ID %d runs on it (Pod %s), is not Degraded for it: %+v",
						name, time.Since(f.notReadyAt).Round(time.Second), s.Name, c.WorkerID, p.Name, got)
				}
				break
			}
		}
	}
}

// --- a slice whose last Pod comes late ---

// lateHost gives the burst cluster a fresh generation and, once the garbage collector took the
// old one's Pods, creates all of its Pods but one, waits lateHostWait (past the bind settle, so
// the reconciler places what it has), then the last: the slice it misses must stay gated until
// then (docs/spec.md §12; the release check of release.go judges every release meanwhile).
func (r *runner) lateHost() {
	i := burstCluster
	was := r.clusters[i].UID
	if r.recreate(i); r.clusters[i].UID == was {
		return
	}
	r.waitForGeneration(r.clusters[i])
	for deadline := time.Now().Add(gcBound); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if r.generationGone(was) {
			break
		}
	}
	rc := r.clusters[i]
	if n := r.missing(i); n > 1 {
		createAll(rc, n-1, nil)
		time.Sleep(lateHostWait)
		r.check(false)
		createAll(rc, 1, nil)
		r.cl.lateHosts++
	}
	r.check(false)
}

// lateHostWait is how long lateHost holds a slice's last Pod back.
const lateHostWait = 3 * time.Second

// generationGone reports whether no live Pod of the RayCluster generation uid is left.
func (r *runner) generationGone(uid types.UID) bool {
	var pods corev1.PodList
	if err := k8sClient.List(ctx, &pods, client.InNamespace(r.ns)); err != nil {
		return false
	}
	for j := range pods.Items {
		p := &pods.Items[j]
		if ref := metav1.GetControllerOfNoCopy(p); ref != nil && ref.UID == uid && lifecycle.PodLive(p) {
			return false
		}
	}
	return true
}

// --- Pod failures ---

// failRandomPod makes kwok fail the containers of a random running worker Pod: half the time one of
// the clusters KubeRay leaves alone, whose failed Pods nobody deletes (their IDs must be freed all
// the same), else of any cluster (KubeRay deletes and replaces it).
func (r *runner) failRandomPod() {
	running := func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }
	pods := r.workerPods(running)
	if r.rng.IntN(2) == 0 {
		pods = slices.DeleteFunc(pods, func(p corev1.Pod) bool { return r.clusterOf(&p) < kubeRayClusters })
	}
	if len(pods) == 0 {
		return
	}
	p := pods[r.rng.IntN(len(pods))]
	if err := localcluster.FailPod(ctx, k8sClient, p.Namespace, p.Name); client.IgnoreNotFound(err) != nil {
		r.errs = append(r.errs, fmt.Errorf("failing Pod %s: %w", p.Name, err))
		return
	}
	r.cl.podFails++
	GinkgoWriter.Printf("pod-fail: Pod %s of %s\n", p.Name, p.Labels[tpuv1alpha1.SliceLabel])
	r.expectReleased(&p)
}

// expectReleased waits until kwok reports the failed Pod Failed, then until no claim is bound to it
// (or it is gone), for at most releaseBound, and records how long the release took. Nothing else
// runs meanwhile: no replacement's admission takes the ID over.
func (r *runner) expectReleased(p *corev1.Pod) {
	deadline := time.Now().Add(5 * time.Second)
	var failedAt time.Time
	for {
		got := &corev1.Pod{}
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(p), got)
		if apierrors.IsNotFound(err) || (err == nil && (got.UID != p.UID || got.DeletionTimestamp != nil)) {
			return // deleted: the release on deletion is checked everywhere else
		}
		if err == nil && got.Status.Phase == corev1.PodFailed && failedAt.IsZero() {
			failedAt, deadline = time.Now(), time.Now().Add(releaseBound)
		}
		if !failedAt.IsZero() {
			held := ""
			if list, err := r.listSlices(); err == nil {
				for _, s := range list.Items {
					for _, c := range s.Status.Claims {
						if c.PodUID == p.UID {
							held = fmt.Sprintf("worker ID %d of slice %s", c.WorkerID, s.Name)
						}
					}
				}
			}
			if held == "" {
				r.cl.maxRelease = max(r.cl.maxRelease, time.Since(failedAt))
				return
			}
			if time.Now().After(deadline) {
				r.violationf("§8: Pod %s has been Failed for %v, but %s is still bound to it", p.Name, releaseBound, held)
				return
			}
		} else if time.Now().After(deadline) {
			GinkgoWriter.Printf("pod-fail: Pod %s is not Failed 5 s later (phase %s)\n", p.Name, got.Status.Phase)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkFinishedReleased checks that no claim stays bound to a Pod Failed or Succeeded for longer
// than releaseBound (docs/spec.md §8). On the local cluster kwok fails Pods (pod-fail): KubeRay
// deletes and replaces its own, the Pods of the clusters it leaves alone stay Failed.
func (r *runner) checkFinishedReleased() {
	var pods corev1.PodList
	if err := k8sClient.List(ctx, &pods, client.InNamespace(r.ns)); err != nil {
		return
	}
	present := map[types.UID]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		present[p.UID] = true
		if _, ok := r.cl.finished[p.UID]; !ok && (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded) {
			r.cl.finished[p.UID] = &finishedPod{name: p.Name, phase: string(p.Status.Phase), at: time.Now()}
		}
	}
	due := false
	for uid, f := range r.cl.finished {
		if !present[uid] {
			delete(r.cl.finished, uid)
		}
		due = due || (!f.reported && time.Since(f.at) > releaseBound)
	}
	if !due {
		return
	}
	list, err := r.listSlices()
	if err != nil {
		return
	}
	for i := range list.Items {
		for _, c := range list.Items[i].Status.Claims {
			if f, ok := r.cl.finished[c.PodUID]; ok && !f.reported && time.Since(f.at) > releaseBound {
				r.violationf("§8: Pod %s has been %s for over %v, but worker ID %d of slice %s is still bound to it",
					f.name, f.phase, releaseBound, c.WorkerID, list.Items[i].Name)
				f.reported = true
			}
		}
	}
}

// --- garbage collection ---

// deleteForCollection deletes a RayCluster, leaves its Pods and slices to the garbage collector
// (and the operator), waits until all are gone, for at most gcBound, then creates it again.
func (r *runner) deleteForCollection() {
	i := r.rng.IntN(len(r.clusters))
	old := r.clusters[i].DeepCopy()
	start := time.Now()
	if !r.deleteGeneration(i) {
		return
	}
	r.cl.gcDeletes++
	for {
		left := r.leftOf(old.UID)
		if left == "" {
			r.cl.maxGC = max(r.cl.maxGC, time.Since(start))
			delete(r.cl.collecting, old.UID)
			break
		}
		if time.Since(start) > gcBound {
			r.violationf("§8: %v after RayCluster %s (UID %s) was deleted, %s", gcBound, old.Name, old.UID, left)
			delete(r.cl.collecting, old.UID)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.createGeneration(i, old)
}

// leftOf names what a deleted RayCluster generation still has in the run's namespace: Pods it
// owns, slices of its UID; empty when nothing.
func (r *runner) leftOf(uid types.UID) string {
	var left []string
	var pods corev1.PodList
	if err := k8sClient.List(ctx, &pods, client.InNamespace(r.ns)); err != nil {
		return "listing Pods: " + err.Error()
	}
	for i := range pods.Items {
		if ref := metav1.GetControllerOfNoCopy(&pods.Items[i]); ref != nil && ref.UID == uid {
			left = append(left, "Pod "+pods.Items[i].Name)
		}
	}
	stored, err := listStored(ctx, k8sClient, r.ns)
	if err != nil {
		return "listing slices: " + err.Error()
	}
	for _, s := range stored {
		if s.clusterUID == uid {
			left = append(left, fmt.Sprintf("slice %s (%d claims)", s.name, len(s.claims)))
		}
	}
	if len(left) == 0 {
		return ""
	}
	return "it still has " + strings.Join(left, ", ")
}

// checkCollected checks that every RayCluster generation deleted more than gcBound ago left no
// Pod and no slice (docs/spec.md §8: slices of a deleted RayCluster are removed; its Pods go with
// the garbage collector, or the runner standing in for it).
func (r *runner) checkCollected() {
	for _, uid := range slices.Sorted(maps.Keys(r.cl.collecting)) {
		c := r.cl.collecting[uid]
		if time.Since(c.at) < gcBound {
			continue
		}
		if left := r.leftOf(uid); left != "" {
			r.violationf("§8: %v after RayCluster %s (UID %s) was deleted, %s", time.Since(c.at).Round(time.Second), c.name, uid, left)
		}
		delete(r.cl.collecting, uid)
	}
}

// waitCollected waits, for at most gcBound, until every deleted RayCluster generation left nothing,
// then checks.
func (r *runner) waitCollected() {
	deadline := time.Now().Add(gcBound)
	for time.Now().Before(deadline) && slices.ContainsFunc(slices.Collect(maps.Keys(r.cl.collecting)), func(uid types.UID) bool { return r.leftOf(uid) != "" }) {
		time.Sleep(500 * time.Millisecond)
	}
	for uid, c := range r.cl.collecting {
		r.cl.collecting[uid] = collecting{name: c.name, at: c.at.Add(-gcBound)}
	}
	r.checkCollected()
}

// restoreNodes undoes what the run did to the local cluster's Nodes: failures, taints, cordons.
func (r *runner) restoreNodes() {
	r.tendNodes(true)
	r.clearNodeProblems()
}

// clearNodeProblems removes the termination taints and cordons the health operations left on the
// run's Nodes (flapNode).
func (r *runner) clearNodeProblems() {
	for _, pool := range r.nodes.pools {
		for _, name := range pool {
			err := framework.UpdateNode(ctx, k8sClient, name, func(n *corev1.Node) {
				n.Spec.Unschedulable = false
				n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == health.TaintImpendingNodeTermination })
			}, false)
			Expect(err).NotTo(HaveOccurred())
		}
	}
}

// --- namespace deletion ---

// deleteSideNamespace creates a namespace with a KubeRay RayCluster of one or two 2-host slices,
// waits from nothing (its Pods' claims in flight) to a few seconds (Pods running), and deletes the
// namespace, leaving it to the namespace controller.
func (r *runner) deleteSideNamespace() {
	ns := framework.CreateNamespace(ctx, k8sClient, "chaos-side")
	rc := testutil.MakeRayCluster("side", ns).TPUGroup(group, "tpu-v4-podslice", "2x2x2", 4, 2, int32(1+r.rng.IntN(2))).Obj()
	if err := k8sClient.Create(ctx, rc); err != nil {
		r.errs = append(r.errs, fmt.Errorf("creating RayCluster %s/%s: %w", ns, rc.Name, err))
	}
	time.Sleep(time.Duration(r.rng.IntN(4000)) * time.Millisecond)
	audit.namespaceDeleted(ns)
	if err := k8sClient.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		r.errs = append(r.errs, fmt.Errorf("deleting namespace %s: %w", ns, err))
		return
	}
	r.cl.nsDeletes++
	r.cl.sides = append(r.cl.sides, &sideNamespace{name: ns, deletedAt: time.Now()})
}

// checkSideNamespaces checks I1 in the namespaces being deleted and that each is gone within
// nsBound (wait: until then, or until all are gone).
func (r *runner) checkSideNamespaces(wait bool) {
	for _, s := range r.cl.sides {
		for !s.gone {
			var ns corev1.Namespace
			err := k8sClient.Get(ctx, client.ObjectKey{Name: s.name}, &ns)
			if apierrors.IsNotFound(err) {
				s.gone = true
				r.cl.maxNSDelete = max(r.cl.maxNSDelete, time.Since(s.deletedAt))
				break
			}
			if _, err := framework.CheckAdmittedPods(ctx, k8sClient, s.name, nil); framework.ViolatesI1(err) {
				r.violationf("in namespace %s, being deleted: %w", s.name, err)
			}
			if time.Since(s.deletedAt) > nsBound {
				r.violationf("namespace %s is still there %v after its deletion: %s", s.name, nsBound, r.namespaceLeft(s.name))
				s.gone = true
				break
			}
			if !wait {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// namespaceLeft names the Pods, slices and RayClusters a namespace still holds.
func (r *runner) namespaceLeft(ns string) string {
	var pods corev1.PodList
	_ = k8sClient.List(ctx, &pods, client.InNamespace(ns))
	stored, _ := listStored(ctx, k8sClient, ns)
	var rcs rayv1.RayClusterList
	_ = k8sClient.List(ctx, &rcs, client.InNamespace(ns))
	out := make([]string, 0, len(pods.Items)+len(stored)+len(rcs.Items))
	for _, p := range pods.Items {
		out = append(out, fmt.Sprintf("Pod %s (phase %s, node %q, deleting %t, finalizers %v)", p.Name, p.Status.Phase, p.Spec.NodeName, p.DeletionTimestamp != nil, p.Finalizers))
	}
	for _, s := range stored {
		out = append(out, "slice "+s.name)
	}
	for _, rc := range rcs.Items {
		out = append(out, fmt.Sprintf("RayCluster %s (finalizers %v)", rc.Name, rc.Finalizers))
	}
	return strings.Join(out, "; ")
}

// deleteRunNamespace deletes the run's namespace with the operator running, and checks that the
// namespace controller finishes within nsBound.
func (r *runner) deleteRunNamespace() {
	audit.namespaceDeleted(r.ns)
	start := time.Now()
	if err := k8sClient.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}); err != nil {
		r.errs = append(r.errs, fmt.Errorf("deleting the run's namespace %s: %w", r.ns, err))
		return
	}
	r.cl.sides = append(r.cl.sides, &sideNamespace{name: r.ns, deletedAt: start})
	r.checkSideNamespaces(true)
	for _, v := range audit.takeViolations() {
		r.violationf("%s", v)
	}
}

// --- checks at the end ---

// measureOnePool measures what docs/spec.md §4's affinity gives under the scheduler: whether the
// Running hosts of each slice whose Pods carry the operator's required pod affinity are all in one
// domain of the slice's affinity key. Slices a label edit named are left out: the scheduler placed
// their Pods by labels the run rewrote. A slice found in several domains is counted (split_slices)
// and printed with each host's Pod, creation, node and terms (CHAOS-split), not failed: runs under
// this churn found a 16-host slice with one host in another pool, every Pod carrying the right
// terms, and why the scheduler placed it there is not established yet (docs/development.md).
func (r *runner) measureOnePool() {
	list, err := r.listSlices()
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("one domain: %w", err))
		return
	}
	var pods corev1.PodList
	if err := k8sClient.List(ctx, &pods, client.InNamespace(r.ns)); err != nil {
		r.errs = append(r.errs, fmt.Errorf("one domain: %w", err))
		return
	}
	byUID := map[types.UID]*corev1.Pod{}
	for i := range pods.Items {
		byUID[pods.Items[i].UID] = &pods.Items[i]
	}
	nodes, err := liveNodes()
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("one domain: %w", err))
		return
	}
	for i := range list.Items {
		s := &list.Items[i]
		key := s.Spec.AffinityTopologyKey
		if key == "" || r.cl.labelTouched[s.Name] {
			continue
		}
		domains := map[string][]int32{}
		var hosts []string
		for _, c := range s.Status.Claims {
			p := byUID[c.PodUID]
			if p == nil || !lifecycle.PodLive(p) || p.Status.Phase != corev1.PodRunning || p.Spec.NodeName == "" || !carriesAffinity(p, s.Name) {
				continue
			}
			n, ok := nodes[p.Spec.NodeName]
			if !ok {
				continue
			}
			domains[n.Labels[key]] = append(domains[n.Labels[key]], c.WorkerID)
			hosts = append(hosts, fmt.Sprintf("%d: Pod %s created %s on %s, affinity %s", c.WorkerID, p.Name,
				p.CreationTimestamp.Format(time.RFC3339), p.Spec.NodeName, affinitySummary(p)))
		}
		switch {
		case len(domains) > 1:
			r.cl.split++
			fmt.Fprintf(os.Stdout, "CHAOS-split slice=%s key=%s domains=%v\n  %s\n", s.Name, key, domains, strings.Join(hosts, "\n  "))
		case len(domains) == 1:
			r.cl.onePool++
		}
	}
}

// affinitySummary prints a Pod's required pod affinity and anti-affinity terms' selectors.
func affinitySummary(p *corev1.Pod) string {
	var out []string
	if a := p.Spec.Affinity; a != nil && a.PodAffinity != nil {
		for _, t := range a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			out = append(out, "with "+metav1.FormatLabelSelector(t.LabelSelector))
		}
	}
	if a := p.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		for _, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			out = append(out, "not with "+metav1.FormatLabelSelector(t.LabelSelector))
		}
	}
	return strings.Join(out, "; ")
}

// carriesAffinity reports whether a Pod carries a required pod affinity term to the Pods of slice.
func carriesAffinity(p *corev1.Pod, slice string) bool {
	if p.Spec.Affinity == nil || p.Spec.Affinity.PodAffinity == nil {
		return false
	}
	for _, t := range p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set{tpuv1alpha1.SliceLabel: slice}) {
			return true
		}
	}
	return false
}

// degradedReasons are the Degraded reasons in docs/spec.md §11's order: the condition's reason is
// the first that applies to some host.
var degradedReasons = []string{
	tpuv1alpha1.ReasonNodeMissing, tpuv1alpha1.ReasonNodeDeleting, tpuv1alpha1.ReasonNodeNotReady,
	tpuv1alpha1.ReasonNodeTainted, tpuv1alpha1.ReasonNodeUnschedulable,
}

// Node taints after which a host is degraded, as docs/spec.md §11 lists them (written out here, not
// taken from the health package: healthAgrees is an oracle of its own).
var (
	notReadyTaints      = []string{"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
	terminationTaints   = []string{"cloud.google.com/impending-node-termination", "ToBeDeletedByClusterAutoscaler", "node.cloudprovider.kubernetes.io/shutdown", "node.kubernetes.io/out-of-service"}
	unschedulableTaints = []string{"node.kubernetes.io/unschedulable"}
)

// healthAgrees checks the run's slices against docs/spec.md §11, read from the live Pods and Nodes
// without the operator's health package: Scheduled is True exactly when every worker ID is held by
// a Pod bound to a Node; Ready is True exactly when every ID is held by a Ready Pod on a Ready Node;
// a host on a missing, deleting, NotReady, tainted or cordoned Node makes the slice Degraded, with
// the first reason of §11's list that applies; and a slice whose hosts are all Ready on Nodes
// without a problem is not Degraded.
func (r *runner) healthAgrees() error {
	list, err := r.listSlices()
	if err != nil {
		return err
	}
	var pods corev1.PodList
	if err := k8sClient.List(ctx, &pods, client.InNamespace(r.ns)); err != nil {
		return err
	}
	var nodeList corev1.NodeList
	if err := k8sClient.List(ctx, &nodeList); err != nil {
		return err
	}
	live := map[types.UID]*corev1.Pod{}
	for i := range pods.Items {
		if p := &pods.Items[i]; lifecycle.PodLive(p) {
			live[p.UID] = p
		}
	}
	nodes := map[string]*corev1.Node{}
	for i := range nodeList.Items {
		nodes[nodeList.Items[i].Name] = &nodeList.Items[i]
	}
	var errs []error
	for i := range list.Items {
		s := &list.Items[i]
		held := map[int32]*corev1.Pod{}
		for _, c := range s.Status.Claims {
			if p := live[c.PodUID]; p != nil {
				held[c.WorkerID] = p
			}
		}
		scheduled, ready := true, true
		first := len(degradedReasons)
		var problems []string
		for id := range s.Spec.Hosts {
			p := held[id]
			if p == nil || p.Spec.NodeName == "" {
				scheduled, ready = false, false
				continue
			}
			n := nodes[p.Spec.NodeName]
			if reason := nodeProblem(n); reason != "" {
				problems = append(problems, fmt.Sprintf("ID %d on %s: %s", id, p.Spec.NodeName, reason))
				first = min(first, slices.Index(degradedReasons, reason))
			}
			ready = ready && podReady(p) && n != nil && nodeReady(n)
		}
		want := map[string]bool{tpuv1alpha1.ConditionScheduled: scheduled, tpuv1alpha1.ConditionReady: ready}
		if len(problems) > 0 {
			want[tpuv1alpha1.ConditionDegraded] = true
		} else if ready {
			want[tpuv1alpha1.ConditionDegraded] = false
		}
		for _, t := range slices.Sorted(maps.Keys(want)) {
			if got := apimeta.IsStatusConditionTrue(s.Status.Conditions, t); got != want[t] {
				errs = append(errs, fmt.Errorf("§11: slice %s has %s %t, but its Pods and Nodes say %t (problems: %v): %+v",
					s.Name, t, got, want[t], problems, apimeta.FindStatusCondition(s.Status.Conditions, t)))
			}
		}
		if got := apimeta.FindStatusCondition(s.Status.Conditions, tpuv1alpha1.ConditionDegraded); len(problems) > 0 && got != nil &&
			got.Reason != degradedReasons[first] {
			errs = append(errs, fmt.Errorf("§11: slice %s is Degraded for %s, but the first reason that applies is %s (problems: %v)",
				s.Name, got.Reason, degradedReasons[first], problems))
		}
	}
	return errors.Join(errs...)
}

// nodeProblem returns the Degraded reason a Node gives its hosts (docs/spec.md §11), or "".
func nodeProblem(n *corev1.Node) string {
	has := func(keys []string) bool {
		return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return slices.Contains(keys, t.Key) })
	}
	switch {
	case n == nil:
		return tpuv1alpha1.ReasonNodeMissing
	case n.DeletionTimestamp != nil:
		return tpuv1alpha1.ReasonNodeDeleting
	case !nodeReady(n) || has(notReadyTaints):
		return tpuv1alpha1.ReasonNodeNotReady
	case has(terminationTaints):
		return tpuv1alpha1.ReasonNodeTainted
	case n.Spec.Unschedulable || has(unschedulableTaints):
		return tpuv1alpha1.ReasonNodeUnschedulable
	}
	return ""
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// reportCluster prints what the cluster operations did:
//
//	CHAOS-cluster gate=<on|off> node_fails=<n> node_recoveries=<n> node_replaces=<n> pod_fails=<n> max_release_s=<x> gc_deletes=<n> max_gc_s=<x> ns_deletes=<n> max_ns_delete_s=<x> degraded_checks=<n> one_pool_slices=<n> split_slices=<n> chosen_domain_slices=<n> bypassed_elsewhere=<n> gate_releases=<n> gate_releases_timed_out=<n> gate_pins=<n> strands=<n> late_hosts=<n>
//
// gate_releases counts the operator's releases of gated Pods judged for "no partial binding"
// (release.go), gate_releases_timed_out those allowed because the slice's assembly timeout had
// passed, gate_pins the releases whose pin on a Node was judged (judgePin); a ChosenDomain run that
// judged no release or no pin fails; strands counts the operator's deletions of stranded Pods
// judged true (audit.go, judgeStrand). late_hosts counts the slices created with
// their last Pod held back (lateHost). It returns gate_releases.
func (r *runner) reportCluster(gateName string) (releases, pins int) {
	c := &r.cl
	released, timedOut, pinned := audit.releaseCounts()
	released, timedOut, pinned = released-r.releasesBefore, timedOut-r.timedOutBefore, pinned-r.pinsBefore
	fmt.Fprintf(os.Stdout, "CHAOS-cluster gate=%s node_fails=%d node_recoveries=%d node_replaces=%d pod_fails=%d max_release_s=%.2f gc_deletes=%d max_gc_s=%.2f ns_deletes=%d max_ns_delete_s=%.2f degraded_checks=%d one_pool_slices=%d split_slices=%d chosen_domain_slices=%d bypassed_elsewhere=%d gate_releases=%d gate_releases_timed_out=%d gate_pins=%d strands=%d late_hosts=%d\n",
		gateName, c.nodeFails, c.nodeRecoveries, c.nodeReplaces, c.podFails, c.maxRelease.Seconds(), c.gcDeletes, c.maxGC.Seconds(), c.nsDeletes, c.maxNSDelete.Seconds(), c.degradedChecks, c.onePool, c.split, len(c.chosen),
		len(c.bypassedElsewhere), released, timedOut, pinned, audit.strandCount()-r.strandsBefore, c.lateHosts)
	return released, pinned
}

// --- node replacements (issue 24, "Stranded Pods") ---

// replaceRandomNode deletes a TPU Node and creates it again 0.2 to 2 s later (one time in three 6 to
// 9 s later, and then no Pod may still be pinned to it: strandedBound), as GKE's node repair
// or an upgrade replaces a VM: a Pod released and pinned to it that has not bound yet is stranded
// (docs/spec.md §12) and must be replaced. It picks a Node an unbound released Pod is pinned to
// when there is one, else, half the time, a Node of the burst cluster's pools while that cluster's
// missing Pods are being admitted (its releases are under way), else any TPU Node not failed.
func (r *runner) replaceRandomNode() {
	var candidates []string
	for _, p := range r.workerPods(func(p *corev1.Pod) bool {
		return p.Spec.NodeName == "" && !tpuenv.HasGate(p) && gate.PinnedNode(p) != ""
	}) {
		candidates = append(candidates, gate.PinnedNode(&p))
	}
	burst := len(candidates) == 0 && r.rng.IntN(2) == 0
	for _, pool := range r.nodes.pools {
		for _, n := range pool {
			if len(candidates) == 0 || burst {
				if _, failed := r.cl.failed[n]; !failed && (!burst || strings.Contains(n, "v6e-8x8")) {
					candidates = append(candidates, n)
				}
			}
		}
	}
	candidates = slices.Compact(slices.Sorted(slices.Values(candidates)))
	if len(candidates) == 0 {
		return
	}
	name := candidates[r.rng.IntN(len(candidates))]
	if !burst {
		r.replaceNode(name)
		return
	}
	r.makeRoom(burstCluster, 1+r.rng.IntN(8))
	var wg sync.WaitGroup
	wg.Go(func() { r.createMissing(burstCluster, nil) })
	time.Sleep(time.Duration(r.rng.IntN(500)) * time.Millisecond)
	r.replaceNode(name)
	wg.Wait()
	r.check(false)
}

// replaceNode deletes Node name and creates it again, as the local cluster made it, later (kwok
// reports it Ready again, kube-controller-manager lifts its not-ready taint).
func (r *runner) replaceNode(name string) {
	var template *corev1.Node
	for _, n := range localCluster.Nodes {
		if n.Name == name {
			template = n
		}
	}
	if template == nil {
		return
	}
	audit.nodeDeleted(name)
	if err := k8sClient.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); client.IgnoreNotFound(err) != nil {
		r.errs = append(r.errs, fmt.Errorf("deleting Node %s: %w", name, err))
		return
	}
	deleted := time.Now()
	r.cl.nodeReplaces++
	// One time in three the Node stays away long enough that its stranded Pods must have been
	// replaced before it is back (strandedBound); otherwise a pinned Pod may simply wait for it.
	long := r.rng.IntN(3) == 0
	away := time.Duration(200+r.rng.IntN(1800)) * time.Millisecond
	if long {
		away = strandedBound + time.Duration(r.rng.IntN(3000))*time.Millisecond
	}
	GinkgoWriter.Printf("node-replace: Node %s deleted for %v\n", name, away)
	time.Sleep(away)
	if long {
		for _, p := range r.workerPods(func(p *corev1.Pod) bool {
			return p.Spec.NodeName == "" && !tpuenv.HasGate(p) && gate.PinnedNode(p) == name
		}) {
			r.violationf("§12 (stranded Pods): Pod %s is still pinned to Node %s, deleted %v ago", p.Name, name, time.Since(deleted).Round(time.Millisecond))
		}
	}
	node := template.DeepCopy()
	node.ResourceVersion, node.UID, node.CreationTimestamp = "", "", metav1.Time{}
	// As a kubelet registers its Node: with its capacity and allocatable (a Node created without
	// them would have no TPU chips for good, and a 16-host slice on its pool no domain), and no
	// conditions (kwok reports them).
	node.Status = corev1.NodeStatus{Capacity: template.Status.Capacity, Allocatable: template.Status.Allocatable}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := k8sClient.Create(ctx, node.DeepCopy())
		return err == nil, client.IgnoreAlreadyExists(err)
	}); err != nil {
		r.errs = append(r.errs, fmt.Errorf("creating Node %s again: %w", name, err))
	}
}

// checkPinsBind checks, once the run has settled and every Node is back, that every live released
// worker Pod pinned to a Node binds (to it) within pinBindBound: a pin on a Node another Pod of
// its slice took, or on a Node that went, is never left behind (docs/spec.md §12, "Pinning",
// "Stranded Pods").
func (r *runner) checkPinsBind() {
	var stuck []string
	deadline := time.Now().Add(pinBindBound)
	for {
		stuck = stuck[:0]
		for _, p := range r.workerPods(func(p *corev1.Pod) bool {
			return p.Spec.NodeName == "" && !tpuenv.HasGate(p) && gate.PinnedNode(p) != ""
		}) {
			stuck = append(stuck, fmt.Sprintf("%s (pinned to %s, created %s ago; %s)", p.Name, gate.PinnedNode(&p),
				time.Since(p.CreationTimestamp.Time).Round(time.Second), r.whyUnbound(&p)))
		}
		if len(stuck) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if len(stuck) > 0 {
		r.violationf("§12 (pinning): released Pods pinned to a Node still unbound %v after the run settled: %v", pinBindBound, stuck)
	}
}

// whyUnbound describes, for a violation, why pinned Pod p may not have bound: the scheduler's
// PodScheduled message, the state of the Node it is pinned to, and the Pods bound there.
func (r *runner) whyUnbound(p *corev1.Pod) string {
	var b strings.Builder
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			fmt.Fprintf(&b, "PodScheduled=%s %s: %q", c.Status, c.Reason, c.Message)
		}
	}
	name := gate.PinnedNode(p)
	n := &corev1.Node{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
		fmt.Fprintf(&b, "; Node: %v", err)
		return b.String()
	}
	var taints []string
	for _, t := range n.Spec.Taints {
		taints = append(taints, t.Key+":"+string(t.Effect))
	}
	fmt.Fprintf(&b, "; Node created %s ago, deleting=%t, unschedulable=%t, taints=%v, allocatable TPU=%s",
		time.Since(n.CreationTimestamp.Time).Round(time.Second), n.DeletionTimestamp != nil, n.Spec.Unschedulable, taints,
		n.Status.Allocatable.Name(constants.TPUResourceName, resource.DecimalSI))
	var bound corev1.PodList
	if err := k8sClient.List(ctx, &bound, client.MatchingFields{"spec.nodeName": name}); err == nil {
		for i := range bound.Items {
			q := &bound.Items[i]
			fmt.Fprintf(&b, "; bound there: %s/%s (live=%t, chips=%d, labels=%v)", q.Namespace, q.Name, lifecycle.PodLive(q), gate.PodChips(q), q.Labels)
		}
	}
	return b.String()
}

// strandedBound is how long after a Node is deleted a released, unbound Pod pinned to it may
// remain: the Node's event reaches the reconciler a bind settle (1 s) later, and the strand is
// confirmed and deleted in that reconcile; the rest is room for a loaded machine.
const strandedBound = 6 * time.Second

// pinBindBound is how long after the run settled a released, pinned Pod may stay unbound: a
// stranded Pod is deleted a bind settle after its Node event, and KubeRay's replacement is
// released at once.
const pinBindBound = 30 * time.Second
