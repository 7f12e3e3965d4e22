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

// Package localcluster turns a running envtest control plane (etcd and kube-apiserver) into a
// small real cluster: kube-controller-manager (garbage collector, namespace and node lifecycle
// controllers among its defaults), kube-scheduler, and kwok driving Nodes shaped like GKE TPU node
// pools, built from a declarative list of Pools. Pods bound to those Nodes turn Running and Ready;
// a Node or a Pod can be failed on demand. The binaries come from `make cluster-tools`. The local
// environment (run-local) and the test suites share it; the production manager never imports it.
package localcluster

import (
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// AssetsEnv names the environment variable holding the directory of kube-scheduler,
// kube-controller-manager and kwok (`make cluster-tools` links them into bin/cluster/...).
const AssetsEnv = "CLUSTER_ASSETS"

// FailNodeLabel set to "true" on a Node makes kwok report it NotReady (kwok's node-not-ready
// stage); removing it makes the Node Ready again. FailPodLabel set to "true" on a running Pod
// makes kwok fail its containers (kwok's pod-container-running-failed stage).
const (
	FailNodeLabel = "node-not-ready.stage.kwok.x-k8s.io"
	FailPodLabel  = "pod-container-running-failed.stage.kwok.x-k8s.io"
)

// kwokStages are the kwok stages the cluster runs with (see the file's header).
//
//go:embed kwok-stages.yaml
var kwokStages []byte

// Options configure a Cluster.
type Options struct {
	// Pools are the TPU node pools whose Nodes the cluster creates.
	Pools []Pool
	// AssetsDir holds kube-scheduler, kube-controller-manager and kwok; default $CLUSTER_ASSETS.
	AssetsDir string
	// PodCIDR is the range kwok gives Pod IPs from (default 10.0.0.0/16: kwok's /24 runs out).
	PodCIDR string
	// SchedulerQPS is the scheduler's client QPS, its burst twice that (default 1000; the
	// scheduler's own default of 50 caps binds at about 50 per second).
	SchedulerQPS int
	// StartTimeout bounds Start once the processes run (default 60s).
	StartTimeout time.Duration
}

// Cluster is a running kube-controller-manager, kube-scheduler and kwok on an envtest control
// plane, with the Nodes of its pools Ready.
type Cluster struct {
	// Nodes are the Nodes of the pools, as created.
	Nodes []*corev1.Node
	// Dir holds the components' kubeconfig, configuration and logs (<component>.log); Stop
	// removes it.
	Dir       string
	processes []*process
}

// Start starts kube-controller-manager, kube-scheduler and kwok against env, which must be
// running, creates the pools' Nodes and returns once every component is healthy and every Node is
// Ready without the not-ready taint. The components authenticate as a system:masters user of env.
// On error nothing started is left running.
func Start(ctx context.Context, env *envtest.Environment, opts Options) (_ *Cluster, err error) {
	if env.Config == nil {
		return nil, errors.New("the envtest environment is not started")
	}
	opts = opts.withDefaults()
	nodes, err := Nodes(opts.Pools)
	if err != nil {
		return nil, err
	}
	for _, b := range []string{"kube-controller-manager", "kube-scheduler", "kwok"} {
		if _, err := os.Stat(filepath.Join(opts.AssetsDir, b)); err != nil {
			return nil, fmt.Errorf("no %s in %s (%s): run `make cluster-tools`: %w", b, opts.AssetsDir, AssetsEnv, err)
		}
	}
	dir, err := os.MkdirTemp("", "localcluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Stop())
		}
	}()
	if err := c.writeFiles(env, opts); err != nil {
		return nil, err
	}
	kcmPort, schedPort, err := freePorts()
	if err != nil {
		return nil, err
	}
	if err := c.start(opts, env, kcmPort, schedPort); err != nil {
		return nil, err
	}

	cl, err := client.New(env.Config, client.Options{})
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if err := cl.Create(ctx, n); err != nil {
			return nil, fmt.Errorf("creating Node %s: %w", n.Name, err)
		}
	}
	c.Nodes = nodes
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	for _, port := range []int{kcmPort, schedPort} {
		if err := c.waitHealthy(ctx, port); err != nil {
			return nil, err
		}
	}
	if err := c.waitNodesReady(ctx, cl); err != nil {
		return nil, err
	}
	return c, nil
}

func (o Options) withDefaults() Options {
	if o.AssetsDir == "" {
		o.AssetsDir = os.Getenv(AssetsEnv)
	}
	if o.PodCIDR == "" {
		o.PodCIDR = "10.0.0.0/16"
	}
	if o.SchedulerQPS == 0 {
		o.SchedulerQPS = 1000
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 60 * time.Second
	}
	return o
}

