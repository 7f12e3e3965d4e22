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
// Both certificate modes are rendered and applied: config/default (built-in certificates, whose
// rotator then runs as the operator's ServiceAccount) and config/certmanager-overlay.
package install

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ray-tpu/tpu-slice-operator/internal/certs"
	"github.com/ray-tpu/tpu-slice-operator/internal/localenv"
	"github.com/ray-tpu/tpu-slice-operator/internal/managerflags"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// The names `make deploy` gives the objects (namespace and namePrefix of config/default).
const (
	installNamespace = "tpu-slice-operator-system"
	deploymentName   = "tpu-slice-operator-controller-manager"
)

// ctx lives as long as the suite.
var ctx = framework.SuiteContext()

var (
	testEnv   *envtest.Environment
	k8sClient client.Client
)

func TestInstall(t *testing.T) {
	framework.RunSuite(t, "Install suite")
}

var _ = BeforeSuite(func() {
	// Only KubeRay's CRD: ours comes from the rendered install itself. No webhooks are served here.
	testEnv, k8sClient = framework.StartBareSuite()
})

// rendered is the output of kustomize build, object by object.
type rendered []*unstructured.Unstructured

// render runs kustomize on a directory of config/ and returns its objects.
func render(dir string) rendered {
	GinkgoHelper()
	objs, err := framework.Kustomize(filepath.Join("config", dir))
	Expect(err).NotTo(HaveOccurred())
	return objs
}

// kinds counts the objects by kind.
func (r rendered) kinds() map[string]int {
	out := map[string]int{}
	for _, u := range r {
		out[u.GetKind()]++
	}
	return out
}

// ofKind returns the objects of one kind.
func (r rendered) ofKind(kind string) rendered {
	var out rendered
	for _, u := range r {
		if u.GetKind() == kind {
			out = append(out, u)
		}
	}
	return out
}

// certManager splits off the cert-manager objects, whose CRDs this control plane does not have.
func (r rendered) certManager() (cm, rest rendered) {
	for _, u := range r {
		if u.GroupVersionKind().Group == "cert-manager.io" {
			cm = append(cm, u)
		} else {
			rest = append(rest, u)
		}
	}
	return cm, rest
}

// one converts the single object of a kind (and name, if given) into out.
func (r rendered) one(kind, name string, out any) {
	GinkgoHelper()
	var found rendered
	for _, u := range r.ofKind(kind) {
		if name == "" || u.GetName() == name {
			found = append(found, u)
		}
	}
	Expect(found).To(HaveLen(1), "one %s %q", kind, name)
	Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(found[0].Object, out)).To(Succeed())
}

func (r rendered) deployment() *appsv1.Deployment {
	GinkgoHelper()
	d := &appsv1.Deployment{}
	r.one("Deployment", deploymentName, d)
	return d
}

// args maps the manager's flags to their values ("" for a boolean flag without one).
func args(d *appsv1.Deployment) map[string]string {
	out := map[string]string{}
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		name, value, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		out[name] = value
	}
	return out
}

// apply applies objects server-side: Namespaces and CRDs first, as kubectl apply would need them.
// The webhook configurations it applied are deleted when the current container ends, so that they
// (whose Service has no Pods here) do not refuse what later specs create.
func apply(objs rendered) {
	GinkgoHelper()
	reapply(objs)
	for _, u := range slices.Concat(objs.ofKind("MutatingWebhookConfiguration"), objs.ofKind("ValidatingWebhookConfiguration")) {
		DeferCleanup(func() {
			Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, u.DeepCopy()))).To(Succeed())
		})
	}
}

// reapply applies objects server-side, as apply does, without scheduling any deletion.
func reapply(objs rendered) {
	GinkgoHelper()
	ordered := slices.Concat(objs.ofKind("Namespace"), objs.ofKind("CustomResourceDefinition"), objs)
	for _, u := range ordered {
		Expect(k8sClient.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()), client.FieldOwner("install-test"), client.ForceOwnership)).
			To(Succeed(), "applying %s %s", u.GetKind(), u.GetName())
	}
}

