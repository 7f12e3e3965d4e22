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

// Package capacity runs the operator, KubeRay and the stand-in cluster autoscaler
// (internal/localcluster/autoscaler) on a local cluster (kube-scheduler, kube-controller-manager,
// kwok) that starts with one v6e 4x4 TPU pool, and checks that ChosenDomain slices get capacity
// (docs/spec.md §12, "Capacity", issue 43 history 1): a slice next to a full pool, and a slice with
// no pool of its shape at all, both end Running in a new pool each, first through capacity Pods
// (no ProvisioningRequest API), then through ProvisioningRequests (the stand-in's CRD installed,
// the operator restarted with --capacity-request=auto). It needs `make envtest` and
// `make cluster-tools`.
package capacity

import (
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/controllers"
	"github.com/ray-tpu/tpu-slice-operator/controllers/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster/autoscaler"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/internal/provisioning"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

const (
	// webhookInstances is the operator's replicas.
	webhookInstances = 2
	// existingPool is the cluster's one TPU pool at the start: v6e 4x4, 4 hosts.
	existingPool = "pool-a"
	// capacityWait is the operator's --capacity-wait here (1 minute by default).
	capacityWait = 2 * time.Second
	// placedWithin bounds how long a slice that needs a new pool takes to run in it: the capacity
	// wait, the stand-in's provisioning delay (1 s) and scan, kwok making the Nodes Ready, the
	// release and the binds.
	placedWithin = 60 * time.Second
)

var (
	ctx     = framework.SuiteContext()
	suite   framework.Suite
	standIn *autoscaler.Autoscaler
)

func TestCapacity(t *testing.T) {
	suite.Run(t, "Capacity suite", func() {
		suite.StartCluster(localcluster.Options{Pools: []localcluster.Pool{
			{Name: existingPool, Accelerator: "tpu-v6e-slice", Topology: "4x4"},
			localcluster.CPUPool(1),
		}})
		start(placement.CapacityOptions{Mode: placement.CapacityPods, Wait: capacityWait, Timeout: 2 * time.Minute})
		stopKubeRay, err := suite.StartKubeRay(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(stopKubeRay)
		standIn, err = autoscaler.Start(ctx, suite.Config, autoscaler.Options{
			NodeGroups: []autoscaler.NodeGroup{
				{Name: "v6e-4x4", Accelerator: "tpu-v6e-slice", Topology: "4x4"},
				{Name: "v5p-2x2x4", Accelerator: "tpu-v5p-slice", Topology: "2x2x4"},
				{Name: "v5p-2x2x2", Accelerator: "tpu-v5p-slice", Topology: "2x2x2"},
			},
			ProvisioningDelay: time.Second,
		})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(standIn.Stop)
	})
}

// start (re)starts the operator's replicas with capacity.
func start(capacity placement.CapacityOptions) {
	GinkgoHelper()
	for _, inst := range suite.Instances {
		Expect(inst.Stop()).To(Succeed())
	}
	suite.StartReplicas(webhookInstances, operator.Options{Controllers: controllers.Options{Capacity: capacity}})
}

var _ = Describe("A ChosenDomain slice no domain fits", Ordered, func() {
	var ns string
	BeforeAll(func() {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "capacity-"}}
		Expect(suite.Client.Create(ctx, n)).To(Succeed())
		ns = n.Name
	})

	It("gets one new pool through capacity Pods when it is next to a full pool", func() {
		first := create(cluster("first", ns, "tpu-v6e-slice", "4x4"))
		Expect(runningIn(ns, first)).To(Equal(existingPool))
		Expect(standIn.PoolsCreated()).To(BeZero(), "the first slice fits the existing pool")

		created := time.Now()
		second := create(cluster("second", ns, "tpu-v6e-slice", "4x4"))
		name := sliceOf(ns, second)
		Eventually(func(g Gomega) {
			c := condition(g, ns, name, tpuv1alpha1.ConditionCapacity)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(BeElementOf(tpuv1alpha1.ReasonCapacityPodsPending, tpuv1alpha1.ReasonCapacityPodsBound))
		}, placedWithin, testutil.Interval).Should(Succeed(), "capacity Pods after the capacity wait")
		pool := runningIn(ns, second)
		took := time.Since(created)
		AddReportEntry("slice next to a full pool, capacity Pods: Running in a new pool after", took.Round(10*time.Millisecond).String())
		Expect(took).To(BeNumerically("<", placedWithin))
		Expect(madeByStandIn(pool)).To(BeTrue(), "pool %s was made for the slice", pool)
		Expect(standIn.PoolsCreated()).To(Equal(1), "one pool for one slice")
		expectWithdrawn(ns, name)
		expectEvent(ns, second, name, tpuv1alpha1.ReasonTPUSliceCapacityRequested)
	})

	It("gets one pool when no pool of its shape exists at all", func() {
		before := standIn.PoolsCreated()
		rc := create(cluster("v5p", ns, "tpu-v5p-slice", "2x2x4"))
		pool := runningIn(ns, rc)
		Expect(madeByStandIn(pool)).To(BeTrue(), "pool %s was made for the slice", pool)
		Expect(standIn.PoolsCreated()).To(Equal(before + 1))
	})

	It("gets one new pool through a ProvisioningRequest where the API is served", func() {
		Expect(autoscaler.InstallCRD(suite.Config)).To(Succeed())
		start(placement.CapacityOptions{Mode: placement.CapacityAuto, Wait: capacityWait, Timeout: 2 * time.Minute})
		before := standIn.PoolsCreated()
		created := time.Now()
		rc := create(cluster("third", ns, "tpu-v6e-slice", "4x4"))
		name := sliceOf(ns, rc)
		var request string
		Eventually(func(g Gomega) {
			var list provisioning.ProvisioningRequestList
			g.Expect(suite.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{tpuv1alpha1.CapacityForLabel: name})).To(Succeed())
			g.Expect(list.Items).To(HaveLen(1))
			g.Expect(list.Items[0].Spec.PodSets[0].Count).To(BeEquivalentTo(4))
			request = list.Items[0].Name
		}, placedWithin, testutil.Interval).Should(Succeed(), "one ProvisioningRequest for the slice")
		pool := runningIn(ns, rc)
		AddReportEntry("slice next to full pools, ProvisioningRequest: Running in a new pool after", time.Since(created).Round(10*time.Millisecond).String())
		Expect(madeByStandIn(pool)).To(BeTrue(), "pool %s was made for the slice", pool)
		Expect(standIn.PoolsCreated()).To(Equal(before+1), "one pool for one request")
		for _, p := range workers(ns, rc) {
			Expect(p.Annotations).To(HaveKeyWithValue(provisioning.ConsumeAnnotation, request), "Pod %s consumes the request", p.Name)
		}
		expectWithdrawn(ns, name)
		Expect(slices.ContainsFunc(standIn.Pools(), func(p autoscaler.Pool) bool {
			return p.Name == pool && strings.HasPrefix(p.For, "provisioningrequest/")
		})).To(BeTrue(), "the pool was made for the request: %+v", standIn.Pools())
	})
})

