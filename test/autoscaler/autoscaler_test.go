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

// Package autoscaler proves the stand-in cluster autoscaler (internal/localcluster/autoscaler)
// on a real local cluster, without the operator: kube-apiserver with the ProvisioningRequest CRD,
// kube-scheduler, kube-controller-manager and kwok. Unschedulable Pods that must share a pool get
// exactly one new pool and bind in it, which is scaled down once they are gone; a
// ProvisioningRequest gets one whole pool and Provisioned; the fault knobs make requests fail; a
// gated Pod gets no pool for 10 s, and one as soon as its gate is removed. It needs
// `make envtest` and `make cluster-tools`.
package autoscaler

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster/autoscaler"
	"github.com/ray-tpu/tpu-slice-operator/internal/localenv"
	"github.com/ray-tpu/tpu-slice-operator/internal/provisioning"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// existingPool is the cluster's one TPU pool: v6e 4x4, which the capacity Pods stay out of.
const existingPool = "pool-a"

// provisioningDelay is the stand-in's delay from a scale-up decision to the pool's Nodes.
const provisioningDelay = time.Second

// gatedWait is how long a gated Pod must get no scale-up.
const gatedWait = 10 * time.Second

// unneededTime is how long a pool of the stand-in's stays without Pods before it deletes it.
const unneededTime = 3 * time.Second

var (
	v6e = autoscaler.NodeGroup{Accelerator: "tpu-v6e-slice", Topology: "4x4"}
	v5p = autoscaler.NodeGroup{Accelerator: "tpu-v5p-slice", Topology: "2x2x4"}
)

var (
	ctx, cancel = context.WithCancel(context.Background())
	k8sClient   client.Client
	standIn     *autoscaler.Autoscaler
)