// checkProductionShape checks what both installs share: the Deployment, PDB, NetworkPolicies and
// the webhook configurations' failure policy, timeouts and selectors.
func checkProductionShape(objs rendered) {
	GinkgoHelper()
	kinds := objs.kinds()
	Expect(kinds).To(HaveKeyWithValue("CustomResourceDefinition", 1))
	Expect(kinds).To(HaveKeyWithValue("Deployment", 1))
	Expect(kinds).To(HaveKeyWithValue("PodDisruptionBudget", 1))
	Expect(kinds).To(HaveKeyWithValue("NetworkPolicy", 2))
	Expect(kinds).To(HaveKeyWithValue("MutatingWebhookConfiguration", 1))
	Expect(kinds).To(HaveKeyWithValue("ValidatingWebhookConfiguration", 1))

	d := objs.deployment()
	Expect(d.Namespace).To(Equal(installNamespace))
	Expect(*d.Spec.Replicas).To(BeEquivalentTo(3), "every replica serves the webhooks")
	Expect(d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue()).To(BeZero(), "a rollout keeps every ready webhook replica")
	podLabels := d.Spec.Template.Labels
	spec := d.Spec.Template.Spec
	Expect(spec.TopologySpreadConstraints).To(HaveLen(2))
	for _, c := range spec.TopologySpreadConstraints {
		Expect(c.LabelSelector.MatchLabels).To(Equal(podLabels))
	}
	Expect(spec.TopologySpreadConstraints[0].TopologyKey).To(Equal(corev1.LabelTopologyZone))
	Expect(spec.TopologySpreadConstraints[1].TopologyKey).To(Equal(corev1.LabelHostname))
	Expect(*spec.SecurityContext.RunAsNonRoot).To(BeTrue())
	Expect(spec.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
	Expect(spec.Containers).To(HaveLen(1))
	c := spec.Containers[0]
	Expect(*c.SecurityContext.ReadOnlyRootFilesystem).To(BeTrue())
	Expect(*c.SecurityContext.AllowPrivilegeEscalation).To(BeFalse())
	Expect(c.SecurityContext.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")))
	Expect(c.Resources.Requests).To(HaveKey(corev1.ResourceCPU))
	Expect(c.Resources.Requests).To(HaveKey(corev1.ResourceMemory))
	Expect(c.Resources.Limits).To(HaveKey(corev1.ResourceMemory))
	Expect(c.LivenessProbe.HTTPGet.Path).To(Equal("/healthz"))
	Expect(c.ReadinessProbe.HTTPGet.Path).To(Equal("/readyz"))
	Expect(args(d)).To(HaveKey("leader-elect"), "the reconciler is leader-elected")
	Expect(c.Ports).To(ContainElement(HaveField("ContainerPort", BeEquivalentTo(9443))))
	Expect(c.Ports).To(ContainElement(HaveField("ContainerPort", BeEquivalentTo(8443))))

	var pdb policyv1.PodDisruptionBudget
	objs.one("PodDisruptionBudget", "", &pdb)
	Expect(pdb.Namespace).To(Equal(installNamespace))
	Expect(pdb.Spec.MaxUnavailable).To(Equal(ptr.To(intstr.FromInt32(1))))
	Expect(pdb.Spec.Selector.MatchLabels).To(Equal(d.Spec.Selector.MatchLabels))

	ports := map[int32]bool{}
	for _, u := range objs.ofKind("NetworkPolicy") {
		var np networkingv1.NetworkPolicy
		Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &np)).To(Succeed())
		Expect(np.Namespace).To(Equal(installNamespace))
		Expect(np.Spec.PodSelector.MatchLabels).To(Equal(d.Spec.Selector.MatchLabels), "NetworkPolicy %s", np.Name)
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				ports[p.Port.IntVal] = true
			}
		}
	}
	Expect(ports).To(Equal(map[int32]bool{9443: true, 8443: true}), "ingress only to the webhook and metrics ports")

	var mutating admissionregistrationv1.MutatingWebhookConfiguration
	objs.one("MutatingWebhookConfiguration", "", &mutating)
	var validating admissionregistrationv1.ValidatingWebhookConfiguration
	objs.one("ValidatingWebhookConfiguration", "", &validating)
	Expect(mutating.Webhooks).To(HaveLen(1))
	Expect(validating.Webhooks).To(HaveLen(1))
	pod, rc := mutating.Webhooks[0], validating.Webhooks[0]
	Expect(pod.Name).To(Equal("mpod.tpu.ray.io"))
	Expect(pod.ObjectSelector.MatchLabels).To(HaveKeyWithValue("ray.io/node-type", "worker"))
	Expect(*pod.SideEffects).To(Equal(admissionregistrationv1.SideEffectClassNoneOnDryRun))
	Expect(rc.Name).To(Equal("vraycluster.tpu.ray.io"))
	for _, w := range []struct {
		name            string
		failurePolicy   *admissionregistrationv1.FailurePolicyType
		timeoutSeconds  *int32
		namespaces      *metav1.LabelSelector
		matchConditions []admissionregistrationv1.MatchCondition
		service         *admissionregistrationv1.ServiceReference
	}{
		{pod.Name, pod.FailurePolicy, pod.TimeoutSeconds, pod.NamespaceSelector, pod.MatchConditions, pod.ClientConfig.Service},
		{rc.Name, rc.FailurePolicy, rc.TimeoutSeconds, rc.NamespaceSelector, rc.MatchConditions, rc.ClientConfig.Service},
	} {
		Expect(*w.failurePolicy).To(Equal(admissionregistrationv1.Fail), w.name)
		Expect(w.timeoutSeconds).To(HaveValue(BeNumerically("<=", 10)), "%s has an explicit timeout", w.name)
		Expect(w.namespaces.MatchExpressions).To(ContainElement(And(
			HaveField("Key", corev1.LabelMetadataName),
			HaveField("Operator", metav1.LabelSelectorOpNotIn),
			HaveField("Values", ContainElements("kube-system", installNamespace)),
		)), "%s never sees the control plane's or its own namespace", w.name)
		Expect(w.matchConditions).To(ContainElement(HaveField("Name", BeElementOf("requests-tpus", "has-tpu-worker-group"))),
			"%s only sees objects asking for TPUs", w.name)
		Expect(w.service.Namespace).To(Equal(installNamespace))
	}
	Expect(rc.MatchConditions).To(ContainElement(HaveField("Name", "changes-tpu-group")),
		"the RayCluster webhook sees only the updates that change a TPU group")
}

