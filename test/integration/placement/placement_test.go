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

package placement

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/gate"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

const (
	v6e     = "tpu-v6e-slice"
	poolKey = constants.NodePoolTopologyKey
	// specLabel keeps each spec's Pods on its own Nodes: both carry it, valued the namespace.
	specLabel = "test.tpu.ray.io/spec"
	hosts     = 4
)

var _ = Describe("The placement step of a ChosenDomain slice", func() {
	var ns string
	var rc *rayv1.RayCluster
	BeforeEach(func() {
		ns = framework.CreateNamespace(ctx, suite.Client, "place")
		rc = testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, hosts, 8).ManagedByMultiKueue().Obj()
		Expect(suite.Client.Create(ctx, rc)).To(Succeed())
	})

	It("chooses one domain when every Pod is present, records it, and releases every Pod onto it", func() {
		small := pool(ns, "a", hosts)
		pool(ns, "b", hosts+1)
		s := createSlice(rc, 0)
		pods := createGated(rc, 0, 0, 1, 2, 3)

		By("the best fit, the pool with no spare Node, is chosen and recorded")
		slice := expectDomainChosen(s, metav1.ConditionTrue, tpuv1alpha1.ReasonDomainFits)
		Expect(slice.Status.Domain).To(Equal(small))
		expectReleased(pods, small)
		lease := &coordinationv1.Lease{}
		Expect(suite.Client.Get(ctx, client.ObjectKey{Namespace: leaseNamespace, Name: gate.LeaseName(poolKey, small)}, lease)).To(Succeed())
		Expect(*lease.Spec.HolderIdentity).To(Equal(ns + "/" + s.Name + "/" + string(slice.UID)))
		expectEvents(rc, tpuv1alpha1.ReasonTPUSliceDomainChosen)
	})

	It("gives one fitting pool to one of two slices; the other waits gated and gets it when the first goes", func() {
		only := pool(ns, "a", hosts)
		first, second := createSlice(rc, 0), createSlice(rc, 1)
		firstPods, secondPods := createGated(rc, 0, 0, 1, 2, 3), createGated(rc, 1, 0, 1, 2, 3)

		By("one slice takes the pool, the other finds no domain and its Pods stay gated")
		var winner, loser *tpuv1alpha1.TPUSliceAssignment
		var winnerPods, loserPods []*corev1.Pod
		Eventually(func(g Gomega) {
			a, b := getSlice(first), getSlice(second)
			g.Expect(a.Status.Domain != "" || b.Status.Domain != "").To(BeTrue())
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
		if getSlice(first).Status.Domain != "" {
			winner, loser, winnerPods, loserPods = first, second, firstPods, secondPods
		} else {
			winner, loser, winnerPods, loserPods = second, first, secondPods, firstPods
		}
		expectReleased(winnerPods, only)
		lost := expectDomainChosen(loser, metav1.ConditionFalse, tpuv1alpha1.ReasonNoDomainFits)
		Expect(apimeta.FindStatusCondition(lost.Status.Conditions, tpuv1alpha1.ConditionDomainChosen).Message).
			To(ContainSubstring(only + ": held by slice " + ns + "/" + winner.Name))
		// Scheduled is the claim reconciler's (health), written after placement's DomainChosen,
		// whose update wakes it (docs/spec.md §11, §12).
		expectScheduled(loser, metav1.ConditionFalse, tpuv1alpha1.ReasonNoDomainFits)
		Consistently(func(g Gomega) { expectGated(g, loserPods) }, 2*time.Second, testutil.Interval).Should(Succeed())
		expectEvents(rc, tpuv1alpha1.ReasonTPUSliceNoDomain)

		By("the first slice goes (its Pods, then the slice): the second gets the pool")
		for _, p := range winnerPods {
			Expect(suite.Client.Delete(ctx, p)).To(Succeed())
		}
		Expect(suite.Client.Delete(ctx, winner)).To(Succeed())
		expectReleased(loserPods, only)
		Expect(getSlice(loser).Status.Domain).To(Equal(only))
	})

	It("skips a pool missing one Ready Node", func() {
		short := pool(ns, "a", hosts)
		full := pool(ns, "b", hosts)
		Expect(framework.SetNodeReady(ctx, suite.Client, fmt.Sprintf("%s-%d", short, 2), false)).To(Succeed())
		s := createSlice(rc, 0)
		pods := createGated(rc, 0, 0, 1, 2, 3)
		Expect(expectDomainChosen(s, metav1.ConditionTrue, tpuv1alpha1.ReasonDomainFits).Status.Domain).To(Equal(full))
		expectReleased(pods, full)
	})

	It("pins no Pod to a Node that is not usable", func() {
		wide := pool(ns, "a", hosts+2)
		Expect(framework.SetNodeReady(ctx, suite.Client, wide+"-0", false)).To(Succeed())
		cordon := &corev1.Node{}
		Expect(suite.Client.Get(ctx, client.ObjectKey{Name: wide + "-1"}, cordon)).To(Succeed())
		cordon.Spec.Unschedulable = true
		Expect(suite.Client.Update(ctx, cordon)).To(Succeed())
		createSlice(rc, 0)
		pins := expectReleased(createGated(rc, 0, 0, 1, 2, 3), wide)
		Expect(slices.Sorted(maps.Values(pins))).To(Equal([]string{wide + "-2", wide + "-3", wide + "-4", wide + "-5"}))
	})

	It("replaces a released Pod whose Node goes, or that another Pod of the slice took, before it binds; the replacement gets a free Node", func() {
		domain := pool(ns, "a", hosts+1)
		s := createSlice(rc, 0)
		pods := createGated(rc, 0, 0, 1, 2, 3)
		pins := expectReleased(pods, domain)
		free := domain + "-" + strconv.Itoa(hosts)
		Expect(pins).NotTo(ContainElement(free), "the best fit leaves the last Node by name free")
		Expect(framework.BindPod(ctx, suite.Client, pods[0], pins[pods[0].Name])).To(Succeed())
		// The reconciles the bind causes are over (its Event recorded, then no write and no
		// requeue for two bind settles): what follows must come from the Node's own event.
		expectEvents(rc, tpuv1alpha1.ReasonTPUSlicePlaced)
		rv := getSlice(s).ResourceVersion
		Consistently(func() string { return getSlice(s).ResourceVersion }, 2*time.Second, testutil.Interval).Should(Equal(rv))

		By("the Node Pod 3 is pinned to is deleted before it binds: the Pod is deleted, a bound Pod is not")
		stranded := pods[3]
		deleted := time.Now()
		Expect(suite.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: pins[stranded.Name]}})).To(Succeed())
		expectDeleted(stranded)
		AddReportEntry("stranded Pod: Node deleted to Pod deleted", ReportEntryVisibilityAlways, time.Since(deleted).Round(time.Millisecond).String())
		Expect(time.Since(deleted)).To(BeNumerically("<", 2*time.Second), "a stranded Pod waits for its replacement")
		expectPodEvent(stranded, tpuv1alpha1.ReasonTPUPodStranded)

		By("its replacement arrives gated and is pinned to the Node left free at once")
		created := time.Now()
		replacement := createGated(rc, 0, 3)
		Expect(expectReleased(replacement, domain)).To(HaveKeyWithValue(replacement[0].Name, free))
		Expect(time.Since(created)).To(BeNumerically("<", 2*time.Second), "a late Pod of a committed slice waits")

		By("Pod 1 binds to the Node Pod 2 is pinned to (as a view that missed a pin could cause): Pod 2 is replaced, no bound Pod is")
		Expect(framework.BindPod(ctx, suite.Client, pods[1], pins[pods[2].Name])).To(Succeed())
		expectDeleted(pods[2])
		Consistently(func(g Gomega) {
			for _, p := range []*corev1.Pod{pods[0], pods[1], replacement[0]} {
				cur := &corev1.Pod{}
				g.Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(p), cur)).To(Succeed())
				g.Expect(cur.DeletionTimestamp).To(BeNil(), "Pod %s", p.Name)
			}
		}, time.Second, testutil.Interval).Should(Succeed())
		Expect(getSlice(s).Status.Domain).To(Equal(domain))

		By("a worker Pod of another RayCluster is created bound to the Node the replacement is pinned to: the replacement is deleted")
		// Nothing of this slice changes: the reconcile must come from the other Pod's create
		// (docs/spec.md §12, "Stranded Pods").
		rv = getSlice(s).ResourceVersion
		Consistently(func() string { return getSlice(s).ResourceVersion }, 2*time.Second, testutil.Interval).Should(Equal(rv))
		other := testutil.MakeRayCluster("other", ns).TPUGroup("tpu", v6e, "4x4", 4, 1, 1).ManagedByMultiKueue().Obj()
		Expect(suite.Client.Create(ctx, other)).To(Succeed())
		taken := time.Now()
		framework.MustCreate(ctx, suite.Client, testutil.WorkerPodFor(other, "tpu").TPUIdentity("tpu", 0, 1).
			NodeSelector(specLabel, ns).NodeName(free).Obj())
		expectDeleted(replacement[0])
		AddReportEntry("stranded Pod: other RayCluster's Pod created on its Node to Pod deleted", ReportEntryVisibilityAlways, time.Since(taken).Round(time.Millisecond).String())
		Expect(time.Since(taken)).To(BeNumerically("<", 2*time.Second), "a stranded Pod waits for its replacement")
	})

	It("keeps the slice off a pool where a bound Pod's required anti-affinity excludes it, as the scheduler would", func() {
		// Without the exclusion pool a is the best fit: one of its 5 Nodes is taken, 4 are left.
		taken := pool(ns, "a", hosts+1)
		wide := pool(ns, "b", hosts+2)
		// A Pod of a slice placed with the inter-pod terms (before issue 24, or with
		// InterPodAffinity): no Pod of another RayCluster in its node pool, in any namespace.
		old := testutil.MakeRayCluster("old", ns).TPUGroup("tpu", v6e, "4x4", 4, 1, 1).ManagedByMultiKueue().Obj()
		Expect(suite.Client.Create(ctx, old)).To(Succeed())
		framework.MustCreate(ctx, suite.Client, testutil.WorkerPodFor(old, "tpu").TPUIdentity("tpu", 0, 0).
			NodeSelector(specLabel, ns).NodeName(taken+"-0").Affinity(&corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey: poolKey, NamespaceSelector: &metav1.LabelSelector{},
				LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: rayutils.RayClusterLabelKey, Operator: metav1.LabelSelectorOpNotIn, Values: []string{old.Name}},
				}},
			}},
		}}).Obj())
		s := createSlice(rc, 0)
		pods := createGated(rc, 0, 0, 1, 2, 3)
		slice := expectDomainChosen(s, metav1.ConditionTrue, tpuv1alpha1.ReasonDomainFits)
		Expect(slice.Status.Domain).To(Equal(wide))
		expectReleased(pods, wide)
	})

	It("releases a Pod with required node affinity of its own onto the domain without a pin", func() {
		domain := pool(ns, "a", hosts)
		createSlice(rc, 0)
		own := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: specLabel, Operator: corev1.NodeSelectorOpExists}}}},
		}}}
		pods := createGated(rc, 0, 0, 1, 2)
		mine := framework.MustCreate(ctx, suite.Client, testutil.WorkerPodFor(rc, "tpu").TPUIdentity("tpu", 0, 3).NodeSelector(specLabel, ns).
			Affinity(own).SchedulingGate(tpuv1alpha1.PlacementSchedulingGate).Obj())
		expectReleased(pods, domain)
		Eventually(func(g Gomega) {
			cur := &corev1.Pod{}
			g.Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(mine), cur)).To(Succeed())
			g.Expect(tpuenv.HasGate(cur)).To(BeFalse())
			g.Expect(cur.Spec.NodeSelector).To(HaveKeyWithValue(poolKey, domain))
			g.Expect(cur.Spec.Affinity).To(Equal(own), "the Pod's own affinity, unchanged")
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
	})

	It("joins the pool where a Pod of the slice that bypassed admission runs, not the best fit (docs/spec.md §12)", func() {
		pool(ns, "a", hosts)
		wide := pool(ns, "b", hosts+1)
		s := createSlice(rc, 0)
		// Created past the webhook: no gate, no domain selector, bound where the scheduler liked.
		framework.MustCreate(ctx, suite.Client, testutil.WorkerPodFor(rc, "tpu").TPUIdentity("tpu", 0, 3).
			NodeSelector(specLabel, rc.Namespace).NodeName(wide+"-4").Obj())
		pods := createGated(rc, 0, 0, 1, 2)
		Expect(expectDomainChosen(s, metav1.ConditionTrue, tpuv1alpha1.ReasonDomainFits).Status.Domain).To(Equal(wide))
		Expect(expectReleased(pods, wide)).NotTo(ContainElement(wide+"-4"), "a Pod pinned to the Node the bypassing Pod runs on")
	})

	It("keeps an incomplete slice gated until the assembly timeout, then releases it; a late Pod follows", func() {
		domain := pool(ns, "a", hosts)
		s := createSlice(rc, 0)
		start := time.Now()
		pods := createGated(rc, 0, 0, 1, 2)
		expectDomainChosen(s, metav1.ConditionFalse, tpuv1alpha1.ReasonWaitingForPods)
		expectScheduled(s, metav1.ConditionFalse, tpuv1alpha1.ReasonSchedulingGated)
		expectEvents(rc, tpuv1alpha1.ReasonTPUSliceGated)
		Consistently(func(g Gomega) { expectGated(g, pods) }, assemblyTimeout-time.Since(start)-time.Second, testutil.Interval).Should(Succeed())

		By("the assembly timeout passes: the three Pods go to a domain with room for all four")
		expectReleased(pods, domain)
		Expect(time.Since(start)).To(BeNumerically(">=", assemblyTimeout-time.Second))
		Expect(getSlice(s).Status.Domain).To(Equal(domain))

		By("the fourth Pod arrives late, gated: it is released onto the same domain at once, on the Node left free")
		pins := expectReleased(pods, domain)
		late := createGated(rc, 0, 3)
		Expect(expectReleased(late, domain)).NotTo(ContainElement(BeElementOf(slices.Collect(maps.Values(pins)))))
	})

	It("never lets two reconcilers take one domain", func() {
		second := startOperator()
		DeferCleanup(second.Stop)
		domains := []string{pool(ns, "a", hosts), pool(ns, "b", hosts)}
		const n = 4
		slices := make([]*tpuv1alpha1.TPUSliceAssignment, n)
		pods := make([][]*corev1.Pod, n)
		for i := range n {
			slices[i] = createSlice(rc, int32(i)) //nolint:gosec // i < 4.
		}
		for i := range n {
			pods[i] = createGated(rc, int32(i), 0, 1, 2, 3) //nolint:gosec // i < 4.
		}
		check := func(g Gomega) {
			owner := map[string]int{}
			chosen := 0
			for i := range n {
				d := getSlice(slices[i]).Status.Domain
				if d == "" {
					continue
				}
				chosen++
				prev, taken := owner[d]
				g.Expect(taken).To(BeFalse(), "slices %d and %d both hold %s", prev, i, d)
				owner[d] = i
			}
			// Every released Pod selects its own slice's domain: no pool holds Pods of two slices.
			selected := map[string]int{}
			for i := range n {
				for _, p := range pods[i] {
					cur := &corev1.Pod{}
					g.Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(p), cur)).To(Succeed())
					if d := cur.Spec.NodeSelector[poolKey]; d != "" {
						prev, taken := selected[d]
						g.Expect(!taken || prev == i).To(BeTrue(), "Pods of slices %d and %d select %s", prev, i, d)
						selected[d] = i
					}
				}
			}
			g.Expect(chosen).To(Equal(len(domains)))
		}
		Eventually(check, testutil.Timeout, testutil.Interval).Should(Succeed())
		Consistently(check, 3*time.Second, testutil.Interval).Should(Succeed())
	})

	It("chooses again, while the Pods are gated, a recorded domain that lost a Ready Node", func() {
		stopOperator()
		lost := pool(ns, "a", hosts)
		other := pool(ns, "b", hosts+1)
		s := createSlice(rc, 0)
		Eventually(func() error {
			cur := getSlice(s)
			cur.Status.Domain = lost
			return suite.Client.Status().Update(ctx, cur)
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
		pods := createGated(rc, 0, 0, 1, 2, 3)
		Expect(framework.SetNodeReady(ctx, suite.Client, lost+"-1", false)).To(Succeed())

		By("the operator starts: the recorded domain no longer fits and no Pod is in it, so another is chosen")
		restartOperator()
		expectReleased(pods, other)
		Expect(expectDomainChosen(s, metav1.ConditionTrue, tpuv1alpha1.ReasonDomainFits).Status.Domain).To(Equal(other))
	})

	It("keeps the Pods gated when no TPU Node has the key's label", func() {
		for i := range hosts {
			node := testutil.MakeNode(fmt.Sprintf("%s-unlabelled-%d", ns, i)).TPU(v6e, "4x4", "").TPUCapacity(4).Ready(true).Obj()
			delete(node.Labels, poolKey)
			node.Labels[specLabel] = ns
			Expect(framework.CreateNode(ctx, suite.Client, node)).To(Succeed())
			DeferCleanup(func() { _ = suite.Client.Delete(ctx, node) })
		}
		s := createSlice(rc, 0)
		pods := createGated(rc, 0, 0, 1, 2, 3)
		slice := expectDomainChosen(s, metav1.ConditionFalse, tpuv1alpha1.ReasonNoDomainFits)
		Expect(apimeta.FindStatusCondition(slice.Status.Conditions, tpuv1alpha1.ConditionDomainChosen).Message).
			To(ContainSubstring("has label " + poolKey))
		Consistently(func(g Gomega) { expectGated(g, pods) }, 2*time.Second, testutil.Interval).Should(Succeed())
	})

	It("warns of a slice placed by inter-pod affinity while the operator chooses domains", func() {
		s := claims.NewSlice(rc.Namespace, tpuv1alpha1.TPUSliceAssignmentSpec{
			RayClusterName: rc.Name, RayClusterUID: rc.UID, GroupName: "tpu", ReplicaIndex: 0, Hosts: hosts,
			Topology: "4x4", Accelerator: v6e, AffinityTopologyKey: poolKey, Placement: tpuv1alpha1.PlacementInterPodAffinity,
		})
		Expect(suite.Client.Create(ctx, s)).To(Succeed())
		expectEvents(rc, tpuv1alpha1.ReasonTPUSliceInterPodAffinity)
	})

	It("releases a 256-host slice with one patch per Pod", func() {
		const big, v5p, topo = 256, "tpu-v5p-slice", "8x8x16"
		rc := testutil.MakeRayCluster("big", ns).TPUGroup("tpu", v5p, topo, 4, big, 1).ManagedByMultiKueue().Obj()
		Expect(suite.Client.Create(ctx, rc)).To(Succeed())
		poolName := ns + "-big"
		Expect(framework.Parallel(big, 32, func(i int) error {
			node := testutil.MakeNode(fmt.Sprintf("%s-%d", poolName, i)).TPU(v5p, topo, poolName).TPUCapacity(4).Ready(true).Obj()
			node.Labels[specLabel] = ns
			DeferCleanup(func() { _ = suite.Client.Delete(ctx, node) })
			return framework.CreateNode(ctx, suite.Client, node)
		})).To(Succeed())
		s := claims.NewSlice(ns, tpuv1alpha1.TPUSliceAssignmentSpec{
			RayClusterName: rc.Name, RayClusterUID: rc.UID, GroupName: "tpu", Hosts: big, Topology: topo, Accelerator: v5p,
			AffinityTopologyKey: poolKey, Placement: tpuv1alpha1.PlacementChosenDomain,
		})
		Expect(suite.Client.Create(ctx, s)).To(Succeed())
		pods := make([]*corev1.Pod, big)
		Expect(framework.Parallel(big, 32, func(i int) error {
			id := int32(i) //nolint:gosec // i < 256.
			p := testutil.WorkerPodFor(rc, "tpu").TPUIdentity("tpu", 0, id).NodeSelector(specLabel, ns).
				SchedulingGate(tpuv1alpha1.PlacementSchedulingGate).Obj()
			pods[i] = p
			return suite.Client.Create(ctx, p)
		})).To(Succeed())
		created := time.Now()
		expectReleased(pods, poolName)
		AddReportEntry("256-host slice: last Pod created to every Pod released", ReportEntryVisibilityAlways, time.Since(created).Round(time.Millisecond).String())
	})

	It("leaves Pods gated while the operator is stopped and releases them when it is back", func() {
		stopOperator()
		domain := pool(ns, "a", hosts)
		s := createSlice(rc, 0)
		pods := createGated(rc, 0, 0, 1, 2, 3)
		Consistently(func(g Gomega) { expectGated(g, pods) }, 2*time.Second, testutil.Interval).Should(Succeed())

		By("the operator starts again")
		restartOperator()
		expectReleased(pods, domain)
		Expect(getSlice(s).Status.Domain).To(Equal(domain))
	})
})

