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

// Package helm checks the Helm chart in charts/ (generated from config/default by
// `make helm-chart`): rendered with the chart's defaults it is exactly the kustomize install, and
// rendered into another namespace with other values it applies server-side to a real API server.
package helm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ray-tpu/tpu-slice-operator/internal/localenv"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

const (
	release          = "tpu-slice-operator"
	deploymentName   = "tpu-slice-operator-controller-manager"
	managedByLabel   = "app.kubernetes.io/managed-by"
	releaseNamespace = "tpu-helm"
)

// ctx lives as long as the suite.
var ctx = framework.SuiteContext()

var (
	k8sClient client.Client
	chartDir  = filepath.Join(localenv.RootDir(), "charts", "tpu-slice-operator")
)

func TestHelm(t *testing.T) {
	framework.RunSuite(t, "Helm chart suite")
}

var _ = BeforeSuite(func() {
	// Only KubeRay's CRD: ours comes from the chart. No webhooks are served here.
	_, k8sClient = framework.StartBareSuite()
})

var _ = Describe("The Helm chart", func() {
	It("passes helm lint --strict", func() {
		out, err := exec.Command(helm(), "lint", "--strict", chartDir).CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
	})

	It("renders, with its defaults, exactly the objects of config/default but for the CRD's keep policy (run `make helm-chart` if not)", func() {
		expectRendersConfig("config/default")
	})

	It("renders, with certManager.enabled, exactly the objects of config/certmanager-overlay but for the CRD's keep policy", func() {
		expectRendersConfig("config/certmanager-overlay", "--set", "certManager.enabled=true")
	})

	It("renders config/prometheus's ServiceMonitor and PrometheusRule when enabled, with their extra labels", func() {
		fromKustomize, err := framework.Kustomize("config/prometheus")
		Expect(err).NotTo(HaveOccurred())
		Expect(fromKustomize).To(HaveLen(2))
		got := map[string]*unstructured.Unstructured{}
		for _, u := range parse(run(helm(), "template", release, chartDir, "--namespace", "tpu-slice-operator-system",
			"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.labels.release=prom",
			"--set", "prometheusRule.enabled=true", "--set", "prometheusRule.labels.release=prom")) {
			got[key(u)] = u
		}
		for _, u := range fromKustomize {
			labels := u.GetLabels()
			labels[managedByLabel] = "Helm"
			labels["release"] = "prom"
			u.SetLabels(labels)
			Expect(got).To(HaveKey(key(u)))
			Expect(cmp.Diff(u.Object, got[key(u)].Object)).To(BeEmpty(), "%s differs from config/prometheus (-kustomize +helm)", key(u))
		}
	})

	// Each combination of values docs/install.md documents renders and applies server-side, and
	// its values land where they should.
	DescribeTable("renders and applies the documented values",
		func(namespace string, check func(objs []*unstructured.Unstructured), set ...string) {
			args := append([]string{"template", release, chartDir, "--namespace", namespace}, set...)
			objs := parse(run(helm(), args...))
			check(objs)
			Expect(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})).To(Succeed())
			applyAll(objs)
		},
		Entry("scheduling, resources, pull secrets and Pod annotations", "tpu-helm-scheduling", func(objs []*unstructured.Unstructured) {
			spec := deploymentOf(objs).Spec.Template
			Expect(spec.Spec.NodeSelector).To(Equal(map[string]string{"pool": "system"}))
			Expect(spec.Spec.Tolerations).To(ConsistOf(HaveField("Key", "dedicated")))
			Expect(spec.Spec.Affinity.NodeAffinity).NotTo(BeNil())
			Expect(spec.Spec.PriorityClassName).To(Equal("system-cluster-critical"))
			Expect(spec.Spec.ImagePullSecrets).To(ConsistOf(corev1.LocalObjectReference{Name: "registry"}))
			Expect(spec.Annotations).To(HaveKeyWithValue("example.com/team", "tpu"))
			Expect(spec.Annotations).To(HaveKey("kubectl.kubernetes.io/default-container"), "the rendered annotation stays")
			manager := spec.Spec.Containers[0]
			Expect(manager.Resources.Limits.Memory().String()).To(Equal("2Gi"))
			Expect(manager.ImagePullPolicy).To(Equal(corev1.PullAlways))
		},
			"--set", "nodeSelector.pool=system",
			"--set", "tolerations[0].key=dedicated", "--set", "tolerations[0].operator=Exists",
			"--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool",
			"--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
			"--set", "priorityClassName=system-cluster-critical",
			"--set", "imagePullSecrets[0].name=registry", "--set", "image.pullPolicy=Always",
			"--set", "podAnnotations.example\\.com/team=tpu",
			"--set", "resources.limits.memory=2Gi", "--set", "resources.requests.memory=256Mi"),
		Entry("manager flags: placement, no forwarding, extra flags; one replica without a PodDisruptionBudget", "tpu-helm-flags", func(objs []*unstructured.Unstructured) {
			deploy := deploymentOf(objs)
			Expect(*deploy.Spec.Replicas).To(BeEquivalentTo(1))
			args := deploy.Spec.Template.Spec.Containers[0].Args
			Expect(args).To(ContainElements("--slice-placement=InterPodAffinity", "--max-slice-hosts=1024"))
			Expect(args).NotTo(ContainElement("--claim-forwarding"))
			Expect(kindsOf(objs)).NotTo(HaveKey("PodDisruptionBudget"))
		},
			"--set", "replicaCount=1", "--set", "podDisruptionBudget.enabled=false", "--set", "manager.claimForwarding=false",
			"--set", "manager.slicePlacement=InterPodAffinity", "--set", "manager.extraArgs[0]=--max-slice-hosts=1024"),
		Entry("the defaults: forwarding replicas with a PodDisruptionBudget, the CRD kept", "tpu-helm-defaults", func(objs []*unstructured.Unstructured) {
			deploy := deploymentOf(objs)
			Expect(*deploy.Spec.Replicas).To(BeEquivalentTo(3))
			Expect(deploy.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--claim-forwarding"))
			Expect(kindsOf(objs)).To(HaveKeyWithValue("PodDisruptionBudget", 1))
			Expect(kindsOf(objs)).NotTo(HaveKey("ServiceMonitor"))
			Expect(kindsOf(objs)).NotTo(HaveKey("PrometheusRule"))
			Expect(kindsOf(objs)).NotTo(HaveKey("Certificate"))
			Expect(crdOf(objs).GetAnnotations()).To(HaveKeyWithValue("helm.sh/resource-policy", "keep"))
		}),
		Entry("crds.keep=false", "tpu-helm-nokeep", func(objs []*unstructured.Unstructured) {
			Expect(crdOf(objs).GetAnnotations()).NotTo(HaveKey("helm.sh/resource-policy"))
		}, "--set", "crds.keep=false"),
		Entry("cert-manager, ServiceMonitor and PrometheusRule", "tpu-helm-monitoring", func(objs []*unstructured.Unstructured) {
			kinds := kindsOf(objs)
			Expect(kinds).To(HaveKeyWithValue("Certificate", 1))
			Expect(kinds).To(HaveKeyWithValue("Issuer", 1))
			Expect(kinds).To(HaveKeyWithValue("ServiceMonitor", 1))
			Expect(kinds).To(HaveKeyWithValue("PrometheusRule", 1))
		}, "--set", "certManager.enabled=true", "--set", "metrics.serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true"),
	)

	It("refuses values its schema does not allow", func() {
		for _, set := range []string{"replicaCount=three", "manager.slicePlacement=Anywhere", "manager.extraArgs[0]=max-slice-hosts", "unknownValue=1", "image.digest=latest"} {
			out, err := exec.Command(helm(), "template", release, chartDir, "--set", set).CombinedOutput()
			Expect(err).To(HaveOccurred(), "--set %s rendered:\n%s", set, out)
			Expect(string(out)).To(ContainSubstring("values don't meet the specifications of the schema"), "--set %s", set)
		}
	})

	It("limits the webhook port to webhook.allowedSources exactly as config/restricted-webhook-sources does", func() {
		fromKustomize, err := framework.Kustomize("config/restricted-webhook-sources")
		Expect(err).NotTo(HaveOccurred())
		var want, got *unstructured.Unstructured
		for _, u := range fromKustomize {
			if u.GetKind() == "NetworkPolicy" && u.GetName() == "tpu-slice-operator-allow-webhook-traffic" {
				want = u
			}
		}
		Expect(want).NotTo(BeNil())
		for _, u := range parse(run(helm(), "template", release, chartDir, "--set", "webhook.allowedSources[0].ipBlock.cidr=172.16.0.0/28")) {
			if u.GetKind() == "NetworkPolicy" && u.GetName() == want.GetName() {
				got = u
			}
		}
		Expect(got).NotTo(BeNil())
		wantIngress, _, _ := unstructured.NestedSlice(want.Object, "spec", "ingress")
		gotIngress, _, _ := unstructured.NestedSlice(got.Object, "spec", "ingress")
		Expect(cmp.Diff(wantIngress, gotIngress)).To(BeEmpty(), "-kustomize +helm")
		from, _, _ := unstructured.NestedSlice(got.Object, "spec", "ingress")
		Expect(from[0]).To(HaveKey("from"), "the rule names its sources")
	})

	It("installs into the release namespace with its values, server-side", func() {
		const image = "registry.example.com/tpu-slice-operator"
		out := run(helm(), "template", release, chartDir, "--namespace", releaseNamespace,
			"--set", "image.repository="+image, "--set", "image.tag=v1.2.3", "--set", "replicaCount=2")
		Expect(string(out)).NotTo(ContainSubstring("tpu-slice-operator-system"), "no trace of the kustomize namespace")
		objs := parse(out)
		Expect(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNamespace}})).To(Succeed())
		// CRDs first, as Helm and kubectl apply do; cert-manager's objects need its CRDs, not here.
		var crds, rest []*unstructured.Unstructured
		for _, u := range objs {
			switch {
			case u.GroupVersionKind().Group == "cert-manager.io":
			case u.GetKind() == "CustomResourceDefinition":
				crds = append(crds, u)
			default:
				rest = append(rest, u)
			}
		}
		Expect(crds).To(HaveLen(1))
		for _, u := range append(crds, rest...) {
			Expect(k8sClient.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("helm-test"), client.ForceOwnership)).
				To(Succeed(), "applying %s %s", u.GetKind(), u.GetName())
		}

		var deploy appsv1.Deployment
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: releaseNamespace, Name: deploymentName}, &deploy)).To(Succeed())
		Expect(*deploy.Spec.Replicas).To(BeEquivalentTo(2))
		Expect(deploy.Spec.Template.Spec.Containers).To(ContainElement(HaveField("Image", image+":v1.2.3")))
		Expect(deploy.Labels).To(HaveKeyWithValue(managedByLabel, "Helm"))

		var mutating admissionregistrationv1.MutatingWebhookConfigurationList
		Expect(k8sClient.List(ctx, &mutating)).To(Succeed())
		Expect(mutating.Items).NotTo(BeEmpty())
		for _, c := range mutating.Items {
			for _, w := range c.Webhooks {
				Expect(w.ClientConfig.Service).NotTo(BeNil())
				Expect(w.ClientConfig.Service.Namespace).To(Equal(releaseNamespace), "webhook %s", w.Name)
			}
		}
		var bindings rbacv1.ClusterRoleBindingList
		Expect(k8sClient.List(ctx, &bindings)).To(Succeed())
		bound := 0
		for _, b := range bindings.Items {
			for _, s := range b.Subjects {
				if s.Kind == rbacv1.ServiceAccountKind && s.Name == deploy.Spec.Template.Spec.ServiceAccountName {
					Expect(s.Namespace).To(Equal(releaseNamespace), "ClusterRoleBinding %s", b.Name)
					bound++
				}
			}
		}
		Expect(bound).To(BeNumerically(">", 0), "the manager's ServiceAccount is bound")
	})

	It("pins the image by digest when one is set", func() {
		const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		for _, u := range parse(run(helm(), "template", release, chartDir, "--namespace", releaseNamespace,
			"--set", "image.repository=registry.example.com/tpu", "--set", "image.digest="+digest)) {
			if u.GetKind() == "Deployment" {
				var deploy appsv1.Deployment
				Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &deploy)).To(Succeed())
				Expect(deploy.Spec.Template.Spec.Containers).To(ContainElement(HaveField("Image", "registry.example.com/tpu@"+digest)))
			}
		}
	})
})

