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

// Command run-local runs the operator on a local cluster for development: etcd and kube-apiserver
// (from `make envtest`), kube-controller-manager, kube-scheduler and kwok Nodes shaped like GKE TPU
// node pools (internal/localcluster, from `make cluster-tools`), our CRD and KubeRay's, KubeRay's
// RayCluster controller in-process, and our manager with its webhooks registered against that API
// server (internal/localenv). The pools hold every sample of config/samples at once; --pool adds
// pools, --bare runs the control plane alone. It writes a kubeconfig for kubectl and runs until
// interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
	"github.com/ray-tpu/tpu-slice-operator/internal/localenv"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
)

func main() {
	var (
		kubeconfigOut string
		indexing      bool
		bare          bool
		pools         poolsFlag
		opts          operator.Options
	)
	flag.StringVar(&kubeconfigOut, "kubeconfig-out", "bin/local/kubeconfig", "Where to write the kubeconfig of the local API server.")
	flag.BoolVar(&indexing, "multihost-indexing", true,
		"KubeRay's RayMultiHostIndexing feature gate (on by default in KubeRay 1.6): KubeRay labels replica and host indexes itself.")
	flag.BoolVar(&bare, "bare", false,
		"Run etcd and kube-apiserver only, without kube-controller-manager, kube-scheduler or Nodes: Pods stay Pending and nothing garbage-collects.")
	flag.Var(&pools, "pool", "Add a node pool to the samples' (repeatable): "+poolUsage+".")
	opts.BindFlags(flag.CommandLine)
	zapOpts := zap.Options{Development: true}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	var cluster *localcluster.Options
	switch {
	case bare && len(pools) > 0:
		fmt.Fprintln(os.Stderr, "--pool needs the cluster: drop --bare")
		os.Exit(2)
	case !bare:
		cluster = &localcluster.Options{Pools: slices.Concat(samplePools, pools)}
	}
	if err := run(ctrl.SetupSignalHandler(), kubeconfigOut, indexing, cluster, opts); err != nil {
		ctrl.Log.Error(err, "Local environment failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfigOut string, indexing bool, cluster *localcluster.Options, opts operator.Options) (err error) {
	log := ctrl.Log.WithName("run-local")
	began := time.Now()
	if _, err := localenv.SetMultiHostIndexing(indexing); err != nil {
		return err
	}
	local, err := localenv.Start(ctx, localenv.Options{Cluster: cluster, Operator: opts})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, local.Stop()) }()
	kubeconfig, err := writeKubeconfig(local.Env, kubeconfigOut)
	if err != nil {
		return err
	}
	nodes := 0
	if local.Cluster != nil {
		nodes = len(local.Cluster.Nodes)
	}
	log.Info("Local environment ready", "nodes", nodes, "kubeconfig", kubeconfig, "took", time.Since(began).Round(time.Millisecond))
	printHowTo(indexing, local.Cluster != nil, kubeconfig)
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
	what, steps := "a local control plane without nodes", bareSteps
	if cluster {
		what, steps = "a local cluster: kube-scheduler places Pods on kwok's GKE-shaped TPU nodes, which run them; kube-controller-manager garbage-collects", clusterSteps
	}
	fmt.Printf(`
tpu-slice-operator is running on %s (KubeRay RayMultiHostIndexing=%t).
In another shell:

  export KUBECONFIG=%s
  alias kubectl=%s
%s
Ctrl-C stops everything.
`, what, indexing, kubeconfig, kubectl, steps)
}

// clusterSteps is the README walkthrough, in short, on the cluster.
const clusterSteps = `  kubectl get nodes -L cloud.google.com/gke-nodepool,cloud.google.com/gke-tpu-topology
  kubectl apply -f config/samples/ray_v1_raycluster_v6e_4x4.yaml
  kubectl wait --for=condition=RayClusterProvisioned raycluster/raycluster-v6e-4x4 --timeout=60s
  kubectl wait --for=condition=Ready tsa -l ray.io/cluster=raycluster-v6e-4x4 --timeout=60s
  kubectl get tsa -o wide
  kubectl get pods -l ray.io/node-type=worker --sort-by=.spec.nodeName -o custom-columns='POD:.metadata.name,SLICE:.metadata.labels.tpu\.ray\.io/slice,TPU_WORKER_ID:.spec.containers[0].env[?(@.name=="TPU_WORKER_ID")].value,NODE:.spec.nodeName,STATUS:.status.phase'
  kubectl label node v6e-4x4-a-2 node-not-ready.stage.kwok.x-k8s.io=true   # fail a node: its slice turns Degraded
  kubectl label node v6e-4x4-a-2 node-not-ready.stage.kwok.x-k8s.io-       # and recover it
  kubectl delete raycluster raycluster-v6e-4x4   # the garbage collector deletes its Pods; its slices go too
  kubectl apply -f config/samples/ray_v1_raycluster_invalid.yaml   # refused with a field error

The pools hold every sample in config/samples at once (README walkthrough).
`

// bareSteps is what to try on a bare control plane.
const bareSteps = `  kubectl apply -f config/samples/ray_v1_raycluster_v6e_4x4.yaml
  kubectl get tsa
  kubectl get pods -l ray.io/node-type=worker -o custom-columns='POD:.metadata.name,SLICE:.metadata.labels.tpu\.ray\.io/slice,TPU_WORKER_ID:.spec.containers[0].env[?(@.name=="TPU_WORKER_ID")].value,HOSTNAME:.spec.hostname'
  kubectl apply -f config/samples/ray_v1_raycluster_invalid.yaml   # refused with a field error

There is no scheduler, kubelet or garbage collector: Pods stay Pending and READY stays False
(drop --bare, or LOCAL_BARE=1 of make run-local, for the cluster).
`