// writeFiles writes the kubeconfig the components use, the API server's CA, the scheduler's
// configuration and kwok's stages into c.Dir.
func (c *Cluster) writeFiles(env *envtest.Environment, opts Options) error {
	user, err := env.AddUser(envtest.User{Name: "local-cluster", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("creating the components' user: %w", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return err
	}
	schedulerConfig := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: %d
  burst: %d
leaderElection:
  leaderElect: false
`, c.path("kubeconfig"), opts.SchedulerQPS, 2*opts.SchedulerQPS)
	for name, data := range map[string][]byte{
		"kubeconfig":     kubeconfig,
		"ca.crt":         env.Config.CAData,
		"scheduler.yaml": []byte(schedulerConfig),
		"kwok.yaml":      kwokStages,
	} {
		if err := os.WriteFile(c.path(name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// start starts the three components; kube-controller-manager signs service-account tokens with
// the key envtest generated for the API server, so that the API server accepts them.
func (c *Cluster) start(opts Options, env *envtest.Environment, kcmPort, schedPort int) error {
	kubeconfig := c.path("kubeconfig")
	serving := func(port int) []string {
		return []string{
			"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
			"--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		}
	}
	components := []struct {
		name string
		args []string
	}{{
		name: "kube-controller-manager",
		args: append(serving(kcmPort),
			"--kubeconfig="+kubeconfig, "--leader-elect=false", "--controllers=*",
			"--service-account-private-key-file="+filepath.Join(env.ControlPlane.APIServer.CertDir, "sa-signer.key"),
			"--root-ca-file="+c.path("ca.crt"), "--use-service-account-credentials=false",
			// A Node's health is its Lease, which kwok renews every 10 s as a kubelet does; the
			// grace period leaves room for a loaded machine.
			"--node-monitor-grace-period=2m",
			"--kube-api-qps=500", "--kube-api-burst=1000"),
	}, {
		name: "kube-scheduler",
		args: append(serving(schedPort), "--config="+c.path("scheduler.yaml")),
	}, {
		name: "kwok",
		args: []string{
			"--kubeconfig=" + kubeconfig, "--config=" + c.path("kwok.yaml"),
			"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=fake",
			"--cidr=" + opts.PodCIDR, "--node-port=0", "--server-address=",
			// Heartbeats through Node Leases (renewed every quarter of 40 s) and a status report
			// every 10-20 minutes, as kubelets do: Node status writes at 20-45 s, kwok's other
			// heartbeat, cost thousands of Nodes' informers (the operator's among them) about
			// 100 decodes a second.
			"--node-lease-duration-seconds=40",
		},
	}}
	for _, comp := range components {
		p, err := startProcess(c.Dir, comp.name, filepath.Join(opts.AssetsDir, comp.name), comp.args...)
		if err != nil {
			return err
		}
		c.processes = append(c.processes, p)
	}
	return nil
}

// Stop stops the components (SIGTERM, then SIGKILL after 10 s) and removes Dir. It leaves the
// control plane running and the Nodes in it.
func (c *Cluster) Stop() error {
	var errs []error
	for _, p := range slices.Backward(c.processes) {
		errs = append(errs, p.stop())
	}
	c.processes = nil
	if c.Dir != "" {
		errs = append(errs, os.RemoveAll(c.Dir))
	}
	return errors.Join(errs...)
}

// CPUTime returns the CPU time (user and system) the named component ("kube-scheduler",
// "kube-controller-manager" or "kwok") has consumed since it started. It reads /proc (Linux only)
// and fails once the component has exited.
func (c *Cluster) CPUTime(component string) (time.Duration, error) {
	for _, p := range c.processes {
		if p.name != component {
			continue
		}
		if err := p.exited(); err != nil {
			return 0, err
		}
		return processCPUTime(p.cmd.Process.Pid)
	}
	return 0, fmt.Errorf("no component %q", component)
}

// Exited returns an error for each component that is no longer running, with the end of its log.
func (c *Cluster) Exited() error {
	errs := make([]error, 0, len(c.processes))
	for _, p := range c.processes {
		errs = append(errs, p.exited())
	}
	return errors.Join(errs...)
}

func (c *Cluster) path(name string) string { return filepath.Join(c.Dir, name) }

// waitHealthy polls https://127.0.0.1:port/healthz until it answers 200.
func (c *Cluster) waitHealthy(ctx context.Context, port int) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		// The components serve a self-signed certificate on loopback; /healthz carries no secret.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // see above.
	}}
	url := fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := c.Exited(); err != nil {
			return false, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false, nil //nolint:nilerr // not listening yet.
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", url, err)
	}
	return nil
}

// waitNodesReady waits until every Node of the cluster is Ready (kwok) and carries no not-ready
// taint (kube-controller-manager's node lifecycle controller removes the one the API server adds).
func (c *Cluster) waitNodesReady(ctx context.Context, cl client.Client) error {
	var notReady string
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := c.Exited(); err != nil {
			return false, err
		}
		for _, want := range c.Nodes {
			var n corev1.Node
			if err := cl.Get(ctx, client.ObjectKeyFromObject(want), &n); err != nil {
				if apierrors.IsNotFound(err) {
					return false, err
				}
				return false, nil // retried until the timeout
			}
			if !Ready(&n) {
				notReady = n.Name
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for Node %s to turn Ready without the not-ready taint: %w", notReady, err)
	}
	return nil
}

// Ready reports whether a Node is Ready and free of the not-ready and unreachable taints, that is
// whether the scheduler places Pods on it.
func Ready(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return false
		}
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// freePorts returns two free loopback ports for the components' health endpoints.
func freePorts() (int, int, error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, 0, err
		}
		listeners = append(listeners, l)
	}
	return listeners[0].Addr().(*net.TCPAddr).Port, listeners[1].Addr().(*net.TCPAddr).Port, nil
}

// FailNode makes kwok report the Node NotReady (failed) or Ready again (!failed), through
// FailNodeLabel. kube-controller-manager then taints it as a kubelet's failure would.
func FailNode(ctx context.Context, c client.Client, name string, failed bool) error {
	value := "null"
	if failed {
		value = `"true"`
	}
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%s}}}`, FailNodeLabel, value)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	return c.Patch(ctx, node, client.RawPatch(types.MergePatchType, patch))
}

// FailPod makes kwok fail the containers of a running Pod, as a crashed Ray process or a lost host
// would: about a second later (with up to a second of jitter) its containers terminate with exit
// code 1, it is no longer Ready and its phase is Failed. It labels the Pod with FailPodLabel.
func FailPod(ctx context.Context, c client.Client, namespace, name string) error {
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:"true"}}}`, FailPodLabel)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	return c.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch))
}
