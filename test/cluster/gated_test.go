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
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// What users wait for when the operator places a slice as a unit (docs/spec.md §4). Each bound is
// several times what this suite measures on a loaded 2-core machine.
const (
	// releaseBound: from the creation of a slice's last Pod until every Pod of it is bound. The
	// reconciler releases a slice once all its Pods exist (after the bind settle, 1 s), and the
	// scheduler binds 4 Pods in milliseconds.
	releaseBound = 10 * time.Second
	// freedBound: from the last Pod of a freed pool gone until the slice waiting for it runs there,
	// Running and Ready.
	freedBound = 20 * time.Second
	// restartBound: from the operator's return until a slice it left gated runs, Running and Ready.
	restartBound = 30 * time.Second
)

// gatedScenarios are the specs of the operator's own placement that need no second run with
// KubeRay's other gate setting: a pool that lacks a Ready Node, a slice whose last Pod comes late,
// the operator down while Pods wait gated, an upgrade from inter-pod terms, and the slices it
// leaves to Kueue. ns and pw are the enclosing container's namespace and
// placement watcher, set before each spec.
func gatedScenarios(ns *string, pw **framework.PlacementWatcher) {
	It("places a slice in another pool when the first choice lacks one Ready Node", func() {
		// Equal pools: the chooser takes the first by name (best fit, then the name).
		node := contendedPools[0] + "-0"
		Expect(localcluster.FailNode(ctx, suite.Client, node, true)).To(Succeed())
		DeferCleanup(recoverNode, node)
		Eventually(func(g Gomega) {
			var n corev1.Node
			g.Expect(suite.Client.Get(ctx, client.ObjectKey{Name: node}, &n)).To(Succeed())
			g.Expect(localcluster.Ready(&n)).To(BeFalse())
		}, testutil.Timeout, testutil.Interval).Should(Succeed())

		rc := create(tpuCluster("avoid", *ns, 1).Obj())
		name, landed := expectOneSlice(*ns)
		Expect(landed).NotTo(Equal(contendedPools[0]), "%s has 3 Ready Nodes for the slice's 4 hosts", contendedPools[0])
		expectChosen(*ns, name, landed)
		expectReleasedAndBound(*pw, name, "a pool lacking a Ready Node")
		expectSliceEvent(rc, name, tpuv1alpha1.ReasonTPUSliceDomainChosen)
		expectSettled(*ns)
		expectSlicesReady(*ns, rc.Name, 1)
	})

	It("places a slice whose template selects its node pool in that pool", func() {
		rc := create(tpuCluster("pinned", *ns, 1).NodeSelector(0, constants.NodePoolTopologyKey, contendedPools[1]).Obj())
		name, landed := expectOneSlice(*ns)
		Expect(landed).To(Equal(contendedPools[1]))
		expectChosen(*ns, name, landed)
		expectReleasedAndBound(*pw, name, "a pinned pool")
		expectSlicesReady(*ns, rc.Name, 1)
	})

	It("holds a slice's first Pods gated until its last Pod exists, then releases the slice whole", func() {
		// KubeRay creates a slice's Pods within milliseconds; this spec creates them itself, as
		// KubeRay would, with the last one late.
		rc := create(tpuCluster("assembly", *ns, 1).ManagedByMultiKueue().Obj())
		for range 3 {
			Expect(suite.Client.Create(ctx, testutil.WorkerPodFor(rc, "tpu").Obj())).To(Succeed())
		}
		var name string
		Eventually(func(g Gomega) {
			placements := placementsIn(g, *ns, constants.NodePoolTopologyKey)
			g.Expect(placements).To(HaveLen(1))
			for n := range placements {
				name = n
			}
			g.Expect(apimeta.FindStatusCondition(slice(g, *ns, name).Status.Conditions, tpuv1alpha1.ConditionDomainChosen)).To(
				PointTo(MatchFields(IgnoreExtras, Fields{"Status": Equal(metav1.ConditionFalse), "Reason": Equal(tpuv1alpha1.ReasonWaitingForPods)})))
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
		expectSliceEvent(rc, name, tpuv1alpha1.ReasonTPUSliceGated)
		Consistently(func(g Gomega) {
			p := placementsIn(g, *ns, constants.NodePoolTopologyKey)[name]
			g.Expect(p.Pods).To(HaveLen(3))
			for _, pod := range p.Pods {
				expectGated(g, &pod)
			}
		}, 3*time.Second, testutil.Interval).Should(Succeed(), "3 of 4 Pods wait gated, past the bind settle")

		By("the last Pod arrives")
		Expect(suite.Client.Create(ctx, testutil.WorkerPodFor(rc, "tpu").Obj())).To(Succeed())
		var landed string
		Eventually(func(g Gomega) {
			var ok bool
			landed, ok = placementsIn(g, *ns, constants.NodePoolTopologyKey)[name].Domain()
			g.Expect(ok).To(BeTrue(), "Running and Ready in one pool")
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
		expectChosen(*ns, name, landed)
		expectReleasedAndBound(*pw, name, "assembly: the last Pod late")
		expectSettled(*ns)
	})

	It("keeps a slice's Pods gated while the operator is down and releases them whole once it returns", func() {
		By("stopping the replica that runs the reconciler; the other two admit the Pods")
		Expect(suite.Instances[0].Stop()).To(Succeed())
		suite.ServeWebhooksFrom(suite.Instances[1:]...)
		returned := false
		DeferCleanup(func() {
			if !returned {
				restartOperator()
			}
		})
		rc := create(tpuCluster("down", *ns, 1).Obj())
		var name string
		Eventually(func(g Gomega) {
			placements := placementsIn(g, *ns, constants.NodePoolTopologyKey)
			g.Expect(placements).To(HaveLen(1))
			for n, p := range placements {
				name = n
				g.Expect(p.Pods).To(HaveLen(4), "every Pod of the slice admitted")
			}
		}, testutil.Timeout, testutil.Interval).Should(Succeed())

		By("stopping the other two replicas: the whole operator is down, the Pods wait gated")
		for _, inst := range suite.Instances[1:] {
			Expect(inst.Stop()).To(Succeed())
		}
		Consistently(func(g Gomega) {
			p := placementsIn(g, *ns, constants.NodePoolTopologyKey)[name]
			g.Expect(p.Pods).To(HaveLen(4))
			for _, pod := range p.Pods {
				expectGated(g, &pod)
			}
		}, 3*time.Second, testutil.Interval).Should(Succeed())

		By("the operator returns and releases the slice whole")
		back := time.Now()
		returned = true
		restartOperator()
		Eventually(func(g Gomega) {
			_, ok := placementsIn(g, *ns, constants.NodePoolTopologyKey)[name].Domain()
			g.Expect(ok).To(BeTrue(), "Running and Ready in one pool")
		}, restartBound, testutil.Interval).Should(Succeed(), "the slice runs within %s of the operator's return", restartBound)
		report("operator down: slice Running and Ready after the operator returned", time.Since(back))
		expectChosen(*ns, name, slice(Default, *ns, name).Status.Domain)
		expectSettled(*ns)
		expectSlicesReady(*ns, rc.Name, 1)
	})

	It("keeps a slice placed by inter-pod terms untouched after the switch to chosen domains, and places a new slice next to it", func() {
		By("the operator places a slice with --slice-placement=InterPodAffinity")
		restartOperatorWith(tpuv1alpha1.PlacementInterPodAffinity)
		switched := false
		DeferCleanup(func() {
			if !switched {
				restartOperator()
			}
		})
		legacy := create(tpuCluster("legacy", *ns, 1).Obj())
		legacySlice, legacyPool := expectOneSlice(*ns)
		s := slice(Default, *ns, legacySlice)
		Expect(s.Spec.Placement).To(Equal(tpuv1alpha1.PlacementInterPodAffinity))
		Expect(s.Status.Domain).To(BeEmpty())
		// All of its Pods, not the ones that ran when its placement was first seen.
		expectSlicesReady(*ns, legacy.Name, 1)
		before := workerPods(legacy)
		for _, pod := range before {
			Expect(pod.Spec.SchedulingGates).To(BeEmpty(), "Pod %s", pod.Name)
			Expect(pod.Spec.NodeSelector).NotTo(HaveKey(constants.NodePoolTopologyKey), "Pod %s", pod.Name)
			Expect(interPodTerms(&pod)).To(BeNumerically(">", 0), "Pod %s carries the slice's terms", pod.Name)
		}

		By("the operator restarts with the default, ChosenDomain; a new slice lands in another pool")
		switched = true
		restartOperator()
		fresh := create(tpuCluster("fresh", *ns, 1).Obj())
		var freshSlice, freshPool string
		Eventually(func(g Gomega) {
			for n, p := range placementsIn(g, *ns, constants.NodePoolTopologyKey) {
				if n == legacySlice {
					continue
				}
				freshSlice = n
				var ok bool
				freshPool, ok = p.Domain()
				g.Expect(ok).To(BeTrue(), "Running and Ready in one pool: %s", p)
			}
			g.Expect(freshSlice).NotTo(BeEmpty())
		}, testutil.LongTimeout, testutil.Interval).Should(Succeed())
		Expect(freshPool).NotTo(Equal(legacyPool), "the legacy slice's pool is full")
		expectChosen(*ns, freshSlice, freshPool)
		expectReleasedAndBound(*pw, freshSlice, "next to a legacy slice")

		By("the legacy slice's Pods are the same, unchanged, and its slice keeps its placement")
		after := workerPods(legacy)
		Expect(after).To(HaveLen(len(before)))
		for i := range before {
			Expect(after).To(ContainElement(And(HaveField("UID", before[i].UID), HaveField("Spec.NodeSelector", before[i].Spec.NodeSelector),
				HaveField("Spec.Affinity", before[i].Spec.Affinity))), "Pod %s untouched", before[i].Name)
		}
		s = slice(Default, *ns, legacySlice)
		Expect(s.Spec.Placement).To(Equal(tpuv1alpha1.PlacementInterPodAffinity))
		Expect(s.Status.Domain).To(BeEmpty())
		expectSettled(*ns)
		expectSlicesReady(*ns, legacy.Name, 1)
		expectSlicesReady(*ns, fresh.Name, 1)
	})

	It("gives a slice created before its node pool exists inter-pod terms and a Warning, and runs it once the pool appears", func() {
		// As with GKE's node auto-provisioning: no TPU Node of the slice's accelerator and topology
		// exists when its Pods are admitted, so no domain can be chosen and the slice keeps
		// today's terms (docs/spec.md §12, "No Node with the key's label"), which a pool created
		// later satisfies.
		rc := create(testutil.MakeRayCluster("autoscaled", *ns).TPUGroup("tpu", latePool.Accelerator, latePool.Topology, 4, 4, 1).Obj())
		var name string
		Eventually(func(g Gomega) {
			var list tpuv1alpha1.TPUSliceAssignmentList
			g.Expect(suite.Client.List(ctx, &list, client.InNamespace(*ns))).To(Succeed())
			g.Expect(list.Items).To(HaveLen(1))
			name = list.Items[0].Name
			g.Expect(list.Items[0].Spec.Placement).To(Equal(tpuv1alpha1.PlacementInterPodAffinity))
			pods := workerPods(rc)
			g.Expect(pods).To(HaveLen(4))
			for _, pod := range pods {
				g.Expect(pod.Spec.SchedulingGates).To(BeEmpty(), "Pod %s: not gated, the scheduler waits for a Node", pod.Name)
				g.Expect(pod.Spec.NodeName).To(BeEmpty(), "Pod %s: no Node fits yet", pod.Name)
				g.Expect(interPodTerms(&pod)).To(BeNumerically(">", 0), "Pod %s carries the slice's terms", pod.Name)
			}
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
		expectSliceEvent(rc, name, tpuv1alpha1.ReasonTPUSliceInterPodAffinity)

		By("the node pool appears")
		nodes, err := localcluster.Nodes([]localcluster.Pool{latePool})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			// The slice's Pods go first, so that none is left bound to a deleted Node.
			Expect(client.IgnoreNotFound(suite.Client.Delete(ctx, rc))).To(Succeed())
			Expect(suite.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(*ns))).To(Succeed())
			Eventually(func(g Gomega) {
				var pods corev1.PodList
				g.Expect(suite.Client.List(ctx, &pods, client.InNamespace(*ns))).To(Succeed())
				g.Expect(pods.Items).To(BeEmpty())
			}, testutil.LongTimeout, testutil.Interval).Should(Succeed())
			for _, n := range nodes {
				Expect(client.IgnoreNotFound(suite.Client.Delete(ctx, n))).To(Succeed())
			}
		})
		appeared := time.Now()
		for _, n := range nodes {
			Expect(suite.Client.Create(ctx, n)).To(Succeed())
		}
		Eventually(func(g Gomega) {
			pool, ok := placementsIn(g, *ns, constants.NodePoolTopologyKey)[name].Domain()
			g.Expect(ok).To(BeTrue(), "Running and Ready in one pool")
			g.Expect(pool).To(Equal(latePool.Name))
		}, testutil.LongTimeout, testutil.Interval).Should(Succeed())
		report("node pool created after the slice: slice Running and Ready", time.Since(appeared))
		s := slice(Default, *ns, name)
		Expect(s.Spec.Placement).To(Equal(tpuv1alpha1.PlacementInterPodAffinity), "a slice's placement is decided once, at its first claim")
		Expect(s.Status.Domain).To(BeEmpty())
		expectSettled(*ns)
		expectSlicesReady(*ns, rc.Name, 1)
	})

	It("leaves Kueue-managed and dynamic-slicing slices ungated, with their own nodeSelector and no terms", func() {
		// Kueue is not installed: each template selects a pool, as Kueue's topology-aware
		// scheduling would have, so that each slice runs whole and turns Ready.
		kueue := create(tpuCluster("kueue", *ns, 1).Label(constants.KueueQueueNameLabel, "lq").
			NodeSelector(0, constants.NodePoolTopologyKey, contendedPools[1]).Obj())
		dynamic := create(tpuCluster("dynamic", *ns, 1).
			GroupAnnotation(0, constants.KueuePodSetSliceRequiredTopologyAnnotation, constants.NodePoolTopologyKey).
			NodeSelector(0, constants.NodePoolTopologyKey, contendedPools[2]).Obj())
		for _, rc := range []*rayv1.RayCluster{kueue, dynamic} {
			want := rc.Spec.WorkerGroupSpecs[0].Template.Spec.NodeSelector
			Eventually(func(g Gomega) {
				pods := workerPods(rc)
				g.Expect(pods).To(HaveLen(4))
				for _, pod := range pods {
					g.Expect(pod.Spec.NodeName).NotTo(BeEmpty(), "Pod %s bound: nothing holds it back", pod.Name)
				}
			}, testutil.LongTimeout, testutil.Interval).Should(Succeed())
			for _, pod := range workerPods(rc) {
				Expect(pod.Spec.SchedulingGates).To(BeEmpty(), "Pod %s of %s", pod.Name, rc.Name)
				Expect(pod.Spec.NodeSelector).To(Equal(want), "Pod %s of %s keeps its template's nodeSelector", pod.Name, rc.Name)
				Expect(interPodTerms(&pod)).To(BeZero(), "Pod %s of %s", pod.Name, rc.Name)
			}
			for _, s := range expectSlicesReady(*ns, rc.Name, 1) {
				Expect(s.Spec.Placement).To(BeEmpty(), "slice %s", s.Name)
				Expect(s.Status.Domain).To(BeEmpty(), "slice %s", s.Name)
				Expect(apimeta.FindStatusCondition(s.Status.Conditions, tpuv1alpha1.ConditionDomainChosen)).To(BeNil(), "slice %s", s.Name)
			}
		}
		expectSettled(*ns)
	})
}

// expectChosen checks that ChosenDomain slice name of namespace ns records domain with
// DomainChosen=True, and that its live Pods were released onto it: no gate, a nodeSelector on it,
// no inter-pod terms.
func expectChosen(ns, name, domain string) {
	GinkgoHelper()
	Expect(domain).NotTo(BeEmpty())
	Eventually(func(g Gomega) {
		s := slice(g, ns, name)
		g.Expect(s.Spec.Placement).To(Equal(tpuv1alpha1.PlacementChosenDomain))
		g.Expect(s.Status.Domain).To(Equal(domain))
		g.Expect(apimeta.FindStatusCondition(s.Status.Conditions, tpuv1alpha1.ConditionDomainChosen)).To(
			PointTo(MatchFields(IgnoreExtras, Fields{"Status": Equal(metav1.ConditionTrue), "Reason": Equal(tpuv1alpha1.ReasonDomainFits)})))
		p := placementsIn(g, ns, s.Spec.AffinityTopologyKey)[name]
		g.Expect(p).NotTo(BeNil())
		for _, pod := range p.Pods {
			g.Expect(pod.Spec.SchedulingGates).To(BeEmpty(), "Pod %s", pod.Name)
			g.Expect(pod.Spec.NodeSelector).To(HaveKeyWithValue(s.Spec.AffinityTopologyKey, domain), "Pod %s", pod.Name)
			g.Expect(interPodTerms(&pod)).To(BeZero(), "Pod %s", pod.Name)
		}
	}, testutil.Timeout, testutil.Interval).Should(Succeed())
}

// expectOneSlice waits until namespace ns has one slice, Running and Ready whole in one node pool,
// and returns its name and pool.
func expectOneSlice(ns string) (name, pool string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		placements := placementsIn(g, ns, constants.NodePoolTopologyKey)
		g.Expect(placements).To(HaveLen(1))
		for n, p := range placements {
			name = n
			var ok bool
			pool, ok = p.Domain()
			g.Expect(ok).To(BeTrue(), "Running and Ready in one pool: %s", p)
		}
	}, testutil.LongTimeout, testutil.Interval).Should(Succeed())
	return name, pool
}

// expectGated checks that pod waits behind the operator's scheduling gate, unbound, as the API
// server reports it (PodScheduled=False, SchedulingGated).
func expectGated(g Gomega, pod *corev1.Pod) {
	g.Expect(pod.Spec.SchedulingGates).To(ContainElement(HaveField("Name", tpuv1alpha1.PlacementSchedulingGate)), "Pod %s gated", pod.Name)
	g.Expect(pod.Spec.NodeName).To(BeEmpty(), "Pod %s unbound", pod.Name)
	g.Expect(pod.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.PodScheduled),
		HaveField("Status", corev1.ConditionFalse), HaveField("Reason", corev1.PodReasonSchedulingGated))), "Pod %s", pod.Name)
}

