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

// Package rbac proves the operator's RBAC on a real API server with RBAC authorization: the RBAC
// objects of the rendered install are applied, and the operator runs as its ServiceAccount
// (impersonation) through a scenario. It must work with exactly those permissions, never be
// refused, and be refused anything beyond them.
package rbac

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ray-tpu/tpu-slice-operator/controllers"
	"github.com/ray-tpu/tpu-slice-operator/internal/localenv"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
	"github.com/ray-tpu/tpu-slice-operator/webhooks"
)

// installDir is the kustomization whose RBAC objects are applied: the production install, so the
// names, namespace and namePrefix are exactly what `make deploy` creates.
const installDir = "default"

// leaderElectionID is the lease the production manager (cmd/main.go) elects its leader with.
const leaderElectionID = "tpu-slice-operator.tpu.ray.io"

// rbacKinds are the kinds taken from the rendered install: the ServiceAccount, what it is granted,
// the policy that narrows its create on Pods, and the Namespace they live in. Everything else (the
// Deployment, the webhook configurations pointing at a Service that does not run here,
// cert-manager objects) stays out.
var rbacKinds = map[string]bool{
	"Namespace": true, "ServiceAccount": true,
	"ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
}

// ctx lives as long as the suite.
var ctx = framework.SuiteContext()

var (
	env *framework.Env
	// admin is the envtest administrator (system:masters): it creates what KubeRay and users would.
	admin client.Client
	// rendered holds the applied RBAC objects of the install.
	rendered []*unstructured.Unstructured
	// saNamespace and saName name the operator's ServiceAccount; saUser is its user name.
	saNamespace, saName, saUser string
	// asSA is a client impersonating the ServiceAccount, for the probes (not the operator's own).
	asSA client.Client
	// refusals records every 403 the operator's own clients received.
	refusals = &forbiddenLog{}

	webhookInstances []*framework.Instance
	reconciler       manager.Manager
	stopReconciler   context.CancelFunc
	reconcilerDone   = make(chan error, 1)
)

func TestRBAC(t *testing.T) {
	framework.RunSuite(t, "RBAC suite (operator as its ServiceAccount)")
}

var _ = BeforeSuite(func() {
	env = framework.StartSuite()
	admin = env.Client

	By("applying the RBAC objects of config/" + installDir + " server-side")
	for _, u := range render(installDir) {
		if rbacKinds[u.GetKind()] {
			rendered = append(rendered, u)
		}
	}
	var accounts []*unstructured.Unstructured
	for _, u := range rendered {
		if u.GetKind() == "ServiceAccount" {
			accounts = append(accounts, u)
		}
	}
	Expect(accounts).To(HaveLen(1), "the install has exactly one ServiceAccount, the manager's")
	saNamespace, saName = accounts[0].GetNamespace(), accounts[0].GetName()
	saUser = serviceaccount.MakeUsername(saNamespace, saName)
	ensureNamespace(saNamespace)
	for _, first := range []bool{true, false} { // Namespaces first, as kubectl apply would need them.
		for _, u := range rendered {
			if (u.GetKind() == "Namespace") == first {
				Expect(admin.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("rbac-test"), client.ForceOwnership)).
					To(Succeed(), "applying %s %s", u.GetKind(), u.GetName())
			}
		}
	}

	By("building clients that impersonate " + saUser)
	var err error
	asSA, err = client.New(impersonate(nil), client.Options{Scheme: operator.Scheme})
	Expect(err).NotTo(HaveOccurred())
	// RBAC objects are effective as soon as the API server's authorizer cache has them.
	Eventually(func() error {
		var pods corev1.PodList
		return asSA.List(ctx, &pods, client.Limit(1))
	}, time.Minute, 100*time.Millisecond).Should(Succeed(), "the ServiceAccount may list Pods once its ClusterRoleBinding is in effect")

	By("starting two webhook replicas as the ServiceAccount, forwarding claims with its own token")
	Expect(saNamespace).To(Equal(framework.ForwardNamespace), "the replicas find each other in the install's namespace")
	token, err := framework.ServiceAccountToken(ctx, admin, saNamespace, saName)
	Expect(err).NotTo(HaveOccurred())
	operatorCfg := impersonate(refusals)
	webhookInstances, err = env.StartInstances(ctx, 2, func(int) framework.InstanceOptions {
		return framework.InstanceOptions{
			Config: operatorCfg,
			// Every multi-host slice's host lists in a ConfigMap, so that its write is made with
			// the ServiceAccount's permissions (docs/install.md).
			Operator:     operator.Options{DisableControllers: true, Webhooks: webhooks.Options{HostListsConfigMapAbove: 1}},
			Forward:      true,
			ForwardToken: token,
		}
	})
	Expect(err).NotTo(HaveOccurred())

	By("starting the reconciler as the ServiceAccount, leader-elected in " + saNamespace + " as in production")
	reconciler, err = operator.New(rest.CopyConfig(operatorCfg), manager.Options{
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                true,
		LeaderElectionNamespace:       saNamespace,
		LeaderElectionID:              leaderElectionID,
		LeaderElectionReleaseOnCancel: true,
		Logger:                        ctrl.Log.WithName("reconciler"),
		Controller:                    localenv.SkipNameValidation(),
	}, operator.Options{DisableWebhooks: true, Controllers: controllers.Options{PlacementNamespace: saNamespace}})
	Expect(err).NotTo(HaveOccurred())
	var rctx context.Context
	rctx, stopReconciler = context.WithCancel(ctx)
	go func() { reconcilerDone <- reconciler.Start(rctx) }()
	Eventually(reconciler.Elected(), time.Minute).Should(BeClosed(), "the reconciler wins the election with the leader-election Role")
})

var _ = AfterSuite(func() {
	if stopReconciler != nil {
		stopReconciler()
		Eventually(reconcilerDone, 30*time.Second).Should(Receive(Not(HaveOccurred())))
	}
	for _, inst := range webhookInstances {
		Expect(inst.Stop()).To(Succeed())
	}
	Expect(refusals.Entries()).To(BeEmpty(), "requests of the operator the API server refused")
})

// impersonate returns the administrator's config impersonating the ServiceAccount. The API server
// adds the groups a ServiceAccount token carries (system:serviceaccounts,
// system:serviceaccounts:<namespace>, system:authenticated), so authorization sees exactly what
// it sees in a cluster. A non-nil log records every 403 the config's clients receive.
func impersonate(log *forbiddenLog) *rest.Config {
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: saUser}
	if log != nil {
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return &recordForbidden{next: rt, log: log} }
	}
	return cfg
}

// forbiddenLog collects the requests the API server refused with 403.
type forbiddenLog struct {
	mu      sync.Mutex
	entries []string
}

func (l *forbiddenLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, s)
}

// Entries returns the refused requests so far.
func (l *forbiddenLog) Entries() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.entries...)
}

type recordForbidden struct {
	next http.RoundTripper
	log  *forbiddenLog
}

func (r *recordForbidden) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusForbidden {
		r.log.add(fmt.Sprintf("%s %s", req.Method, req.URL.RequestURI()))
	}
	return resp, err
}

// ensureNamespace creates a namespace unless it exists (the install may or may not render it).
func ensureNamespace(name string) {
	GinkgoHelper()
	err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	Expect(client.IgnoreAlreadyExists(err)).To(Succeed())
}

// render runs kustomize on a directory of config/ and returns its objects.
func render(dir string) []*unstructured.Unstructured {
	GinkgoHelper()
	objs, err := framework.Kustomize(filepath.Join("config", dir))
	Expect(err).NotTo(HaveOccurred())
	return objs
}