var _ = Describe("make deploy (config/default: built-in certificates)", Ordered, func() {
	var objs rendered
	BeforeAll(func() {
		objs = render("default")
		cm, _ := objs.certManager()
		Expect(cm).To(BeEmpty(), "the default install needs no cert-manager")
		apply(objs)
	})

	It("renders the production shape and applies server-side", func() {
		checkProductionShape(objs)
		var deploy appsv1.Deployment
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: deploymentName}, &deploy)).To(Succeed())
		Expect(*deploy.Spec.Replicas).To(BeEquivalentTo(3))
	})

	It("passes the manager the names of the objects its certificate rotator manages, and grants it exactly those", func() {
		d := objs.deployment()
		a := args(d)
		Expect(a).To(HaveKeyWithValue("cert-mode", certs.ModeSelfSigned))
		Expect(d.Spec.Template.Spec.Volumes).To(BeEmpty(), "no certificate files are mounted")

		var mutating admissionregistrationv1.MutatingWebhookConfiguration
		objs.one("MutatingWebhookConfiguration", "", &mutating)
		var validating admissionregistrationv1.ValidatingWebhookConfiguration
		objs.one("ValidatingWebhookConfiguration", "", &validating)
		Expect(a).To(HaveKeyWithValue("mutating-webhook-configuration-name", mutating.Name))
		Expect(a).To(HaveKeyWithValue("validating-webhook-configuration-name", validating.Name))
		var service corev1.Service
		objs.one("Service", mutating.Webhooks[0].ClientConfig.Service.Name, &service)
		Expect(a).To(HaveKeyWithValue("webhook-service-name", service.Name))
		Expect(validating.Webhooks[0].ClientConfig.Service.Name).To(Equal(service.Name))
		Expect(a).To(HaveKeyWithValue("cert-secret-name", certs.DefaultSecretName))
		// The namespace comes from the downward API, so it follows the kustomize namespace.
		Expect(d.Spec.Template.Spec.Containers[0].Env).To(ContainElement(corev1.EnvVar{
			Name:      "POD_NAMESPACE",
			ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}},
		}))
		Expect(service.Namespace).To(Equal(d.Namespace))

		By("the Go heap's soft limit: the container's memory limit, from the downward API")
		Expect(d.Spec.Template.Spec.Containers[0].Env).To(ContainElement(corev1.EnvVar{
			Name:      managerflags.MemoryLimitEnv,
			ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}},
		}))
		Expect(d.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().IsZero()).To(BeFalse(), "the manager has a memory limit")

		By("claim forwarding: on, with the Pod's IP, and the webhook Service's EndpointSlices readable in the operator's namespace only")
		Expect(a).To(HaveKey("claim-forwarding"))
		Expect(d.Spec.Template.Spec.Containers[0].Env).To(ContainElement(corev1.EnvVar{
			Name:      "POD_IP",
			ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}},
		}))
		var managerRole rbacv1.Role
		objs.one("Role", "tpu-slice-operator-manager-role", &managerRole)
		Expect(managerRole.Namespace).To(Equal(installNamespace))
		Expect(managerRole.Rules).To(ConsistOf(rbacv1.PolicyRule{
			APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"},
		}, rbacv1.PolicyRule{ // the domain Leases of ChosenDomain slices (docs/spec.md §12), in this namespace only
			APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
			Verbs: []string{"create", "delete", "get", "list", "update", "watch"},
		}))

		By("the rotator's Role: the Secret by name, plus create, in the operator's namespace only")
		var role rbacv1.Role
		objs.one("Role", "tpu-slice-operator-cert-rotator-role", &role)
		Expect(role.Namespace).To(Equal(installNamespace))
		Expect(role.Rules).To(ConsistOf(
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
			rbacv1.PolicyRule{
				APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{a["cert-secret-name"]},
				Verbs: []string{"get", "list", "update", "watch"},
			},
		))
		By("the rotator's ClusterRole: the two webhook configurations by name")
		var clusterRole rbacv1.ClusterRole
		objs.one("ClusterRole", "tpu-slice-operator-cert-rotator-role", &clusterRole)
		Expect(clusterRole.Rules).To(HaveLen(1))
		Expect(clusterRole.Rules[0].ResourceNames).To(ConsistOf(mutating.Name))
		Expect(clusterRole.Rules[0].ResourceNames).To(ConsistOf(validating.Name))
		Expect(clusterRole.Rules[0].Resources).To(ConsistOf("mutatingwebhookconfigurations", "validatingwebhookconfigurations"))
		Expect(clusterRole.Rules[0].Verbs).To(ConsistOf("get", "list", "watch", "update"))
		By("both bound to the manager's ServiceAccount")
		sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: d.Spec.Template.Spec.ServiceAccountName, Namespace: installNamespace}
		var roleBinding rbacv1.RoleBinding
		objs.one("RoleBinding", "tpu-slice-operator-cert-rotator-rolebinding", &roleBinding)
		Expect(roleBinding.RoleRef.Name).To(Equal(role.Name))
		Expect(roleBinding.Subjects).To(ConsistOf(sa))
		var clusterRoleBinding rbacv1.ClusterRoleBinding
		objs.one("ClusterRoleBinding", "tpu-slice-operator-cert-rotator-rolebinding", &clusterRoleBinding)
		Expect(clusterRoleBinding.RoleRef.Name).To(Equal(clusterRole.Name))
		Expect(clusterRoleBinding.Subjects).To(ConsistOf(sa))
	})

	It("issues, injects and serves one CA's certificates from three replicas running as the ServiceAccount", func() {
		d := objs.deployment()
		saConfig := rest.CopyConfig(testEnv.Config)
		saConfig.Impersonate = rest.ImpersonationConfig{
			UserName: serviceaccount.MakeUsername(installNamespace, d.Spec.Template.Spec.ServiceAccountName),
			Groups:   append(serviceaccount.MakeGroupNames(installNamespace), "system:authenticated"),
		}
		rotators := make([]*certs.Rotator, 3)
		for i := range rotators {
			rotators[i] = startRotator(saConfig, d)
		}

		By("every replica becoming ready")
		for _, r := range rotators {
			Eventually(func() error { return r.ReadyCheck(nil) }, testutil.Timeout, testutil.Interval).Should(Succeed())
		}
		secret := &corev1.Secret{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: args(d)["cert-secret-name"]}, secret)).To(Succeed())
		Expect(secret.Data).To(HaveKey(certs.CACertKey))
		Expect(secret.Data).To(HaveKey(certs.CAKeyKey))
		bundle := secret.Data[certs.CABundleKey]
		Expect(bundle).NotTo(BeEmpty())

		By("the same certificate on every replica, trusted by the bundle for the Service's name")
		served, err := rotators[0].GetCertificate(nil)
		Expect(err).NotTo(HaveOccurred())
		for _, r := range rotators[1:] {
			other, err := r.GetCertificate(nil)
			Expect(err).NotTo(HaveOccurred())
			Expect(other.Certificate[0]).To(Equal(served.Certificate[0]))
		}
		roots := x509.NewCertPool()
		Expect(roots.AppendCertsFromPEM(bundle)).To(BeTrue())
		_, err = served.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: args(d)["webhook-service-name"] + "." + installNamespace + ".svc"})
		Expect(err).NotTo(HaveOccurred())

		By("the bundle in both webhook configurations")
		expectInjected := func(bundle []byte) {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				var mutating admissionregistrationv1.MutatingWebhookConfiguration
				g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: args(d)["mutating-webhook-configuration-name"]}, &mutating)).To(Succeed())
				for _, w := range mutating.Webhooks {
					g.Expect(w.ClientConfig.CABundle).To(Equal(bundle), w.Name)
				}
				var validating admissionregistrationv1.ValidatingWebhookConfiguration
				g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: args(d)["validating-webhook-configuration-name"]}, &validating)).To(Succeed())
				for _, w := range validating.Webhooks {
					g.Expect(w.ClientConfig.CABundle).To(Equal(bundle), w.Name)
				}
			}, testutil.Timeout, testutil.Interval).Should(Succeed())
		}
		expectInjected(bundle)

		By("a re-applied install leaving the injected bundle alone")
		reapply(objs.ofKind("MutatingWebhookConfiguration"))
		expectInjected(bundle)

		By("a reset bundle being injected again")
		var mutating admissionregistrationv1.MutatingWebhookConfiguration
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: args(d)["mutating-webhook-configuration-name"]}, &mutating)).To(Succeed())
		mutating.Webhooks[0].ClientConfig.CABundle = nil
		Expect(k8sClient.Update(ctx, &mutating)).To(Succeed())
		expectInjected(bundle)

		By("a deleted Secret being issued again and served by every replica")
		Expect(k8sClient.Delete(ctx, secret)).To(Succeed())
		Eventually(func(g Gomega) {
			fresh := &corev1.Secret{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(secret), fresh)).To(Succeed())
			g.Expect(fresh.UID).NotTo(Equal(secret.UID))
			for _, r := range rotators {
				cert, err := r.GetCertificate(nil)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})).To(Equal(fresh.Data[certs.CertKey]))
			}
			bundle = fresh.Data[certs.CABundleKey]
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
		expectInjected(bundle)
	})

	It("runs the manager binary with the Deployment's arguments, as its ServiceAccount, until it is ready", func() {
		d := objs.deployment()
		dir := GinkgoT().TempDir()
		manager := filepath.Join(dir, "manager")
		build := exec.Command("go", "build", "-o", manager, "./cmd")
		build.Dir = localenv.RootDir()
		out, err := build.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "go build ./cmd: %s", out)

		sa, err := testEnv.AddUser(envtest.User{
			Name:   serviceaccount.MakeUsername(installNamespace, d.Spec.Template.Spec.ServiceAccountName),
			Groups: serviceaccount.MakeGroupNames(installNamespace),
		}, nil)
		Expect(err).NotTo(HaveOccurred())
		kubeconfig, err := sa.KubeConfig()
		Expect(err).NotTo(HaveOccurred())
		// In a Pod the manager authenticates with its ServiceAccount token, which claim forwarding
		// also presents to the other replicas: the same here, with a token from the TokenRequest API.
		token, err := framework.ServiceAccountToken(ctx, k8sClient, installNamespace, d.Spec.Template.Spec.ServiceAccountName)
		Expect(err).NotTo(HaveOccurred())
		kc, err := clientcmd.Load(kubeconfig)
		Expect(err).NotTo(HaveOccurred())
		for _, user := range kc.AuthInfos {
			user.ClientCertificateData, user.ClientKeyData, user.Token = nil, nil, token
		}
		kubeconfig, err = clientcmd.Write(*kc)
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(filepath.Join(dir, "kubeconfig"), kubeconfig, 0o600)).To(Succeed())

		healthPort, webhookPort := freePort(), freePort()
		// The Deployment's arguments, then what differs outside a Pod: local ports, and no leader
		// election (it needs the in-cluster namespace file).
		cmd := exec.Command(manager, append(slices.Clone(d.Spec.Template.Spec.Containers[0].Args),
			"--health-probe-bind-address=127.0.0.1:"+healthPort, "--metrics-bind-address=0",
			"--webhook-port="+webhookPort, "--leader-elect=false")...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(dir, "kubeconfig"), "POD_NAMESPACE="+installNamespace, "POD_IP=127.0.0.1",
			// As the kubelet resolves the Deployment's resourceFieldRef.
			managerflags.MemoryLimitEnv+"="+strconv.FormatInt(objs.deployment().Spec.Template.Spec.Containers[0].Resources.Limits.Memory().Value(), 10))
		cmd.Stdout, cmd.Stderr = GinkgoWriter, GinkgoWriter
		Expect(cmd.Start()).To(Succeed())
		DeferCleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})

		By("/readyz passing: the webhook server serves, the certificates are in place and the informers (the webhook Service's EndpointSlices among them) have synced")
		Eventually(func() (int, error) {
			resp, err := http.Get("http://127.0.0.1:" + healthPort + "/readyz")
			if err != nil {
				return 0, err
			}
			_ = resp.Body.Close()
			return resp.StatusCode, nil
		}, testutil.LongTimeout, testutil.Interval).Should(Equal(http.StatusOK))

		By("the webhook port presenting the certificate the injected bundle trusts, TLS 1.2 or later, HTTP/1.1 only")
		var mutating admissionregistrationv1.MutatingWebhookConfiguration
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: args(d)["mutating-webhook-configuration-name"]}, &mutating)).To(Succeed())
		roots := x509.NewCertPool()
		Expect(roots.AppendCertsFromPEM(mutating.Webhooks[0].ClientConfig.CABundle)).To(BeTrue())
		serverName := args(d)["webhook-service-name"] + "." + installNamespace + ".svc"
		dial := func(cfg *tls.Config) (*tls.Conn, error) {
			cfg.RootCAs, cfg.ServerName = roots, serverName
			return tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", "127.0.0.1:"+webhookPort, cfg)
		}
		conn, err := dial(&tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(conn.ConnectionState().NegotiatedProtocol).To(Equal("http/1.1"))
		Expect(conn.Close()).To(Succeed())
		_, err = dial(&tls.Config{MinVersion: tls.VersionTLS11, MaxVersion: tls.VersionTLS11})
		Expect(err).To(HaveOccurred(), "TLS 1.1 is refused")
	})

	It("can block only KubeRay TPU worker Pods and RayClusters with TPU groups while the webhooks are down", func() {
		By("pointing both webhooks at a closed port: every call fails")
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		closed := "https://" + ln.Addr().String()
		Expect(ln.Close()).To(Succeed())
		d := objs.deployment()
		var mutating admissionregistrationv1.MutatingWebhookConfiguration
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: args(d)["mutating-webhook-configuration-name"]}, &mutating)).To(Succeed())
		mutating.Webhooks[0].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: ptr.To(closed + "/mutate--v1-pod")}
		Expect(k8sClient.Update(ctx, &mutating)).To(Succeed())
		var validating admissionregistrationv1.ValidatingWebhookConfiguration
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: args(d)["validating-webhook-configuration-name"]}, &validating)).To(Succeed())
		failurePolicy := validating.Webhooks[0].FailurePolicy
		validating.Webhooks[0].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: ptr.To(closed + "/validate-ray-io-v1-raycluster")}
		validating.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		Expect(k8sClient.Update(ctx, &validating)).To(Succeed())

		ns := framework.CreateNamespace(ctx, k8sClient, "install-probe")
		By("creating a TPU RayCluster while the RayCluster webhook's failures are ignored, as if before the outage")
		running := testutil.MakeRayCluster("running", ns).ManagedByMultiKueue().CPUGroup("cpu", 1).
			TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 1).Obj()
		Eventually(func() error { return k8sClient.Create(ctx, running) }, testutil.Timeout, testutil.Interval).Should(Succeed())
		validating.Webhooks[0].FailurePolicy = failurePolicy
		Expect(k8sClient.Update(ctx, &validating)).To(Succeed())

		refused := MatchError(ContainSubstring("failed calling webhook"))
		worker := func() *testutil.PodWrapper {
			return testutil.MakeWorkerPod(ns, "probe", "uid-1", "workers").GenerateName("probe-workers-")
		}
		cpuCluster := testutil.MakeRayCluster("cpu", ns).ManagedByMultiKueue().CPUGroup("cpu", 1).Obj()
		tpuCluster := testutil.MakeRayCluster("tpu", ns).ManagedByMultiKueue().CPUGroup("cpu", 1).
			TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 1).Obj()
		// The webhooks' configuration is read from the API server's cache: wait until it refuses.
		Eventually(func() error { return k8sClient.Create(ctx, worker().TPU(4).Obj()) }, testutil.Timeout, testutil.Interval).Should(refused)
		Eventually(func() error { return k8sClient.Create(ctx, tpuCluster) }, testutil.Timeout, testutil.Interval).Should(refused)

		By("updating the running TPU RayCluster: only changes to a TPU group's template or numOfHosts wait for the operator")
		update := func(change func(rc *rayv1.RayCluster)) error {
			var rc rayv1.RayCluster
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(running), &rc); err != nil {
				return err
			}
			change(&rc)
			return k8sClient.Update(ctx, &rc)
		}
		const cpu, tpu = 0, 1 // the groups' indexes
		Expect(update(func(rc *rayv1.RayCluster) {
			g := &rc.Spec.WorkerGroupSpecs[tpu]
			g.Replicas, g.MaxReplicas = ptr.To[int32](2), ptr.To[int32](2)
		})).To(Succeed(), "the Ray autoscaler scales a TPU group")
		Expect(update(func(rc *rayv1.RayCluster) { rc.Finalizers = append(rc.Finalizers, "example.com/hold") })).
			To(Succeed(), "a finalizer is added")
		Expect(update(func(rc *rayv1.RayCluster) { rc.Finalizers = nil })).To(Succeed(), "a finalizer is removed")
		Expect(update(func(rc *rayv1.RayCluster) { rc.Labels = map[string]string{"team": "a"} })).To(Succeed(), "the RayCluster's labels")
		Expect(update(func(rc *rayv1.RayCluster) {
			rc.Spec.WorkerGroupSpecs[cpu].Template.Labels = map[string]string{"rev": "2"}
		})).To(Succeed(), "a CPU group's template")
		Expect(update(func(rc *rayv1.RayCluster) {
			rc.Spec.WorkerGroupSpecs[tpu].Template.Labels = map[string]string{"rev": "2"}
		})).To(refused, "a TPU group's template")
		Expect(update(func(rc *rayv1.RayCluster) { rc.Spec.WorkerGroupSpecs[tpu].NumOfHosts = 2 })).To(refused, "a TPU group's numOfHosts")
		Expect(update(func(rc *rayv1.RayCluster) {
			added := *rc.Spec.WorkerGroupSpecs[tpu].DeepCopy()
			added.GroupName = "tpu-2"
			rc.Spec.WorkerGroupSpecs = append(rc.Spec.WorkerGroupSpecs, added)
		})).To(refused, "a new TPU group")
		Expect(update(func(rc *rayv1.RayCluster) { rc.Spec.WorkerGroupSpecs[tpu].GroupName = "renamed" })).
			To(refused, "a renamed TPU group")

		Expect(k8sClient.Create(ctx, worker().Obj())).To(Succeed(), "a KubeRay worker Pod without TPUs")
		Expect(k8sClient.Create(ctx, testutil.MakePod("plain-tpu", ns).TPU(4).Obj())).To(Succeed(), "a TPU Pod that is not a KubeRay worker")
		Expect(k8sClient.Create(ctx, cpuCluster)).To(Succeed(), "a RayCluster without TPU groups")
	})
})

