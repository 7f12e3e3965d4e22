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

// Package framework starts what the integration and end-to-end suites run against: a real
// kube-apiserver and etcd (envtest), our CRD and KubeRay's, our webhooks registered with the API
// server through several independent operator instances behind one endpoint, and, optionally,
// KubeRay's own RayCluster controller in-process so that real KubeRay creates the Pods.
package framework

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/forward"
	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
	"github.com/ray-tpu/tpu-slice-operator/internal/localenv"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/internal/podpatch"
)

// Env is a running control plane with our webhooks installed.
type Env struct {
	Env    *envtest.Environment
	Config *rest.Config
	Client client.Client
	proxy  *http.Server
	// backends are the webhook instances' addresses the proxy spreads requests over.
	backends atomic.Pointer[[]string]
	next     atomic.Uint64

	mu sync.Mutex
	// instances are every instance started, stopped by Stop.
	instances []*Instance
	// forwardTokenValue is the token forwarding instances present (forwardToken).
	forwardTokenValue string
	// bypass makes the proxy admit every Pod unchanged, as if the operator were not installed.
	bypass atomic.Bool
	// standIn, when set, mutates every Pod the proxy admits in the operator's place (BypassWith).
	standIn atomic.Pointer[func(*corev1.Pod)]
	// cluster is the local cluster StartCluster started, stopped by Stop before the control plane.
	cluster *localcluster.Cluster
}

// Start starts etcd and kube-apiserver with our CRD, KubeRay's RayCluster CRD and our webhook
// configurations, and a round-robin proxy on the registered webhook endpoint. It fails, naming
// `make envtest`, when the control-plane binaries are missing: it never skips.
func Start() (*Env, error) {
	testEnv, err := localenv.NewEnvironment()
	if err != nil {
		return nil, err
	}
	e := &Env{Env: testEnv}
	cfg, err := e.Env.Start()
	if err != nil {
		// A start that failed late (installing the CRDs) leaves etcd and kube-apiserver running.
		return nil, errors.Join(fmt.Errorf("starting envtest: %w", err), e.Env.Stop())
	}
	e.Config = cfg
	if e.Client, err = client.New(cfg, client.Options{Scheme: operator.Scheme}); err != nil {
		return nil, errors.Join(err, e.Env.Stop())
	}
	if err := e.startProxy(); err != nil {
		return nil, errors.Join(err, e.Env.Stop())
	}
	return e, nil
}

// Stop stops every instance still running, the proxy and the control plane.
func (e *Env) Stop() error {
	e.mu.Lock()
	instances := e.instances
	e.mu.Unlock()
	var errs []error
	for _, inst := range instances {
		errs = append(errs, inst.Stop())
	}
	if e.cluster != nil {
		errs = append(errs, e.cluster.Stop())
	}
	if e.proxy != nil {
		_ = e.proxy.Close()
	}
	return errors.Join(append(errs, e.Env.Stop())...)
}

// StartCluster makes the Env a real cluster (internal/localcluster): kube-controller-manager,
// kube-scheduler and kwok running the Nodes of opts.Pools, every Node Ready when it returns. It
// needs `make cluster-tools` (CLUSTER_ASSETS) and fails, naming it, without them. Stop stops it
// before the control plane.
func (e *Env) StartCluster(ctx context.Context, opts localcluster.Options) (*localcluster.Cluster, error) {
	if e.cluster != nil {
		return nil, errors.New("the local cluster is already started")
	}
	c, err := localcluster.Start(ctx, e.Env, opts)
	if err != nil {
		return nil, err
	}
	e.cluster = c
	return c, nil
}

// StartBare starts etcd and kube-apiserver with only KubeRay's RayCluster CRD and no webhooks, for
// suites that install the operator from its own manifests. Stop it with the Environment's Stop.
func StartBare() (*envtest.Environment, client.Client, error) {
	base, err := localenv.NewEnvironment()
	if err != nil {
		return nil, nil, err
	}
	kuberay, err := localenv.KubeRayCRDDir()
	if err != nil {
		return nil, nil, err
	}
	testEnv := &envtest.Environment{
		BinaryAssetsDirectory: base.BinaryAssetsDirectory,
		CRDInstallOptions:     envtest.CRDInstallOptions{Paths: []string{filepath.Join(kuberay, "ray.io_rayclusters.yaml")}},
	}
	localenv.GKEAdmission(testEnv)
	cfg, err := testEnv.Start()
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("starting envtest: %w", err), testEnv.Stop())
	}
	c, err := client.New(cfg, client.Options{Scheme: operator.Scheme})
	if err != nil {
		return nil, nil, errors.Join(err, testEnv.Stop())
	}
	return testEnv, c, nil
}

