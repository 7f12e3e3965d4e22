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

package e2e

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// pendingTTL is short in these tests so that I3 settles quickly (docs/spec.md: within twice the TTL).
const pendingTTL = 3 * time.Second

var _ = Describe("KubeRay with RayMultiHostIndexing off", Ordered, Serial, func() {
	BeforeAll(func() { framework.SetMultiHostIndexing(false) })
	scenarios(false)
})

var _ = Describe("KubeRay with RayMultiHostIndexing on", Ordered, Serial, func() {
	BeforeAll(func() { framework.SetMultiHostIndexing(true) })
	scenarios(true)
})

func scenarios(gate bool) {
	var ns string
	BeforeEach(func() {
		ns = framework.CreateNamespace(ctx, suite.Client, "e2e")
	})

	It("gives every host of two 64-host v6e slices a unique ID", func() {
		rc := create(testutil.MakeRayCluster("v6e", ns).TPUGroup("tpu", "tpu-v6e-slice", "16x16", 4, 64, 2).Obj())
		expectSettled(rc, map[string]int{"tpu": 128})
	})

	It("handles v4 3-D slices, single-host v5e replicas and a CPU group side by side", func() {
		rc := create(testutil.MakeRayCluster("mixed", ns).
			TPUGroup("v4", "tpu-v4-podslice", "2x2x4", 4, 4, 3).
			TPUGroup("v5e", "tpu-v5-lite-podslice", "2x4", 8, 1, 4).
			CPUGroup("cpu", 2).Obj())
		expectSettled(rc, map[string]int{"v4": 12, "v5e": 4, "cpu": 2})
		for _, p := range workerPods(rc, "v5e") {
			Expect(p.Spec.Hostname).To(BeEmpty(), "single-host Pods keep KubeRay's hostname")
			Expect(env1(&p, constants.EnvWorkerID)).To(Equal("0"))
		}
		for _, p := range workerPods(rc, "cpu") {
			Expect(p.Annotations).NotTo(HaveKey(tpuv1alpha1.ClaimTokenAnnotation))
		}
	})

	It("numbers v7x two-container Pods per container and sets process addresses", func() {
		b := testutil.MakeRayCluster("v7x", ns).TPUGroup("tpu", "tpu7x", "2x2x2", 2, 2, 1)
		g := &b.Spec.WorkerGroupSpecs[0].Template.Spec
		second := *g.Containers[0].DeepCopy()
		second.Name = "ray-worker-2"
		g.Containers = append(g.Containers, second)
		rc := create(b.Obj())
		expectSettled(rc, map[string]int{"tpu": 2})
		ids := []string{}
		for _, p := range workerPods(rc, "tpu") {
			for _, c := range p.Spec.Containers {
				ids = append(ids, envOf(c, constants.EnvWorkerID))
				Expect(envOf(c, constants.EnvProcessAddresses)).To(Equal(
					"tpu-0-0.v7x-headless:8471,tpu-0-0.v7x-headless:8472,tpu-0-1.v7x-headless:8471,tpu-0-1.v7x-headless:8472"))
			}
		}
		slices.Sort(ids)
		Expect(ids).To(Equal([]string{"0", "1", "2", "3"}))
	})

	It("sets MEGASCALE variables for multislice groups", func() {
		b := testutil.MakeRayCluster("ms", ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 2)
		b.Spec.WorkerGroupSpecs[0].Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: constants.EnvMegascaleNumSlices, Value: "2"}}
		rc := create(b.Obj())
		expectSettled(rc, map[string]int{"tpu": 8})
		for _, p := range workerPods(rc, "tpu") {
			c := p.Spec.Containers[0]
			Expect(envOf(c, constants.EnvMegascaleCoordinator)).To(Equal("tpu-0-0.ms-headless"))
			Expect(envOf(c, constants.EnvMegascaleSliceID)).To(Equal(p.Labels[constants.ReplicaIndexLabel][len("tpu-"):]))
		}
	})

	It("gives a deleted worker's ID back to its replacement", func() {
		rc := create(testutil.MakeRayCluster("del", ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 2).Obj())
		expectSettled(rc, map[string]int{"tpu": 8})
		victim := workerPods(rc, "tpu")[0]
		victimSlice := victim.Labels[tpuv1alpha1.SliceLabel]
		Expect(suite.Client.Delete(ctx, &victim)).To(Succeed())
		if gate {
			// KubeRay deletes the whole replica and recreates it with the same index and a new
			// replica name; the slice follows the new generation.
			oldName := victim.Labels[rayutils.RayWorkerReplicaNameKey]
			Expect(oldName).NotTo(BeEmpty())
			Eventually(func(g Gomega) {
				var slice tpuv1alpha1.TPUSliceAssignment
				g.Expect(suite.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: victimSlice}, &slice)).To(Succeed())
				g.Expect(slice.Spec.ReplicaName).NotTo(BeEmpty())
				g.Expect(slice.Spec.ReplicaName).NotTo(Equal(oldName))
				g.Expect(slice.Spec.ReplicaIndex).To(BeEquivalentTo(mustAtoi(victim.Labels[rayutils.RayWorkerReplicaIndexKey])))
				var replaced int
				for _, p := range workerPods(rc, "tpu") {
					if p.Labels[tpuv1alpha1.SliceLabel] == victimSlice {
						g.Expect(p.Labels[rayutils.RayWorkerReplicaNameKey]).To(Equal(slice.Spec.ReplicaName))
						replaced++
					}
				}
				g.Expect(replaced).To(Equal(4))
			}, testutil.LongTimeout, testutil.Interval).Should(Succeed())
		} else {
			// KubeRay creates one anonymous replacement; it must take the freed ID.
			Eventually(func(g Gomega) {
				pods := workerPods(rc, "tpu")
				g.Expect(pods).To(HaveLen(8))
				g.Expect(pods).NotTo(ContainElement(HaveField("UID", victim.UID)))
			}, testutil.Timeout, testutil.Interval).Should(Succeed())
		}
		expectSettled(rc, map[string]int{"tpu": 8})
	})

	It("follows workersToDelete and scale down and up", func() {
		rc := create(testutil.MakeRayCluster("scale", ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 3).Obj())
		expectSettled(rc, map[string]int{"tpu": 12})

		By("scaling down to one replica, deleting one replica's Pods as the autoscaler would")
		pods := workerPods(rc, "tpu")
		keep := pods[0].Labels[tpuv1alpha1.SliceLabel]
		var toDelete []string
		for _, p := range pods {
			if p.Labels[tpuv1alpha1.SliceLabel] != keep {
				toDelete = append(toDelete, p.Name)
			}
		}
		update(rc, func(rc *rayv1.RayCluster) {
			rc.Spec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](1)
			rc.Spec.WorkerGroupSpecs[0].ScaleStrategy.WorkersToDelete = toDelete
		})
		expectSettled(rc, map[string]int{"tpu": 4})

		By("scaling back up to three replicas")
		update(rc, func(rc *rayv1.RayCluster) { rc.Spec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](3) })
		expectSettled(rc, map[string]int{"tpu": 12})
	})

	It("starts a re-created RayCluster of the same name from fresh slices", func() {
		for range 3 {
			rc := create(testutil.MakeRayCluster("again", ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 2).Obj())
			expectSettled(rc, map[string]int{"tpu": 8})
			deleteCluster(rc)
		}
		Eventually(func(g Gomega) {
			var list tpuv1alpha1.TPUSliceAssignmentList
			g.Expect(suite.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			g.Expect(list.Items).To(BeEmpty())
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
	})

	It("adopts the Pods of a cluster that ran before the install and never hands out their IDs again", func() {
		installIntoRunningCluster(ns, gate)
	})

	It("admits KubeRay's replacement of a Pod deleted right after its create within 2 s", func() {
		quickDeletion(ns, gate)
	})

	It("reports a slice of KubeRay's Pods Ready once they are bound and Ready, which kubectl wait sees", func() {
		rc := create(testutil.MakeRayCluster("health", ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 2).Obj())
		expectSettled(rc, map[string]int{"tpu": 8})
		nodes := map[string]string{} // worker Pod name -> Node
		for i, p := range workerPods(rc, "tpu") {
			pool := "pool-" + p.Labels[constants.ReplicaIndexLabel] // one node pool per replica
			node := testutil.MakeNode(fmt.Sprintf("%s-%d", ns, i)).TPU("tpu-v6e-slice", "4x4", pool).Ready(true).Obj()
			Expect(framework.CreateNode(ctx, suite.Client, node)).To(Succeed())
			DeferCleanup(func() { _ = suite.Client.Delete(ctx, node) })
			nodes[p.Name] = node.Name
		}
		By("the scheduler binds KubeRay's Pods and their kubelets report them Ready")
		for _, p := range workerPods(rc, "tpu") {
			Expect(framework.BindPod(ctx, suite.Client, &p, nodes[p.Name])).To(Succeed())
			Expect(framework.SetPodReady(ctx, suite.Client, &p, true)).To(Succeed())
		}
		user, err := suite.Env.Env.ControlPlane.AddUser(envtest.User{Name: "kubectl-" + ns, Groups: []string{"system:masters"}}, nil)
		Expect(err).NotTo(HaveOccurred())
		kubectl, err := user.Kubectl()
		Expect(err).NotTo(HaveOccurred())
		start := time.Now()
		stdout, stderr, err := kubectl.Run("wait", "--for=condition=Ready", "tpusliceassignment", "-n", ns,
			"-l", rayutils.RayClusterLabelKey+"="+rc.Name, "--timeout=60s")
		out, _ := io.ReadAll(stdout)
		errOut, _ := io.ReadAll(stderr)
		Expect(err).NotTo(HaveOccurred(), "kubectl wait: %s%s", out, errOut)
		GinkgoWriter.Printf("kubectl wait returned after %v:\n%s", time.Since(start), out)
		Expect(strings.Count(string(out), "condition met")).To(Equal(2), "both slices of the cluster: %s", out)

		var list tpuv1alpha1.TPUSliceAssignmentList
		Expect(suite.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{rayutils.RayClusterLabelKey: rc.Name})).To(Succeed())
		Expect(list.Items).To(HaveLen(2))
		for _, s := range list.Items {
			for _, t := range []string{tpuv1alpha1.ConditionClaimed, tpuv1alpha1.ConditionScheduled, tpuv1alpha1.ConditionPlaced, tpuv1alpha1.ConditionReady} {
				Expect(apimeta.IsStatusConditionTrue(s.Status.Conditions, t)).To(BeTrue(), "slice %s condition %s", s.Name, t)
			}
			Expect(apimeta.IsStatusConditionFalse(s.Status.Conditions, tpuv1alpha1.ConditionDegraded)).To(BeTrue(), "slice %s not Degraded", s.Name)
			Expect(s.Status.Hosts).To(HaveLen(4))
		}
		Expect(framework.CheckHealthConverged(ctx, suite.Client, ns)).To(Succeed())
	})

	It("refuses an invalid RayCluster at CREATE and at UPDATE", func() {
		err := suite.Client.Create(ctx, testutil.MakeRayCluster("bad", ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 2, 1).Obj())
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
		rc := create(testutil.MakeRayCluster("good", ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 1).Obj())
		rc.Spec.WorkerGroupSpecs[0].Template.Spec.NodeSelector[constants.TopologyNodeSelectorKey] = "4x8"
		err = suite.Client.Update(ctx, rc)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
	})
}

func create(rc *rayv1.RayCluster) *rayv1.RayCluster {
	Expect(suite.Client.Create(ctx, rc)).To(Succeed())
	return rc
}

func update(rc *rayv1.RayCluster, mutate func(*rayv1.RayCluster)) {
	Eventually(func() error {
		if err := suite.Client.Get(ctx, client.ObjectKeyFromObject(rc), rc); err != nil {
			return err
		}
		mutate(rc)
		return suite.Client.Update(ctx, rc)
	}, testutil.Timeout, testutil.Interval).Should(Succeed())
}

// deleteCluster deletes a RayCluster and, standing in for the garbage collector envtest lacks,
// its Pods.
func deleteCluster(rc *rayv1.RayCluster) {
	Expect(suite.Client.Delete(ctx, rc)).To(Succeed())
	Eventually(func() bool {
		return apierrors.IsNotFound(suite.Client.Get(ctx, client.ObjectKeyFromObject(rc), &rayv1.RayCluster{}))
	}, testutil.Timeout, testutil.Interval).Should(BeTrue())
	Expect(suite.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(rc.Namespace),
		client.MatchingLabels{rayutils.RayClusterLabelKey: rc.Name})).To(Succeed())
}