var _ = Describe("the cert-manager install (config/certmanager-overlay)", Ordered, func() {
	var objs rendered
	BeforeAll(func() {
		objs = render("certmanager-overlay")
	})

	It("renders cert-manager's Issuer and Certificate wired to the webhook Service and the manager", func() {
		cm, rest := objs.certManager()
		Expect(cm.kinds()).To(Equal(map[string]int{"Issuer": 1, "Certificate": 1}))
		checkProductionShape(rest)

		certificate := cm.ofKind("Certificate")[0]
		dnsNames, _, _ := unstructured.NestedStringSlice(certificate.Object, "spec", "dnsNames")
		var service corev1.Service
		objs.one("Service", "tpu-slice-operator-webhook-service", &service)
		Expect(dnsNames).To(Equal([]string{
			service.Name + "." + installNamespace + ".svc",
			service.Name + "." + installNamespace + ".svc.cluster.local",
		}))
		issuer, _, _ := unstructured.NestedString(certificate.Object, "spec", "issuerRef", "name")
		Expect(issuer).To(Equal(cm.ofKind("Issuer")[0].GetName()))
		secretName, _, _ := unstructured.NestedString(certificate.Object, "spec", "secretName")

		d := objs.deployment()
		a := args(d)
		Expect(a).To(HaveKeyWithValue("cert-mode", certs.ModeExternal))
		spec := d.Spec.Template.Spec
		Expect(spec.Volumes).To(ConsistOf(HaveField("Secret.SecretName", secretName)))
		Expect(spec.Containers[0].VolumeMounts).To(ConsistOf(And(
			HaveField("Name", spec.Volumes[0].Name),
			HaveField("MountPath", a["webhook-cert-path"]),
			HaveField("ReadOnly", true),
		)))

		injectFrom := certificate.GetNamespace() + "/" + certificate.GetName()
		for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
			Expect(objs.ofKind(kind)[0].GetAnnotations()).To(HaveKeyWithValue("cert-manager.io/inject-ca-from", injectFrom), kind)
		}
		for _, kind := range []string{"Role", "ClusterRole"} {
			for _, u := range objs.ofKind(kind) {
				Expect(u.GetName()).NotTo(ContainSubstring("cert-rotator"), "the built-in rotator's permissions are not granted")
			}
		}
	})

	It("differs from config/default only in its certificates", func() {
		names := func(objs rendered) []string {
			out := make([]string, 0, len(objs))
			for _, u := range objs {
				out = append(out, u.GetKind()+"/"+u.GetName())
			}
			return out
		}
		_, rest := objs.certManager()
		var defaults rendered
		for _, u := range render("default") {
			if !strings.Contains(u.GetName(), "cert-rotator") {
				defaults = append(defaults, u)
			}
		}
		Expect(names(rest)).To(ConsistOf(names(defaults)))
	})

	It("applies server-side, but for the cert-manager kinds this control plane does not have", func() {
		_, rest := objs.certManager()
		apply(rest)
		var mutating admissionregistrationv1.MutatingWebhookConfiguration
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: certs.DefaultWebhookConfigurationName}, &mutating)).To(Succeed())
		Expect(mutating.Annotations).To(HaveKey("cert-manager.io/inject-ca-from"))
	})
})

