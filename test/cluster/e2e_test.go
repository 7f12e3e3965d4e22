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

package cluster

import (
	"fmt"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// pendingTTL is short so that I3 settles quickly (docs/spec.md §9: within twice the TTL).
const pendingTTL = 3 * time.Second

// degradedBound is how soon a failed Node must turn its slice Degraded (issue #21): kwok reports
// the Node NotReady 1-2 s after FailNode, and the reconciler writes health a bind settle (1 s)
// after the Node event.
const degradedBound = 5 * time.Second

var _ = Describe("End to end with KubeRay's RayMultiHostIndexing off", Ordered, Serial, func() {
	BeforeAll(func() { framework.SetMultiHostIndexing(false) })
	scenarios(false)
})

var _ = Describe("End to end with KubeRay's RayMultiHostIndexing on", Ordered, Serial, func() {
	BeforeAll(func() { framework.SetMultiHostIndexing(true) })
	scenarios(true)
})

func scenarios(gate bool) {
	var (
		ns string
		i1 *framework.I1Watcher
		pw *framework.PlacementWatcher
	)
	BeforeEach(func() {
		ns = framework.CreateNamespace(ctx, suite.Client, "e2e")
		var err error
		i1, err = suite.WatchI1(ctx, ns, nil)
		Expect(err).NotTo(HaveOccurred())
		pw, err = suite.WatchPlacement(ctx, ns, true)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			i1.Stop()
			pw.Stop()
			Expect(i1.Violations()).To(BeEmpty(), "I1 at every Pod event")
			Expect(pw.Violations()).To(BeEmpty(), "one domain per slice, one slice per domain, whole releases, at every Pod event")
			// Every spec starts on free pools: its namespace goes, and with it the Pods that hold
			// the Nodes (the namespace itself takes the namespace controller some seconds more).
			Expect(client.IgnoreNotFound(suite.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))).To(Succeed())
			Eventually(func(g Gomega) {
				var pods corev1.PodList
				g.Expect(suite.Client.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
				g.Expect(pods.Items).To(BeEmpty())
			}, testutil.LongTimeout, testutil.Interval).Should(Succeed())
		})
	})

	It("places contending slices each in a pool of its own, the fourth gated with no Pod bound until a pool is freed", func() {
		start := time.Now()
		first := create(tpuCluster("first", ns, 2).Obj())
		second := create(tpuCluster("second", ns, 2).Obj())

		By("three slices land each in one pool of its own, the fourth stays gated")
		var pending string
		var domains map[string]string
		Eventually(func(g Gomega) {
			placements := placementsIn(g, ns, constants.NodePoolTopologyKey)
			g.Expect(placements).To(HaveLen(4), "every slice's Pods admitted")
			var err error
			domains, err = framework.CheckSlicesApart(placements)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(domains).To(HaveLen(3), "three slices Running and Ready in one pool each: %v", placements)
			for name, p := range placements {
				if _, placed := domains[name]; !placed {
					pending = name
					g.Expect(p.Pods).To(HaveLen(4))
					g.Expect(p.Unbound).To(HaveLen(4), "no Pod of the fourth slice bound: %s", p)
				}
			}
		}, testutil.LongTimeout, testutil.Interval).Should(Succeed())
		report("contention: three slices Running and Ready", time.Since(start))
		for name, domain := range domains {
			expectChosen(ns, name, domain)
			expectReleasedAndBound(pw, name, "contention: "+name)
		}
		Expect(pw.Pins()).To(BeNumerically(">=", 12), "each released Pod of the three slices pinned to a Node of its own (checked by the watcher)")

		By("the fourth slice's Pods wait behind the gate, never tried by the scheduler; its slice says no pool fits")
		owner, other := first, second
		if slices.ContainsFunc(workerPods(second), func(p corev1.Pod) bool { return p.Labels[tpuv1alpha1.SliceLabel] == pending }) {
			owner, other = second, first
		}
		Eventually(func(g Gomega) {
			for _, p := range placementsIn(g, ns, constants.NodePoolTopologyKey)[pending].Pods {
				expectGated(g, &p)
				msg, err := framework.FailedScheduling(ctx, suite.Client, &p)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(msg).To(BeEmpty(), "the scheduler spent nothing on Pod %s", p.Name)
			}
			s := slice(g, ns, pending)
			g.Expect(s.Spec.Placement).To(Equal(tpuv1alpha1.PlacementChosenDomain))
			g.Expect(s.Status.Domain).To(BeEmpty())
			cond := apimeta.FindStatusCondition(s.Status.Conditions, tpuv1alpha1.ConditionDomainChosen)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(*cond).To(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", tpuv1alpha1.ReasonNoDomainFits)))
			for _, pool := range contendedPools {
				g.Expect(cond.Message).To(ContainSubstring(pool), "the message names every pool of the accelerator")
			}
			g.Expect(apimeta.FindStatusCondition(s.Status.Conditions, tpuv1alpha1.ConditionScheduled)).To(PointTo(MatchFields(IgnoreExtras, Fields{
				"Status": Equal(metav1.ConditionFalse), "Reason": Equal(tpuv1alpha1.ReasonNoDomainFits),
			})))
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
		expectSliceEvent(owner, pending, tpuv1alpha1.ReasonTPUSliceNoDomain)
		expectSettled(ns)

		By("deleting the RayCluster the fourth slice is not of frees its pools, and the fourth slice lands in one")
		Expect(suite.Client.Delete(ctx, other)).To(Succeed())
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(suite.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{rayutils.RayClusterLabelKey: other.Name})).To(Succeed())
			g.Expect(pods.Items).To(BeEmpty(), "the deleted RayCluster's Pods are gone")
		}, testutil.LongTimeout, 20*time.Millisecond).Should(Succeed())
		freed := time.Now()
		Eventually(func(g Gomega) {
			placements := placementsIn(g, ns, constants.NodePoolTopologyKey)
			g.Expect(placements).To(HaveLen(2))
			var err error
			domains, err = framework.CheckSlicesApart(placements)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(domains).To(HaveKey(pending), "the fourth slice Running and Ready in one pool: %v", placements)
			g.Expect(domains).To(HaveLen(2))
		}, freedBound, testutil.Interval).Should(Succeed(), "the fourth slice lands within %s of its pool being freed", freedBound)
		report("contention: the fourth slice Running and Ready after its pool was freed", time.Since(freed))
		expectChosen(ns, pending, domains[pending])
		expectSliceEvent(owner, pending, tpuv1alpha1.ReasonTPUSliceDomainChosen)
		expectSettled(ns)
		expectSlicesReady(ns, owner.Name, 2)
	})

	It("keeps each 2-host subslice of a pool split in sub-blocks in one sub-block", func() {
		rc := create(testutil.MakeRayCluster("sub", ns).TPUGroup("tpu", subsliceAccelerator, "4x4", 4, 2, 2).
			GroupAnnotation(0, constants.SliceTopologyAnnotation, "2x4").
			NodeSelector(0, constants.NodePoolTopologyKey, subslicePool).Obj())
		var domains map[string]string
		Eventually(func(g Gomega) {
			placements := placementsIn(g, ns, constants.GCETopologySubblockKey)
			g.Expect(placements).To(HaveLen(2))
			var err error
			domains, err = framework.CheckSlicesApart(placements)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(domains).To(HaveLen(2), "each subslice Running and Ready in a sub-block of its own: %v", placements)
		}, testutil.LongTimeout, testutil.Interval).Should(Succeed())
		expectSettled(ns)
		for _, s := range expectSlicesReady(ns, rc.Name, 2) {
			Expect(s.Spec.Hosts).To(BeEquivalentTo(2))
			Expect(s.Spec.AffinityTopologyKey).To(Equal(constants.GCETopologySubblockKey))
			expectChosen(ns, s.Name, domains[s.Name])
			expectReleasedAndBound(pw, s.Name, "subslice "+s.Name)
		}
	})

	It("turns a slice Degraded within 5 s of a Node failure and runs KubeRay's replacement in a healthy domain", func() {
		b := tpuCluster("fail", ns, 1)
		// A Pod on a failed Node is evicted once its toleration of the node lifecycle controller's
		// not-ready (or unreachable) NoExecute taint runs out: 300 s by default (the API server's
		// DefaultTolerationSeconds), 1 s here. Eviction deletes the Pod, kwok removes it as the
		// kubelet would, and KubeRay replaces it. (KubeRay itself never replaces a Pod that is only
		// not Ready: it deletes Failed or Succeeded Pods.)
		for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
			b.Spec.WorkerGroupSpecs[0].Template.Spec.Tolerations = append(b.Spec.WorkerGroupSpecs[0].Template.Spec.Tolerations,
				corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](1)})
		}
		rc := create(b.Obj())
		var sliceName, pool string
		Eventually(func(g Gomega) {
			placements := placementsIn(g, ns, constants.NodePoolTopologyKey)
			g.Expect(placements).To(HaveLen(1))
			for name, p := range placements {
				var ok bool
				pool, ok = p.Domain()
				g.Expect(ok).To(BeTrue(), "Running and Ready in one pool: %s", p)
				sliceName = name
			}
		}, testutil.LongTimeout, testutil.Interval).Should(Succeed())
		expectSettled(ns)
		expectSlicesReady(ns, rc.Name, 1)

		victim := workerPods(rc)[0]
		node := victim.Spec.NodeName
		By("failing Node " + node + " of worker " + framework.WorkerID(&victim))
		failed := time.Now()
		Expect(localcluster.FailNode(ctx, suite.Client, node, true)).To(Succeed())
		DeferCleanup(recoverNode, node)
		var notReady, degraded time.Duration
		Eventually(func(g Gomega) {
			if notReady == 0 {
				var n corev1.Node
				g.Expect(suite.Client.Get(ctx, client.ObjectKey{Name: node}, &n)).To(Succeed())
				if !localcluster.Ready(&n) {
					notReady = time.Since(failed)
				}
			}
			cond := apimeta.FindStatusCondition(slice(g, ns, sliceName).Status.Conditions, tpuv1alpha1.ConditionDegraded)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Status).To(Equal(metav1.ConditionTrue))
			degraded = time.Since(failed)
			g.Expect(cond.Reason).To(Equal(tpuv1alpha1.ReasonNodeNotReady))
			g.Expect(cond.Message).To(ContainSubstring(node))
		}, testutil.Timeout, 50*time.Millisecond).Should(Succeed())
		report("node failure: Node seen NotReady", notReady)
		report("node failure: slice Degraded", degraded)
		Expect(degraded).To(BeNumerically("<", degradedBound), "Degraded %v after the Node failed", degraded)

		By("the node lifecycle controller evicts the Pod and KubeRay replaces it")
		old := map[types.UID]bool{}
		for _, p := range workerPods(rc) {
			old[p.UID] = true
		}
		replaced := 1
		if gate {
			replaced = 4 // KubeRay deletes the replica whole and recreates it
		}
		Eventually(func(g Gomega) {
			pods := workerPods(rc)
			g.Expect(pods).To(HaveLen(4))
			g.Expect(slices.DeleteFunc(pods, func(p corev1.Pod) bool { return old[p.UID] })).To(HaveLen(replaced))
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
		report("node failure: KubeRay's replacement admitted", time.Since(failed))
		Expect(framework.CheckAdmitted(ctx, suite.Client, ns)).Error().NotTo(HaveOccurred())

		if gate {
			By("the new replica is placed whole in a healthy pool while the Node is still down")
			var landed string
			Eventually(func(g Gomega) {
				p := placementsIn(g, ns, constants.NodePoolTopologyKey)[sliceName]
				g.Expect(p).NotTo(BeNil())
				var ok bool
				landed, ok = p.Domain()
				g.Expect(ok).To(BeTrue(), "Running and Ready in one pool: %s", p)
			}, testutil.LongTimeout, testutil.Interval).Should(Succeed())
			report("node failure: the new replica Running and Ready", time.Since(failed))
			Expect(landed).NotTo(Equal(pool), "%s has 3 usable Nodes for the slice's 4 hosts", pool)
			expectChosen(ns, sliceName, landed)
			expectReleasedAndBound(pw, sliceName, "node failure: the new replica")
			ids, err := framework.CheckAdmitted(ctx, suite.Client, ns)
			Expect(err).NotTo(HaveOccurred())
			Expect(ids.IDs[sliceName]).To(ConsistOf(0, 1, 2, 3), "unique worker IDs")
			AddReportEntry("node failure: where the slice runs", ReportEntryVisibilityAlways,
				fmt.Sprintf("in %s, failed on %s, in %s while the Node is down", pool, node, landed))
		} else {
			By("the replacement waits gated: its slice's pool has no free usable Node (docs/spec.md §12, \"Pinning\")")
			Eventually(func(g Gomega) {
				p := placementsIn(g, ns, constants.NodePoolTopologyKey)[sliceName]
				g.Expect(p.Unbound).To(HaveLen(1))
				g.Expect(p.Domains).To(Equal(map[string]int{pool: 3}))
				var unbound corev1.Pod
				g.Expect(suite.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: p.Unbound[0]}, &unbound)).To(Succeed())
				expectGated(g, &unbound)
			}, testutil.Timeout, testutil.Interval).Should(Succeed())

			By("recovering the Node, as GKE's auto-repair would; the slice runs whole in its pool and turns Ready")
			Expect(localcluster.FailNode(ctx, suite.Client, node, false)).To(Succeed())
			Eventually(func(g Gomega) {
				p := placementsIn(g, ns, constants.NodePoolTopologyKey)[sliceName]
				g.Expect(p).NotTo(BeNil())
				landed, ok := p.Domain()
				g.Expect(ok).To(BeTrue(), "Running and Ready in one pool: %s", p)
				g.Expect(landed).To(Equal(pool))
			}, testutil.LongTimeout, testutil.Interval).Should(Succeed())
			report("node failure: slice Running and Ready again", time.Since(failed))
		}
		expectSlicesReady(ns, rc.Name, 1)
		// The node lifecycle controller removes the Node's not-ready NoExecute taint a little after
		// its Ready condition: until then a slice on it stays Degraded.
		Eventually(func(g Gomega) {
			g.Expect(apimeta.IsStatusConditionFalse(slice(g, ns, sliceName).Status.Conditions, tpuv1alpha1.ConditionDegraded)).To(BeTrue(), "no longer Degraded")
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
		report("node failure: slice no longer Degraded", time.Since(failed))
		expectSettled(ns)
	})

	if gate {
		gatedScenarios(&ns, &pw)
	}

	It("releases the claims and the slices of a deleted RayCluster once the garbage collector deleted its Pods", func() {
		rc := create(tpuCluster("gc", ns, 1).Obj())
		expectRunning(ns, 1)
		expectSettled(ns)
		expectSlicesReady(ns, rc.Name, 1)

		deleted := time.Now()
		Expect(suite.Client.Delete(ctx, rc)).To(Succeed())
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(suite.Client.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
			g.Expect(pods.Items).To(BeEmpty(), "the garbage collector deletes the RayCluster's Pods")
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
		report("garbage collection: Pods gone", time.Since(deleted))
		Eventually(func(g Gomega) {
			var list tpuv1alpha1.TPUSliceAssignmentList
			g.Expect(suite.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			g.Expect(list.Items).To(BeEmpty())
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
		report("garbage collection: slices gone", time.Since(deleted))
		Expect(framework.CheckClaimsMatchPods(ctx, suite.Client, ns)).To(Succeed())
	})

	It("finishes deleting a namespace with a running slice", func() {
		rc := create(tpuCluster("ns", ns, 1).Obj())
		expectRunning(ns, 1)
		expectSlicesReady(ns, rc.Name, 1)
		deleted := time.Now()
		Expect(suite.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		Eventually(func() error {
			return suite.Client.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
		}, testutil.LongTimeout, testutil.Interval).Should(Satisfy(apierrors.IsNotFound), "the namespace controller finishes")
		report("namespace deletion", time.Since(deleted))
		for _, list := range []client.ObjectList{&corev1.PodList{}, &tpuv1alpha1.TPUSliceAssignmentList{}, &rayv1.RayClusterList{}} {
			Expect(suite.Client.List(ctx, list, client.InNamespace(ns))).To(Succeed())
			Expect(apimeta.LenList(list)).To(BeZero(), "%T left in the deleted namespace", list)
		}
	})
}

// tpuCluster is a RayCluster of replicas v6e 4x4 slices of 4 hosts (4 chips each).
func tpuCluster(name, ns string, replicas int32) *testutil.RayClusterWrapper {
	return testutil.MakeRayCluster(name, ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, replicas)
}

func create(rc *rayv1.RayCluster) *rayv1.RayCluster {
	GinkgoHelper()
	Expect(suite.Client.Create(ctx, rc)).To(Succeed())
	return rc
}

// workerPods returns the live worker Pods of rc.
func workerPods(rc *rayv1.RayCluster) []corev1.Pod {
	GinkgoHelper()
	var pods corev1.PodList
	Expect(suite.Client.List(ctx, &pods, client.InNamespace(rc.Namespace), client.MatchingLabels{
		rayutils.RayClusterLabelKey: rc.Name, rayutils.RayNodeTypeLabelKey: string(rayv1.WorkerNode),
	})).To(Succeed())
	return slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool {
		return p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
	})
}

func placementsIn(g Gomega, ns, key string) map[string]*framework.SlicePlacement {
	placements, err := framework.SlicePlacements(ctx, suite.Client, ns, key)
	g.Expect(err).NotTo(HaveOccurred())
	return placements
}

func slice(g Gomega, ns, name string) *tpuv1alpha1.TPUSliceAssignment {
	var s tpuv1alpha1.TPUSliceAssignment
	g.Expect(suite.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s)).To(Succeed())
	return &s
}

// expectRunning waits until n slices of namespace ns run whole, Running and Ready, each in one
// node pool of its own.
func expectRunning(ns string, n int) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		placements := placementsIn(g, ns, constants.NodePoolTopologyKey)
		domains, err := framework.CheckSlicesApart(placements)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(domains).To(HaveLen(n), "Running and Ready in a pool each: %v", placements)
	}, testutil.LongTimeout, testutil.Interval).Should(Succeed())
}

