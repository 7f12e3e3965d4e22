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
	"encoding/json"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// recreateBound is how soon the reconciler re-creates a deleted host lists ConfigMap: a Pod whose
// containers start meanwhile waits for it (CreateContainerConfigError, retried by the kubelet).
const recreateBound = 2 * time.Second

var _ = Describe("The host lists of a slice above --host-lists-configmap-above (docs/spec.md §4)", Ordered, Serial, func() {
	BeforeAll(func() { framework.SetMultiHostIndexing(false) })

	It("come from one ConfigMap the slice owns, re-created when deleted, and KubeRay's replacement reads it too", func() {
		const hosts = 128 // v5p 8x8x8 of 4-chip hosts: above the default 64
		ns := framework.CreateNamespace(ctx, suite.Client, "e2e-hostlists")
		rc := create(testutil.MakeRayCluster("big", ns).TPUGroup("tpu", "tpu-v5p-slice", "8x8x8", 4, hosts, 1).Obj())
		expectSettled(rc, map[string]int{"tpu": hosts})

		By("every Pod references the same ConfigMap and carries no host list of its own")
		pods := workerPods(rc, "tpu")
		sliceName := pods[0].Labels[tpuv1alpha1.SliceLabel]
		var name string
		for i := range pods {
			p := &pods[i]
			Expect(p.Labels[tpuv1alpha1.SliceLabel]).To(Equal(sliceName))
			refs := tpuenv.ReferencedHostListsConfigMaps(p, topology.TPUContainers(&p.Spec))
			Expect(refs).To(HaveLen(1), "Pod %s", p.Name)
			if name == "" {
				name = refs[0]
			}
			Expect(refs[0]).To(Equal(name), "Pod %s", p.Name)
			for _, e := range p.Spec.Containers[0].Env {
				Expect(len(e.Value)).To(BeNumerically("<", 256), "Pod %s has %s inline", p.Name, e.Name)
			}
			data, err := json.Marshal(p)
			Expect(err).NotTo(HaveOccurred())
			// KubeRay's Pod with its managed fields is about 9 KB; inline, the hostnames and the
			// 512 TorchTPU addresses alone would add 17 KB.
			Expect(len(data)).To(BeNumerically("<", 12<<10), "Pod %s as stored", p.Name)
		}

		By("the ConfigMap is the slice's, immutable, and holds the lists the Pods' environment resolves to")
		var slice tpuv1alpha1.TPUSliceAssignment
		Expect(suite.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: sliceName}, &slice)).To(Succeed())
		key := client.ObjectKey{Namespace: ns, Name: name}
		var cm corev1.ConfigMap
		Expect(suite.Client.Get(ctx, key, &cm)).To(Succeed())
		expectTheSlices(&cm, &slice, hosts)
		Eventually(func(g Gomega) {
			g.Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(&slice), &slice)).To(Succeed())
			g.Expect(slice.Status.HostListsConfigMaps).To(Equal([]string{name}), "kubectl describe names the ConfigMap")
		}, testutil.Timeout, testutil.Interval).Should(Succeed())

		By("a deleted ConfigMap is re-created while the slice's Pods live")
		Expect(suite.Client.Delete(ctx, &cm)).To(Succeed())
		deleted := time.Now()
		var again corev1.ConfigMap
		Eventually(func(g Gomega) {
			g.Expect(suite.Client.Get(ctx, key, &again)).To(Succeed())
			g.Expect(again.UID).NotTo(Equal(cm.UID))
		}, recreateBound, 20*time.Millisecond).Should(Succeed())
		GinkgoWriter.Printf("host lists ConfigMap re-created %v after its deletion\n", time.Since(deleted))
		expectTheSlices(&again, &slice, hosts)

		By("KubeRay's replacement of a deleted worker references it as well")
		victim := pods[0]
		Expect(suite.Client.Delete(ctx, &victim)).To(Succeed())
		Eventually(func(g Gomega) {
			now := workerPods(rc, "tpu")
			g.Expect(now).To(HaveLen(hosts))
			g.Expect(now).NotTo(ContainElement(HaveField("UID", victim.UID)))
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
		expectSettled(rc, map[string]int{"tpu": hosts})
		for _, p := range workerPods(rc, "tpu") {
			Expect(tpuenv.ReferencedHostListsConfigMaps(&p, topology.TPUContainers(&p.Spec))).To(Equal([]string{name}), "Pod %s", p.Name)
		}
	})
})

// expectTheSlices checks that cm is the host lists ConfigMap of slice, a v5p slice of hosts
// 4-chip hosts of RayCluster "big" group "tpu" replica 0.
func expectTheSlices(cm *corev1.ConfigMap, slice *tpuv1alpha1.TPUSliceAssignment, hosts int32) {
	GinkgoHelper()
	owner := metav1.GetControllerOf(cm)
	Expect(owner).NotTo(BeNil())
	Expect(owner.Kind).To(Equal("TPUSliceAssignment"))
	Expect(owner.UID).To(Equal(slice.UID))
	Expect(cm.Immutable).To(HaveValue(BeTrue()))
	Expect(cm.Labels).To(HaveKeyWithValue(tpuv1alpha1.SliceLabel, slice.Name))
	Expect(cm.Data).To(HaveKeyWithValue(constants.EnvWorkerHostnames, tpuenv.WorkerHostnames("tpu", 0, hosts, "big-headless")))
	Expect(strings.Split(cm.Data[constants.EnvTorchSlicebuilderAddresses], ",")).To(HaveLen(int(hosts)*4),
		"one TorchTPU address per chip")
}
