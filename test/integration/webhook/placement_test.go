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
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// These specs use v5p shapes no other spec of the suite creates Nodes for, so that the Nodes one
// spec creates (and the caches see until they are deleted) decide no other spec's placement.
var _ = Describe("Slice placement at admission (docs/spec.md §4)", func() {
	// slicePods creates a RayCluster of one v5p slice of topology and returns its worker Pods as
	// the API server stored them, and the slice.
	slicePods := func(ns, name, topology string, hosts int32) ([]*corev1.Pod, *tpuv1alpha1.TPUSliceAssignment) {
		GinkgoHelper()
		rc := createCluster(testutil.MakeRayCluster(name, ns).TPUGroup("tpu", "tpu-v5p-slice", topology, 4, hosts, 1).ManagedByMultiKueue().Obj())
		pods := make([]*corev1.Pod, 0, hosts)
		for range hosts {
			pods = append(pods, framework.MustCreate(ctx, suite.Client, testutil.WorkerPodFor(rc, "tpu").Obj()))
		}
		slice := &tpuv1alpha1.TPUSliceAssignment{}
		Expect(suite.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: naming.SliceName(name, "tpu", 0)}, slice)).To(Succeed())
		_, err := framework.CheckAdmitted(ctx, suite.Client, ns)
		Expect(err).NotTo(HaveOccurred())
		return pods, slice
	}

	It("gates the Pods of a slice whose node pool has a TPU Node, without inter-pod terms, and records ChosenDomain", func() {
		ns := newNamespace()
		for _, name := range []string{"v5p-gate-0", "v5p-gate-1"} {
			n := testutil.MakeNode(name).TPU("tpu-v5p-slice", "2x2x2", "pool-v5p").Ready(true).Obj()
			Expect(framework.CreateNode(ctx, suite.Client, n)).To(Succeed())
			DeferCleanup(func() { Expect(client.IgnoreNotFound(suite.Client.Delete(ctx, n))).To(Succeed()) })
		}
		By("every instance's Node cache has the pool before the first admission")
		for _, inst := range suite.Instances {
			Eventually(func() int {
				var list corev1.NodeList
				Expect(inst.Manager.GetCache().List(ctx, &list, client.MatchingLabels{constants.NodePoolTopologyKey: "pool-v5p"})).To(Succeed())
				return len(list.Items)
			}, testutil.Timeout, testutil.Interval).Should(Equal(2))
		}

		pods, slice := slicePods(ns, "gated", "2x2x2", 2)

		for _, p := range pods {
			Expect(p.Spec.SchedulingGates).To(Equal([]corev1.PodSchedulingGate{{Name: tpuv1alpha1.PlacementSchedulingGate}}), "Pod %s", p.Name)
			Expect(p.Spec.Affinity).To(BeNil(), "Pod %s: no inter-pod terms; the reconciler adds a nodeSelector on the chosen domain", p.Name)
		}
		Expect(slice.Spec.Placement).To(Equal(tpuv1alpha1.PlacementChosenDomain))
		Expect(slice.Spec.AffinityTopologyKey).To(Equal(constants.NodePoolTopologyKey))
	})

	It("falls back to inter-pod terms, and records InterPodAffinity, when no TPU Node matches the Pods' nodeSelector", func() {
		ns := newNamespace()

		pods, slice := slicePods(ns, "ungated", "2x2x4", 4)

		for _, p := range pods {
			Expect(p.Spec.SchedulingGates).To(BeEmpty(), "Pod %s", p.Name)
			Expect(p.Spec.Affinity).NotTo(BeNil(), "Pod %s", p.Name)
			terms := p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution
			Expect(terms).To(HaveLen(1))
			Expect(terms[0].TopologyKey).To(Equal(constants.NodePoolTopologyKey))
			Expect(terms[0].LabelSelector.MatchLabels).To(HaveKeyWithValue(tpuv1alpha1.SliceLabel, slice.Name))
			// One term against the other slices of the namespace, one against every slice of
			// every other namespace (docs/spec.md §4: a slice's name is unique in its namespace only).
			anti := p.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
			Expect(anti).To(HaveLen(2))
			Expect(anti[0].NamespaceSelector).To(BeNil())
			Expect(anti[0].Namespaces).To(BeEmpty())
			Expect(anti[1].NamespaceSelector).To(Equal(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{ns}},
			}}))
		}
		Expect(slice.Spec.Placement).To(Equal(tpuv1alpha1.PlacementInterPodAffinity))
	})
})
