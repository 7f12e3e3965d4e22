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
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

var _ = Describe("Claim lifecycle", func() {
	var ns string
	BeforeEach(func() {
		ns = framework.CreateNamespace(ctx, suite.Client, "life")
	})
	AfterEach(func() {
		By("claims equal the live Pods once activity stops (I3)")
		expectClaimsMatchPods(ns)
	})

	It("gives a deleted worker's ID to its replacement", func() {
		rc := cluster(ns, "rc", 4, 1)
		pods := framework.CreatePods(ctx, suite.Client, rc, "tpu", 4)
		framework.ExpectIDs(ctx, suite.Client, ns, map[int32][]int{0: {0, 1, 2, 3}})
		victim := podWithID(pods, "2")
		Expect(suite.Client.Delete(ctx, victim)).To(Succeed())

		replacement := framework.MustCreate(ctx, suite.Client, testutil.WorkerPodFor(rc, "tpu").Obj())
		Expect(framework.WorkerID(replacement)).To(Equal("2"))
		framework.ExpectIDs(ctx, suite.Client, ns, map[int32][]int{0: {0, 1, 2, 3}})
	})

	It("releases the pending claim of a Pod that a later webhook rejected", func() {
		rc := cluster(ns, "rc", 4, 1)
		err := suite.Client.Create(ctx, testutil.WorkerPodFor(rc, "tpu").Label(framework.RejectLabel, "true").Obj())
		Expect(err).To(MatchError(ContainSubstring("rejected by the test's later validating webhook")))
		// The claim, and until the window ends the slice's 3 other IDs reserved with it (docs/spec.md §3.5).
		Expect(framework.ClaimCount(ctx, suite.Client, ns)).To(BeNumerically(">=", 1),
			"the claim was made before the later webhook refused the Pod")

		Eventually(func() int { return framework.ClaimCount(ctx, suite.Client, ns) }, 2*pendingTTL+testutil.Timeout, testutil.Interval).Should(BeZero())
		pod := framework.MustCreate(ctx, suite.Client, testutil.WorkerPodFor(rc, "tpu").Obj())
		Expect(framework.WorkerID(pod)).To(Equal("0"))
	})

	It("gives every generation of a RayCluster deleted and re-created ten times IDs 0..63 in each slice", func() {
		for gen := range 10 {
			By(fmt.Sprintf("generation %d", gen))
			rc := cluster(ns, "again", 64, 2)
			framework.CreatePods(ctx, suite.Client, rc, "tpu", 128)
			report, err := framework.CheckAdmitted(ctx, suite.Client, ns)
			Expect(err).NotTo(HaveOccurred())
			Expect(report.IDs).To(HaveLen(2))
			for slice, ids := range report.IDs {
				Expect(ids).To(Equal(framework.Seq(64)), "slice %s", slice)
			}
			var list tpuv1alpha1.TPUSliceAssignmentList
			Expect(suite.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			for _, s := range list.Items {
				Expect(s.Spec.RayClusterUID).To(Equal(rc.UID))
			}
			// Delete the cluster and, as the garbage collector would, its Pods; re-create at once.
			Expect(suite.Client.Delete(ctx, rc)).To(Succeed())
			Expect(suite.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns),
				client.MatchingLabels{rayutils.RayClusterLabelKey: rc.Name})).To(Succeed())
		}
		Eventually(func() int { return framework.SliceCount(ctx, suite.Client, ns) }, testutil.Timeout, testutil.Interval).Should(BeZero())
	})

	It("follows a group scaled 3 → 1 → 3 replicas", func() {
		rc := cluster(ns, "scale", 4, 3)
		pods := framework.CreatePods(ctx, suite.Client, rc, "tpu", 12)
		framework.ExpectIDs(ctx, suite.Client, ns, map[int32][]int{0: framework.Seq(4), 1: framework.Seq(4), 2: framework.Seq(4)})

		By("scaling down to one replica: KubeRay deletes the Pods of replicas 1 and 2")
		framework.SetReplicas(ctx, suite.Client, rc, 1)
		for _, p := range pods {
			if p.Labels[constants.ReplicaIndexLabel] != "tpu-0" {
				Expect(suite.Client.Delete(ctx, p)).To(Succeed())
			}
		}
		Eventually(func() int { return framework.SliceCount(ctx, suite.Client, ns) }, testutil.Timeout, testutil.Interval).Should(Equal(1),
			"empty slices above the replica count are deleted")

		By("scaling back up to three replicas")
		framework.SetReplicas(ctx, suite.Client, rc, 3)
		framework.CreatePods(ctx, suite.Client, rc, "tpu", 8)
		framework.ExpectIDs(ctx, suite.Client, ns, map[int32][]int{0: framework.Seq(4), 1: framework.Seq(4), 2: framework.Seq(4)})
	})

	It("records a late Pod whose slice was deleted while its create was in flight", func() {
		rc := cluster(ns, "late", 4, 2)
		framework.CreatePods(ctx, suite.Client, rc, "tpu", 4)
		By("the first Pod of replica 1 is held 6 s by a slower webhook after its claim")
		var heldErr error
		var wg sync.WaitGroup
		wg.Go(func() {
			heldErr = suite.Client.Create(ctx, testutil.WorkerPodFor(rc, "tpu").Label(framework.DelayLabel, "6s").Obj())
		})
		Eventually(func() int { return framework.SliceCount(ctx, suite.Client, ns) }, testutil.Timeout, 10*time.Millisecond).Should(Equal(2))
		By("scaled down meanwhile: once the claim's TTL runs out, the empty replica 1 is deleted")
		framework.SetReplicas(ctx, suite.Client, rc, 1)
		Eventually(func() int { return framework.SliceCount(ctx, suite.Client, ns) }, testutil.Timeout, testutil.Interval).Should(Equal(1))
		wg.Wait()
		Expect(heldErr).NotTo(HaveOccurred())
		By("the late Pod's slice is re-created with its claim (I3 holds)")
		Eventually(func() int { return framework.SliceCount(ctx, suite.Client, ns) }, testutil.Timeout, testutil.Interval).Should(Equal(2))
		expectClaimsMatchPods(ns)
	})

	It("deletes a late Pod whose ID another Pod took after its claim expired, and only that Pod", func() {
		rc := cluster(ns, "taken", 4, 1)
		first := framework.CreatePods(ctx, suite.Client, rc, "tpu", 3)
		var late *corev1.Pod
		var wg sync.WaitGroup
		wg.Go(func() {
			p := testutil.WorkerPodFor(rc, "tpu").Label(framework.DelayLabel, "6s").Obj()
			Expect(suite.Client.Create(ctx, p)).To(Succeed())
			late = p
		})
		Eventually(func() int { return framework.ClaimCount(ctx, suite.Client, ns) }, testutil.Timeout, 10*time.Millisecond).Should(Equal(4))
		By("its claim expires before its create commits; another Pod takes the ID")
		Eventually(func() int { return framework.ClaimCount(ctx, suite.Client, ns) }, testutil.Timeout, testutil.Interval).Should(Equal(3))
		taker := framework.MustCreate(ctx, suite.Client, testutil.WorkerPodFor(rc, "tpu").Obj())
		wg.Wait()
		Expect(framework.WorkerID(late)).To(Equal(framework.WorkerID(taker)))
		By("the late Pod is deleted; the Pods that hold their IDs are not")
		Eventually(func() bool {
			return apierrors.IsNotFound(suite.Client.Get(ctx, client.ObjectKeyFromObject(late), &corev1.Pod{}))
		}, testutil.Timeout, testutil.Interval).Should(BeTrue())
		for _, p := range append(first, taker) {
			Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{})).To(Succeed())
		}
		framework.ExpectIDs(ctx, suite.Client, ns, map[int32][]int{0: framework.Seq(4)})
	})

	It("takes the ID away from a Failed Pod", func() {
		rc := cluster(ns, "rc", 4, 1)
		pods := framework.CreatePods(ctx, suite.Client, rc, "tpu", 4)
		framework.ExpectBound(ctx, suite.Client, ns, 4)
		failed := podWithID(pods, "1")
		failed.Status.Phase = corev1.PodFailed
		Expect(suite.Client.Status().Update(ctx, failed)).To(Succeed())
		Eventually(func() int { return framework.ClaimCount(ctx, suite.Client, ns) }, testutil.Timeout, testutil.Interval).Should(Equal(3))

		replacement := framework.MustCreate(ctx, suite.Client, testutil.WorkerPodFor(rc, "tpu").Obj())
		Expect(framework.WorkerID(replacement)).To(Equal("1"))
	})

	It("records a few Events when a 64-host slice is bound, not one per Pod", func() {
		// docs/spec.md §8: at most 8 Events on single claims of a kind per reconcile, one Event on the
		// RayCluster above. One per Pod was an API write each, posted all at once beside the creates.
		rc := cluster(ns, "events", 64, 1)
		framework.CreatePods(ctx, suite.Client, rc, "tpu", 64)
		framework.ExpectBound(ctx, suite.Client, ns, 64)
		assigned := func() int { return len(eventsRegarding(ns, tpuv1alpha1.ReasonTPUWorkerIDAssigned)) }
		Eventually(assigned, testutil.Timeout, testutil.Interval).Should(BeNumerically(">=", 1))
		Consistently(assigned, 2*time.Second, testutil.Interval).Should(BeNumerically("<=", 16),
			"64 claims bound in a few reconciles record a few Events")
		Expect(eventsRegarding(ns, tpuv1alpha1.ReasonTPUWorkerIDAssigned)).To(ContainElement(rc.Name),
			"a reconcile that binds more than 8 claims records one Event on the RayCluster")

		By("deleting the RayCluster's Pods, as the garbage collector would")
		Expect(suite.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns))).To(Succeed())
		Eventually(func() int { return framework.ClaimCount(ctx, suite.Client, ns) }, testutil.Timeout, testutil.Interval).Should(BeZero())
		released := func() int { return len(eventsRegarding(ns, tpuv1alpha1.ReasonTPUClaimReleased)) }
		// Releases are not settled (fast release): a deletion that trickles in is released over
		// many reconciles, each with its own Events, so their number is not bounded here; the
		// summing up is TestClaimEvents'.
		Eventually(released, testutil.Timeout, testutil.Interval).Should(BeNumerically(">=", 1))
	})

	It("loses nothing when operator instances restart in the middle of a slice's admission", func() {
		rc := cluster(ns, "restart", 64, 1)
		var wg sync.WaitGroup
		wg.Go(func() { framework.CreatePods(ctx, suite.Client, rc, "tpu", 64) })
		Eventually(func() int { return framework.ClaimCount(ctx, suite.Client, ns) }, testutil.Timeout, testutil.Interval/10).Should(BeNumerically(">=", 8))
		By("stopping the reconciler's instance and one webhook instance while Pods are being admitted")
		for i := range 2 {
			Expect(suite.Instances[i].Stop()).To(Succeed())
			inst, err := suite.StartInstance(ctx, replicas(i))
			Expect(err).NotTo(HaveOccurred())
			suite.Instances[i] = inst
			suite.ServeWebhooksFrom(suite.Instances...)
		}
		wg.Wait()
		framework.ExpectIDs(ctx, suite.Client, ns, map[int32][]int{0: framework.Seq(64)})
	})
})