// stopOperator stops the operator until restartOperator, or until the spec ends.
func stopOperator() {
	GinkgoHelper()
	stopped := suite.Instances[0]
	Expect(stopped.Stop()).To(Succeed())
	DeferCleanup(func() {
		if suite.Instances[0] == stopped {
			restartOperator()
		}
	})
}

// restartOperator starts a new operator in the stopped one's place.
func restartOperator() {
	GinkgoHelper()
	suite.Instances[0] = startOperator()
}

// pool creates n Ready TPU Nodes of a pool named <ns>-<name>, with 4 chips each, and returns the
// pool's name; the Nodes are deleted after the spec.
func pool(ns, name string, n int) string {
	GinkgoHelper()
	poolName := ns + "-" + name
	names := make([]string, n)
	Expect(framework.Parallel(n, 16, func(i int) error {
		names[i] = fmt.Sprintf("%s-%d", poolName, i)
		node := testutil.MakeNode(names[i]).TPU(v6e, "4x4", poolName).TPUCapacity(4).Ready(true).Obj()
		node.Labels[specLabel] = ns
		return framework.CreateNode(ctx, suite.Client, node)
	})).To(Succeed())
	DeferCleanup(func() {
		for _, name := range names {
			_ = suite.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}
	})
	return poolName
}

