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

package identity

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

var _ = Describe("No request can destroy live claims", func() {
	var ns string
	BeforeEach(func() {
		ns = framework.CreateNamespace(ctx, suite.Client, "guards")
	})

	It("refuses a Pod of another host count next to a running slice, and deletes none of its Pods", func() {
		rc := testutil.MakeRayCluster("v4", ns).TPUGroup("tpu", "tpu-v4-podslice", "2x2x4", 4, 4, 1).ManagedByMultiKueue().Obj()
		Expect(suite.Client.Create(ctx, rc)).To(Succeed())
		running := framework.CreatePods(ctx, suite.Client, rc, "tpu", 4)
		framework.ExpectBound(ctx, suite.Client, ns, 4)
		before := claimsOf(ns)

		By("a Pod of the same group whose topology gives 1 host, where the group's numOfHosts is 4")
		odd := testutil.WorkerPodFor(rc, "tpu").Topology("tpu-v4-podslice", "2x2x1").Obj()
		err := suite.Client.Create(ctx, odd)
		Expect(err).To(MatchError(And(ContainSubstring("topology 2x2x1 gives 1 hosts per slice"), ContainSubstring("has numOfHosts 4"))))

		By("three such AdmissionReviews posted straight to a webhook instance, with no credentials")
		for i := range 3 {
			answer, err := suite.PostAdmission(ctx, suite.Instances[i%len(suite.Instances)], podReview(ns, odd))
			Expect(err).NotTo(HaveOccurred())
			Expect(answer.Response.Allowed).To(BeFalse())
		}
		Consistently(func() map[int32]types.UID { return claimsOf(ns) }, 3*time.Second, testutil.Interval).Should(Equal(before))

		By("the group's template changed to 1 host while its replica of 4 runs: a Pod of the new template")
		Eventually(func() error {
			if err := suite.Client.Get(ctx, client.ObjectKeyFromObject(rc), rc); err != nil {
				return err
			}
			rc.Spec.WorkerGroupSpecs[0].NumOfHosts = 1
			rc.Spec.WorkerGroupSpecs[0].Template.Spec.NodeSelector[constants.TopologyNodeSelectorKey] = "2x2x1"
			return suite.Client.Update(ctx, rc)
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
		err = suite.Client.Create(ctx, testutil.WorkerPodFor(rc, "tpu").Obj())
		Expect(err).To(MatchError(And(ContainSubstring("gives 1 hosts per slice"), ContainSubstring("a slice of 4 hosts"),
			ContainSubstring("delete the group's old replicas"))))
		Expect(claimsOf(ns)).To(Equal(before))
		for _, p := range running {
			Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{})).To(Succeed(), "Pod %s still runs", p.Name)
		}
		expectSettled(ns)
	})

	It("never lets a create of a deleted RayCluster generation touch the new one's slices", func() {
		rc := cluster(ns, "regen", "4x4", 4, 4, 1)
		watcher := watchI1(ns)
		defer watcher.Stop()

		By("a create of the first generation held 4 s in a slower webhook after our claim")
		held := testutil.WorkerPodFor(rc, "tpu").Label(framework.DelayLabel, "4s").Obj()
		var heldErr error
		var wg sync.WaitGroup
		wg.Go(func() { heldErr = suite.Client.Create(ctx, held) })
		// The claim, with the slice's other IDs reserved in the same write (docs/spec.md §3.5).
		Eventually(func() int { return framework.ClaimCount(ctx, suite.Client, ns) }, testutil.Timeout, 10*time.Millisecond).Should(BeNumerically(">=", 1))

		By("the RayCluster deleted and re-created under the same name; the new generation fills its slice")
		Expect(suite.Client.Delete(ctx, rc)).To(Succeed())
		second := cluster(ns, "regen", "4x4", 4, 4, 1)
		Expect(second.UID).NotTo(Equal(rc.UID))
		framework.CreatePods(ctx, suite.Client, second, "tpu", 4)
		wg.Wait()
		Expect(heldErr).NotTo(HaveOccurred(), "the held create commits, as the API server allows")

		By("the old generation's Pod holds nothing of the new slice, and the new Pods keep their IDs")
		current := func() error {
			_, err := framework.CheckAdmittedPods(ctx, suite.Client, ns, func(p *corev1.Pod) bool {
				return identityOf(p).ClusterUID == second.UID
			})
			return err
		}
		Consistently(current, 3*time.Second, testutil.Interval).Should(Succeed())
		framework.ExpectBound(ctx, suite.Client, ns, 4)
		Expect(sliceOf(ns).Spec.RayClusterUID).To(Equal(second.UID))

		By("a create naming the deleted RayCluster is refused")
		late := testutil.WorkerPodFor(rc, "tpu").Obj()
		Expect(suite.Client.Create(ctx, late)).To(MatchError(ContainSubstring("has been deleted")))

		By("so is a forwarded claim naming it, whatever the caller says")
		status, body, err := suite.ForwardClaim(ctx, suite.Instances[1], allocator.Request{
			Namespace: ns, ClusterName: "regen", ClusterUID: rc.UID, GroupName: "tpu", Hosts: 4, Topology: "4x4",
			Claim: claims.Request{Token: "forged-token"},
		}, 2*time.Second)
		Expect(err).NotTo(HaveOccurred())
		Expect(status).To(Equal(http.StatusOK))
		Expect(string(body)).To(ContainSubstring("has been deleted"))
		Expect(watcher.Violations()).To(BeEmpty(), "I1 on every Pod event")
	})

	It("never lets a Pod of an older KubeRay replica replace the newer one", func() {
		rc := cluster(ns, "gate", "4x4", 4, 4, 1)
		indexed := func(name string, host int32) *corev1.Pod {
			return testutil.WorkerPodFor(rc, "tpu").KubeRayIndexes(0, name, host).Obj()
		}
		first := make([]*corev1.Pod, 0, 4)
		for h := range int32(4) {
			first = append(first, framework.MustCreate(ctx, suite.Client, indexed("tpu-aaaaa", h)))
		}
		By("KubeRay replaces the replica whole under a new name")
		for _, p := range first {
			Expect(suite.Client.Delete(ctx, p)).To(Succeed())
		}
		for h := range int32(4) {
			framework.MustCreate(ctx, suite.Client, indexed("tpu-bbbbb", h))
		}
		Expect(sliceOf(ns).Spec.ReplacedReplicaNames).To(Equal([]string{"tpu-aaaaa"}))
		By("a late create of the old replica is refused and replaces nothing")
		Expect(suite.Client.Create(ctx, indexed("tpu-aaaaa", 2))).To(MatchError(ContainSubstring("has already replaced")))
		Expect(sliceOf(ns).Spec.ReplicaName).To(Equal("tpu-bbbbb"))
		expectSettled(ns)
	})

	It("refuses a 10,000-host topology at Pod admission and in RayCluster validation", func() {
		big := testutil.MakeRayCluster("huge", ns).TPUGroup("tpu", "tpu-v5p-slice", "20x20x100", 4, 10_000, 1).ManagedByMultiKueue().Obj()
		Expect(suite.Client.Create(ctx, big)).To(MatchError(ContainSubstring("2400")))
		rc := cluster(ns, "small", "4x4", 4, 4, 1)
		pod := testutil.WorkerPodFor(rc, "tpu").Topology("tpu-v5p-slice", "20x20x100").Obj()
		Expect(suite.Client.Create(ctx, pod)).To(MatchError(ContainSubstring("--max-slice-hosts=2400")))
		Expect(framework.SliceCount(ctx, suite.Client, ns)).To(BeZero())
	})

	It("never shares a slice object between two groups whose slice names collide, and says so at once", func() {
		rc := cluster(ns, "col", "4x4", 4, 4, 1)
		other := cluster(ns, "other", "4x4", 4, 4, 1)
		other.Spec.WorkerGroupSpecs[0].GroupName = "x"
		Expect(suite.Client.Update(ctx, other)).To(Succeed())
		squatter := claims.NewSlice(ns, tpuv1alpha1.TPUSliceAssignmentSpec{
			RayClusterName: "other", RayClusterUID: other.UID, GroupName: "x", ReplicaIndex: 0, Hosts: 4, Topology: "4x4",
		})
		squatter.Name = naming.SliceName("col", "tpu", 0) // as if the shortened names collided
		Expect(suite.Client.Create(ctx, squatter)).To(Succeed())
		start := time.Now()
		err := suite.Client.Create(ctx, testutil.WorkerPodFor(rc, "tpu").Obj())
		Expect(err).To(MatchError(ContainSubstring("is taken by replica 0 of RayCluster other group x")))
		Expect(time.Since(start)).To(BeNumerically("<", 2*time.Second), "refused at once, not retried to the deadline")
		Expect(apierrors.IsForbidden(err)).To(BeTrue())
	})
})

// podReview is the AdmissionReview the API server would send for creating pod in ns.
func podReview(ns string, pod *corev1.Pod) *admissionv1.AdmissionReview {
	GinkgoHelper()
	raw, err := json.Marshal(pod)
	Expect(err).NotTo(HaveOccurred())
	return &admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("forged-" + time.Now().Format(time.RFC3339Nano)), Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: ns, Operation: admissionv1.Create,
			Object: runtime.RawExtension{Raw: raw},
		},
	}
}

func sliceOf(ns string) *tpuv1alpha1.TPUSliceAssignment {
	GinkgoHelper()
	var list tpuv1alpha1.TPUSliceAssignmentList
	Expect(suite.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	Expect(list.Items).To(HaveLen(1))
	return &list.Items[0]
}

// watchI1 starts the framework's I1Watcher on the namespace's Pods labeled as KubeRay workers.
func watchI1(ns string) *framework.I1Watcher {
	GinkgoHelper()
	w, err := suite.WatchI1(ctx, ns, func(p *corev1.Pod) bool { return p.Labels[rayutils.RayNodeTypeLabelKey] == "worker" })
	Expect(err).NotTo(HaveOccurred())
	return w
}