// expectRendersConfig checks that the chart, with set, renders exactly the objects of a directory of
// config/: the Namespace left out, managed by Helm, the CRD kept on uninstall (crds.keep).
func expectRendersConfig(dir string, set ...string) {
	GinkgoHelper()
	want := map[string]*unstructured.Unstructured{}
	namespace := ""
	fromKustomize, err := framework.Kustomize(dir)
	Expect(err).NotTo(HaveOccurred())
	for _, u := range fromKustomize {
		if u.GetKind() == "Namespace" { // Helm installs into the release namespace instead.
			namespace = u.GetName()
			continue
		}
		if labels := u.GetLabels(); labels[managedByLabel] == "kustomize" {
			labels[managedByLabel] = "Helm"
			u.SetLabels(labels)
		}
		if u.GetKind() == "CustomResourceDefinition" {
			annotations := u.GetAnnotations()
			annotations["helm.sh/resource-policy"] = "keep"
			u.SetAnnotations(annotations)
		}
		want[key(u)] = u
	}
	Expect(namespace).NotTo(BeEmpty())
	got := map[string]*unstructured.Unstructured{}
	for _, u := range parse(run(helm(), append([]string{"template", release, chartDir, "--namespace", namespace}, set...)...)) {
		got[key(u)] = u
	}
	Expect(keys(got)).To(ConsistOf(keys(want)))
	for k, u := range want {
		Expect(cmp.Diff(u.Object, got[k].Object)).To(BeEmpty(), "%s differs from %s (-kustomize +helm)", k, dir)
	}
}

