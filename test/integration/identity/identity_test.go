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
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// replacementBound is the longest a user may wait for a replacement Pod once the Pod it replaces
// is visibly gone (docs/spec.md §8).
const replacementBound = 2 * time.Second

var _ = Describe("Claims follow the Pods' immutable identity", func() {
	var ns string
	BeforeEach(func() {
		ns = framework.CreateNamespace(ctx, suite.Client, "identity")
	})
	AfterEach(func() {
		By("claims equal the live Pods once activity stops (I3), I1 and I2")
		expectSettled(ns)
	})

	It("adopts the Pods of clusters that ran before the operator, before giving out any of their IDs", func() {
		rc := cluster(ns, "pre", "4x4", 4, 4, 2)
		By("creating a full replica 0 and three Pods of replica 1 with the webhook out of the way, their identity set as the reference webhook sets it")
		suite.Bypass(true)
		pre := map[string]*corev1.Pod{}
		for replica, ids := range map[int32][]int32{0: {0, 1, 2, 3}, 1: {0, 1, 3}} {
			for _, id := range ids {
				p := framework.MustCreate(ctx, suite.Client, referencePod(rc, replica, id))
				pre[fmt.Sprintf("%d/%d", replica, id)] = p
			}
		}
		suite.Bypass(false)

		By("the group scales up: the new Pod gets the one free ID, not ID 0 of replica 0 again")
		scaled := framework.MustCreate(ctx, suite.Client, testutil.WorkerPodFor(rc, "tpu").Obj())
		Expect(tpuName(scaled)).To(Equal("tpu-1"))
		Expect(framework.WorkerID(scaled)).To(Equal("2"))
		framework.ExpectIDs(ctx, suite.Client, ns, map[int32][]int{0: framework.Seq(4), 1: framework.Seq(4)})

		By("a Pod of the adopted replica 0 is replaced: the replacement gets its ID")
		Expect(suite.Client.Delete(ctx, pre["0/1"])).To(Succeed())
		waitGone(pre["0/1"])
		replacement, took := createTimed(testutil.WorkerPodFor(rc, "tpu").Obj())
		Expect(took).To(BeNumerically("<", replacementBound), "replacement admitted after %v", took)
		Expect(tpuName(replacement)).To(Equal("tpu-0"))
		Expect(framework.WorkerID(replacement)).To(Equal("1"))
		framework.ExpectIDs(ctx, suite.Client, ns, map[int32][]int{0: framework.Seq(4), 1: framework.Seq(4)})
	})

	It("records Pods that carry an identity even when nothing is admitted", func() {
		rc := cluster(ns, "quiet", "4x4", 4, 4, 1)
		suite.Bypass(true)
		for id := range int32(4) {
			framework.MustCreate(ctx, suite.Client, referencePod(rc, 0, id))
		}
		suite.Bypass(false)
		framework.ExpectBound(ctx, suite.Client, ns, 4)
		Expect(framework.SliceCount(ctx, suite.Client, ns)).To(Equal(1))
	})

	It("keeps a running Pod's ID when its labels and claim token are removed or edited", func() {
		rc := cluster(ns, "labels", "4x4", 4, 4, 1)
		pods := framework.CreatePods(ctx, suite.Client, rc, "tpu", 4)
		framework.ExpectBound(ctx, suite.Client, ns, 4)
		before := claimsOf(ns)

		By("kubectl label pod <worker> tpu.ray.io/slice- tpu.ray.io/worker-id- replicaIndex-, and the claim token annotation removed")
		stripped := pods[2]
		patch := client.MergeFrom(stripped.DeepCopy())
		for _, k := range []string{tpuv1alpha1.SliceLabel, tpuv1alpha1.WorkerIDLabel, constants.ReplicaIndexLabel} {
			delete(stripped.Labels, k)
		}
		delete(stripped.Annotations, tpuv1alpha1.ClaimTokenAnnotation)
		Expect(suite.Client.Patch(ctx, stripped, patch)).To(Succeed())
		By("and another Pod's claim token edited")
		edited := pods[1]
		patch = client.MergeFrom(edited.DeepCopy())
		edited.Annotations[tpuv1alpha1.ClaimTokenAnnotation] = "edited-by-a-tool"
		Expect(suite.Client.Patch(ctx, edited, patch)).To(Succeed())

		Consistently(func() map[int32]types.UID { return claimsOf(ns) }, testutil.ConsistentlyTime, testutil.Interval).Should(Equal(before))

		By("a fifth Pod of the full slice is refused, not given the stripped Pod's ID")
		err := suite.Client.Create(ctx, testutil.WorkerPodFor(rc, "tpu").Obj())
		Expect(err).To(MatchError(ContainSubstring("fully claimed")))
		Expect(apierrors.IsTooManyRequests(err)).To(BeTrue(), "the refusal is transient: %v", err)

		By("restoring the labels is fine too")
		patch = client.MergeFrom(stripped.DeepCopy())
		stripped.Labels[tpuv1alpha1.SliceLabel] = claimsSliceName(ns)
		Expect(suite.Client.Patch(ctx, stripped, patch)).To(Succeed())
		Consistently(func() map[int32]types.UID { return claimsOf(ns) }, testutil.ConsistentlyTime, testutil.Interval).Should(Equal(before))
	})

	It("gives each of four Pods created from one copied manifest its own ID", func() {
		rc := cluster(ns, "copies", "4x4", 4, 4, 2)
		pods := framework.CreatePods(ctx, suite.Client, rc, "tpu", 4)
		framework.ExpectBound(ctx, suite.Client, ns, 4)
		By("kubectl get pod -o yaml of a running worker, then created again four times")
		source := &corev1.Pod{}
		Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(pods[0]), source)).To(Succeed())
		manifest := source.DeepCopy()
		manifest.Name, manifest.UID, manifest.ResourceVersion, manifest.CreationTimestamp = "", "", "", metav1.Time{}
		manifest.Status = corev1.PodStatus{}
		ids := map[string]bool{}
		for range 4 {
			copied := framework.MustCreate(ctx, suite.Client, manifest)
			Expect(tpuName(copied)).To(Equal("tpu-1"))
			Expect(ids).NotTo(HaveKey(framework.WorkerID(copied)))
			ids[framework.WorkerID(copied)] = true
			Expect(copied.Annotations[tpuv1alpha1.ClaimTokenAnnotation]).NotTo(Equal(source.Annotations[tpuv1alpha1.ClaimTokenAnnotation]))
		}
		framework.ExpectIDs(ctx, suite.Client, ns, map[int32][]int{0: framework.Seq(4), 1: framework.Seq(4)})
	})

	It("frees the ID of a Pod deleted right after its create: the replacement is admitted within 2 s", func() {
		rc := cluster(ns, "quick", "4x4", 4, 4, 1)
		framework.CreatePods(ctx, suite.Client, rc, "tpu", 3)
		last := framework.MustCreate(ctx, suite.Client, testutil.WorkerPodFor(rc, "tpu").Obj())
		Expect(suite.Client.Delete(ctx, last)).To(Succeed())
		Expect(time.Since(last.CreationTimestamp.Time)).To(BeNumerically("<", 2*time.Second), "deleted soon after its create")
		waitGone(last)
		replacement, took := createTimed(testutil.WorkerPodFor(rc, "tpu").Obj())
		GinkgoWriter.Printf("replacement of a Pod deleted right after its create admitted in %v\n", took)
		Expect(took).To(BeNumerically("<", replacementBound))
		Expect(framework.WorkerID(replacement)).To(Equal(framework.WorkerID(last)))
	})

	It("frees the ID of a Pod deleted in the middle of a 256-Pod burst, and no create of the burst waits for the TTL", func() {
		rc := cluster(ns, "burst", "16x16", 1, 256, 1)
		var (
			next, victimAt atomic.Int64
			mu             sync.Mutex
			worst          time.Duration
			replaceTook    time.Duration
			wg             sync.WaitGroup
		)
		victimAt.Store(100)
		for range 8 {
			wg.Go(func() {
				defer GinkgoRecover()
				for {
					i := next.Add(1) - 1
					if i >= 256 {
						return
					}
					p, took := createTimed(testutil.WorkerPodFor(rc, "tpu").Obj())
					mu.Lock()
					worst = max(worst, took)
					mu.Unlock()
					if i != victimAt.Load() {
						continue
					}
					Expect(suite.Client.Delete(ctx, p)).To(Succeed())
					waitGone(p)
					_, took = createTimed(testutil.WorkerPodFor(rc, "tpu").Obj())
					mu.Lock()
					replaceTook = took
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		GinkgoWriter.Printf("256-Pod burst: slowest create %v, replacement of the Pod deleted mid-burst %v\n", worst, replaceTook)
		Expect(replaceTook).To(BeNumerically("<", replacementBound))
		Expect(worst).To(BeNumerically("<", 10*time.Second), "a create of the burst waited for the deleted Pod's claim")
		framework.ExpectIDs(ctx, suite.Client, ns, map[int32][]int{0: framework.Seq(256)})
	})

	It("follows a group scaled 3 → 1 → 3 at once, admitting the scale-up within 2 s a Pod", func() {
		rc := cluster(ns, "scale", "4x4", 4, 4, 3)
		pods := framework.CreatePods(ctx, suite.Client, rc, "tpu", 12)
		framework.SetReplicas(ctx, suite.Client, rc, 1)
		for _, p := range pods {
			if tpuName(p) != "tpu-0" {
				Expect(suite.Client.Delete(ctx, p)).To(Succeed())
			}
		}
		for _, p := range pods {
			if tpuName(p) != "tpu-0" {
				waitGone(p)
			}
		}
		framework.SetReplicas(ctx, suite.Client, rc, 3)
		for range 8 {
			_, took := createTimed(testutil.WorkerPodFor(rc, "tpu").Obj())
			Expect(took).To(BeNumerically("<", replacementBound))
		}
		framework.ExpectIDs(ctx, suite.Client, ns, map[int32][]int{0: framework.Seq(4), 1: framework.Seq(4), 2: framework.Seq(4)})
	})
})

// cluster creates a RayCluster KubeRay leaves alone (the tests create its Pods) with one v6e group.
func cluster(ns, name, topo string, chips int64, hosts, replicas int32) *rayv1.RayCluster {
	GinkgoHelper()
	rc := testutil.MakeRayCluster(name, ns).TPUGroup("tpu", "tpu-v6e-slice", topo, chips, hosts, replicas).ManagedByMultiKueue().Obj()
	Expect(suite.Client.Create(ctx, rc)).To(Succeed())
	return rc
}

// referencePod is a worker Pod of rc's group "tpu" with the identity the reference webhook gives
// host id of replica: TPU_WORKER_ID, TPU_NAME, TPU_WORKER_HOSTNAMES, hostname and subdomain, and
// its replicaIndex label, but none of this operator's labels or annotations.
func referencePod(rc *rayv1.RayCluster, replica, id int32) *corev1.Pod {
	p := testutil.WorkerPodFor(rc, "tpu").TPUIdentity("tpu", replica, id).
		Env(0, constants.EnvWorkerHostnames, tpuenv.WorkerHostnames("tpu", replica, rc.Spec.WorkerGroupSpecs[0].NumOfHosts, rc.Name+"-headless")).
		Label(constants.ReplicaIndexLabel, naming.ReplicaIndexValue("tpu", replica)).Obj()
	p.Spec.Hostname, p.Spec.Subdomain = naming.Hostname("tpu", replica, id), rc.Name+"-headless"
	return p
}

// createTimed creates pod, retrying refusals as KubeRay would, and returns it and how long the
// admission took from the first attempt.
func createTimed(pod *corev1.Pod) (*corev1.Pod, time.Duration) {
	GinkgoHelper()
	created, took, err := framework.CreateRetrying(ctx, suite.Client, pod, testutil.Timeout)
	Expect(err).NotTo(HaveOccurred())
	return created, took
}

// waitGone waits until the API server no longer has the Pod: its deletion is visible.
func waitGone(p *corev1.Pod) {
	GinkgoHelper()
	Eventually(func() bool {
		return apierrors.IsNotFound(suite.Client.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{}))
	}, testutil.Timeout, 10*time.Millisecond).Should(BeTrue())
}

func tpuName(p *corev1.Pod) string {
	v, _ := framework.WorkerEnv(p, constants.EnvName)
	return v
}

// claimsOf returns, for the namespace's only slice, the Pod UID each worker ID is bound to.
func claimsOf(ns string) map[int32]types.UID {
	GinkgoHelper()
	var list tpuv1alpha1.TPUSliceAssignmentList
	Expect(suite.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	Expect(list.Items).To(HaveLen(1))
	out := map[int32]types.UID{}
	for _, c := range list.Items[0].Status.Claims {
		out[c.WorkerID] = c.PodUID
	}
	return out
}

func claimsSliceName(ns string) string {
	GinkgoHelper()
	var list tpuv1alpha1.TPUSliceAssignmentList
	Expect(suite.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	Expect(list.Items).To(HaveLen(1))
	return list.Items[0].Name
}

// expectSettled checks I1 and I2 now and I3 once activity stops.
func expectSettled(ns string) {
	GinkgoHelper()
	_, err := framework.CheckAdmitted(ctx, suite.Client, ns)
	Expect(err).NotTo(HaveOccurred())
	Eventually(func() error { return framework.CheckClaimsMatchPods(ctx, suite.Client, ns) },
		testutil.LongTimeout, testutil.Interval).Should(Succeed())
}

// identityOf is the spec identity of a live Pod.
func identityOf(p *corev1.Pod) identity.Identity {
	GinkgoHelper()
	id, ok := identity.FromPod(p)
	Expect(ok).To(BeTrue(), "Pod %s carries an identity", p.Name)
	return id
}
