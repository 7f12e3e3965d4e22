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
	"io"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// tpuNode is a fake GKE TPU Node of the v6e 4x4 node pool pool-a, in GCE sub-block subblock.
func tpuNode(name, subblock string) *corev1.Node {
	return testutil.MakeNode(name).TPU("tpu-v6e-slice", "4x4", "pool-a").GCE("block-1", subblock).Obj()
}

var _ = Describe("GKE subslicing (Ray's TPU subslicing guide)", func() {
	It("splits one 4x4 v6e pool into two 2x4 subslices used by two RayClusters, each placed on its sub-block", func() {
		ns := newNamespace()
		nodes := []*corev1.Node{tpuNode("gke-n0", "sb-a"), tpuNode("gke-n1", "sb-a"),
			tpuNode("gke-n2", "sb-b"), tpuNode("gke-n3", "sb-b")}
		for _, n := range nodes {
			Expect(suite.Client.Create(ctx, n)).To(Succeed())
			DeferCleanup(func() { Expect(client.IgnoreNotFound(suite.Client.Delete(ctx, n))).To(Succeed()) })
		}
		By("every instance's Node cache has the pool before the first admission")
		for _, inst := range suite.Instances {
			Eventually(func() int {
				var list corev1.NodeList
				Expect(inst.Manager.GetCache().List(ctx, &list)).To(Succeed())
				return len(list.Items)
			}, testutil.Timeout, testutil.Interval).Should(BeNumerically(">=", 4))
		}
		for _, name := range []string{"half-a", "half-b"} {
			rc := testutil.MakeRayCluster(name, ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 2, 1).
				GroupAnnotation(0, constants.SliceTopologyAnnotation, "2x4").ManagedByMultiKueue().Obj()
			Expect(suite.Client.Create(ctx, rc)).To(Succeed())
			for range 2 {
				pod := testutil.WorkerPodFor(rc, "tpu").Obj()
				created := framework.MustCreate(ctx, suite.Client, pod)
				// The Nodes carry the sub-block label, so the operator chooses the sub-block itself:
				// the Pods wait gated, without inter-pod terms (docs/spec.md §4).
				Expect(created.Spec.SchedulingGates).To(Equal([]corev1.PodSchedulingGate{{Name: tpuv1alpha1.PlacementSchedulingGate}}))
				Expect(created.Spec.Affinity).To(BeNil())
				Expect(env1(created, constants.EnvTorchTopology)).To(Equal("2,4,1"))
			}
		}
		var list tpuv1alpha1.TPUSliceAssignmentList
		Expect(suite.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		Expect(list.Items).To(HaveLen(2))
		for _, s := range list.Items {
			Expect(s.Spec.Hosts).To(Equal(int32(2)))
			Expect(s.Spec.AffinityTopologyKey).To(Equal(constants.GCETopologySubblockKey),
				"with the node-pool key the two subslices could not share the pool")
			Expect(s.Spec.Placement).To(Equal(tpuv1alpha1.PlacementChosenDomain))
		}
		_, err := framework.CheckAdmitted(ctx, suite.Client, ns)
		Expect(err).NotTo(HaveOccurred())
	})

	It("answers kubectl apply of a subsliced RayCluster that targets no Nodes yet with a warning", func() {
		ns := newNamespace()
		rc := testutil.MakeRayCluster("no-nodes", ns).TPUGroup("tpu", "tpu-v5-lite-podslice", "4x4", 4, 2, 1).
			GroupAnnotation(0, constants.SliceTopologyAnnotation, "2x4").Obj()
		rc.APIVersion, rc.Kind = "ray.io/v1", "RayCluster"
		data, err := yaml.Marshal(rc)
		Expect(err).NotTo(HaveOccurred())
		file := filepath.Join(GinkgoT().TempDir(), "rc.yaml")
		Expect(os.WriteFile(file, data, 0o600)).To(Succeed())
		user, err := suite.Env.Env.ControlPlane.AddUser(envtest.User{Name: "kubectl-user", Groups: []string{"system:masters"}}, nil)
		Expect(err).NotTo(HaveOccurred())
		kubectl, err := user.Kubectl()
		Expect(err).NotTo(HaveOccurred())
		stdout, stderr, err := kubectl.Run("apply", "-f", file)
		out, _ := io.ReadAll(stdout)
		errOut, _ := io.ReadAll(stderr)
		Expect(err).NotTo(HaveOccurred(), "kubectl apply: %s", errOut)
		Expect(string(out)).To(ContainSubstring("raycluster.ray.io/no-nodes created"))
		Expect(strings.TrimSpace(string(errOut))).To(HavePrefix("Warning: "), "kubectl prints admission warnings on stderr")
		Expect(string(errOut)).To(ContainSubstring("no Node"))
	})
})