// createSlice creates replica's ChosenDomain slice, as the webhook creates it at the first claim.
func createSlice(rc *rayv1.RayCluster, replica int32) *tpuv1alpha1.TPUSliceAssignment {
	GinkgoHelper()
	s := claims.NewSlice(rc.Namespace, tpuv1alpha1.TPUSliceAssignmentSpec{
		RayClusterName: rc.Name, RayClusterUID: rc.UID, GroupName: "tpu", ReplicaIndex: replica, Hosts: hosts,
		Topology: "4x4", Accelerator: v6e, AffinityTopologyKey: poolKey, Placement: tpuv1alpha1.PlacementChosenDomain,
	})
	Expect(suite.Client.Create(ctx, s)).To(Succeed())
	return s
}

// createGated creates the worker Pods of replica holding workerIDs, as the webhook admits them
// for a ChosenDomain slice: the identity, the scheduling gate, no inter-pod terms.
func createGated(rc *rayv1.RayCluster, replica int32, workerIDs ...int32) []*corev1.Pod {
	GinkgoHelper()
	out := make([]*corev1.Pod, 0, len(workerIDs))
	for _, id := range workerIDs {
		p := testutil.WorkerPodFor(rc, "tpu").TPUIdentity("tpu", replica, id).NodeSelector(specLabel, rc.Namespace).
			SchedulingGate(tpuv1alpha1.PlacementSchedulingGate).Obj()
		out = append(out, framework.MustCreate(ctx, suite.Client, p))
	}
	return out
}

