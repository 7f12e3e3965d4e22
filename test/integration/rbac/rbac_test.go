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

package rbac

import (
	"fmt"
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/gate"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

var _ = Describe("The rendered RBAC", func() {
	It("grants no wildcard apiGroup, resource, verb or URL", func() {
		roles := 0
		for _, u := range rendered {
			if u.GetKind() != "ClusterRole" && u.GetKind() != "Role" {
				continue
			}
			roles++
			var role rbacv1.ClusterRole // Role and ClusterRole share the rules' shape.
			Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &role)).To(Succeed())
			Expect(role.AggregationRule).To(BeNil(), "%s %s aggregates other roles", u.GetKind(), u.GetName())
			for _, r := range role.Rules {
				for field, values := range map[string][]string{
					"apiGroups": r.APIGroups, "resources": r.Resources, "verbs": r.Verbs,
					"resourceNames": r.ResourceNames, "nonResourceURLs": r.NonResourceURLs,
				} {
					for _, v := range values {
						Expect(v).NotTo(ContainSubstring("*"), "%s %s: %s has a wildcard", u.GetKind(), u.GetName(), field)
					}
				}
				Expect(r.Verbs).NotTo(ContainElement(BeElementOf("escalate", "bind", "impersonate")),
					"%s %s grants a privilege-escalation verb", u.GetKind(), u.GetName())
			}
		}
		Expect(roles).To(BeNumerically(">=", 2), "the manager's ClusterRole and its leader-election Role")
	})
})

// unnamedGrant reports whether a rule without resourceNames of the rendered roles bound to the
// ServiceAccount grants attrs' verb on its resource in its namespace.
func unnamedGrant(attrs authorizationv1.ResourceAttributes) bool {
	for _, b := range rendered {
		if (b.GetKind() != "RoleBinding" || b.GetNamespace() != attrs.Namespace) && b.GetKind() != "ClusterRoleBinding" {
			continue
		}
		var binding rbacv1.RoleBinding
		Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(b.Object, &binding)).To(Succeed())
		for _, rule := range rulesOf(binding.RoleRef, b.GetNamespace()) {
			if len(rule.ResourceNames) == 0 && slices.Contains(rule.APIGroups, attrs.Group) &&
				slices.Contains(rule.Resources, attrs.Resource) && slices.Contains(rule.Verbs, attrs.Verb) {
				return true
			}
		}
	}
	return false
}

var _ = Describe("The rendered RBAC's named grants", func() {
	It("cover the named objects alone", func() {
		checked := 0
		for _, b := range rendered {
			if b.GetKind() != "RoleBinding" && b.GetKind() != "ClusterRoleBinding" {
				continue
			}
			var binding rbacv1.RoleBinding // RoleBinding and ClusterRoleBinding share the shape.
			Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(b.Object, &binding)).To(Succeed())
			if !slices.ContainsFunc(binding.Subjects, func(s rbacv1.Subject) bool {
				return s.Kind == rbacv1.ServiceAccountKind && s.Name == saName && s.Namespace == saNamespace
			}) {
				continue
			}
			for _, rule := range rulesOf(binding.RoleRef, b.GetNamespace()) {
				for _, name := range rule.ResourceNames {
					for _, group := range rule.APIGroups {
						for _, resource := range rule.Resources {
							for _, verb := range rule.Verbs {
								attrs := authorizationv1.ResourceAttributes{
									Namespace: b.GetNamespace(), Verb: verb, Group: group, Resource: resource, Name: name,
								}
								Expect(canI(attrs)).To(BeTrue(), "%s %s/%s %q is granted by %s", verb, group, resource, name, binding.RoleRef.Name)
								if unnamedGrant(attrs) {
									continue // another rule grants it whatever the name (domain Leases, docs/install.md)
								}
								attrs.Name = "not-" + name
								Expect(canI(attrs)).To(BeFalse(), "%s %s/%s %q: the grant names %q alone", verb, group, resource, attrs.Name, name)
								checked++
							}
						}
					}
				}
			}
		}
		GinkgoWriter.Printf("checked %d named grants\n", checked)
	})
})

