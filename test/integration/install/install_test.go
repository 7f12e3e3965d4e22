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

// Package install checks that what `make deploy` and `make build-installer` render installs on a
// real API server: every object is applied server-side, with the API server's own validation.
package install

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/ray-tpu/tpu-slice-operator/internal/localenv"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
)

var (
	testEnv   *envtest.Environment
	k8sClient client.Client
	ctx       = context.Background()
)

func TestInstall(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Install suite")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	base, err := localenv.NewEnvironment()
	Expect(err).NotTo(HaveOccurred())
	// Only KubeRay's CRD: ours comes from the rendered install itself. No webhooks are served here.
	kuberay, err := localenv.KubeRayCRDDir()
	Expect(err).NotTo(HaveOccurred())
	testEnv = &envtest.Environment{
		BinaryAssetsDirectory: base.BinaryAssetsDirectory,
		CRDInstallOptions:     envtest.CRDInstallOptions{Paths: []string{filepath.Join(kuberay, "ray.io_rayclusters.yaml")}},
	}
	cfg, err := testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	k8sClient, err = client.New(cfg, client.Options{Scheme: operator.Scheme})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// render runs kustomize on a directory of config/ and returns its objects.
func render(dir string) []*unstructured.Unstructured {
	GinkgoHelper()
	kustomize := os.Getenv("KUSTOMIZE")
	if kustomize == "" {
		kustomize = filepath.Join(localenv.RootDir(), "bin", "kustomize")
	}
	if _, err := os.Stat(kustomize); err != nil {
		Fail("kustomize not found at " + kustomize + ": run the tests with `make test` (it installs kustomize into bin/)")
	}
	out, err := exec.Command(kustomize, "build", filepath.Join(localenv.RootDir(), "config", dir)).Output()
	if exitErr, ok := errors.AsType[*exec.ExitError](err); ok {
		Fail("kustomize build config/" + dir + ": " + string(exitErr.Stderr))
	}
	Expect(err).NotTo(HaveOccurred())
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		Expect(err).NotTo(HaveOccurred())
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		u := &unstructured.Unstructured{}
		Expect(utilyaml.Unmarshal(doc, &u.Object)).To(Succeed())
		objs = append(objs, u)
	}
	return objs
}

func apply(objs []*unstructured.Unstructured) {
	GinkgoHelper()
	for _, u := range objs {
		Expect(k8sClient.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("install-test"), client.ForceOwnership)).
			To(Succeed(), "applying %s %s", u.GetKind(), u.GetName())
	}
}

var _ = Describe("make deploy (config/default)", func() {
	It("renders and applies server-side", func() {
		objs := render("default")
		var certManager, rest []*unstructured.Unstructured
		kinds := map[string]int{}
		for _, u := range objs {
			kinds[u.GetKind()]++
			if u.GroupVersionKind().Group == "cert-manager.io" {
				// cert-manager's CRDs are not part of this control plane; the objects must still render.
				certManager = append(certManager, u)
				continue
			}
			rest = append(rest, u)
		}
		Expect(kinds).To(HaveKeyWithValue("CustomResourceDefinition", 1))
		Expect(kinds).To(HaveKeyWithValue("Deployment", 1))
		Expect(kinds).To(HaveKeyWithValue("MutatingWebhookConfiguration", 1))
		Expect(kinds).To(HaveKeyWithValue("ValidatingWebhookConfiguration", 1))
		Expect(certManager).To(HaveLen(2), "an Issuer and a Certificate")
		// Namespaces and CRDs first, as kubectl apply would need them.
		for _, first := range []string{"Namespace", "CustomResourceDefinition"} {
			for _, u := range rest {
				if u.GetKind() == first {
					apply([]*unstructured.Unstructured{u})
				}
			}
		}
		apply(rest)

		var deploy appsv1.Deployment
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: "tpu-slice-operator-system", Name: "tpu-slice-operator-controller-manager"}, &deploy)).To(Succeed())
		Expect(*deploy.Spec.Replicas).To(BeEquivalentTo(3))
		c := deploy.Spec.Template.Spec.Containers[0]
		Expect(*c.SecurityContext.ReadOnlyRootFilesystem).To(BeTrue())
		Expect(*c.SecurityContext.AllowPrivilegeEscalation).To(BeFalse())
		Expect(c.Args).To(ContainElement("--leader-elect"))
	})

	It("narrows the Pod webhook to KubeRay worker Pods by its name", func() {
		for _, u := range render("default") {
			if u.GetKind() != "MutatingWebhookConfiguration" {
				continue
			}
			hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
			Expect(hooks).To(HaveLen(1))
			hook := hooks[0].(map[string]any)
			Expect(hook["name"]).To(Equal("mpod.tpu.ray.io"))
			Expect(hook).To(HaveKey("objectSelector"))
			Expect(hook).To(HaveKey("namespaceSelector"))
			Expect(hook).To(HaveKeyWithValue("sideEffects", "NoneOnDryRun"))
			Expect(hook).To(HaveKeyWithValue("failurePolicy", "Fail"))
			Expect(hook).To(HaveKey("clientConfig"))
		}
	})
})

var _ = Describe("config/samples", func() {
	It("renders and the RayCluster samples pass KubeRay's CRD schema", func() {
		var rayClusters []*unstructured.Unstructured
		for _, u := range render("samples") {
			if u.GetKind() == "RayCluster" {
				u.SetNamespace("default")
				rayClusters = append(rayClusters, u)
			}
		}
		Expect(rayClusters).To(HaveLen(4))
		apply(rayClusters)
	})
})