// applyAll applies objects server-side as Helm would install them: CRDs first; cert-manager's and
// the Prometheus Operator's kinds, whose CRDs this control plane does not have, are left out.
func applyAll(objs []*unstructured.Unstructured) {
	GinkgoHelper()
	var crds, rest []*unstructured.Unstructured
	for _, u := range objs {
		switch {
		case u.GroupVersionKind().Group == "cert-manager.io", u.GroupVersionKind().Group == "monitoring.coreos.com":
		case u.GetKind() == "CustomResourceDefinition":
			crds = append(crds, u)
		default:
			rest = append(rest, u)
		}
	}
	for _, u := range append(crds, rest...) {
		Expect(k8sClient.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("helm-test"), client.ForceOwnership)).
			To(Succeed(), "applying %s %s", u.GetKind(), u.GetName())
	}
}

// deploymentOf returns the manager Deployment among objs.
func deploymentOf(objs []*unstructured.Unstructured) *appsv1.Deployment {
	GinkgoHelper()
	for _, u := range objs {
		if u.GetKind() == "Deployment" {
			var deploy appsv1.Deployment
			Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &deploy)).To(Succeed())
			return &deploy
		}
	}
	Fail("no Deployment rendered")
	return nil
}

// crdOf returns the CRD among objs.
func crdOf(objs []*unstructured.Unstructured) *unstructured.Unstructured {
	GinkgoHelper()
	for _, u := range objs {
		if u.GetKind() == "CustomResourceDefinition" {
			return u
		}
	}
	Fail("no CRD rendered")
	return nil
}

