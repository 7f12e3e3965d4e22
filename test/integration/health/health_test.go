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

package health

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/health"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// degradedWithin is how soon after a Node goes NotReady its slices must report Degraded: the
// bind settle (1 s) that coalesces Node events, plus a reconcile.
const degradedWithin = 5 * time.Second

var _ = Describe("Slice health", func() {
	var ns string
	BeforeEach(func() {
		ns = framework.CreateNamespace(ctx, suite.Client, "health")
	})

	It("reports a 4-host slice bound inside one pool Scheduled, Placed and Ready, with Events on the RayCluster", func() {
		rc := cluster(ns, "rc", "tpu-v6e-slice", "4x4", 4)
		nodes := tpuNodes(ns+"-a", "tpu-v6e-slice", "4x4", "pool-a", 4)
		pods := createPods(rc, 4)
		sliceName := naming.SliceName(rc.Name, "tpu", 0)
		expectCondition(ns, sliceName, tpuv1alpha1.ConditionScheduled, metav1.ConditionFalse, tpuv1alpha1.ReasonHostsUnscheduled)
		expectCondition(ns, sliceName, tpuv1alpha1.ConditionPlaced, metav1.ConditionUnknown, tpuv1alpha1.ReasonNoHostScheduled)

		By("the scheduler binds every host into pool-a")
		bindAll(pods, func(id int) string { return nodes[id] })
		expectCondition(ns, sliceName, tpuv1alpha1.ConditionScheduled, metav1.ConditionTrue, tpuv1alpha1.ReasonAllHostsScheduled)
		expectCondition(ns, sliceName, tpuv1alpha1.ConditionPlaced, metav1.ConditionTrue, tpuv1alpha1.ReasonOneDomain)
		expectCondition(ns, sliceName, tpuv1alpha1.ConditionReady, metav1.ConditionFalse, tpuv1alpha1.ReasonHostsNotReady)

		By("the kubelets report every Pod Ready")
		readyAll(pods, true)
		slice := expectCondition(ns, sliceName, tpuv1alpha1.ConditionReady, metav1.ConditionTrue, tpuv1alpha1.ReasonAllHostsReady)
		Expect(apimeta.IsStatusConditionTrue(slice.Status.Conditions, tpuv1alpha1.ConditionClaimed)).To(BeTrue())
		Expect(apimeta.IsStatusConditionFalse(slice.Status.Conditions, tpuv1alpha1.ConditionDegraded)).To(BeTrue())
		Expect(apimeta.FindStatusCondition(slice.Status.Conditions, tpuv1alpha1.ConditionPlaced).Message).
			To(Equal("all 4 hosts on cloud.google.com/gke-nodepool=pool-a"))
		want := make([]string, 0, 4)
		for id := range 4 {
			want = append(want, fmt.Sprintf("%d %s pool-a Ready", id, nodes[id]))
		}
		Expect(slice.Status.Hosts.String()).To(Equal(strings.Join(want, "\n")))
		Expect(slice.Labels).To(HaveKeyWithValue(rayutils.RayClusterLabelKey, rc.Name), "kubectl wait -l ray.io/cluster=<c> finds the slice")
		expectEvents(rc, tpuv1alpha1.ReasonTPUSliceScheduled, tpuv1alpha1.ReasonTPUSlicePlaced, tpuv1alpha1.ReasonTPUSliceReady)
	})

	It("reports a host bound into another pool as Placed=False naming the hosts", func() {
		rc := cluster(ns, "split", "tpu-v6e-slice", "4x4", 4)
		poolA := tpuNodes(ns+"-a", "tpu-v6e-slice", "4x4", "pool-a", 4)
		poolB := tpuNodes(ns+"-b", "tpu-v6e-slice", "4x4", "pool-b", 4)
		pods := createPods(rc, 4)
		bindAll(pods, func(id int) string {
			if id == 3 {
				return poolB[0]
			}
			return poolA[id]
		})
		readyAll(pods, true)
		slice := expectCondition(ns, naming.SliceName(rc.Name, "tpu", 0), tpuv1alpha1.ConditionPlaced, metav1.ConditionFalse, tpuv1alpha1.ReasonSplitDomains)
		Expect(apimeta.FindStatusCondition(slice.Status.Conditions, tpuv1alpha1.ConditionPlaced).Message).
			To(Equal("hosts 0-2 on pool-a, 3 on pool-b (placement key cloud.google.com/gke-nodepool)"))
		Expect(apimeta.IsStatusConditionTrue(slice.Status.Conditions, tpuv1alpha1.ConditionReady)).To(BeTrue(), "a split slice's hosts may all be Ready")
		expectEvents(rc, tpuv1alpha1.ReasonTPUSliceNotPlaced)
	})

	It("reports a Node gone NotReady as Degraded naming the host within seconds, and Ready again once it recovers", func() {
		rc := cluster(ns, "flap", "tpu-v6e-slice", "4x4", 4)
		nodes := tpuNodes(ns+"-a", "tpu-v6e-slice", "4x4", "pool-a", 4)
		pods := createPods(rc, 4)
		sliceName := naming.SliceName(rc.Name, "tpu", 0)
		bindAll(pods, func(id int) string { return nodes[id] })
		readyAll(pods, true)
		expectCondition(ns, sliceName, tpuv1alpha1.ConditionReady, metav1.ConditionTrue, tpuv1alpha1.ReasonAllHostsReady)

		By("host 2's Node goes NotReady")
		Expect(framework.SetNodeReady(ctx, suite.Client, nodes[2], false)).To(Succeed())
		took := timeUntil(ns, sliceName, tpuv1alpha1.ConditionDegraded, metav1.ConditionTrue)
		AddReportEntry("time to report Degraded", took.String())
		GinkgoWriter.Printf("Degraded reported %v after the Node went NotReady\n", took)
		Expect(took).To(BeNumerically("<", degradedWithin))
		slice := getSlice(ns, sliceName)
		degraded := apimeta.FindStatusCondition(slice.Status.Conditions, tpuv1alpha1.ConditionDegraded)
		Expect(degraded.Reason).To(Equal(tpuv1alpha1.ReasonNodeNotReady))
		Expect(degraded.Message).To(Equal(fmt.Sprintf("node not Ready: host 2 (%s)", nodes[2])))
		ready := apimeta.FindStatusCondition(slice.Status.Conditions, tpuv1alpha1.ConditionReady)
		Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		Expect(ready.Reason).To(Equal(tpuv1alpha1.ReasonReadinessLost))

		By("the Node recovers")
		Expect(framework.SetNodeReady(ctx, suite.Client, nodes[2], true)).To(Succeed())
		expectCondition(ns, sliceName, tpuv1alpha1.ConditionDegraded, metav1.ConditionFalse, tpuv1alpha1.ReasonHostsHealthy)
		expectCondition(ns, sliceName, tpuv1alpha1.ConditionReady, metav1.ConditionTrue, tpuv1alpha1.ReasonAllHostsReady)
		expectEvents(rc, tpuv1alpha1.ReasonTPUSliceReady, tpuv1alpha1.ReasonTPUSliceNotReady, tpuv1alpha1.ReasonTPUSliceDegraded, tpuv1alpha1.ReasonTPUSliceRecovered)

		By("GKE's termination taint for host maintenance on host 0's Node")
		Expect(framework.UpdateNode(ctx, suite.Client, nodes[0], func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: health.TaintImpendingNodeTermination, Effect: corev1.TaintEffectNoSchedule})
		}, false)).To(Succeed())
		took = timeUntil(ns, sliceName, tpuv1alpha1.ConditionDegraded, metav1.ConditionTrue)
		Expect(took).To(BeNumerically("<", degradedWithin))
		degraded = apimeta.FindStatusCondition(getSlice(ns, sliceName).Status.Conditions, tpuv1alpha1.ConditionDegraded)
		Expect(degraded.Reason).To(Equal(tpuv1alpha1.ReasonNodeTainted))
		Expect(degraded.Message).To(ContainSubstring("host 0 (" + nodes[0] + ")"))

		By("nothing was deleted, evicted or cordoned for it")
		for _, p := range pods {
			Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{})).To(Succeed())
		}
		for _, n := range nodes {
			var node corev1.Node
			Expect(suite.Client.Get(ctx, client.ObjectKey{Name: n}, &node)).To(Succeed())
			Expect(node.Spec.Unschedulable).To(BeFalse())
		}
		Eventually(func() error { return framework.CheckHealthConverged(ctx, suite.Client, ns) }, testutil.Timeout, testutil.Interval).Should(Succeed())
	})

	It("writes a 1,024-host slice's status at most twice per Pod over its life until Ready", func() {
		const hosts = 1024
		rc := cluster(ns, "big", "tpu-v5p-slice", "16x16x16", hosts)
		sliceName := naming.SliceName(rc.Name, "tpu", 0)
		writes, err := framework.WatchSliceWrites(ctx, suite.Config, ns, sliceName)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(writes.Stop)
		nodes := tpuNodes(ns+"-a", "tpu-v5p-slice", "16x16x16", "pool-a", hosts)
		pods := createPods(rc, hosts)
		expectCondition(ns, sliceName, tpuv1alpha1.ConditionClaimed, metav1.ConditionTrue, tpuv1alpha1.ReasonAllHostsBound)
		claimTotal, _, _ := writes.Counts()

		By("binding every Pod and reporting it Ready, 16 at a time")
		start := time.Now()
		Expect(framework.Parallel(hosts, 16, func(i int) error {
			id := mustAtoi(framework.WorkerID(pods[i]))
			if err := framework.BindPod(ctx, suite.Client, pods[i], nodes[id]); err != nil {
				return err
			}
			return framework.SetPodReady(ctx, suite.Client, pods[i], true)
		})).To(Succeed())
		Eventually(func() bool {
			return apimeta.IsStatusConditionTrue(getSlice(ns, sliceName).Status.Conditions, tpuv1alpha1.ConditionReady)
		}, testutil.LongTimeout, 50*time.Millisecond).Should(BeTrue())
		readyAfter := time.Since(start)
		Consistently(func() int { total, _, _ := writes.Counts(); return total }, 3*time.Second, 100*time.Millisecond).Should(BeNumerically(">", 0))

		total, claimWrites, healthOnly := writes.Counts()
		perPod := float64(total) / hosts
		GinkgoWriter.Printf("1,024-host slice: %d status writes (%d until Claimed; %d changed claims, %d only health), %.2f per Pod; Ready %.1fs after the first bind\n",
			total, claimTotal, claimWrites, healthOnly, perPod, readyAfter.Seconds())
		AddReportEntry("writes per Pod", fmt.Sprintf("%.2f (%d health-only writes), Ready after %.1fs", perPod, healthOnly, readyAfter.Seconds()))
		Expect(perPod).To(BeNumerically("<=", 2), "at most ~2 status writes per Pod over the slice's life")
		Expect(healthOnly).To(BeNumerically("<=", 60), "binding and readiness bursts are coalesced by the bind settle, not written per Pod")
		slice := getSlice(ns, sliceName)
		Expect(slice.Status.Hosts).To(HaveLen(hosts))
		Expect(apimeta.FindStatusCondition(slice.Status.Conditions, tpuv1alpha1.ConditionPlaced).Status).To(Equal(metav1.ConditionTrue))
	})
})

