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

package cluster

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// newNamespace creates a namespace with a generated name.
func newNamespace() *corev1.Namespace {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cluster-"}}
	Expect(suite.Client.Create(ctx, ns)).To(Succeed())
	return ns
}

// runTPUPod creates a Pod asking for one 4-chip host of pool, owned by owner when it is not nil,
// and waits until it runs Ready on a Node of that pool.
func runTPUPod(ns, pool string, owner *corev1.ConfigMap) *corev1.Pod {
	GinkgoHelper()
	pod := testutil.MakePod("worker", ns).
		Topology("tpu-v6e-slice", "4x4").
		NodeSelector(constants.NodePoolTopologyKey, pool).
		TPU(4).Obj()
	if owner != nil {
		pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, corev1.SchemeGroupVersion.WithKind("ConfigMap"))}
	}
	Expect(suite.Client.Create(ctx, pod)).To(Succeed())
	Expect(pod.Spec.Tolerations).To(ContainElement(HaveField("Key", string(constants.TPUResourceName))),
		"the API server's ExtendedResourceToleration tolerates the TPU Nodes' taint, as GKE does")
	Eventually(func(g Gomega) {
		g.Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		g.Expect(pod.Spec.NodeName).NotTo(BeEmpty(), "scheduled")
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(pod.Status.Conditions).To(ContainElement(And(
			HaveField("Type", corev1.PodReady), HaveField("Status", corev1.ConditionTrue))))
	}, testutil.Timeout, testutil.Interval).Should(Succeed())
	var node corev1.Node
	Expect(suite.Client.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, &node)).To(Succeed())
	Expect(node.Labels).To(HaveKeyWithValue(constants.NodePoolTopologyKey, pool), "the Pod runs on a Node of its pool")
	return pod
}

var _ = Describe("The local cluster", func() {
	It("made the pools' Nodes, shaped like GKE TPU nodes, Ready", func() {
		var nodes corev1.NodeList
		Expect(suite.Client.List(ctx, &nodes)).To(Succeed())
		Expect(nodes.Items).To(HaveLen(len(suite.Cluster.Nodes)))
		Expect(nodes.Items).To(HaveLen(4*4 + 1))
		for i := range nodes.Items {
			n := &nodes.Items[i]
			Expect(localcluster.Ready(n)).To(BeTrue(), "Node %s is Ready without the not-ready taint", n.Name)
			chips := n.Status.Allocatable[constants.TPUResourceName]
			if n.Labels[constants.NodePoolTopologyKey] == cpuPool {
				Expect(chips.IsZero()).To(BeTrue(), "CPU Node %s has no TPU", n.Name)
				continue
			}
			Expect(chips.Value()).To(Equal(int64(4)), "Node %s has 4 allocatable TPU chips", n.Name)
		}
	})

	It("keeps Pods that ask for no TPU off the tainted TPU Nodes", func() {
		ns := newNamespace()
		pod := testutil.MakePod("head", ns.Name).Obj()
		Expect(suite.Client.Create(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
			g.Expect(pod.Spec.NodeName).NotTo(BeEmpty(), "scheduled")
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
		Expect(pod.Spec.NodeName).To(Equal(cpuPool+"-0"), "the only Node without the google.com/tpu taint")
	})

	It("schedules a TPU Pod onto its pool, runs it, and garbage-collects it with its owner", func() {
		ns := newNamespace()
		owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner", Namespace: ns.Name}}
		Expect(suite.Client.Create(ctx, owner)).To(Succeed())
		pod := runTPUPod(ns.Name, "pool-b", owner)

		Expect(suite.Client.Delete(ctx, owner)).To(Succeed())
		Eventually(func() error {
			return suite.Client.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
		}, testutil.Timeout, testutil.Interval).Should(Satisfy(apierrors.IsNotFound), "the garbage collector deletes the Pod")
	})

	It("finishes deleting a namespace with a running Pod", func() {
		ns := newNamespace()
		runTPUPod(ns.Name, "pool-a", nil)

		Expect(suite.Client.Delete(ctx, ns)).To(Succeed())
		Eventually(func() error {
			return suite.Client.Get(ctx, client.ObjectKeyFromObject(ns), &corev1.Namespace{})
		}, testutil.Timeout, testutil.Interval).Should(Satisfy(apierrors.IsNotFound), "the namespace controller finishes")
	})

	It("fails a Node on demand and recovers it", func() {
		name := suite.Cluster.Nodes[0].Name
		ready := func() bool {
			var n corev1.Node
			Expect(suite.Client.Get(ctx, client.ObjectKey{Name: name}, &n)).To(Succeed())
			return localcluster.Ready(&n)
		}
		Expect(localcluster.FailNode(ctx, suite.Client, name, true)).To(Succeed())
		Eventually(ready, testutil.Timeout, testutil.Interval).Should(BeFalse(), "kwok reports the Node NotReady")
		Consistently(ready, 3*time.Second, testutil.Interval).Should(BeFalse(), "the Node stays failed")

		Expect(localcluster.FailNode(ctx, suite.Client, name, false)).To(Succeed())
		Eventually(ready, testutil.Timeout, testutil.Interval).Should(BeTrue(), "the Node is Ready again, untainted")
	})
})
