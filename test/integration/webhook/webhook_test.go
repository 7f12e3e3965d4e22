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

package webhook

import (
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

func newNamespace() string {
	return framework.CreateNamespace(ctx, suite.Client, "tpu")
}

// createCluster creates a RayCluster that KubeRay's controller leaves alone: these tests create
// the worker Pods themselves, shaped exactly like KubeRay's.
func createCluster(rc *rayv1.RayCluster) *rayv1.RayCluster {
	Expect(suite.Client.Create(ctx, rc)).To(Succeed())
	return rc
}

func workerPod(rc *rayv1.RayCluster, group string) *testutil.PodWrapper {
	GinkgoHelper()
	p := testutil.WorkerPodFor(rc, group)
	Expect(p).NotTo(BeNil(), "group %s", group)
	return p
}

func env1(pod *corev1.Pod, name string) string {
	v, _ := framework.WorkerEnv(pod, name)
	return v
}

var _ = Describe("RayCluster validation", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("accepts a valid TPU cluster and a CPU cluster", func() {
		createCluster(testutil.MakeRayCluster("v6e", ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 2).ManagedByMultiKueue().Obj())
		createCluster(testutil.MakeRayCluster("cpu", ns).CPUGroup("cpu", 3).ManagedByMultiKueue().Obj())
	})

	It("refuses numOfHosts that disagrees with the topology, with a field error, at CREATE and UPDATE", func() {
		rc := testutil.MakeRayCluster("bad", ns).CPUGroup("cpu", 1).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 2, 1).ManagedByMultiKueue().Obj()
		err := suite.Client.Create(ctx, rc)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring("spec.workerGroupSpecs[1].numOfHosts: Invalid value: 2: topology 4x4 has 16 chips and each Pod requests 4, so the slice needs numOfHosts 4"))

		good := createCluster(testutil.MakeRayCluster("good", ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 1).ManagedByMultiKueue().Obj())
		good.Spec.WorkerGroupSpecs[0].NumOfHosts = 3
		err = suite.Client.Update(ctx, good)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring("spec.workerGroupSpecs[0].numOfHosts: Invalid value: 3"))
	})
})