func cluster(ns, name, accelerator, topo string, hosts int32) *rayv1.RayCluster {
	GinkgoHelper()
	rc := testutil.MakeRayCluster(name, ns).TPUGroup("tpu", accelerator, topo, 4, hosts, 1).ManagedByMultiKueue().Obj()
	Expect(suite.Client.Create(ctx, rc)).To(Succeed())
	return rc
}

// tpuNodes creates n Ready TPU Nodes of a pool, named <prefix>-<i>, and returns their names.
func tpuNodes(prefix, accelerator, topo, pool string, n int) []string {
	GinkgoHelper()
	names := make([]string, n)
	Expect(framework.Parallel(n, 16, func(i int) error {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
		return framework.CreateNode(ctx, suite.Client, testutil.MakeNode(names[i]).TPU(accelerator, topo, pool).GCE("block-1", "sb-"+pool).Ready(true).Obj())
	})).To(Succeed())
	DeferCleanup(func() {
		for _, name := range names {
			_ = suite.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}
	})
	return names
}

// createPods creates n worker Pods of rc's group, 8 at a time, and returns them by worker ID.
func createPods(rc *rayv1.RayCluster, n int) []*corev1.Pod {
	GinkgoHelper()
	created := make([]*corev1.Pod, n)
	Expect(framework.Parallel(n, 8, func(i int) error {
		p, _, err := framework.CreateRetrying(ctx, suite.Client, testutil.WorkerPodFor(rc, "tpu").Obj(), testutil.LongTimeout)
		created[i] = p
		return err
	})).To(Succeed())
	byID := make([]*corev1.Pod, n)
	for _, p := range created {
		id := mustAtoi(framework.WorkerID(p))
		Expect(byID[id]).To(BeNil(), "worker ID %d twice", id)
		byID[id] = p
	}
	return byID
}