// startProxy serves the endpoint the API server calls and hands each admission request to the next
// webhook instance (round robin), so consecutive admissions of one slice land on different
// instances, as they do behind a Service with several API servers.
func (e *Env) startProxy() error {
	wio := &e.Env.WebhookInstallOptions
	cert, err := tls.LoadX509KeyPair(filepath.Join(wio.LocalServingCertDir, "tls.crt"), filepath.Join(wio.LocalServingCertDir, "tls.key"))
	if err != nil {
		return fmt.Errorf("loading webhook serving certificate: %w", err)
	}
	ln, err := tls.Listen("tcp", net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(wio.LocalServingPort)),
		&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return fmt.Errorf("listening on the webhook endpoint: %w", err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			backends := *e.backends.Load()
			target := backends[int(e.next.Add(1)-1)%len(backends)]
			r.SetURL(&url.URL{Scheme: "https", Host: target})
		},
		Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // loopback to our own test servers.
			MaxIdleConnsPerHost: 256,
		},
		ErrorLog: nil,
	}
	empty := []string{}
	e.backends.Store(&empty)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if mutate := e.standIn.Load(); mutate != nil {
			admitMutated(w, r, *mutate)
			return
		}
		if e.bypass.Load() {
			allowUnchanged(w, r)
			return
		}
		if bypassed(r) {
			allowUnchanged(w, r)
			return
		}
		if len(*e.backends.Load()) == 0 {
			http.Error(w, "no webhook instance is serving", http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	})
	mux.HandleFunc(rejectPath, rejectAll)
	mux.HandleFunc(delayPath, delay)
	e.proxy = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = e.proxy.Serve(ln) }()
	return nil
}

// Instance is one operator process: its own manager, client, cache and webhook server.
type Instance struct {
	Manager   manager.Manager
	Allocator *allocator.Allocator
	Addr      string
	// Metrics are this instance's claim metrics: what its allocator and claim forwarding did.
	Metrics *metrics.Metrics
	// Peers are the replicas this instance forwards to, as it sees them (with InstanceOptions.Forward).
	Peers *forward.Peers
	// endpointSlice is the instance's endpoint in the webhook Service, if it forwards.
	endpointSlice *discoveryv1.EndpointSlice
	env           *Env
	// severed, once set, fails every API request of the instance: a crashed process makes none.
	severed  *atomic.Bool
	cancel   context.CancelFunc
	done     chan error
	stopOnce sync.Once
	stopErr  error
}

// InstanceOptions choose what an instance runs.
type InstanceOptions struct {
	Operator operator.Options
	// Config overrides the REST config (e.g. with fault injection in the transport).
	Config *rest.Config
	// Forward turns on claim forwarding as the production install runs it: the instance is an
	// endpoint of the webhook Service (an EndpointSlice the Env writes, as Kubernetes would, and
	// removes when the instance stops), and it authenticates to its peers with a ServiceAccount
	// token allowed to post forwarded claims.
	Forward bool
	// ForwardToken overrides the token a forwarding instance presents (default: the Env's).
	ForwardToken string
}

// Replicas returns, for StartInstances, the options of webhook replicas as the production install
// runs them: each forwards claims, and only replica 0 may run the reconciler. base holds every
// replica's other operator options.
func Replicas(base operator.Options) func(i int) InstanceOptions {
	return func(i int) InstanceOptions {
		o := base
		o.DisableControllers = o.DisableControllers || i > 0
		return InstanceOptions{Operator: o, Forward: true}
	}
}

// StartInstances starts n instances, with the options opts gives for each index, and makes the
// proxy spread admissions over them.
func (e *Env) StartInstances(ctx context.Context, n int, opts func(i int) InstanceOptions) ([]*Instance, error) {
	instances := make([]*Instance, 0, n)
	for i := range n {
		inst, err := e.StartInstance(ctx, opts(i))
		if err != nil {
			return nil, err
		}
		instances = append(instances, inst)
	}
	e.ServeWebhooksFrom(instances...)
	if err := WaitForPeers(ctx, instances...); err != nil {
		return nil, err
	}
	return instances, nil
}

