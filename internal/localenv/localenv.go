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

// Package localenv starts a local control plane for development and tests: etcd and kube-apiserver
// (envtest) with our CRD and KubeRay's RayCluster CRD, our webhook configurations pointed at a local
// endpoint, and KubeRay's RayCluster controller in-process. The production manager never imports it.
package localenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/ray-project/kuberay/ray-operator/controllers/ray"
	"github.com/ray-project/kuberay/ray-operator/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
)

// RootDir is the repository root.
func RootDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// KubeRayCRDDir returns the directory of KubeRay's CRDs in the ray-operator module pinned in go.mod.
func KubeRayCRDDir() (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/ray-project/kuberay/ray-operator")
	cmd.Dir = RootDir()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locating the ray-operator module (go list): %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases"), nil
}

// NewEnvironment returns an envtest environment with our CRD, KubeRay's RayCluster CRD and our
// webhook configurations. It fails, naming `make envtest`, when the control-plane binaries are
// missing: callers never skip.
func NewEnvironment() (*envtest.Environment, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is not set: use `make test` or `make run-local` (they run `make envtest`, which provides kube-apiserver and etcd)")
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		return nil, fmt.Errorf("no kube-apiserver in KUBEBUILDER_ASSETS=%s: run `make envtest`: %w", assets, err)
	}
	kuberayCRDs, err := KubeRayCRDDir()
	if err != nil {
		return nil, err
	}
	root := RootDir()
	env := &envtest.Environment{
		CRDInstallOptions: envtest.CRDInstallOptions{
			Paths:              []string{filepath.Join(root, "config", "crd", "bases"), filepath.Join(kuberayCRDs, "ray.io_rayclusters.yaml")},
			ErrorIfPathMissing: true,
			// envtest's default, 10 s, is too short on a loaded 2-core machine for KubeRay's
			// large CRDs to be served.
			MaxTime: time.Minute,
		},
		WebhookInstallOptions: envtest.WebhookInstallOptions{
			Paths: []string{filepath.Join(root, "config", "webhook", "manifests.yaml")},
		},
		ErrorIfCRDPathMissing: true,
	}
	if os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT") == "" {
		// envtest's default, 20 s per component, is too short for kube-apiserver on a loaded
		// 2-core machine; the variable still overrides this.
		env.ControlPlaneStartTimeout = time.Minute
	}
	GKEAdmission(env)
	return env, nil
}

// GKEAdmission turns on, in env's API server, the built-in admission GKE runs that matters to TPU
// Pods: ExtendedResourceToleration, which gives a Pod asking for google.com/tpu the toleration of
// the google.com/tpu taint of TPU Nodes (internal/localcluster taints them so).
func GKEAdmission(env *envtest.Environment) {
	env.ControlPlane.GetAPIServer().Configure().Append("enable-admission-plugins", "ExtendedResourceToleration")
}

// SetMultiHostIndexing sets KubeRay's process-global RayMultiHostIndexing gate and returns its
// previous value.
func SetMultiHostIndexing(on bool) (bool, error) {
	was := features.Enabled(features.RayMultiHostIndexing)
	return was, utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{string(features.RayMultiHostIndexing): on})
}

// SkipNameValidation lets several managers in one process register controllers of one name.
func SkipNameValidation() config.Controller {
	return config.Controller{SkipNameValidation: ptr.To(true)}
}

// StartKubeRay runs KubeRay's RayCluster controller in a manager of its own (it caches every Pod
// and registers a field index of its own, so it cannot share the operator's manager). The returned
// function stops it.
func StartKubeRay(ctx context.Context, cfg *rest.Config) (stop func() error, err error) {
	mgr, err := manager.New(rest.CopyConfig(cfg), manager.Options{
		Scheme:                 operator.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Logger:                 ctrl.Log.WithName("kuberay"),
		Controller:             SkipNameValidation(),
	})
	if err != nil {
		return nil, err
	}
	if err := ray.NewReconciler(ctx, mgr, ray.RayClusterReconcilerOptions{}).SetupWithManager(mgr, 2); err != nil {
		return nil, fmt.Errorf("setting up KubeRay's RayCluster controller: %w", err)
	}
	return runManager(ctx, mgr, "KubeRay's manager"), nil
}
