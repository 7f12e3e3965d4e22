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
	"strconv"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/controllers"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// A user isolates a worker Pod for debugging by removing one of KubeRay's labels (docs/spec.md §8,
// docs/operations.md): the Pod leaves the operator's label-selected cache and KubeRay's view, and
// its informer reports it DELETED, but it runs on. Its claim stays, nobody else gets its ID, and
// restoring the label deletes nothing.
var _ = Describe("A Pod isolated by removing a KubeRay label", func() {
	var ns string
	BeforeEach(func() {
		ns = framework.CreateNamespace(ctx, suite.Client, "isolate")
	})
	AfterEach(func() {
		By("claims equal the live Pods, the isolated one included (I3), I1 and I2")
		expectSettled(ns)
	})

	DescribeTable("keeps its claim while pending and bound, and is not deleted when the label is restored",
		func(label string) {
			rc := cluster(ns, "iso", "4x4", 4, 4, 1)
			watcher, err := suite.WatchI1(ctx, ns, nil)
			Expect(err).NotTo(HaveOccurred())
			defer watcher.Stop()

			By("kubectl label pod P " + label + "- right after P's create, while its claim is pending")
			p := framework.MustCreate(ctx, suite.Client, testutil.WorkerPodFor(rc, "tpu").Obj())
			value := p.Labels[label]
			setLabel(p, label, "")
			id := framework.WorkerID(p)

			By("P's claim is not released: it stays on P's worker ID, and is bound to P once the burst settles")
			Consistently(func() string { return holderOf(ns, id, p) }, 2*controllers.DefaultBindSettle, testutil.Interval).Should(Equal("P"))
			Eventually(func() types.UID { return claimsOf(ns)[int32FromString(id)] }, testutil.Timeout, testutil.Interval).Should(Equal(p.UID))

			By("the next Pods of the slice get the other IDs, and the slice is then full")
			others := framework.CreatePods(ctx, suite.Client, rc, "tpu", 3)
			for _, o := range others {
				Expect(framework.WorkerID(o)).NotTo(Equal(id), "Pod %s got the isolated Pod's ID", o.Name)
			}
			err = suite.Client.Create(ctx, testutil.WorkerPodFor(rc, "tpu").Obj())
			Expect(err).To(MatchError(ContainSubstring("fully claimed")))

			By("a bound Pod's " + label + " label removed too: nothing released")
			bound := others[1]
			boundValue := bound.Labels[label]
			before := claimsOf(ns)
			setLabel(bound, label, "")
			Consistently(func() map[int32]types.UID { return claimsOf(ns) }, 2*controllers.DefaultBindSettle, testutil.Interval).Should(Equal(before))

			By("restoring both labels deletes nothing and changes no claim")
			setLabel(p, label, value)
			setLabel(bound, label, boundValue)
			Consistently(func() map[int32]types.UID { return claimsOf(ns) }, 2*controllers.DefaultBindSettle, testutil.Interval).Should(Equal(before))
			Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{})).To(Succeed(), "P is running")

			watcher.Stop()
			Expect(watcher.Violations()).To(BeEmpty(), "I1 on every Pod event")
			Expect(watcher.Deleted()).To(BeEmpty(), "I6: the operator deleted a running Pod")
		},
		Entry("ray.io/group", rayutils.RayNodeGroupLabelKey),
		Entry("ray.io/cluster", rayutils.RayClusterLabelKey),
		Entry("ray.io/node-type", rayutils.RayNodeTypeLabelKey),
	)
})

// setLabel patches label on pod to value, or removes it when value is empty.
func setLabel(pod *corev1.Pod, label, value string) {
	GinkgoHelper()
	patch := client.MergeFrom(pod.DeepCopy())
	if value == "" {
		delete(pod.Labels, label)
	} else {
		pod.Labels[label] = value
	}
	Expect(suite.Client.Patch(ctx, pod, patch)).To(Succeed())
}

// holderOf says who holds worker ID id in the namespace's only slice: "P" when the claim is pod's
// (bound to its UID, or pending with its claim token), "none" or the other Pod's name otherwise.
func holderOf(ns, id string, pod *corev1.Pod) string {
	GinkgoHelper()
	var list tpuv1alpha1.TPUSliceAssignmentList
	Expect(suite.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	Expect(list.Items).To(HaveLen(1))
	for _, c := range list.Items[0].Status.Claims {
		if c.WorkerID != int32FromString(id) {
			continue
		}
		if c.PodUID == pod.UID || (c.PodUID == "" && c.Token == pod.Annotations[tpuv1alpha1.ClaimTokenAnnotation]) {
			return "P"
		}
		return "claim " + c.Token + " of Pod " + c.PodName
	}
	return "none"
}

func int32FromString(s string) int32 {
	GinkgoHelper()
	n, err := strconv.ParseInt(s, 10, 32)
	Expect(err).NotTo(HaveOccurred())
	return int32(n)
}