// StartInstance starts an operator instance and waits until its webhook server serves. Env.Stop
// stops it if it still runs.
func (e *Env) StartInstance(ctx context.Context, opts InstanceOptions) (*Instance, error) {
	cfg := opts.Config
	if cfg == nil {
		cfg = e.Config
	}
	cfg = rest.CopyConfig(operator.RESTConfig(cfg, opts.Operator))
	severed := &atomic.Bool{}
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if severed.Load() {
				return nil, errCrashed
			}
			return next.RoundTrip(req)
		})
	})
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	wio := &e.Env.WebhookInstallOptions
	addr := net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(port))
	if opts.Forward {
		if err := e.forwardOptions(ctx, &opts, port); err != nil {
			return nil, err
		}
	}
	if opts.Operator.Metrics == nil {
		opts.Operator.Metrics = metrics.New()
	}
	mgr, err := manager.New(cfg, manager.Options{
		Scheme:                 operator.Scheme,
		Cache:                  operator.CacheOptions(opts.Operator),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer: severableServer{Server: webhook.NewServer(webhook.Options{
			Host: wio.LocalServingHost, Port: port, CertDir: wio.LocalServingCertDir,
		}), severed: severed},
		Logger:     ctrl.Log.WithName("operator").WithValues("port", port),
		Controller: localenv.SkipNameValidation(),
	})
	if err != nil {
		return nil, err
	}
	inst := &Instance{Manager: mgr, Addr: addr, Metrics: opts.Operator.Metrics, env: e, done: make(chan error, 1), severed: severed}
	parts, err := operator.Setup(mgr, opts.Operator)
	if err != nil {
		return nil, err
	}
	inst.Allocator = parts.Allocator
	if parts.Router != nil {
		inst.Peers = parts.Router.Peers()
	}
	ictx, cancel := context.WithCancel(ctx)
	inst.cancel = cancel
	go func() { inst.done <- mgr.Start(ictx) }()
	e.mu.Lock()
	e.instances = append(e.instances, inst)
	e.mu.Unlock()
	if err := waitForTLS(ictx, inst.Addr); err != nil {
		return nil, errors.Join(err, inst.Stop())
	}
	if opts.Forward {
		if inst.endpointSlice, err = e.addEndpoint(ctx, port); err != nil {
			return nil, errors.Join(err, inst.Stop())
		}
	}
	return inst, nil
}

// Stop stops the instance as Kubernetes stops a Pod: its endpoint goes first, so that peers stop
// forwarding claims to it, then the manager, waiting for it to return. Later calls (and Crash)
// return the first's result.
func (i *Instance) Stop() error { return i.stop(true) }

// Crash kills the instance as a crash or SIGKILL does: from then on it makes no API request (not
// even the writes its timers would make, such as a reservation's give-back) and answers no
// request (severableServer); then its manager stops while its peers still list its endpoint, and
// the endpoint goes only then, as Kubernetes removes it once the Pod's readiness probe fails.
func (i *Instance) Crash() error {
	i.severed.Store(true)
	return i.stop(false)
}

// severableServer is an instance's webhook server that answers nothing once the instance crashed:
// every request it gets from then on, an admission or a forwarded claim, loses its connection
// with no answer, as at a killed process's socket. Without it the webhook server, which
// controller-runtime stops last, went on answering from memory while the rest of the manager
// stopped: a crashed holder handed out reserved IDs for seconds after the crash.
type severableServer struct {
	webhook.Server
	severed *atomic.Bool
}

// Register registers hook, cut off once the instance crashed.
func (s severableServer) Register(path string, hook http.Handler) {
	s.Server.Register(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.severed.Load() {
			// net/http closes the connection, with no response, and logs nothing.
			panic(http.ErrAbortHandler)
		}
		hook.ServeHTTP(w, r)
	}))
}

// errCrashed is what a crashed instance's API requests fail with.
var errCrashed = errors.New("the instance crashed")

func (i *Instance) stop(endpointFirst bool) error {
	i.stopOnce.Do(func() {
		var errs []error
		if endpointFirst {
			errs = append(errs, i.removeEndpoint())
		}
		i.cancel()
		select {
		case err := <-i.done:
			errs = append(errs, err)
		case <-time.After(30 * time.Second):
			errs = append(errs, errors.New("manager did not stop within 30s"))
		}
		if !endpointFirst {
			errs = append(errs, i.removeEndpoint())
		}
		i.stopErr = errors.Join(errs...)
	})
	return i.stopErr
}

// Unlist removes the instance's endpoint from the webhook Service while it keeps running, as
// Kubernetes does for a Pod whose readiness probe fails: its peers stop forwarding claims to it, and
// the groups it owned move to them. Stop it later as usual.
func (i *Instance) Unlist() error { return i.removeEndpoint() }