func TestAutoscaler(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Stand-in autoscaler suite")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	DeferCleanup(cancel)
	start := time.Now()
	Expect(os.Getenv("KUBEBUILDER_ASSETS")).NotTo(BeEmpty(), "run `make envtest` and set KUBEBUILDER_ASSETS (make test-cluster does)")
	env := &envtest.Environment{ControlPlaneStartTimeout: time.Minute}
	localenv.GKEAdmission(env)
	cfg, err := env.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	// As a suite that has the operator's CRDs would add it.
	Expect(autoscaler.InstallCRD(cfg)).To(Succeed())

	cluster, err := localcluster.Start(ctx, env, localcluster.Options{Pools: []localcluster.Pool{
		{Name: existingPool, Accelerator: v6e.Accelerator, Topology: v6e.Topology},
		localcluster.CPUPool(1),
	}})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(cluster.Stop)

	k8sClient, err = client.New(cfg, client.Options{Scheme: autoscaler.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	standIn, err = autoscaler.Start(ctx, cfg, autoscaler.Options{
		NodeGroups:            []autoscaler.NodeGroup{v6e, v5p},
		ProvisioningDelay:     provisioningDelay,
		ScaleDownUnneededTime: unneededTime,
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(standIn.Stop)
	AddReportEntry("start", ReportEntryVisibilityAlways, "control plane, local cluster and stand-in in "+time.Since(start).Round(10*time.Millisecond).String())
})

// poolsFor returns the pools the stand-in decided for what (autoscaler.Pool.For).
func poolsFor(what string) []autoscaler.Pool {
	var out []autoscaler.Pool
	for _, p := range standIn.Pools() {
		if p.For == what {
			out = append(out, p)
		}
	}
	return out
}

// tpuPod is a worker Pod of a slice of group's shape asking for one 4-chip host.
func tpuPod(ns string, g autoscaler.NodeGroup) *testutil.PodWrapper {
	return testutil.MakePod("worker", ns).Topology(g.Accelerator, g.Topology).TPU(4)
}

// slice is a 4-host v6e 4x4 slice of ns, as the capacity objects are built from: its Pod as
// admitted, with the toleration of the TPU taint the API server's ExtendedResourceToleration gives
// it (a PodTemplate gets none: a template without it fits no TPU pool, as for the autoscaler).
// The objects built from it must not name it as their owner: no TPUSliceAssignment exists here,
// and the garbage collector would delete what names a missing one.
func slice(ns, name string) provisioning.Slice {
	pod := tpuPod(ns, v6e).Obj()
	pod.Spec.Tolerations = []corev1.Toleration{{Key: constants.TPUResourceName, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	return provisioning.Slice{Namespace: ns, Name: name, UID: types.UID(name), Hosts: 4, Key: constants.NodePoolTopologyKey, Pod: pod}
}

var _ = Describe("The stand-in autoscaler", Ordered, func() {
	var ns string
	var gated *corev1.Pod
	var gatedSince time.Time

	BeforeAll(func() {
		namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "autoscaler-"}}
		Expect(k8sClient.Create(ctx, namespace)).To(Succeed())
		ns = namespace.Name
		// A gated Pod of a v5p slice, which a v5p pool would take: only its gate keeps the
		// stand-in from creating one. It waits gated while the other specs run.
		gated = tpuPod(ns, v5p).Named("gated").SchedulingGate(tpuv1alpha1.PlacementSchedulingGate).Obj()
		Expect(k8sClient.Create(ctx, gated)).To(Succeed())
		gatedSince = time.Now()
	})

	It("gives a slice's Unschedulable capacity Pods exactly one new pool, where all bind", func() {
		start := time.Now()
		pods := provisioning.NewCapacityPods(slice(ns, "slice-a"), 1, []string{existingPool}, "registry.k8s.io/pause:3.10")
		for _, p := range pods {
			p.OwnerReferences = nil
			Expect(k8sClient.Create(ctx, p)).To(Succeed())
		}
		var pool string
		Eventually(func(g Gomega) {
			domains := map[string]int{}
			for _, p := range pods {
				var got corev1.Pod
				g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(p), &got)).To(Succeed())
				g.Expect(got.Spec.NodeName).NotTo(BeEmpty(), "Pod %s bound", got.Name)
				var node corev1.Node
				g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: got.Spec.NodeName}, &node)).To(Succeed())
				g.Expect(node.Labels).To(HaveKeyWithValue(autoscaler.NodeGroupLabel, "nap-tpu-v6e-slice-4x4"))
				domains[node.Labels[constants.NodePoolTopologyKey]]++
			}
			g.Expect(domains).To(HaveLen(1), "all in one pool")
			for d := range domains {
				pool = d
			}
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
		AddReportEntry("capacity Pods bound", ReportEntryVisibilityAlways, time.Since(start).Round(10*time.Millisecond).String())
		Expect(pool).NotTo(Equal(existingPool))
		Consistently(func() []autoscaler.Pool { return poolsFor("pods") }, 3*time.Second, 100*time.Millisecond).Should(
			ConsistOf(And(HaveField("Name", pool), HaveField("Nodes", HaveLen(4)))), "exactly one pool for the Pods")
	})

	It("scales the capacity Pods' pool down once they are gone", func() {
		pools := poolsFor("pods")
		Expect(pools).To(HaveLen(1))
		Expect(k8sClient.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns),
			client.MatchingLabels{tpuv1alpha1.CapacityForLabel: "slice-a"}, client.GracePeriodSeconds(0))).To(Succeed())
		// The stand-in's last look at the Pods may come a scan (250 ms) before the delete.
		start := time.Now().Add(-time.Second)
		Eventually(func(g Gomega) {
			var nodes corev1.NodeList
			g.Expect(k8sClient.List(ctx, &nodes, client.MatchingLabels{constants.NodePoolTopologyKey: pools[0].Name})).To(Succeed())
			g.Expect(nodes.Items).To(BeEmpty())
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
		Expect(time.Since(start)).To(BeNumerically(">=", unneededTime), "not before the pool was unneeded for unneededTime")
		Expect(poolsFor("pods")).To(ConsistOf(HaveField("Deleted", Not(BeZero()))))
		var existing corev1.NodeList
		Expect(k8sClient.List(ctx, &existing, client.MatchingLabels{constants.NodePoolTopologyKey: existingPool})).To(Succeed())
		Expect(existing.Items).To(HaveLen(4), "a pool the stand-in did not create is never scaled down")
	})

	It("gives a ProvisioningRequest for a 4x4 slice one pool of 4 Nodes and Provisioned", func() {
		start := time.Now()
		s := slice(ns, "slice-b")
		pt := provisioning.NewPodTemplate(s, 1)
		pr := provisioning.NewRequest(s, 1, provisioning.ClassBestEffortAtomicScaleUp)
		pt.OwnerReferences, pr.OwnerReferences = nil, nil
		Expect(k8sClient.Create(ctx, pt)).To(Succeed())
		Expect(k8sClient.Create(ctx, pr)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pr), pr)).To(Succeed())
			g.Expect(apimeta.IsStatusConditionTrue(pr.Status.Conditions, provisioning.ConditionAccepted)).To(BeTrue())
			c := apimeta.FindStatusCondition(pr.Status.Conditions, provisioning.ConditionProvisioned)
			g.Expect(c).NotTo(BeNil())
			g.Expect(*c).To(And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", autoscaler.ReasonCapacityIsProvisioned),
				HaveField("LastTransitionTime", Not(BeZero()))))
			g.Expect(provisioning.StateOf(pr).Phase).To(Equal(provisioning.Provisioned))
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
		pools := poolsFor("provisioningrequest/" + ns + "/" + pr.Name)
		Expect(pools).To(HaveLen(1))
		Eventually(func(g Gomega) {
			var nodes corev1.NodeList
			g.Expect(k8sClient.List(ctx, &nodes, client.MatchingLabels{constants.NodePoolTopologyKey: pools[0].Name})).To(Succeed())
			g.Expect(nodes.Items).To(HaveLen(4))
			for i := range nodes.Items {
				g.Expect(localcluster.Ready(&nodes.Items[i])).To(BeTrue(), "Node %s Ready", nodes.Items[i].Name)
			}
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
		AddReportEntry("ProvisioningRequest's pool Ready", ReportEntryVisibilityAlways, time.Since(start).Round(10*time.Millisecond).String())
		Consistently(func() []autoscaler.Pool { return poolsFor("provisioningrequest/" + ns + "/" + pr.Name) }, 2*time.Second, 100*time.Millisecond).Should(HaveLen(1))
	})

	It("fails requests when told to, and requests of a refused class", func() {
		s := slice(ns, "slice-c")
		pt := provisioning.NewPodTemplate(s, 1)
		pt.OwnerReferences = nil
		Expect(k8sClient.Create(ctx, pt)).To(Succeed())
		standIn.FailNextProvisioningRequests(1)
		standIn.RefuseClass(provisioning.ClassQueuedProvisioning, true)
		DeferCleanup(standIn.RefuseClass, provisioning.ClassQueuedProvisioning, false)
		injected := provisioning.NewRequest(s, 1, provisioning.ClassBestEffortAtomicScaleUp)
		refused := provisioning.NewRequest(s, 1, provisioning.ClassQueuedProvisioning)
		refused.Name = "slice-c-refused"
		for _, pr := range []*provisioning.ProvisioningRequest{injected, refused} {
			pr.OwnerReferences = nil
			Expect(k8sClient.Create(ctx, pr)).To(Succeed())
		}
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(injected), injected)).To(Succeed())
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(refused), refused)).To(Succeed())
			g.Expect(apimeta.FindStatusCondition(injected.Status.Conditions, provisioning.ConditionFailed)).To(PointTo(And(
				HaveField("Status", metav1.ConditionTrue), HaveField("Reason", autoscaler.ReasonInjectedFailure))))
			g.Expect(apimeta.FindStatusCondition(refused.Status.Conditions, provisioning.ConditionFailed)).To(PointTo(And(
				HaveField("Status", metav1.ConditionTrue), HaveField("Reason", autoscaler.ReasonClassRefused))))
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
		Expect(provisioning.StateOf(injected).Phase).To(Equal(provisioning.Ended))
		Expect(poolsFor("provisioningrequest/" + ns + "/" + injected.Name)).To(BeEmpty())
		Expect(poolsFor("provisioningrequest/" + ns + "/" + refused.Name)).To(BeEmpty())
	})

	It("never scales up for a gated Pod", func() {
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(gated), gated)).To(Succeed())
		Expect(gated.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.PodScheduled),
			HaveField("Reason", corev1.PodReasonSchedulingGated))))
		noV5p := func() []autoscaler.Pool {
			var out []autoscaler.Pool
			for _, p := range standIn.Pools() {
				if p.Group == "nap-tpu-v5p-slice-2x2x4" {
					out = append(out, p)
				}
			}
			return out
		}
		Consistently(noV5p, max(time.Until(gatedSince.Add(gatedWait)), 0)+500*time.Millisecond, 100*time.Millisecond).Should(BeEmpty())
		Expect(time.Since(gatedSince)).To(BeNumerically(">=", gatedWait))

		By("removing the gate: the scheduler marks the Pod Unschedulable, and a v5p pool takes it")
		base := gated.DeepCopy()
		gated.Spec.SchedulingGates = nil
		Expect(k8sClient.Patch(ctx, gated, client.MergeFrom(base))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(gated), gated)).To(Succeed())
			g.Expect(gated.Spec.NodeName).To(HavePrefix("nap-tpu-v5p-slice-2x2x4-"))
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
		Expect(noV5p()).To(ConsistOf(HaveField("Pods", ConsistOf(gated.UID))))
	})
})