// kindsOf counts objs by kind.
func kindsOf(objs []*unstructured.Unstructured) map[string]int {
	out := map[string]int{}
	for _, u := range objs {
		out[u.GetKind()]++
	}
	return out
}

func key(u *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", u.GroupVersionKind().GroupKind(), u.GetNamespace(), u.GetName())
}

func keys(m map[string]*unstructured.Unstructured) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// helm returns the helm binary: $HELM, else bin/helm, installed with `make helm` when missing
// (built from source once, like every tool in bin/).
func helm() string {
	GinkgoHelper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	h := filepath.Join(localenv.RootDir(), "bin", "helm")
	if _, err := os.Stat(h); err != nil {
		By("installing helm into bin/ with `make helm`")
		cmd := exec.Command("make", "--no-print-directory", "-C", localenv.RootDir(), "helm")
		out, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "make helm: %s", out)
	}
	return h
}

// run runs a command and returns its standard output, failing with its standard error.
func run(name string, args ...string) []byte {
	GinkgoHelper()
	out, err := exec.Command(name, args...).Output()
	if exitErr, ok := errors.AsType[*exec.ExitError](err); ok {
		Fail(fmt.Sprintf("%s %v: %s", filepath.Base(name), args, exitErr.Stderr))
	}
	Expect(err).NotTo(HaveOccurred())
	return out
}

// parse splits helm's output into objects.
func parse(out []byte) []*unstructured.Unstructured {
	GinkgoHelper()
	objs, err := framework.ParseYAML(out)
	Expect(err).NotTo(HaveOccurred())
	return objs
}