func (i *Instance) removeEndpoint() error {
	if i.endpointSlice == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return client.IgnoreNotFound(i.env.Client.Delete(ctx, i.endpointSlice))
}

// ServeWebhooksFrom makes the proxy spread admissions over these instances (round robin).
func (e *Env) ServeWebhooksFrom(instances ...*Instance) {
	addrs := make([]string, len(instances))
	for i, inst := range instances {
		addrs[i] = inst.Addr
	}
	e.backends.Store(&addrs)
}

// StartKubeRay runs KubeRay's RayCluster controller in-process against the environment.
func (e *Env) StartKubeRay(ctx context.Context) (stop func() error, err error) {
	return localenv.StartKubeRay(ctx, e.Config)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitForTLS waits until a TLS server answers on addr.
func waitForTLS(ctx context.Context, addr string) error {
	dialer := &net.Dialer{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := tls.DialWithDialer(dialer, "tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // loopback probe.
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("webhook server on %s did not start: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// RejectLabel marks Pods that the validating webhook installed by InstallRejectingWebhook refuses.
const RejectLabel = "test.tpu.ray.io/reject"

const rejectPath = "/reject"

// InstallRejectingWebhook registers a validating Pod webhook that runs after our mutating one and
// refuses every Pod labeled RejectLabel=true: the Pod's claim is made, but the Pod never appears.
func (e *Env) InstallRejectingWebhook(ctx context.Context) error {
	return e.installPodWebhook(ctx, "reject", rejectPath, &metav1.LabelSelector{MatchLabels: map[string]string{RejectLabel: "true"}}, nil)
}

// installPodWebhook registers the validating webhook <name>.test.tpu.ray.io (configuration
// test-<name>-pods) for the creates of the Pods selector selects, served by the Env's endpoint at
// path, failing closed.
func (e *Env) installPodWebhook(ctx context.Context, name, path string, selector *metav1.LabelSelector, timeoutSeconds *int32) error {
	wio := &e.Env.WebhookInstallOptions
	url := "https://" + net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(wio.LocalServingPort)) + path
	return e.Client.Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "test-" + name + "-pods"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    name + ".test.tpu.ray.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: wio.LocalServingCAData},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			ObjectSelector:          selector,
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:          timeoutSeconds,
		}},
	})
}

func rejectAll(w http.ResponseWriter, r *http.Request) {
	answerReview(w, r, func(req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		return &admissionv1.AdmissionResponse{
			UID: req.UID, Allowed: false,
			Result: &metav1.Status{Code: http.StatusForbidden, Message: "rejected by the test's later validating webhook"},
		}, nil
	})
}

// answerReview decodes the AdmissionReview r carries and writes it back with the response respond
// makes of its request, or answers 400 when either fails.
func answerReview(w http.ResponseWriter, r *http.Request, respond func(*admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error)) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "bad AdmissionReview", http.StatusBadRequest)
		return
	}
	resp, err := respond(review.Request)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	review.Response, review.Request = resp, nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// Bypass makes the registered webhook endpoint admit every request unchanged while on, as if the
// operator were not installed: Pods created meanwhile keep whatever identity their creator gave
// them (the reference webhook's, a hand-made one, none).
func (e *Env) Bypass(on bool) { e.bypass.Store(on) }

// BypassLabel is a label that, set to "true" on a Pod, makes the registered webhook endpoint admit
// that Pod unchanged, as Bypass does for every request: a Pod created "with the webhook out of the
// way" (before the operator ran, or excluded by the webhook's objectSelector) while other creates
// go through the operator as usual. Nothing else reads the label.
const BypassLabel = "test.tpu.ray.io/bypass"

// bypassed reports whether the AdmissionReview r carries is for an object labeled BypassLabel=true.
// It leaves r's body readable for the proxy.
func bypassed(r *http.Request) bool {
	body, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil || !bytes.Contains(body, []byte(BypassLabel)) {
		// Most reviews never name the label: no need to decode them (the decode cost a
		// millisecond per admission, which the bench counted against the webhook).
		return false
	}
	var review struct {
		Request *struct {
			Object struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			} `json:"object"`
		} `json:"request"`
	}
	if json.Unmarshal(body, &review) != nil || review.Request == nil {
		return false
	}
	return review.Request.Object.Metadata.Labels[BypassLabel] == "true"
}