// expectReleasedAndBound checks, from what pw saw, that every live Pod of slice name was bound
// within releaseBound of the creation of its last Pod, and reports the times.
func expectReleasedAndBound(pw *framework.PlacementWatcher, name, what string) {
	GinkgoHelper()
	t := pw.Timeline(name)
	took, ok := t.ReleaseToBound()
	Expect(ok).To(BeTrue(), "the watch saw every Pod of slice %s created and bound: %+v", name, t)
	AddReportEntry(what+": last Pod created, released, bound", ReportEntryVisibilityAlways,
		fmt.Sprintf("released after %s, all %d bound after %s", t.Released.Sub(t.Created).Round(10*time.Millisecond), t.Pods, took.Round(10*time.Millisecond)))
	Expect(took).To(BeNumerically("<", releaseBound), "slice %s bound %s after its last Pod was created", name, took)
}

// expectSliceEvent waits for an Event of reason about slice name of RayCluster rc.
func expectSliceEvent(rc *rayv1.RayCluster, name, reason string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(suite.Client.List(ctx, &list, client.InNamespace(rc.Namespace))).To(Succeed())
		g.Expect(list.Items).To(ContainElement(SatisfyAll(
			HaveField("Reason", reason),
			Satisfy(func(e eventsv1.Event) bool {
				return e.Regarding.Name == name || (e.Regarding.Name == rc.Name && e.Related != nil && e.Related.Name == name)
			}))), "an Event %s about slice %s", reason, name)
	}, testutil.Timeout, testutil.Interval).Should(Succeed())
}

// interPodTerms counts the Pod's inter-pod affinity and anti-affinity terms.
func interPodTerms(pod *corev1.Pod) int {
	a := pod.Spec.Affinity
	if a == nil {
		return 0
	}
	n := 0
	if a.PodAffinity != nil {
		n += len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) + len(a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
	}
	if a.PodAntiAffinity != nil {
		n += len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) + len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
	}
	return n
}

// recoverNode makes a Node failed with localcluster.FailNode Ready again and waits until it is,
// untainted.
func recoverNode(name string) {
	GinkgoHelper()
	Expect(localcluster.FailNode(ctx, suite.Client, name, false)).To(Succeed())
	Eventually(func(g Gomega) {
		var n corev1.Node
		g.Expect(suite.Client.Get(ctx, client.ObjectKey{Name: name}, &n)).To(Succeed())
		g.Expect(localcluster.Ready(&n)).To(BeTrue())
	}, testutil.Timeout, testutil.Interval).Should(Succeed())
}