// madeByStandIn reports whether the stand-in autoscaler created pool.
func madeByStandIn(pool string) bool {
	return slices.ContainsFunc(standIn.Pools(), func(p autoscaler.Pool) bool { return p.Name == pool })
}

// cluster is a RayCluster of one slice of 4 hosts of 4 chips.
func cluster(name, ns, accelerator, topology string) *rayv1.RayCluster {
	return testutil.MakeRayCluster(name, ns).TPUGroup("tpu", accelerator, topology, 4, 4, 1).Obj()
}

func create(rc *rayv1.RayCluster) *rayv1.RayCluster {
	GinkgoHelper()
	Expect(suite.Client.Create(ctx, rc)).To(Succeed())
	return rc
}

// workers are rc's live worker Pods.
func workers(ns string, rc *rayv1.RayCluster) []corev1.Pod {
	GinkgoHelper()
	var pods corev1.PodList
	Expect(suite.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"ray.io/cluster": rc.Name, "ray.io/node-type": "worker"})).To(Succeed())
	return slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
}

// sliceOf waits for rc's one slice and returns its name.
func sliceOf(ns string, rc *rayv1.RayCluster) string {
	GinkgoHelper()
	var name string
	Eventually(func(g Gomega) {
		var list tpuv1alpha1.TPUSliceAssignmentList
		g.Expect(suite.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{"ray.io/cluster": rc.Name})).To(Succeed())
		g.Expect(list.Items).To(HaveLen(1))
		name = list.Items[0].Name
	}, placedWithin, testutil.Interval).Should(Succeed())
	return name
}

// runningIn waits until rc's 4 worker Pods are Running and Ready in one node pool, and returns it.
func runningIn(ns string, rc *rayv1.RayCluster) string {
	GinkgoHelper()
	var pool string
	Eventually(func(g Gomega) {
		placements, err := framework.SlicePlacements(ctx, suite.Client, ns, constants.NodePoolTopologyKey)
		g.Expect(err).NotTo(HaveOccurred())
		name := ""
		for n, p := range placements {
			if len(p.Pods) > 0 && p.Pods[0].Labels["ray.io/cluster"] == rc.Name {
				name = n
			}
		}
		g.Expect(name).NotTo(BeEmpty(), "a slice of %s", rc.Name)
		p := placements[name]
		g.Expect(p.Pods).To(HaveLen(4))
		var ok bool
		pool, ok = p.Domain()
		g.Expect(ok).To(BeTrue(), "Running and Ready in one pool: %s", p)
	}, placedWithin, testutil.Interval).Should(Succeed())
	return pool
}

func condition(g Gomega, ns, name, typ string) *metav1.Condition {
	var s tpuv1alpha1.TPUSliceAssignment
	g.Expect(suite.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s)).To(Succeed())
	return apimeta.FindStatusCondition(s.Status.Conditions, typ)
}

// expectWithdrawn waits until the slice's capacity objects are gone and its Capacity condition
// with them.
func expectWithdrawn(ns, name string) {
	GinkgoHelper()
	selector := client.MatchingLabels{tpuv1alpha1.CapacityForLabel: name}
	Eventually(func(g Gomega) {
		var pods corev1.PodList
		g.Expect(suite.Client.List(ctx, &pods, client.InNamespace(ns), selector)).To(Succeed())
		g.Expect(pods.Items).To(BeEmpty(), "capacity Pods")
		var templates corev1.PodTemplateList
		g.Expect(suite.Client.List(ctx, &templates, client.InNamespace(ns), selector)).To(Succeed())
		g.Expect(templates.Items).To(BeEmpty(), "PodTemplates")
		g.Expect(condition(g, ns, name, tpuv1alpha1.ConditionCapacity)).To(BeNil())
	}, placedWithin, testutil.Interval).Should(Succeed())
}

// expectEvent waits for an Event of reason on rc about slice name.
func expectEvent(ns string, rc *rayv1.RayCluster, name, reason string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(suite.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		g.Expect(slices.ContainsFunc(list.Items, func(e eventsv1.Event) bool {
			return e.Reason == reason && e.Regarding.Name == rc.Name && e.Related != nil && e.Related.Name == name
		})).To(BeTrue(), "an Event %s about slice %s", reason, name)
	}, placedWithin, testutil.Interval).Should(Succeed())
}
