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
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

var _ = Describe("GKE dynamic slicing with Kueue (Ray's TPU subslicing guide)", Ordered, Serial, func() {
	It("admits the guide's tpu7x manifest end to end: 192 hosts from the slice-topology annotation, an accelerator-only nodeSelector, suspended then resumed", func() {
		ns := framework.CreateNamespace(ctx, suite.Client, "e2e-dws")
		b := testutil.MakeRayCluster("dws", ns).TPUGroup("tpu", "tpu7x", "4x12x16", 4, 192, 1).
			WithoutNodeSelector(0, constants.TopologyNodeSelectorKey).
			GroupAnnotation(0, constants.SliceTopologyAnnotation, "4x12x16").
			Label(constants.KueueQueueNameLabel, "tpu7x-queue")
		b.Spec.Suspend = ptr.To(true) // Kueue admits the workload, then unsuspends it.
		rc := create(b.Obj())
		Consistently(func() []corev1.Pod { return workerPods(rc, "tpu") }, testutil.ConsistentlyTime, testutil.Interval).Should(BeEmpty())

		By("resumed, as Kueue does once it admitted the workload")
		update(rc, func(rc *rayv1.RayCluster) { rc.Spec.Suspend = ptr.To(false) })
		expectSettled(rc, map[string]int{"tpu": 192})
		for _, p := range workerPods(rc, "tpu") {
			Expect(env1(&p, constants.EnvTorchTopology)).To(Equal("4,12,16,2"), "TorchTPU topology of the slice itself, tpu7x")
			Expect(p.Spec.Hostname).NotTo(BeEmpty())
			if a := p.Spec.Affinity; a != nil && a.PodAffinity != nil {
				for _, term := range a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
					Expect(term.LabelSelector.MatchLabels).NotTo(HaveKey(tpuv1alpha1.SliceLabel), "no slice affinity fights Kueue's placement")
				}
			}
		}
	})
})
