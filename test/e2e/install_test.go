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

package e2e

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// replacementBound is how soon after a deletion becomes visible its replacement must be admitted
// (docs/spec.md §8).
const replacementBound = 2 * time.Second

// installIntoRunningCluster checks docs/spec.md §3.4 and I7 on an install into a cluster where a
// TPU RayCluster already runs. Before the install, KubeRay creates the cluster's worker Pods and
// the reference webhook (a stand-in on the webhook endpoint, framework.Env.BypassWith) gives each
// its TPU identity, as it does in the clusters this operator replaces it in; the operator is not
// running at all. Then the operator's webhook replicas start and the group scales up at once: the
// first admission must adopt the running Pods before it gives out an ID. The reconciler starts only
// once KubeRay has the new Pods, as when it waits for its leader lease, so that adoption at
// admission is what is tested (the reconciler adopts too, within milliseconds, when it runs).
// Then an adopted Pod is deleted (KubeRay replaces it; with the gate on, the whole replica). I1 is
// checked on every Pod event from the install on, I2 and I3 once KubeRay is done.
//
// Why a stand-in rather than identity env in the template or Pods made by hand: KubeRay creates
// every Pod of a group from one template, so a template can give one identity to all of them, and
// Pods made by hand belong to a cluster KubeRay must ignore (managedBy), which then never scales
// or replaces anything. What really runs before the install is KubeRay's own Pods, mutated by the
// reference webhook; the stand-in does what it does: with KubeRay's multi-host indexing labels
// their replica and host index, else the n-th Pod of the group gets host n mod H of replica n / H.
func installIntoRunningCluster(ns string, gate bool) {
	By("uninstalling the operator and answering admissions as the reference webhook does")
	suite.BypassWith(referenceWebhook(ns))
	stopOperator()
	DeferCleanup(func() {
		suite.BypassWith(nil)
		if suite.Instances == nil {
			startOperator(true)
		}
	})
	rc := create(testutil.MakeRayCluster("running", ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 2).Obj())
	var running []corev1.Pod
	Eventually(func(g Gomega) {
		running = workerPods(rc, "tpu")
		g.Expect(running).To(HaveLen(8))
		spots := map[string]bool{}
		for _, p := range running {
			id, ok := identity.FromPod(&p)
			g.Expect(ok).To(BeTrue(), "Pod %s has its identity from the reference webhook", p.Name)
			spots[fmt.Sprintf("%s/%d", id.SliceName(), id.WorkerID)] = true
		}
		g.Expect(spots).To(HaveLen(8), "the reference webhook's IDs are unique")
	}, testutil.LongTimeout, testutil.Interval).Should(Succeed())
	Expect(framework.SliceCount(ctx, suite.Client, ns)).To(BeZero(), "nothing of the operator ran")

	By("installing the operator's webhook replicas, then scaling the group up 2 → 3 at once")
	before := adoptionCounts()
	watcher, err := suite.WatchI1(ctx, ns, nil)
	Expect(err).NotTo(HaveOccurred())
	defer watcher.Stop()
	suite.BypassWith(nil)
	startOperator(false)
	update(rc, func(rc *rayv1.RayCluster) { rc.Spec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](3) })
	Eventually(func() []corev1.Pod { return workerPods(rc, "tpu") }, testutil.LongTimeout, testutil.Interval).Should(HaveLen(12))
	_, err = framework.CheckAdmitted(ctx, suite.Client, ns)
	Expect(err).NotTo(HaveOccurred(), "the new replica's Pods duplicate no adopted ID")

	By("starting the reconciler too")
	stopOperator()
	startOperator(true)
	expectSettled(rc, map[string]int{"tpu": 12})
	expectHeld(ns, running)
	after := adoptionCounts()
	GinkgoWriter.Printf("install (gate %t): %.0f claims adopted at admission, %.0f by the reconciler\n",
		gate, after.admission-before.admission, after.reconciler-before.reconciler)
	Expect(after.admission-before.admission).To(BeNumerically("==", len(running)), "the first admission adopted every running Pod")

	By("deleting an adopted Pod: its replacement takes its ID, never another running Pod's")
	victim := running[0]
	Expect(suite.Client.Delete(ctx, &victim)).To(Succeed())
	Eventually(func() []types.UID {
		pods := workerPods(rc, "tpu")
		uids := make([]types.UID, 0, len(pods))
		for _, p := range pods {
			uids = append(uids, p.UID)
		}
		return uids
	}, testutil.LongTimeout, testutil.Interval).Should(And(HaveLen(12), Not(ContainElement(victim.UID))))
	expectSettled(rc, map[string]int{"tpu": 12})
	Expect(watcher.Violations()).To(BeEmpty(), "I1 on every Pod event after the install")
}