func workerPods(rc *rayv1.RayCluster, group string) []corev1.Pod {
	var pods corev1.PodList
	Expect(suite.Client.List(ctx, &pods, client.InNamespace(rc.Namespace), client.MatchingLabels{
		rayutils.RayClusterLabelKey: rc.Name, rayutils.RayNodeGroupLabelKey: group,
		rayutils.RayNodeTypeLabelKey: string(rayv1.WorkerNode),
	})).To(Succeed())
	return slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool {
		return p.DeletionTimestamp != nil || p.UID != "" && p.Labels[rayutils.RayClusterLabelKey] != rc.Name
	})
}

// expectSettled waits until KubeRay has created the wanted number of worker Pods per group, then
// checks I1 and I2 on every admitted Pod, and waits for I3 (claims equal live Pods) within twice
// the pending TTL after activity stops.
func expectSettled(rc *rayv1.RayCluster, want map[string]int) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		for group, n := range want {
			g.Expect(workerPods(rc, group)).To(HaveLen(n), "worker Pods of group %s", group)
		}
	}, testutil.LongTimeout, testutil.Interval).Should(Succeed())
	Eventually(func() error {
		report, err := framework.CheckAdmitted(ctx, suite.Client, rc.Namespace)
		if err != nil {
			return err
		}
		for _, ids := range report.IDs {
			for i, id := range ids {
				if id != i {
					return fmt.Errorf("slice IDs %v are not 0..%d", ids, len(ids)-1)
				}
			}
		}
		return nil
	}, testutil.Timeout, testutil.Interval).Should(Succeed())
	Eventually(func() error { return framework.CheckClaimsMatchPods(ctx, suite.Client, rc.Namespace) },
		2*pendingTTL+testutil.Timeout, testutil.Interval).Should(Succeed())
}

func mustAtoi(s string) int {
	GinkgoHelper()
	n, err := strconv.Atoi(s)
	Expect(err).NotTo(HaveOccurred())
	return n
}

func env1(p *corev1.Pod, name string) string {
	v, _ := framework.WorkerEnv(p, name)
	return v
}

func envOf(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}