var _ = Describe("The operator running as its ServiceAccount", func() {
	It("is who the API server authorizes", func() {
		review := &authenticationv1.SelfSubjectReview{}
		Expect(asSA.Create(ctx, review)).To(Succeed())
		Expect(review.Status.UserInfo.Username).To(Equal(saUser))
		Expect(review.Status.UserInfo.Groups).To(ContainElements("system:serviceaccounts", "system:serviceaccounts:"+saNamespace))
	})

	It("holds the leader-election lease in its namespace", func() {
		var lease coordinationv1.Lease
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: saNamespace, Name: leaderElectionID}, &lease)).To(Succeed())
		Expect(lease.Spec.HolderIdentity).NotTo(BeNil())
		Expect(*lease.Spec.HolderIdentity).NotTo(BeEmpty())
	})

	It("assigns unique worker IDs, binds and releases claims and removes slices with exactly its permissions", func() {
		ns := newNamespace()
		rc := testutil.MakeRayCluster("rbac", ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 2).ManagedByMultiKueue().Obj()
		Expect(admin.Create(ctx, rc)).To(Succeed())

		forwardedBefore, _ := forwardingStats()
		By("creating the 8 worker Pods of 2 slices as KubeRay would (admin)")
		pods := make([]*corev1.Pod, 0, 8)
		for range 8 {
			pods = append(pods, createPod(testutil.WorkerPodFor(rc, "tpu").Obj()))
		}
		report, err := framework.CheckAdmitted(ctx, admin, ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(report.LivePods).To(Equal(8))
		Expect(report.IDs).To(HaveLen(2))
		for slice, ids := range report.IDs {
			Expect(ids).To(Equal([]int{0, 1, 2, 3}), "slice %s", slice)
		}
		By("each slice's host lists written to its ConfigMap by the webhook, as the ServiceAccount")
		for _, p := range pods {
			refs := tpuenv.ReferencedHostListsConfigMaps(p, []int{0})
			Expect(refs).To(HaveLen(1), "Pod %s references its slice's host lists ConfigMap", p.Name)
			var cm corev1.ConfigMap
			Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: refs[0]}, &cm)).To(Succeed())
			Expect(cm.Labels).To(HaveKeyWithValue(tpuv1alpha1.SliceLabel, p.Labels[tpuv1alpha1.SliceLabel]))
		}
		By("deleting one: the reconciler re-creates it, as the ServiceAccount")
		first := tpuenv.ReferencedHostListsConfigMaps(pods[0], []int{0})[0]
		Expect(admin.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: first}})).To(Succeed())
		Eventually(func() error {
			return admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: first}, &corev1.ConfigMap{})
		}, testutil.Timeout, testutil.Interval).Should(Succeed())

		By("replacing it with a mutable one of other data that names the slice as its controller: the reconciler replaces it, as the ServiceAccount")
		// docs/spec.md §4, §8: the owner reference is a hint; the slice's data, immutable, is the rule.
		var good corev1.ConfigMap
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: first}, &good)).To(Succeed())
		Expect(admin.Delete(ctx, good.DeepCopy())).To(Succeed())
		forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: first, Labels: good.Labels,
			OwnerReferences: good.OwnerReferences}, Data: map[string]string{}}
		for k := range good.Data {
			forged.Data[k] = "attacker-0.evil"
		}
		Expect(admin.Create(ctx, forged)).To(Succeed())
		Eventually(func(g Gomega) {
			var cm corev1.ConfigMap
			g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: first}, &cm)).To(Succeed())
			g.Expect(cm.UID).NotTo(Equal(forged.UID), "replaced")
			g.Expect(cm.Data).To(Equal(good.Data))
			g.Expect(cm.Immutable).To(HaveValue(BeTrue()))
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
		Eventually(func() []string { return eventsFor(ns, tpuv1alpha1.ReasonTPUSliceHostListsReplaced) }, testutil.Timeout, testutil.Interval).
			Should(ConsistOf(pods[0].Labels[tpuv1alpha1.SliceLabel]))

		By("the replica that does not own the group forwarding its claims, authenticated and authorized as the ServiceAccount")
		forwarded, fallbacks := forwardingStats()
		Expect(forwarded - forwardedBefore).To(BeNumerically(">", 0))
		Expect(fallbacks).To(BeZero(), "no forward was refused or failed")

		By("the reconciler binding every claim to its Pod and recording an Event on each")
		expectClaimsMatchPods(ns, 8)
		Eventually(func() []string { return eventsFor(ns, tpuv1alpha1.ReasonTPUWorkerIDAssigned) }, testutil.Timeout, testutil.Interval).
			Should(ConsistOf(podNames(pods)))

		By("deleting a worker: its claim is released and its ID goes to the replacement")
		victim := pods[5]
		victimID, _ := framework.WorkerEnv(victim, constants.EnvWorkerID)
		Expect(admin.Delete(ctx, victim)).To(Succeed())
		expectClaimsMatchPods(ns, 7)
		Eventually(func() []string { return eventsFor(ns, tpuv1alpha1.ReasonTPUClaimReleased) }, testutil.Timeout, testutil.Interval).
			Should(ConsistOf(rc.Name))
		replacement := createPod(testutil.WorkerPodFor(rc, "tpu").Obj())
		Expect(replacement.Labels).To(HaveKeyWithValue(tpuv1alpha1.SliceLabel, victim.Labels[tpuv1alpha1.SliceLabel]))
		replacementID, _ := framework.WorkerEnv(replacement, constants.EnvWorkerID)
		Expect(replacementID).To(Equal(victimID))
		expectClaimsMatchPods(ns, 8)
		_, err = framework.CheckAdmitted(ctx, admin, ns)
		Expect(err).NotTo(HaveOccurred())

		By("deleting a slice its live Pods hold: the reconciler re-creates it, which adopts the ConfigMap its former self left, as the ServiceAccount")
		// docs/spec.md §4: with no garbage collector here the old slice's ConfigMap stays; the new
		// slice of the same name takes it over instead of leaving its Pods' lists inline.
		former := &tpuv1alpha1.TPUSliceAssignment{}
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: pods[0].Labels[tpuv1alpha1.SliceLabel]}, former)).To(Succeed())
		Expect(admin.Delete(ctx, former)).To(Succeed())
		recreated := &tpuv1alpha1.TPUSliceAssignment{}
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(former), recreated)).To(Succeed())
			g.Expect(recreated.UID).NotTo(Equal(former.UID))
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
		Eventually(func(g Gomega) {
			var cm corev1.ConfigMap
			g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: first}, &cm)).To(Succeed())
			owner := metav1.GetControllerOfNoCopy(&cm)
			g.Expect(owner).NotTo(BeNil())
			g.Expect(owner.UID).To(Equal(recreated.UID), "the ConfigMap's controller is the re-created slice")
		}, testutil.Timeout, testutil.Interval).Should(Succeed())

		By("deleting the RayCluster and, as the garbage collector would, its Pods: the slices are removed")
		Expect(admin.Delete(ctx, rc)).To(Succeed())
		Expect(admin.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns))).To(Succeed())
		Eventually(func() ([]tpuv1alpha1.TPUSliceAssignment, error) {
			var list tpuv1alpha1.TPUSliceAssignmentList
			err := admin.List(ctx, &list, client.InNamespace(ns))
			return list.Items, err
		}, testutil.Timeout, testutil.Interval).Should(BeEmpty())

		By("the operator's clients never being refused")
		Expect(refusals.Entries()).To(BeEmpty())
	})
})