// referenceWebhook returns what the reference webhook does to the TPU worker Pods of namespace ns
// (docs/spec.md §4: TPU_WORKER_ID, TPU_NAME, TPU_WORKER_HOSTNAMES, hostname, subdomain and the
// replicaIndex label; none of this operator's labels or annotations). Other Pods pass unchanged.
func referenceWebhook(ns string) func(*corev1.Pod) {
	var mu sync.Mutex
	next := map[string]int32{}
	return func(p *corev1.Pod) {
		cluster, grp := p.Labels[rayutils.RayClusterLabelKey], p.Labels[rayutils.RayNodeGroupLabelKey]
		if p.Namespace != ns || p.Labels[rayutils.RayNodeTypeLabelKey] != string(rayv1.WorkerNode) || topology.ChipsPerPod(&p.Spec) == 0 {
			return
		}
		shape, err := topology.FromPod(p.Annotations, &p.Spec)
		if err != nil {
			return
		}
		var replica, host int32
		if r, h, ok := kubeRayIndexes(p); ok {
			replica, host = r, h
		} else {
			mu.Lock()
			n := next[cluster+"/"+grp]
			next[cluster+"/"+grp] = n + 1
			mu.Unlock()
			replica, host = n/shape.Hosts, n%shape.Hosts
		}
		subdomain := naming.HeadlessServiceName(cluster)
		w := (&testutil.PodWrapper{Pod: *p}).TPUIdentity(grp, replica, host).
			Env(0, constants.EnvWorkerHostnames, tpuenv.WorkerHostnames(grp, replica, shape.Hosts, subdomain)).
			Label(constants.ReplicaIndexLabel, naming.ReplicaIndexValue(grp, replica))
		*p = w.Pod
		p.Spec.Hostname, p.Spec.Subdomain = naming.Hostname(grp, replica, host), subdomain
	}
}

// kubeRayIndexes reads KubeRay's RayMultiHostIndexing labels.
func kubeRayIndexes(p *corev1.Pod) (replica, host int32, ok bool) {
	r, err1 := strconv.Atoi(p.Labels[rayutils.RayWorkerReplicaIndexKey])
	h, err2 := strconv.Atoi(p.Labels[rayutils.RayHostIndexKey])
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return int32(r), int32(h), true //nolint:gosec // small indexes.
}