func getSlice(s *tpuv1alpha1.TPUSliceAssignment) *tpuv1alpha1.TPUSliceAssignment {
	GinkgoHelper()
	out := &tpuv1alpha1.TPUSliceAssignment{}
	Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(s), out)).To(Succeed())
	return out
}

// expectDomainChosen waits for the slice's DomainChosen condition and returns the slice.
func expectDomainChosen(s *tpuv1alpha1.TPUSliceAssignment, status metav1.ConditionStatus, reason string) *tpuv1alpha1.TPUSliceAssignment {
	GinkgoHelper()
	var out *tpuv1alpha1.TPUSliceAssignment
	Eventually(func(g Gomega) {
		out = &tpuv1alpha1.TPUSliceAssignment{}
		g.Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(s), out)).To(Succeed())
		c := apimeta.FindStatusCondition(out.Status.Conditions, tpuv1alpha1.ConditionDomainChosen)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(status))
		g.Expect(c.Reason).To(Equal(reason))
	}, testutil.Timeout, testutil.Interval).Should(Succeed())
	return out
}

// expectScheduled waits until the slice's Scheduled condition (health, the claim reconciler's)
// has status and reason and carries the DomainChosen message stored beside it (placement's): a
// DomainChosen write wakes the health write that derives Scheduled from it (docs/spec.md §11).
func expectScheduled(s *tpuv1alpha1.TPUSliceAssignment, status metav1.ConditionStatus, reason string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		out := &tpuv1alpha1.TPUSliceAssignment{}
		g.Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(s), out)).To(Succeed())
		c := apimeta.FindStatusCondition(out.Status.Conditions, tpuv1alpha1.ConditionScheduled)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(status))
		g.Expect(c.Reason).To(Equal(reason))
		chosen := apimeta.FindStatusCondition(out.Status.Conditions, tpuv1alpha1.ConditionDomainChosen)
		g.Expect(chosen).NotTo(BeNil())
		g.Expect(c.Message).To(HaveSuffix(": " + chosen.Message))
	}, testutil.Timeout, testutil.Interval).Should(Succeed())
}