var _ = Describe("The placement step as the ServiceAccount", func() {
	It("takes a domain Lease in its namespace and releases a ChosenDomain slice's gated Pods", func() {
		ns := newNamespace()
		rc := testutil.MakeRayCluster("rbac", ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 1).ManagedByMultiKueue().Obj()
		Expect(admin.Create(ctx, rc)).To(Succeed())
		pool := ns + "-pool"
		for i := range 4 {
			node := testutil.MakeNode(fmt.Sprintf("%s-%d", pool, i)).TPU("tpu-v6e-slice", "4x4", pool).TPUCapacity(4).Ready(true).Obj()
			node.Labels["test.tpu.ray.io/spec"] = ns
			Expect(framework.CreateNode(ctx, admin, node)).To(Succeed())
			DeferCleanup(func() { _ = admin.Delete(ctx, node) })
		}
		slice := claims.NewSlice(ns, tpuv1alpha1.TPUSliceAssignmentSpec{
			RayClusterName: rc.Name, RayClusterUID: rc.UID, GroupName: "tpu", Hosts: 4, Topology: "4x4", Accelerator: "tpu-v6e-slice",
			AffinityTopologyKey: constants.NodePoolTopologyKey, Placement: tpuv1alpha1.PlacementChosenDomain,
		})
		Expect(admin.Create(ctx, slice)).To(Succeed())
		pods := make([]*corev1.Pod, 0, 4)
		for id := range int32(4) {
			pods = append(pods, createPod(testutil.WorkerPodFor(rc, "tpu").TPUIdentity("tpu", 0, id).Label(framework.BypassLabel, "true").
				NodeSelector("test.tpu.ray.io/spec", ns).SchedulingGate(tpuv1alpha1.PlacementSchedulingGate).Obj()))
		}
		Eventually(func(g Gomega) {
			for _, p := range pods {
				cur := &corev1.Pod{}
				g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(p), cur)).To(Succeed())
				g.Expect(cur.Spec.SchedulingGates).To(BeEmpty())
				g.Expect(cur.Spec.NodeSelector).To(HaveKeyWithValue(constants.NodePoolTopologyKey, pool))
			}
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: saNamespace, Name: gate.LeaseName(constants.NodePoolTopologyKey, pool)}, &coordinationv1.Lease{})).
			To(Succeed(), "the domain Lease is in the operator's namespace")
		Expect(refusals.Entries()).To(BeEmpty())
	})
})