// expectHeld checks that each of the Pods that ran before the install still runs with its identity
// and holds a claim bound to it on that ID.
func expectHeld(ns string, pods []corev1.Pod) {
	GinkgoHelper()
	var list tpuv1alpha1.TPUSliceAssignmentList
	Expect(suite.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	held := map[types.UID]string{}
	for _, s := range list.Items {
		for _, c := range s.Status.Claims {
			held[c.PodUID] = fmt.Sprintf("%s/%d", s.Name, c.WorkerID)
		}
	}
	for _, p := range pods {
		id, _ := identity.FromPod(&p)
		Expect(held).To(HaveKeyWithValue(p.UID, fmt.Sprintf("%s/%d", id.SliceName(), id.WorkerID)), "Pod %s keeps its ID", p.Name)
	}
}

type adoptions struct{ admission, reconciler float64 }

// adoptionCounts reads the claims_adopted_total metric (every instance runs in this process and
// records into metrics.Default).
func adoptionCounts() adoptions {
	read := func(where string) float64 {
		var m dto.Metric
		Expect(metrics.Default.ClaimsAdopted.WithLabelValues(where).Write(&m)).To(Succeed())
		return m.GetCounter().GetValue()
	}
	return adoptions{admission: read(metrics.AdoptedAtAdmission), reconciler: read(metrics.AdoptedByReconciler)}
}

// quickDeletion checks docs/spec.md §8's fast release with KubeRay: a worker Pod deleted while its
// claim is still pending (created a moment ago) is replaced by KubeRay, and the replacement
// (with the gate on, KubeRay's whole new replica) is admitted within 2 s of the deletion becoming
// visible: from the Get that answers NotFound to every Pod of the replacement existing with an
// identity. Three trials, each on a fresh cluster.
//
// The Pod is deleted once KubeRay has had a moment (settleKubeRay) to see the Pods it created, not
// the instant it appears: KubeRay waits for the Pods it created to reach its cache before it acts
// on their group again, and a Pod deleted before that stalls KubeRay's own replacement for its
// expectations timeout (30 s), whatever the webhook does. The moment is well inside the 1 s bind
// settle, so the deleted Pod's claim is still pending, which the test checks.
func quickDeletion(ns string, gate bool) {
	const settleKubeRay = 300 * time.Millisecond
	took := make([]time.Duration, 0, 3)
	for trial := range 3 {
		rc := create(testutil.MakeRayCluster(fmt.Sprintf("quick-%d", trial), ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 1).Obj())
		var victim corev1.Pod
		var complete time.Time
		Eventually(func(g Gomega) {
			pods := workerPods(rc, "tpu")
			g.Expect(pods).To(HaveLen(4))
			victim = pods[0]
			for _, p := range pods {
				if p.CreationTimestamp.After(victim.CreationTimestamp.Time) {
					victim = p // the newest
				}
			}
			complete = time.Now()
		}, testutil.LongTimeout, 5*time.Millisecond).Should(Succeed())
		time.Sleep(settleKubeRay)
		pending := claimPending(ns, victim.UID)
		Expect(suite.Client.Delete(ctx, &victim)).To(Succeed())
		gone := waitNotFound(&victim)
		age := gone.Sub(complete)
		replaced := func() bool {
			pods := workerPods(rc, "tpu")
			if gate {
				// KubeRay replaces the replica whole, under a new replica name.
				n := 0
				for _, p := range pods {
					if p.Labels[rayutils.RayWorkerReplicaNameKey] == victim.Labels[rayutils.RayWorkerReplicaNameKey] {
						return false
					}
					if _, ok := identity.FromPod(&p); ok {
						n++
					}
				}
				return n == 4
			}
			n := 0
			for _, p := range pods {
				if _, ok := identity.FromPod(&p); ok && p.UID != victim.UID {
					n++
				}
			}
			return n == 4
		}
		Eventually(replaced, testutil.LongTimeout, 5*time.Millisecond).Should(BeTrue())
		d := time.Since(gone)
		took = append(took, d)
		GinkgoWriter.Printf("quick deletion (gate %t, trial %d): Pod %s gone %v after its group was complete (claim pending: %t); replacement admitted %v after the deletion was visible\n",
			gate, trial, victim.Name, age.Round(time.Millisecond), pending, d.Round(time.Millisecond))
		Expect(pending).To(BeTrue(), "the deleted Pod's claim was still pending")
		expectSettled(rc, map[string]int{"tpu": 4})
	}
	GinkgoWriter.Printf("quick deletion (gate %t): replacements admitted in %v\n", gate, took)
	for _, d := range took {
		Expect(d).To(BeNumerically("<", replacementBound))
	}
}

// claimPending reports whether the namespace's slices hold a claim not yet bound to a Pod and none
// bound to Pod uid: the Pod's claim is still pending.
func claimPending(ns string, uid types.UID) bool {
	GinkgoHelper()
	var list tpuv1alpha1.TPUSliceAssignmentList
	Expect(suite.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	pending := false
	for _, s := range list.Items {
		for _, c := range s.Status.Claims {
			if c.PodUID == uid {
				return false
			}
			pending = pending || c.PodUID == ""
		}
	}
	return pending
}

// waitNotFound waits until a Get of the Pod answers NotFound and returns when it did.
func waitNotFound(p *corev1.Pod) time.Time {
	GinkgoHelper()
	var at time.Time
	Eventually(func() bool {
		err := suite.Client.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{})
		at = time.Now()
		return apierrors.IsNotFound(err)
	}, testutil.Timeout, time.Millisecond).Should(BeTrue())
	return at
}