var _ = Describe("TPU worker Pod admission", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("gives a KubeRay-shaped multi-host Pod its identity and records the claim", func() {
		rc := createCluster(testutil.MakeRayCluster("rc", ns).TPUGroup("tpu-group", "tpu-v6e-slice", "4x4", 4, 4, 2).ManagedByMultiKueue().Obj())
		pod := workerPod(rc, "tpu-group").Obj()
		Expect(suite.Client.Create(ctx, pod)).To(Succeed())

		Expect(env1(pod, constants.EnvWorkerID)).To(Equal("0"))
		Expect(env1(pod, constants.EnvName)).To(Equal("tpu-group-0"))
		Expect(env1(pod, constants.EnvWorkerHostnames)).To(Equal(
			"tpu-group-0-0.rc-headless,tpu-group-0-1.rc-headless,tpu-group-0-2.rc-headless,tpu-group-0-3.rc-headless"))
		Expect(pod.Spec.Hostname).To(Equal("tpu-group-0-0"))
		Expect(pod.Spec.Subdomain).To(Equal("rc-headless"))
		Expect(pod.Labels).To(HaveKeyWithValue(constants.ReplicaIndexLabel, "tpu-group-0"))
		Expect(pod.Annotations).To(HaveKey(tpuv1alpha1.ClaimTokenAnnotation))

		var slice tpuv1alpha1.TPUSliceAssignment
		Expect(suite.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: pod.Labels[tpuv1alpha1.SliceLabel]}, &slice)).To(Succeed())
		Expect(slice.Spec.RayClusterUID).To(Equal(rc.UID))
		By("the write claimed ID 0 under the Pod's token and reserved the slice's other 3 IDs (docs/spec.md §3.5)")
		Expect(slice.Status.Claims).To(HaveLen(4))
		Expect(slice.Status.Claims[0].Token).To(Equal(identity.Token(pod)))
		Expect(slice.OwnerReferences).To(ContainElement(HaveField("UID", rc.UID)))

		By("binding the claim to the Pod, and giving the unused reserved IDs back once the window ends")
		Eventually(func(g Gomega) {
			g.Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(&slice), &slice)).To(Succeed())
			g.Expect(slice.Status.Claims).To(HaveLen(1))
			g.Expect(slice.Status.Claims[0].PodUID).To(Equal(pod.UID))
		}, allocator.DefaultReservationWindow+testutil.Timeout, testutil.Interval).Should(Succeed())
	})

	It("leaves non-TPU worker Pods untouched", func() {
		rc := createCluster(testutil.MakeRayCluster("cpu", ns).CPUGroup("cpu", 1).ManagedByMultiKueue().Obj())
		pod := workerPod(rc, "cpu").Obj()
		Expect(suite.Client.Create(ctx, pod)).To(Succeed())
		Expect(pod.Annotations).NotTo(HaveKey(tpuv1alpha1.ClaimTokenAnnotation))
		Expect(pod.Spec.Containers[0].Env).To(BeEmpty())
	})

	It("denies a TPU worker Pod without a topology nodeSelector, naming the key, and leaves no claim", func() {
		rc := createCluster(testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 1).ManagedByMultiKueue().Obj())
		pod := workerPod(rc, "tpu").Obj()
		delete(pod.Spec.NodeSelector, constants.TopologyNodeSelectorKey)
		err := suite.Client.Create(ctx, pod)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring(constants.TopologyNodeSelectorKey))
		expectNoSlices(ns)
	})

	It("writes nothing for a dry run but returns the mutated Pod (I4)", func() {
		rc := createCluster(testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 1).ManagedByMultiKueue().Obj())
		pod := workerPod(rc, "tpu").Obj()
		Expect(suite.Client.Create(ctx, pod, client.DryRunAll)).To(Succeed())
		Expect(env1(pod, constants.EnvWorkerID)).To(Equal("0"))
		expectNoSlices(ns)
	})

	It("honors KubeRay's multi-host index labels", func() {
		rc := createCluster(testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", "tpu-v4-podslice", "2x2x4", 4, 4, 3).ManagedByMultiKueue().Obj())
		pod := workerPod(rc, "tpu").KubeRayIndexes(2, "tpu-abcde", 3).Obj()
		Expect(suite.Client.Create(ctx, pod)).To(Succeed())
		Expect(env1(pod, constants.EnvWorkerID)).To(Equal("3"))
		Expect(env1(pod, constants.EnvName)).To(Equal("tpu-2"))
		Expect(pod.Spec.Hostname).To(Equal("tpu-2-3"))
	})

	DescribeTable("concurrent creates through three webhook instances keep IDs unique (I1, I2, I5)",
		func(accelerator, topology string, chips int64, hosts, replicas int32) {
			rc := createCluster(testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", accelerator, topology, chips, hosts, replicas).ManagedByMultiKueue().Obj())
			n := int(hosts * replicas)
			before := framework.TotalCounts(suite.Instances)
			committedBefore := committedBy()
			errs := make([]error, n)
			latencies := make([]time.Duration, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					start := time.Now()
					errs[i] = suite.Client.Create(ctx, workerPod(rc, "tpu").Obj())
					latencies[i] = time.Since(start)
				})
			}
			wg.Wait()
			for _, err := range errs {
				Expect(err).NotTo(HaveOccurred())
			}
			for _, l := range latencies {
				Expect(l).To(BeNumerically("<", 10*time.Second), "every request answered before the webhook deadline")
			}
			report, err := framework.CheckAdmitted(ctx, suite.Client, ns)
			Expect(err).NotTo(HaveOccurred())
			Expect(report.LivePods).To(Equal(n))
			Expect(report.IDs).To(HaveLen(int(replicas)))
			for _, ids := range report.IDs {
				Expect(ids).To(HaveLen(int(hosts)))
			}
			after := framework.TotalCounts(suite.Instances)
			By("one replica, the group's owner, committing every claim; the others forwarding theirs to it")
			committed := committedBy()
			for i := range committed {
				committed[i] -= committedBefore[i]
			}
			Expect(committed).To(ContainElement(int64(n)), "claims committed by each instance: %v", committed)
			Expect(after.Forwarded - before.Forwarded).To(BeNumerically(">", 0))
			Expect(after.Fallbacks - before.Fallbacks).To(BeZero())
			GinkgoWriter.Printf("CLAIMS pods=%d attempts_per_pod=%.2f conflicts_per_pod=%.2f writes_per_pod=%.2f\n", n,
				float64(after.Attempts-before.Attempts)/float64(n), float64(after.Conflicts-before.Conflicts)/float64(n),
				float64(after.Writes-before.Writes)/float64(n))
			Eventually(func() error { return framework.CheckClaimsMatchPods(ctx, suite.Client, ns) },
				testutil.Timeout, testutil.Interval).Should(Succeed())
		},
		Entry("64 Pods into one 64-host v6e slice", "tpu-v6e-slice", "16x16", int64(4), int32(64), int32(1)),
		Entry("256 Pods across four 64-host slices", "tpu-v6e-slice", "16x16", int64(4), int32(64), int32(4)),
	)

	It("denies, as transient, a Pod beyond the slices the RayCluster asks for, and leaks no claim", func() {
		rc := createCluster(testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", "tpu-v6e-slice", "2x2", 4, 1, 2).ManagedByMultiKueue().Obj())
		for range 2 {
			Expect(suite.Client.Create(ctx, workerPod(rc, "tpu").Obj())).To(Succeed())
		}
		err := suite.Client.Create(ctx, workerPod(rc, "tpu").Obj())
		Expect(err).To(HaveOccurred())
		Expect(strings.ToLower(err.Error())).To(ContainSubstring("transient"))
		var list tpuv1alpha1.TPUSliceAssignmentList
		Expect(suite.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		Expect(list.Items).To(HaveLen(2))
		for _, s := range list.Items {
			Expect(s.Status.Claims).To(HaveLen(1))
		}
	})
})

func expectNoSlices(ns string) {
	var list tpuv1alpha1.TPUSliceAssignmentList
	Expect(suite.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	Expect(list.Items).To(BeEmpty())
}

// committedBy returns the claims each instance's allocator has committed so far.
func committedBy() []int64 {
	out := make([]int64, len(suite.Instances))
	for i, inst := range suite.Instances {
		out[i] = inst.Counts().Committed
	}
	return out
}