func bindAll(pods []*corev1.Pod, nodeOf func(id int) string) {
	GinkgoHelper()
	for id, p := range pods {
		Expect(framework.BindPod(ctx, suite.Client, p, nodeOf(id))).To(Succeed())
	}
}

func readyAll(pods []*corev1.Pod, ready bool) {
	GinkgoHelper()
	for _, p := range pods {
		Expect(framework.SetPodReady(ctx, suite.Client, p, ready)).To(Succeed())
	}
}

func getSlice(ns, name string) *tpuv1alpha1.TPUSliceAssignment {
	GinkgoHelper()
	s := &tpuv1alpha1.TPUSliceAssignment{}
	Expect(suite.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
	return s
}

// expectCondition waits until the slice's condition has that status and reason, and returns the slice.
func expectCondition(ns, name, condType string, status metav1.ConditionStatus, reason string) *tpuv1alpha1.TPUSliceAssignment {
	GinkgoHelper()
	var s *tpuv1alpha1.TPUSliceAssignment
	Eventually(func(g Gomega) {
		s = &tpuv1alpha1.TPUSliceAssignment{}
		g.Expect(suite.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
		c := apimeta.FindStatusCondition(s.Status.Conditions, condType)
		g.Expect(c).NotTo(BeNil(), "condition %s", condType)
		g.Expect(c.Status).To(Equal(status), "condition %s: %s", condType, c.Message)
		g.Expect(c.Reason).To(Equal(reason), "condition %s: %s", condType, c.Message)
		g.Expect(c.LastTransitionTime.IsZero()).To(BeFalse())
	}, testutil.Timeout, 50*time.Millisecond).Should(Succeed())
	return s
}

// timeUntil measures how long until the slice's condition has that status, polling every 20 ms.
func timeUntil(ns, name, condType string, status metav1.ConditionStatus) time.Duration {
	GinkgoHelper()
	start := time.Now()
	Eventually(func() metav1.ConditionStatus {
		if c := apimeta.FindStatusCondition(getSlice(ns, name).Status.Conditions, condType); c != nil {
			return c.Status
		}
		return ""
	}, testutil.Timeout, 20*time.Millisecond).Should(Equal(status))
	return time.Since(start)
}

// expectEvents waits until the RayCluster has an Event of each reason.
func expectEvents(rc *rayv1.RayCluster, reasons ...string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(suite.Client.List(ctx, &list, client.InNamespace(rc.Namespace))).To(Succeed())
		got := map[string]bool{}
		for _, e := range list.Items {
			if e.Regarding.Kind == "RayCluster" && e.Regarding.Name == rc.Name {
				got[e.Reason] = true
				g.Expect(e.Related).NotTo(BeNil())
				g.Expect(e.Related.Kind).To(Equal("TPUSliceAssignment"))
			}
		}
		for _, r := range reasons {
			g.Expect(got).To(HaveKey(r), "an Event %s on RayCluster %s", r, rc.Name)
		}
	}, testutil.Timeout, testutil.Interval).Should(Succeed())
}

func mustAtoi(s string) int {
	GinkgoHelper()
	n, err := strconv.Atoi(s)
	Expect(err).NotTo(HaveOccurred())
	return n
}
