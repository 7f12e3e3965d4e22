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

package localenv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
)

// Options configure Start.
type Options struct {
	// Cluster, when set, makes the control plane a cluster (localcluster.Start): the scheduler,
	// kube-controller-manager and kwok Nodes of Cluster.Pools. Nil leaves a bare control plane,
	// where Pods stay Pending and nothing garbage-collects.
	Cluster *localcluster.Options
	// Operator configures the operator's manager.
	Operator operator.Options
}

// Local is a running local environment: the control plane, the cluster around it if any, one
// operator manager serving the webhooks envtest registered, and KubeRay's RayCluster controller.
type Local struct {
	// Env is the running control plane.
	Env *envtest.Environment
	// Cluster is the running cluster, or nil on a bare control plane.
	Cluster *localcluster.Cluster
	// stops stop what Start started, in the order it started them.
	stops []func() error
}

// Start starts etcd and kube-apiserver (NewEnvironment), the cluster of opts.Cluster, the
// operator and KubeRay's RayCluster controller, and returns once the operator's webhook server
// serves, so that a RayCluster applied next is admitted. KubeRay's RayMultiHostIndexing gate is
// the caller's (SetMultiHostIndexing). On error nothing started is left running.
func Start(ctx context.Context, opts Options) (_ *Local, err error) {
	log := ctrl.Log.WithName("localenv")
	env, err := NewEnvironment()
	if err != nil {
		return nil, err
	}
	l := &Local{Env: env}
	defer func() {
		if err != nil {
			err = errors.Join(err, l.Stop())
		}
	}()
	log.Info("Starting etcd and kube-apiserver")
	// env.Start leaves etcd and kube-apiserver running when a later step of it fails (installing
	// the CRDs or webhooks): stop them then too.
	l.stops = append(l.stops, env.Stop)
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting the control plane: %w", err)
	}

	if opts.Cluster != nil {
		log.Info("Starting kube-controller-manager, kube-scheduler and kwok", "pools", len(opts.Cluster.Pools))
		c, err := localcluster.Start(ctx, env, *opts.Cluster)
		if err != nil {
			return nil, fmt.Errorf("starting the local cluster: %w", err)
		}
		l.Cluster = c
		l.stops = append(l.stops, c.Stop)
	}

	wio := &env.WebhookInstallOptions
	mgr, err := operator.New(cfg, manager.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir,
		}),
	}, opts.Operator)
	if err != nil {
		return nil, err
	}
	l.stops = append(l.stops, runManager(ctx, mgr, "the operator's manager"))
	if err := waitServing(ctx, mgr); err != nil {
		return nil, err
	}

	stopKubeRay, err := StartKubeRay(ctx, cfg)
	if err != nil {
		return nil, err
	}
	l.stops = append(l.stops, stopKubeRay)
	return l, nil
}

// Stop stops what Start started, in reverse order: KubeRay, the operator, the cluster, then the
// control plane.
func (l *Local) Stop() error {
	var errs []error
	for _, stop := range slices.Backward(l.stops) {
		errs = append(errs, stop())
	}
	l.stops = nil
	return errors.Join(errs...)
}

// runManager starts mgr and returns the function that stops it and waits up to 30 s for it to
// return; later calls return the first's result.
func runManager(ctx context.Context, mgr manager.Manager, name string) (stop func() error) {
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	return sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return fmt.Errorf("%s did not stop within 30s", name)
		}
	})
}

// waitServing waits up to 30 s for mgr's caches to sync and its webhook server to accept TLS
// connections.
func waitServing(ctx context.Context, mgr manager.Manager) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return errors.New("the operator's caches did not sync within 30s")
	}
	started := mgr.GetWebhookServer().StartedChecker()
	var lastErr error
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		lastErr = started(nil)
		return lastErr == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the operator's webhook server did not start: %w", errors.Join(err, lastErr))
	}
	return nil
}
