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

// Command run-local runs the operator on an embedded local control plane for development: etcd and
// kube-apiserver (from `make envtest`), our CRD and KubeRay's, KubeRay's RayCluster controller
// in-process, and our manager with its webhooks registered against that API server. With --cluster
// it adds kube-controller-manager, kube-scheduler and kwok TPU node pools for the samples
// (internal/localcluster, built by `make cluster-tools`). It writes a kubeconfig for kubectl and runs
// until interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
	"github.com/ray-tpu/tpu-slice-operator/internal/localenv"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
)

// samplePools are the TPU node pools of --cluster: one per slice the samples in config/samples ask
// for (two v6e 4x4 slices, one v4 2x2x4 slice, two single-host v5e 2x4 slices).
var samplePools = []localcluster.Pool{
	{Name: "v6e-4x4-a", Accelerator: "tpu-v6e-slice", Topology: "4x4"},
	{Name: "v6e-4x4-b", Accelerator: "tpu-v6e-slice", Topology: "4x4"},
	{Name: "v4-2x2x4", Accelerator: "tpu-v4-podslice", Topology: "2x2x4"},
	{Name: "v5e-2x4", Accelerator: "tpu-v5-lite-podslice", Topology: "2x4", Slices: 2},
}

func main() {
	var (
		kubeconfigOut string
		indexing      bool
		cluster       bool
		opts          operator.Options
	)
	flag.StringVar(&kubeconfigOut, "kubeconfig-out", "bin/local/kubeconfig", "Where to write the kubeconfig of the local API server.")
	flag.BoolVar(&indexing, "multihost-indexing", true,
		"KubeRay's RayMultiHostIndexing feature gate (on by default in KubeRay 1.6): KubeRay labels replica and host indexes itself.")
	flag.BoolVar(&cluster, "cluster", false,
		"Add kube-controller-manager, kube-scheduler and kwok TPU node pools for the samples (`make cluster-tools`; "+localcluster.AssetsEnv+" names their directory).")
	opts.BindFlags(flag.CommandLine)
	zapOpts := zap.Options{Development: true}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	if err := run(ctrl.SetupSignalHandler(), kubeconfigOut, indexing, cluster, opts); err != nil {
		ctrl.Log.Error(err, "Local control plane failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfigOut string, indexing, cluster bool, opts operator.Options) (err error) {
	log := ctrl.Log.WithName("run-local")
	if _, err := localenv.SetMultiHostIndexing(indexing); err != nil {
		return err
	}
	env, err := localenv.NewEnvironment()
	if err != nil {
		return err
	}
	log.Info("Starting etcd and kube-apiserver")
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() { err = errors.Join(err, env.Stop()) }()
	if cluster {
		log.Info("Starting kube-controller-manager, kube-scheduler and kwok", "pools", len(samplePools))
		c, startErr := localcluster.Start(ctx, env, localcluster.Options{Pools: samplePools})
		if startErr != nil {
			return fmt.Errorf("starting the local cluster: %w", startErr)
		}
		defer func() { err = errors.Join(err, c.Stop()) }()
		log.Info("Local cluster ready", "nodes", len(c.Nodes))
	}

	wio := &env.WebhookInstallOptions
	mgr, err := operator.New(cfg, manager.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir,
		}),
	}, opts)
	if err != nil {
		return err
	}
	mctx, stopManager := context.WithCancel(ctx)
	managerDone := make(chan error, 1)
	go func() { managerDone <- mgr.Start(mctx) }()
	defer func() {
		stopManager()
		err = errors.Join(err, <-managerDone)
	}()

	stopKubeRay, err := localenv.StartKubeRay(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stopKubeRay()) }()

	kubeconfig, err := writeKubeconfig(env, kubeconfigOut)
	if err != nil {
		return err
	}
	printHowTo(indexing, cluster, kubeconfig)
	<-ctx.Done()
	log.Info("Shutting down")
	return nil
}

// writeKubeconfig writes the kubeconfig of a cluster-admin user to path and returns its absolute
// path.
func writeKubeconfig(env *envtest.Environment, path string) (string, error) {
	user, err := env.AddUser(envtest.User{Name: "developer", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("creating a kubeconfig user: %w", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return "", err
	}
	return filepath.Abs(path)
}

// printHowTo tells the developer what to type in another shell. bin/kubectl links the kubectl
// make envtest provided for this machine's OS and architecture.
func printHowTo(indexing, cluster bool, kubeconfig string) {
	kubectl, err := filepath.Abs(filepath.Join("bin", "kubectl"))
	if _, statErr := os.Stat(kubectl); err != nil || statErr != nil {
		kubectl = filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	}
	nodes := "There is no scheduler or kubelet: Pods stay Pending, and nothing garbage-collects (--cluster adds them)."
	if cluster {
		nodes = "kube-scheduler places Pods on kwok's TPU nodes (kubectl get nodes -L " + constants.NodePoolTopologyKey +
			"), which run them; kube-controller-manager garbage-collects."
	}
	fmt.Printf(`
tpu-slice-operator is running on a local control plane (KubeRay RayMultiHostIndexing=%t).
In another shell:

  export KUBECONFIG=%s
  alias kubectl=%s
  kubectl apply -f config/samples/ray_v1_raycluster_v6e_4x4.yaml
  kubectl get tpusliceassignments
  kubectl get pods -l ray.io/node-type=worker -o custom-columns='POD:.metadata.name,SLICE:.metadata.labels.tpu\.ray\.io/slice,TPU_WORKER_ID:.spec.containers[0].env[?(@.name=="TPU_WORKER_ID")].value,HOSTNAME:.spec.hostname'
  kubectl apply -f config/samples/ray_v1_raycluster_invalid.yaml   # refused with a field error

%s Ctrl-C stops everything.
`, indexing, kubeconfig, kubectl, nodes)
}