var _ = Describe("config/samples", func() {
	It("renders the valid RayCluster samples, which pass KubeRay's CRD schema", func() {
		objs := render("samples")
		Expect(objs.kinds()).To(Equal(map[string]int{"RayCluster": 3}), "kubectl apply -k applies only what the webhook admits")
		for _, u := range objs {
			u.SetNamespace("default")
		}
		apply(objs)
	})
})

// startRotator runs the certificate rotator of one manager replica, configured by the Deployment's
// own arguments, until the spec ends.
func startRotator(cfg *rest.Config, d *appsv1.Deployment) *certs.Rotator {
	GinkgoHelper()
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	var opts certs.Options
	opts.BindFlags(fs)
	var ours []string // The certificate flags; the others are the rest of the manager's.
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if fs.Lookup(name) != nil {
			ours = append(ours, a)
		}
	}
	Expect(fs.Parse(ours)).To(Succeed())
	opts.Namespace = d.Namespace // POD_NAMESPACE, from the downward API.
	r, err := certs.New(opts)
	Expect(err).NotTo(HaveOccurred())
	mgr, err := manager.New(cfg, manager.Options{
		Scheme:                 operator.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Three replicas in one process register the same controller name.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(r.SetupWithManager(mgr)).To(Succeed())
	mgrCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer GinkgoRecover()
		Expect(mgr.Start(mgrCtx)).To(Succeed())
	})
	DeferCleanup(func() {
		cancel()
		wg.Wait()
	})
	return r
}

// freePort returns a local TCP port nothing listens on.
func freePort() string {
	GinkgoHelper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = ln.Close() }()
	_, port, err := net.SplitHostPort(ln.Addr().String())
	Expect(err).NotTo(HaveOccurred())
	return port
}