// expectSettled checks I1 and I2 on the namespace's Pods, and waits for I3 (claims equal live
// Pods, within twice the pending TTL) and I8 (stored health equals what the live Pods and Nodes
// say).
func expectSettled(ns string) {
	GinkgoHelper()
	Expect(framework.CheckAdmitted(ctx, suite.Client, ns)).Error().NotTo(HaveOccurred())
	Eventually(func() error { return framework.CheckClaimsMatchPods(ctx, suite.Client, ns) },
		2*pendingTTL+testutil.Timeout, testutil.Interval).Should(Succeed())
	Eventually(func() error { return framework.CheckHealthConverged(ctx, suite.Client, ns) },
		testutil.Timeout, testutil.Interval).Should(Succeed())
}

// expectSlicesReady waits until the n slices of RayCluster cluster are Ready, and returns them.
func expectSlicesReady(ns, cluster string, n int) []tpuv1alpha1.TPUSliceAssignment {
	GinkgoHelper()
	var list tpuv1alpha1.TPUSliceAssignmentList
	Eventually(func(g Gomega) {
		g.Expect(suite.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{rayutils.RayClusterLabelKey: cluster})).To(Succeed())
		g.Expect(list.Items).To(HaveLen(n))
		for _, s := range list.Items {
			for _, t := range []string{tpuv1alpha1.ConditionClaimed, tpuv1alpha1.ConditionScheduled, tpuv1alpha1.ConditionPlaced, tpuv1alpha1.ConditionReady} {
				g.Expect(apimeta.IsStatusConditionTrue(s.Status.Conditions, t)).To(BeTrue(), "slice %s condition %s", s.Name, t)
			}
		}
	}, testutil.Timeout, testutil.Interval).Should(Succeed())
	return list.Items
}

// report adds a timing to the spec's report.
func report(what string, d time.Duration) {
	AddReportEntry(what, ReportEntryVisibilityAlways, d.Round(10*time.Millisecond).String())
}