// BypassWith makes the registered webhook endpoint answer every request in the operator's place
// while mutate is not nil, as another mutating webhook installed instead of the operator (the
// reference webhook) would: a Pod create is admitted with the changes mutate makes to the Pod (it
// may be called concurrently), everything else is admitted unchanged. BypassWith(nil) hands the
// endpoint back. Like Bypass, it is global to the Env.
func (e *Env) BypassWith(mutate func(*corev1.Pod)) {
	if mutate == nil {
		e.standIn.Store(nil)
		return
	}
	e.standIn.Store(&mutate)
}

// ServeStandIn starts a webhook server of its own, on the operator's serving certificate, that
// answers in the operator's place as BypassWith's endpoint does (a Pod create admitted with the
// changes mutate makes to the Pod, everything else unchanged), and makes the proxy hand every
// request to it instead of the operator's instances: a stand-in reached through the same hop as
// they are. stop stops it and hands the proxy back to the instances it served before.
func (e *Env) ServeStandIn(mutate func(*corev1.Pod)) (stop func() error, err error) {
	wio := &e.Env.WebhookInstallOptions
	cert, err := tls.LoadX509KeyPair(filepath.Join(wio.LocalServingCertDir, "tls.crt"), filepath.Join(wio.LocalServingCertDir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("loading webhook serving certificate: %w", err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, fmt.Errorf("listening for the stand-in webhook: %w", err)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { admitMutated(w, r, mutate) }),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	before := e.backends.Load()
	e.backends.Store(&[]string{ln.Addr().String()})
	return func() error {
		e.backends.Store(before)
		return srv.Close()
	}, nil
}

func admitMutated(w http.ResponseWriter, r *http.Request, mutate func(*corev1.Pod)) {
	answerReview(w, r, func(req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
		if req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create {
			return resp, nil
		}
		pod := &corev1.Pod{}
		if err := json.Unmarshal(req.Object.Raw, pod); err != nil {
			return nil, errors.New("bad Pod")
		}
		if pod.Namespace == "" {
			pod.Namespace = req.Namespace
		}
		orig := pod.DeepCopy()
		mutate(pod)
		// The patch as the operator's webhook builds it (podpatch.Diff), so that the floor pays
		// no more for it than the operator does.
		ops, ok := podpatch.Diff(orig, pod)
		if !ok {
			ops = admission.PatchResponseFromRaw(mustJSON(orig), mustJSON(pod)).Patches
		}
		if len(ops) > 0 {
			resp.Patch = mustJSON(ops)
			resp.PatchType = ptr.To(admissionv1.PatchTypeJSONPatch)
		}
		return resp, nil
	})
}

func allowUnchanged(w http.ResponseWriter, r *http.Request) {
	answerReview(w, r, func(req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}, nil
	})
}

// DelayLabel holds, on a Pod, how long (a Go duration) the validating webhook InstallDelayingWebhook
// registers holds its create after our mutating webhook claimed its ID: a create that commits late.
const DelayLabel = "test.tpu.ray.io/delay"

const delayPath = "/delay"

// InstallDelayingWebhook registers a validating Pod webhook, which runs after every mutating one,
// that holds each Pod labeled DelayLabel for that long before admitting it (at most 29 s: its
// timeout is 30 s).
func (e *Env) InstallDelayingWebhook(ctx context.Context) error {
	return e.installPodWebhook(ctx, "delay", delayPath,
		&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: DelayLabel, Operator: metav1.LabelSelectorOpExists}}}, ptr.To[int32](30))
}

func delay(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "bad AdmissionReview", http.StatusBadRequest)
		return
	}
	var pod struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(review.Request.Object.Raw, &pod); err == nil {
		if d, err := time.ParseDuration(pod.Metadata.Labels[DelayLabel]); err == nil {
			time.Sleep(min(d, 29*time.Second))
		}
	}
	allowUnchanged(w, &http.Request{Body: io.NopCloser(bytes.NewReader(mustJSON(review)))})
}

func mustJSON(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return data
}

// PostAdmission posts review straight to instance inst's Pod webhook, over TLS and with no client
// credentials, as anything that reaches the webhook's port can, and returns the answer.
func (e *Env) PostAdmission(ctx context.Context, inst *Instance, review *admissionv1.AdmissionReview) (*admissionv1.AdmissionReview, error) {
	body, err := json.Marshal(review)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+inst.Addr+"/mutate--v1-pod", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	httpClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}} //nolint:gosec // a forged caller does not check.
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("decoding the webhook's answer (%s): %w", resp.Status, err)
	}
	return &out, nil
}