// expectReleased waits until every Pod has lost the operator's gate and selects domain, pinned to
// a Node of its own in domain (the pools' Nodes are named <domain>-<i>), and returns each Pod's
// Node by Pod name.
func expectReleased(pods []*corev1.Pod, domain string) map[string]string {
	GinkgoHelper()
	var pins map[string]string
	Eventually(func(g Gomega) {
		pins = map[string]string{}
		for _, p := range pods {
			cur := &corev1.Pod{}
			g.Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(p), cur)).To(Succeed())
			g.Expect(tpuenv.HasGate(cur)).To(BeFalse(), "Pod %s is gated", cur.Name)
			g.Expect(cur.Spec.NodeSelector).To(HaveKeyWithValue(poolKey, domain), "Pod %s", cur.Name)
			pins[cur.Name] = gate.PinnedNode(cur)
		}
	}, testutil.Timeout, testutil.Interval).Should(Succeed())
	seen := map[string]string{}
	for pod, node := range pins {
		Expect(node).To(HavePrefix(domain+"-"), "Pod %s is pinned to a Node of %s", pod, domain)
		Expect(seen).NotTo(HaveKey(node), "Pods %s and %s are pinned to one Node", pod, seen[node])
		seen[node] = pod
	}
	return pins
}

// expectGated checks that every Pod still carries the gate and selects no domain.
func expectGated(g Gomega, pods []*corev1.Pod) {
	for _, p := range pods {
		cur := &corev1.Pod{}
		g.Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(p), cur)).To(Succeed())
		g.Expect(tpuenv.HasGate(cur)).To(BeTrue(), "Pod %s was released", cur.Name)
		g.Expect(cur.Spec.NodeSelector).NotTo(HaveKey(poolKey), "Pod %s", cur.Name)
	}
}