var _ = Describe("The ServiceAccount", Ordered, func() {
	var (
		ns      string
		rc      *rayv1.RayCluster
		pod     *corev1.Pod
		slice   *tpuv1alpha1.TPUSliceAssignment
		node    *corev1.Node
		secret  *corev1.Secret
		foreign *admissionregistrationv1.ValidatingWebhookConfiguration
	)
	BeforeAll(func() {
		ns = newNamespace()
		rc = testutil.MakeRayCluster("probe", ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 1).ManagedByMultiKueue().Obj()
		Expect(admin.Create(ctx, rc)).To(Succeed())
		pod = createPod(testutil.MakePod("plain", ns).Obj())
		slice = testutil.MakeSlice("probe-slice", ns, rc.Name, rc.UID, "tpu", 0, 4).SelectorLabels().Obj()
		Expect(admin.Create(ctx, slice)).To(Succeed())
		node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "rbac-node-"}}
		Expect(admin.Create(ctx, node)).To(Succeed())
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "user-secret", Namespace: ns}, StringData: map[string]string{"k": "v"}}
		Expect(admin.Create(ctx, secret)).To(Succeed())
		url := "https://example.invalid/validate"
		foreign = &admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "someone-elses-"},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{
				Name:                    "someone.example.com",
				ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url},
				Rules:                   []admissionregistrationv1.RuleWithOperations{}, // intercepts nothing
				SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
				AdmissionReviewVersions: []string{"v1"},
			}},
		}
		Expect(admin.Create(ctx, foreign)).To(Succeed())
		DeferCleanup(func() {
			Expect(client.IgnoreNotFound(admin.Delete(ctx, foreign))).To(Succeed())
			Expect(client.IgnoreNotFound(admin.Delete(ctx, node))).To(Succeed())
		})
	})

	It("may do what the operator needs (the probes' identity is not refused everything)", func() {
		Expect(asSA.List(ctx, &corev1.PodList{})).To(Succeed(), "list Pods in every namespace")
		Expect(asSA.List(ctx, &rayv1.RayClusterList{})).To(Succeed(), "list RayClusters in every namespace")
		Expect(asSA.Get(ctx, client.ObjectKeyFromObject(slice), &tpuv1alpha1.TPUSliceAssignment{})).To(Succeed())
		Expect(asSA.Get(ctx, client.ObjectKey{Namespace: saNamespace, Name: leaderElectionID}, &coordinationv1.Lease{})).To(Succeed())
	})

	It("may create capacity Pods, and no other Pod (the capacity-pods policy)", func() {
		// RBAC grants the create (docs/spec.md §12, "Capacity"); the policy narrows it. Policies
		// take effect a moment after they are created.
		capacityPod := func(name string, edit func(*corev1.Pod)) *corev1.Pod {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{tpuv1alpha1.CapacityForLabel: "s"}},
				Spec: corev1.PodSpec{AutomountServiceAccountToken: ptr.To(false),
					Containers: []corev1.Container{{Name: "capacity", Image: "registry.k8s.io/pause:3.10"}}},
			}
			if edit != nil {
				edit(p)
			}
			return p
		}
		refused := map[string]*corev1.Pod{
			"a Pod without the capacity label": testutil.MakePod("plain", ns).Obj(),
			"a capacity Pod with a command":    capacityPod("command", func(p *corev1.Pod) { p.Spec.Containers[0].Command = []string{"sh"} }),
			"a capacity Pod with a hostPath volume": capacityPod("volume", func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
			}),
			"a capacity Pod on the host network":         capacityPod("hostnet", func(p *corev1.Pod) { p.Spec.HostNetwork = true }),
			"a capacity Pod with a ServiceAccount token": capacityPod("token", func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil }),
			"a capacity Pod naming its Node":             capacityPod("node", func(p *corev1.Pod) { p.Spec.NodeName = "n" }),
			"a privileged capacity Pod": capacityPod("privileged", func(p *corev1.Pod) {
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
			}),
		}
		Eventually(func(g Gomega) {
			probe := testutil.MakePod("", ns).Obj()
			probe.GenerateName = "probe-"
			err := asSA.Create(ctx, probe)
			g.Expect(err).To(HaveOccurred(), "the policy is in effect")
			g.Expect(err.Error()).To(ContainSubstring("capacity-pods"))
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
		for what, p := range refused {
			err := asSA.Create(ctx, p)
			Expect(err).To(HaveOccurred(), "%s was created", what)
			Expect(err.Error()).To(ContainSubstring("capacity-pods"), "%s: refused by the policy", what)
		}
		allowed := capacityPod("capacity", nil)
		Expect(asSA.Create(ctx, allowed)).To(Succeed(), "a capacity Pod")
		Expect(admin.Delete(ctx, allowed)).To(Succeed())
		Expect(admin.Create(ctx, testutil.MakePod("by-admin", ns).Obj())).To(Succeed(), "the policy binds the operator alone")
	})

	labelPatch := func(obj client.Object) error {
		return asSA.Patch(ctx, obj, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"rbac-test":"x"}}}`)))
	}
	DescribeTable("is refused",
		func(do func() error) {
			err := do()
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
		},
		Entry("listing Secrets in every namespace", func() error { return asSA.List(ctx, &corev1.SecretList{}) }),
		Entry("reading a Secret", func() error { return asSA.Get(ctx, client.ObjectKeyFromObject(secret), &corev1.Secret{}) }),
		Entry("creating a RayCluster", func() error {
			return asSA.Create(ctx, testutil.MakeRayCluster("by-operator", ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 1).Obj())
		}),
		Entry("updating a RayCluster", func() error { return labelPatch(rc.DeepCopy()) }),
		Entry("deleting a RayCluster", func() error { return asSA.Delete(ctx, rc.DeepCopy()) }),
		Entry("updating a Pod", func() error {
			p := &corev1.Pod{}
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(pod), p)).To(Succeed())
			p.Labels = map[string]string{"rbac-test": "x"}
			return asSA.Update(ctx, p)
		}),
		Entry("creating a Deployment", func() error {
			labels := map[string]string{"app": "x"}
			return asSA.Create(ctx, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: "by-operator", Namespace: ns},
				Spec: appsv1.DeploymentSpec{
					Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod.Spec},
				},
			})
		}),
		Entry("patching a Node", func() error { return labelPatch(node.DeepCopy()) }),
		Entry("changing a TPUSliceAssignment's spec", func() error {
			s := &tpuv1alpha1.TPUSliceAssignment{}
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(slice), s)).To(Succeed())
			s.Spec.Hosts = 8
			return asSA.Update(ctx, s)
		}),
		Entry("patching a TPUSliceAssignment's status (claims change only by resourceVersion-checked update)", func() error {
			return asSA.Status().Patch(ctx, slice.DeepCopy(), client.RawPatch("application/merge-patch+json", []byte(`{"status":{"claimed":1}}`)))
		}),
		Entry("taking a lease outside its namespace", func() error {
			return asSA.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaderElectionID, Namespace: ns}})
		}),
		Entry("binding itself to cluster-admin", func() error {
			return asSA.Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "rbac-test-escalation"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: saNamespace, Name: saName}},
			})
		}),
		Entry("changing another component's webhook configuration", func() error { return labelPatch(foreign.DeepCopy()) }),
		Entry("deleting the TPUSliceAssignment CRD", func() error {
			crd := &unstructured.Unstructured{}
			crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
			crd.SetName("tpusliceassignments.tpu.ray.io")
			return asSA.Delete(ctx, crd)
		}),
	)
})

// rulesOf returns the rules of the rendered role a binding in namespace refers to.
func rulesOf(ref rbacv1.RoleRef, namespace string) []rbacv1.PolicyRule {
	GinkgoHelper()
	for _, u := range rendered {
		if u.GetKind() == ref.Kind && u.GetName() == ref.Name && (ref.Kind == "ClusterRole" || u.GetNamespace() == namespace) {
			var role rbacv1.ClusterRole
			Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &role)).To(Succeed())
			return role.Rules
		}
	}
	Fail(fmt.Sprintf("the install binds %s %s, which it does not render", ref.Kind, ref.Name))
	return nil
}

// canI asks the API server whether the ServiceAccount may do what attrs describe.
func canI(attrs authorizationv1.ResourceAttributes) bool {
	GinkgoHelper()
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs}}
	Expect(asSA.Create(ctx, review)).To(Succeed())
	return review.Status.Allowed
}

func newNamespace() string {
	GinkgoHelper()
	return framework.CreateNamespace(ctx, admin, "rbac")
}

// createPod creates a Pod as the administrator, retrying transient denials as KubeRay would, and
// returns the stored Pod.
func createPod(pod *corev1.Pod) *corev1.Pod {
	GinkgoHelper()
	var created *corev1.Pod
	Eventually(func() error {
		p := pod.DeepCopy() // a failed attempt must not leave a half-mutated Pod for the next
		if err := admin.Create(ctx, p); err != nil {
			return err
		}
		created = p
		return nil
	}, testutil.Timeout, testutil.Interval).Should(Succeed())
	return created
}

// expectClaimsMatchPods waits until the slices hold exactly n claims, each bound to its live Pod (I3).
func expectClaimsMatchPods(ns string, n int) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(framework.CheckClaimsMatchPods(ctx, admin, ns)).To(Succeed())
		var list tpuv1alpha1.TPUSliceAssignmentList
		g.Expect(admin.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		claims := 0
		for _, s := range list.Items {
			claims += len(s.Status.Claims)
		}
		g.Expect(claims).To(Equal(n))
	}, testutil.Timeout, testutil.Interval).Should(Succeed())
}

// eventsFor returns the names of the objects that Events of a reason in ns are about.
func eventsFor(ns, reason string) []string {
	GinkgoHelper()
	var list eventsv1.EventList
	Expect(admin.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	var names []string
	for _, e := range list.Items {
		if e.Reason == reason && !slices.Contains(names, e.Regarding.Name) {
			names = append(names, e.Regarding.Name)
		}
	}
	return names
}

func podNames(pods []*corev1.Pod) []string {
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Name
	}
	return names
}

// forwardingStats sums the claims the webhook replicas forwarded and fell back on.
func forwardingStats() (forwarded, fallbacks int64) {
	c := framework.TotalCounts(webhookInstances)
	return c.Forwarded, c.Fallbacks
}
