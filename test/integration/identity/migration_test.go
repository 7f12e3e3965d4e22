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
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

var _ = Describe("TPUSliceAssignments stored by earlier versions", Serial, func() {
	It("stay readable, keep their claims, and are stored in the string form at their next write", func() {
		ns := framework.CreateNamespace(ctx, suite.Client, "migration")
		rc := cluster(ns, "old", "4x4", 4, 4, 1)
		By("the earlier version's objects are written while no reconciler runs, as before an upgrade")
		Expect(suite.Instances[0].Stop()).To(Succeed())
		suite.ServeWebhooksFrom(suite.Instances[1:]...)
		// The upgraded operator: a new instance running the reconciler, as instance 0 did.
		upgraded := false
		upgrade := func() {
			inst, err := suite.StartInstance(ctx, framework.InstanceOptions{Forward: true})
			Expect(err).NotTo(HaveOccurred())
			suite.Instances[0], upgraded = inst, true
			suite.ServeWebhooksFrom(suite.Instances...)
			Expect(framework.WaitForPeers(ctx, suite.Instances...)).To(Succeed())
		}
		DeferCleanup(func() {
			if !upgraded {
				upgrade()
			}
		})
		suite.Bypass(true)
		held := framework.MustCreate(ctx, suite.Client, referencePod(rc, 0, 0))
		suite.Bypass(false)

		By("a slice as the earlier version stored it: status.claims a list of objects (the CRD keeps that field's schema)")
		spec := tpuv1alpha1.TPUSliceAssignmentSpec{RayClusterName: rc.Name, RayClusterUID: rc.UID, GroupName: "tpu", Hosts: 4, Topology: "4x4"}
		typed := claims.NewSlice(ns, spec)
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(tpuv1alpha1.GroupVersion.WithKind("TPUSliceAssignment"))
		obj.SetName(typed.Name)
		obj.SetNamespace(ns)
		obj.SetLabels(typed.Labels)
		Expect(unstructured.SetNestedField(obj.Object, map[string]any{
			"rayClusterName": rc.Name, "rayClusterUID": string(rc.UID), "groupName": "tpu", "replicaIndex": int64(0),
			"hosts": int64(4), "topology": "4x4",
		}, "spec")).To(Succeed())
		Expect(suite.Client.Create(ctx, obj)).To(Succeed())
		Eventually(func() error {
			Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
			Expect(unstructured.SetNestedSlice(obj.Object, []any{map[string]any{
				"workerID": int64(0), "token": "legacy-0", "podName": held.Name, "podUID": string(held.UID), "claimedAt": "2026-11-30T12:00:00Z",
			}}, "status", "claims")).To(Succeed())
			Expect(unstructured.SetNestedField(obj.Object, int64(1), "status", "claimed")).To(Succeed())
			return suite.Client.Status().Update(ctx, obj)
		}, testutil.Timeout, testutil.Interval).Should(Succeed())

		raw := &unstructured.Unstructured{}
		raw.SetGroupVersionKind(tpuv1alpha1.GroupVersion.WithKind("TPUSliceAssignment"))
		Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(obj), raw)).To(Succeed())
		_, stored, _ := unstructured.NestedFieldNoCopy(raw.Object, "status", "claims")
		Expect(stored).To(BeTrue(), "the slice is stored in the list form")

		By("the stored list is read as it is")
		read := &tpuv1alpha1.TPUSliceAssignment{}
		Expect(suite.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: naming.SliceName(rc.Name, "tpu", 0)}, read)).To(Succeed())
		Expect([]tpuv1alpha1.WorkerClaim(read.Status.Claims)).To(Equal([]tpuv1alpha1.WorkerClaim{
			{WorkerID: 0, Token: "legacy-0", PodName: held.Name, PodUID: held.UID}}))

		By("the upgraded operator starts; a new Pod gets a free ID, and the slice is stored in the string form")
		upgrade()
		next := framework.MustCreate(ctx, suite.Client, testutil.WorkerPodFor(rc, "tpu").Obj())
		Expect(framework.WorkerID(next)).To(Equal("1"))
		Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(obj), raw)).To(Succeed())
		text, found, err := unstructured.NestedString(raw.Object, "status", "workers")
		Expect(err).NotTo(HaveOccurred(), "status.workers is a string")
		Expect(found).To(BeTrue())
		_, legacy, _ := unstructured.NestedFieldNoCopy(raw.Object, "status", "claims")
		Expect(legacy).To(BeFalse(), "the list form is no longer stored")
		// Then the new Pod's claim, and the IDs reserved with it (docs/spec.md §3.5) until they are
		// given back.
		Expect(text).To(HavePrefix("0 legacy-0 " + held.Name + " " + string(held.UID) + "\n1 " + identity.Token(next)))
		expectSettled(ns)
	})
})
