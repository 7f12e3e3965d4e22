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

package lifecycle

import (
	"fmt"
	"slices"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

var _ = Describe("Claim lifecycle", func() {
	var ns string
	BeforeEach(func() {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "life-"}}
		Expect(k8sClient.Create(ctx, n)).To(Succeed())
		ns = n.Name
	})
	AfterEach(func() {
		By("claims equal the live Pods once activity stops (I3)")
		expectClaimsMatchPods(ns)
	})

	It("gives a deleted worker's ID to its replacement", func() {
		rc := cluster(ns, "rc", 4, 1)
		pods := createPods(rc, 4)
		expectIDs(ns, map[int32][]int{0: {0, 1, 2, 3}})
		victim := podWithID(pods, "2")
		Expect(k8sClient.Delete(ctx, victim)).To(Succeed())

		replacement := mustCreate(testutil.WorkerPodFor(rc, "tpu").Obj())
		Expect(workerID(replacement)).To(Equal("2"))
		expectIDs(ns, map[int32][]int{0: {0, 1, 2, 3}})
	})

	It("releases the pending claim of a Pod that a later webhook rejected", func() {
		rc := cluster(ns, "rc", 4, 1)
		err := k8sClient.Create(ctx, testutil.WorkerPodFor(rc, "tpu").Label(framework.RejectLabel, "true").Obj())
		Expect(err).To(MatchError(ContainSubstring("rejected by the test's later validating webhook")))
		Expect(claimCount(ns)).To(Equal(1), "the claim was made before the later webhook refused the Pod")

		Eventually(func() int { return claimCount(ns) }, 2*pendingTTL+testutil.Timeout, testutil.Interval).Should(BeZero())
		pod := mustCreate(testutil.WorkerPodFor(rc, "tpu").Obj())
		Expect(workerID(pod)).To(Equal("0"))
	})

	It("gives every generation of a RayCluster deleted and re-created ten times IDs 0..63 in each slice", func() {
		for gen := range 10 {
			By(fmt.Sprintf("generation %d", gen))
			rc := cluster(ns, "again", 64, 2)
			createPods(rc, 128)
			report, err := framework.CheckAdmitted(ctx, k8sClient, ns)
			Expect(err).NotTo(HaveOccurred())
			Expect(report.IDs).To(HaveLen(2))
			for slice, ids := range report.IDs {
				Expect(ids).To(Equal(seq(64)), "slice %s", slice)
			}
			var list tpuv1alpha1.TPUSliceAssignmentList
			Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			for _, s := range list.Items {
				Expect(s.Spec.RayClusterUID).To(Equal(rc.UID))
			}
			// Delete the cluster and, as the garbage collector would, its Pods; re-create at once.
			Expect(k8sClient.Delete(ctx, rc)).To(Succeed())
			Expect(k8sClient.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns),
				client.MatchingLabels{rayutils.RayClusterLabelKey: rc.Name})).To(Succeed())
		}
		Eventually(func() int { return sliceCount(ns) }, testutil.Timeout, testutil.Interval).Should(BeZero())
	})

	It("follows a group scaled 3 → 1 → 3 replicas", func() {
		rc := cluster(ns, "scale", 4, 3)
		pods := createPods(rc, 12)
		expectIDs(ns, map[int32][]int{0: seq(4), 1: seq(4), 2: seq(4)})

		By("scaling down to one replica: KubeRay deletes the Pods of replicas 1 and 2")
		setReplicas(rc, 1)
		for _, p := range pods {
			if p.Labels[constants.ReplicaIndexLabel] != "tpu-0" {
				Expect(k8sClient.Delete(ctx, p)).To(Succeed())
			}
		}
		Eventually(func() int { return sliceCount(ns) }, testutil.Timeout, testutil.Interval).Should(Equal(1),
			"empty slices above the replica count are deleted")

		By("scaling back up to three replicas")
		setReplicas(rc, 3)
		createPods(rc, 8)
		expectIDs(ns, map[int32][]int{0: seq(4), 1: seq(4), 2: seq(4)})
	})

	It("takes the ID away from a Failed Pod", func() {
		rc := cluster(ns, "rc", 4, 1)
		pods := createPods(rc, 4)
		expectBound(ns, 4)
		failed := podWithID(pods, "1")
		failed.Status.Phase = corev1.PodFailed
		Expect(k8sClient.Status().Update(ctx, failed)).To(Succeed())
		Eventually(func() int { return claimCount(ns) }, testutil.Timeout, testutil.Interval).Should(Equal(3))

		replacement := mustCreate(testutil.WorkerPodFor(rc, "tpu").Obj())
		Expect(workerID(replacement)).To(Equal("1"))
	})

	It("loses nothing when operator instances restart in the middle of a slice's admission", func() {
		rc := cluster(ns, "restart", 64, 1)
		var wg sync.WaitGroup
		wg.Go(func() { createPods(rc, 64) })
		Eventually(func() int { return claimCount(ns) }, testutil.Timeout, testutil.Interval/10).Should(BeNumerically(">=", 8))
		By("stopping the reconciler's instance and one webhook instance while Pods are being admitted")
		for i := range 2 {
			Expect(instances[i].Stop()).To(Succeed())
			inst, err := env.StartInstance(ctx, instanceOptions(i == 0))
			Expect(err).NotTo(HaveOccurred())
			instances[i] = inst
			env.ServeWebhooksFrom(instances...)
		}
		wg.Wait()
		expectIDs(ns, map[int32][]int{0: seq(64)})
	})
})

