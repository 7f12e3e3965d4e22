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
	"fmt"
	"net/http"
	"runtime"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

var _ = Describe("Bounds before work (docs/spec.md §5, §10)", func() {
	var ns string
	BeforeEach(func() {
		ns = framework.CreateNamespace(ctx, suite.Client, "bounds")
	})

	It("refuses absurd topologies with a copied identity fast and with bounded memory", func() {
		rc := cluster(ns, "absurd", "4x4", 4, 4, 1)
		copied := func(accelerator, topo string, containers int) *corev1.Pod {
			p := testutil.WorkerPodFor(rc, "tpu").Topology(accelerator, topo).TPU(1)
			for i := 1; i < containers; i++ {
				p.Container(fmt.Sprintf("ray-worker-%d", i), 1)
			}
			for i := range containers {
				p.Env(i, constants.EnvWorkerID, "0").Env(i, constants.EnvName, "tpu-0")
			}
			return p.Annotation(tpuv1alpha1.ClaimTokenAnnotation, "copied").Obj()
		}
		pods := map[string]*corev1.Pod{
			"v6e 1024x1024 of 1-chip Pods":                 copied("tpu-v6e-slice", "1024x1024", 1),
			"tpu7x 128x128x64 with 16 one-chip containers": copied("tpu7x", "128x128x64", 16),
		}
		const rounds = 5
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range rounds {
			for name, pod := range pods {
				start := time.Now()
				answer, err := suite.PostAdmission(ctx, suite.Instances[0], podReview(ns, pod))
				Expect(err).NotTo(HaveOccurred())
				Expect(time.Since(start)).To(BeNumerically("<", time.Second), name)
				Expect(answer.Response.Allowed).To(BeFalse(), name)
				Expect(answer.Response.Result.Code).To(BeEquivalentTo(http.StatusForbidden), name)
				Expect(answer.Response.Result.Message).To(ContainSubstring("--max-slice-hosts=2400"), name)
			}
		}
		runtime.ReadMemStats(&after)
		// This process runs three operator instances and the test: the bound leaves room for
		// their background work. Before the bound came first, each 1024x1024 review allocated
		// 69 MiB and each tpu7x one 1 GiB.
		allocated := after.TotalAlloc - before.TotalAlloc
		GinkgoWriter.Printf("%d absurd reviews allocated %d MiB in this process\n", rounds*len(pods), allocated>>20)
		Expect(allocated).To(BeNumerically("<", uint64(128<<20)))
		Expect(framework.SliceCount(ctx, suite.Client, ns)).To(BeZero())
	})

	It("opens no slice beyond the desired replicas for forged KubeRay index labels", func() {
		rc := cluster(ns, "forged", "2x2", 4, 1, 1)
		for replica := range int32(40) {
			pod := testutil.WorkerPodFor(rc, "tpu").KubeRayIndexes(replica, "", -1).Obj()
			answer, err := suite.PostAdmission(ctx, suite.Instances[int(replica)%len(suite.Instances)], podReview(ns, pod))
			Expect(err).NotTo(HaveOccurred())
			if replica == 0 {
				Expect(answer.Response.Allowed).To(BeTrue())
				continue
			}
			Expect(answer.Response.Allowed).To(BeFalse(), "replica %d", replica)
			Expect(answer.Response.Result.Message).To(ContainSubstring(claims.BeyondDesiredMessage(replica, 1)))
			Expect(answer.Response.Result.Code).To(BeEquivalentTo(http.StatusForbidden), "the live RayCluster confirms it")
		}
		Expect(framework.SliceCount(ctx, suite.Client, ns)).To(Equal(1))
		Expect(framework.ClaimCount(ctx, suite.Client, ns)).To(Equal(1))
	})

	It("denies a dry run, a re-invocation and a copy within 6 s when the API server is slow", func() {
		slow := &framework.SlowAPI{Resources: []string{"rayclusters", "tpusliceassignments"}, Delay: 9 * time.Second}
		inst, err := suite.StartInstance(ctx, framework.InstanceOptions{
			Operator: operator.Options{DisableControllers: true}, Config: slow.Config(suite.Config),
		})
		Expect(err).NotTo(HaveOccurred())
		defer func() {
			slow.Set(false)
			Expect(inst.Stop()).To(Succeed())
		}()
		Expect(inst.Manager.GetCache().WaitForCacheSync(ctx)).To(BeTrue())

		By("the slow instance's cache stops seeing RayClusters and slices; a RayCluster is created and a first pass claims")
		slow.Set(true)
		rc := cluster(ns, "slow", "4x4", 4, 4, 1)
		first, err := suite.Instances[0].Allocator.Claim(ctx, allocator.Request{
			Namespace: ns, ClusterName: rc.Name, ClusterUID: rc.UID, GroupName: "tpu", Hosts: 4, Topology: "4x4",
			Accelerator: "tpu-v6e-slice",
		})
		Expect(err).NotTo(HaveOccurred())
		claimed := func(token string) *corev1.Pod {
			pod := testutil.WorkerPodFor(rc, "tpu").Obj()
			tpuenv.Apply(pod, tpuenv.Values{GroupName: "tpu", ReplicaIndex: first.Replica, WorkerID: first.WorkerID, Hosts: 4,
				Subdomain: rc.Name + "-headless", SliceName: first.SliceName, ClaimToken: token}, topology.TPUContainers(&pod.Spec))
			return pod
		}
		dryRun := podReview(ns, testutil.WorkerPodFor(rc, "tpu").Obj())
		dryRun.Request.DryRun = ptr.To(true)
		reviews := map[string]*admissionv1.AdmissionReview{
			"a dry run":       dryRun,
			"a re-invocation": podReview(ns, claimed(first.Token)),
			"a copy of a Pod": podReview(ns, claimed("copied-token")),
		}
		for name, review := range reviews {
			start := time.Now()
			answer, err := suite.PostAdmission(ctx, inst, review)
			took := time.Since(start)
			Expect(err).NotTo(HaveOccurred(), name)
			GinkgoWriter.Printf("%s answered in %s: %s\n", name, took, answer.Response.Result.Message)
			Expect(took).To(BeNumerically("<", 6500*time.Millisecond), "%s: the 6 s admission deadline", name)
			Expect(answer.Response.Allowed).To(BeFalse(), name)
			Expect(answer.Response.Result.Code).To(BeEquivalentTo(http.StatusTooManyRequests), name)
			Expect(answer.Response.Result.Message).To(And(ContainSubstring("timed out after 6s"), ContainSubstring(allocator.TransientNote)), name)
		}
		By("the denials claimed nothing: only the first pass's claim is held")
		Expect(framework.ClaimCount(ctx, suite.Client, ns)).To(Equal(1))
	})
})