func cluster(ns, name string, hosts, replicas int32) *rayv1.RayCluster {
	GinkgoHelper()
	topo := map[int32]string{4: "4x4", 64: "16x16"}[hosts]
	rc := testutil.MakeRayCluster(name, ns).TPUGroup("tpu", "tpu-v6e-slice", topo, 4, hosts, replicas).ManagedByMultiKueue().Obj()
	Expect(suite.Client.Create(ctx, rc)).To(Succeed())
	return rc
}

func podWithID(pods []*corev1.Pod, id string) *corev1.Pod {
	GinkgoHelper()
	i := slices.IndexFunc(pods, func(p *corev1.Pod) bool { return framework.WorkerID(p) == id })
	Expect(i).To(BeNumerically(">=", 0), "a Pod with worker ID %s", id)
	return pods[i]
}

func expectClaimsMatchPods(ns string) {
	GinkgoHelper()
	Eventually(func() error { return framework.CheckClaimsMatchPods(ctx, suite.Client, ns) },
		2*pendingTTL+testutil.Timeout, testutil.Interval).Should(Succeed())
}

// eventsRegarding returns the names of the objects Events of reason in ns are about, one per Event.
func eventsRegarding(ns, reason string) []string {
	GinkgoHelper()
	var list eventsv1.EventList
	Expect(suite.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	var names []string
	for _, e := range list.Items {
		if e.Reason == reason {
			names = append(names, e.Regarding.Name)
		}
	}
	return names
}