func cluster(ns, name string, hosts, replicas int32) *rayv1.RayCluster {
	GinkgoHelper()
	topo := map[int32]string{4: "4x4", 64: "16x16"}[hosts]
	rc := testutil.MakeRayCluster(name, ns).TPUGroup("tpu", "tpu-v6e-slice", topo, 4, hosts, replicas).ManagedByMultiKueue().Obj()
	Expect(k8sClient.Create(ctx, rc)).To(Succeed())
	return rc
}

func setReplicas(rc *rayv1.RayCluster, n int32) {
	GinkgoHelper()
	Eventually(func() error {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(rc), rc); err != nil {
			return err
		}
		rc.Spec.WorkerGroupSpecs[0].Replicas = ptr.To(n)
		return k8sClient.Update(ctx, rc)
	}, testutil.Timeout, testutil.Interval).Should(Succeed())
}

// mustCreate creates a Pod, retrying transient denials as KubeRay would, and returns the stored Pod.
func mustCreate(pod *corev1.Pod) *corev1.Pod {
	GinkgoHelper()
	var created *corev1.Pod
	Eventually(func() error {
		p := pod.DeepCopy() // a failed attempt must not leave a half-mutated Pod for the next
		if err := k8sClient.Create(ctx, p); err != nil {
			return err
		}
		created = p
		return nil
	}, testutil.Timeout, testutil.Interval).Should(Succeed())
	return created
}

// createPods creates n worker Pods of rc's TPU group concurrently, retrying transient failures
// (denials, a webhook instance restarting) as KubeRay would, and returns them.
func createPods(rc *rayv1.RayCluster, n int) []*corev1.Pod {
	GinkgoHelper()
	out := make([]*corev1.Pod, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			defer GinkgoRecover()
			for range 50 {
				pod := testutil.WorkerPodFor(rc, "tpu").Obj()
				if errs[i] = k8sClient.Create(ctx, pod); errs[i] == nil {
					out[i] = pod
					return
				}
				time.Sleep(testutil.Interval)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		Expect(err).NotTo(HaveOccurred())
	}
	return out
}

func workerID(p *corev1.Pod) string {
	v, _ := framework.WorkerEnv(p, constants.EnvWorkerID)
	return v
}

func podWithID(pods []*corev1.Pod, id string) *corev1.Pod {
	GinkgoHelper()
	i := slices.IndexFunc(pods, func(p *corev1.Pod) bool { return workerID(p) == id })
	Expect(i).To(BeNumerically(">=", 0), "a Pod with worker ID %s", id)
	return pods[i]
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// expectIDs checks I1/I2 and that each replica's live Pods have exactly the wanted IDs.
func expectIDs(ns string, want map[int32][]int) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		report, err := framework.CheckAdmitted(ctx, k8sClient, ns)
		g.Expect(err).NotTo(HaveOccurred())
		var list tpuv1alpha1.TPUSliceAssignmentList
		g.Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		got := map[int32][]int{}
		for _, s := range list.Items {
			if ids := report.IDs[s.Name]; len(ids) > 0 {
				got[s.Spec.ReplicaIndex] = ids
			}
		}
		g.Expect(got).To(Equal(want))
	}, testutil.Timeout, testutil.Interval).Should(Succeed())
}

func expectBound(ns string, n int) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var list tpuv1alpha1.TPUSliceAssignmentList
		g.Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		bound := 0
		for _, s := range list.Items {
			for _, c := range s.Status.Claims {
				if c.PodUID != "" {
					bound++
				}
			}
		}
		g.Expect(bound).To(Equal(n))
	}, testutil.Timeout, testutil.Interval).Should(Succeed())
}

func expectClaimsMatchPods(ns string) {
	GinkgoHelper()
	Eventually(func() error { return framework.CheckClaimsMatchPods(ctx, k8sClient, ns) },
		2*pendingTTL+testutil.Timeout, testutil.Interval).Should(Succeed())
}

func claimCount(ns string) int {
	var list tpuv1alpha1.TPUSliceAssignmentList
	Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	n := 0
	for _, s := range list.Items {
		n += len(s.Status.Claims)
	}
	return n
}

func sliceCount(ns string) int {
	var list tpuv1alpha1.TPUSliceAssignmentList
	Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	return len(list.Items)
}