// expectDeleted waits until the Pod is gone or terminating.
func expectDeleted(p *corev1.Pod) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		cur := &corev1.Pod{}
		err := suite.Client.Get(ctx, client.ObjectKeyFromObject(p), cur)
		if apierrors.IsNotFound(err) {
			return
		}
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cur.UID != p.UID || cur.DeletionTimestamp != nil).To(BeTrue(), "Pod %s is not deleted", p.Name)
	}, testutil.Timeout, 20*time.Millisecond).Should(Succeed())
}

// expectPodEvent waits for an Event of reason on the Pod.
func expectPodEvent(p *corev1.Pod, reason string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(suite.Client.List(ctx, &list, client.InNamespace(p.Namespace))).To(Succeed())
		g.Expect(slices.ContainsFunc(list.Items, func(e eventsv1.Event) bool {
			return e.Regarding.Kind == "Pod" && e.Regarding.Name == p.Name && e.Reason == reason
		})).To(BeTrue(), "an Event %s on Pod %s", reason, p.Name)
	}, testutil.Timeout, testutil.Interval).Should(Succeed())
}

// expectEvents waits for Events of each reason on the RayCluster.
func expectEvents(rc *rayv1.RayCluster, reasons ...string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(suite.Client.List(ctx, &list, client.InNamespace(rc.Namespace))).To(Succeed())
		got := map[string]bool{}
		for _, e := range list.Items {
			if e.Regarding.Kind == "RayCluster" && e.Regarding.Name == rc.Name {
				got[e.Reason] = true
			}
		}
		for _, r := range reasons {
			g.Expect(got).To(HaveKey(r), "an Event %s on RayCluster %s", r, rc.Name)
		}
	}, testutil.Timeout, testutil.Interval).Should(Succeed())
}
