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

	It("renders, with its defaults, exactly the objects of config/default (run `make helm-chart` if not)", func() {
		want := map[string]*unstructured.Unstructured{}
		namespace := ""
		fromKustomize, err := framework.Kustomize("config/default")
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
			want[key(u)] = u
		}
		Expect(namespace).NotTo(BeEmpty())
		got := map[string]*unstructured.Unstructured{}
		for _, u := range parse(run(helm(), "template", release, chartDir, "--namespace", namespace)) {
			got[key(u)] = u
		}
		Expect(keys(got)).To(ConsistOf(keys(want)))
		for k, u := range want {
			Expect(cmp.Diff(u.Object, got[k].Object)).To(BeEmpty(), "%s differs from config/default (-kustomize +helm)", k)
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
