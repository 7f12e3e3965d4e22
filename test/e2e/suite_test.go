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

// Package e2e runs KubeRay's own RayCluster controller in-process against a real API server with
// our operator (three webhook instances, one reconciler) and checks docs/spec.md §9 as KubeRay creates,
// deletes and recreates Pods at its own pace, with its RayMultiHostIndexing gate off and on.
package e2e

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/ray-tpu/tpu-slice-operator/controllers"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

const webhookInstances = 3

// ctx lives as long as the suite; AfterSuite cancels it.
var ctx, cancel = context.WithCancel(context.Background())

var (
	env         *framework.Env
	k8sClient   client.Client
	instances   []*framework.Instance
	stopKubeRay func() error
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "KubeRay end-to-end suite")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var err error
	env, err = framework.Start()
	Expect(err).NotTo(HaveOccurred())
	k8sClient = env.Client
	startOperator(true)
	stopKubeRay, err = env.StartKubeRay(ctx)
	Expect(err).NotTo(HaveOccurred())
})

// startOperator starts the operator's instances (three webhook replicas forwarding claims as the
// production install runs them, the first also reconciling unless reconcile is false) and makes the
// webhook endpoint send admissions to them.
func startOperator(reconcile bool) {
	GinkgoHelper()
	var err error
	instances, err = env.StartInstances(ctx, webhookInstances, func(i int) framework.InstanceOptions {
		return framework.InstanceOptions{
			Operator: operator.Options{
				DisableControllers: i > 0 || !reconcile,
				Controllers:        controllers.Options{PendingTTL: pendingTTL},
				Metrics:            metrics.Default, // shared: adoptionCounts reads it across restarts
			},
			Forward: true, // as the production install runs
		}
	})
	Expect(err).NotTo(HaveOccurred())
}

// stopOperator stops every instance: the operator is uninstalled until startOperator.
func stopOperator() {
	GinkgoHelper()
	env.ServeWebhooksFrom()
	for _, inst := range instances {
		Expect(inst.Stop()).To(Succeed())
	}
	instances = nil
}

var _ = AfterSuite(func() {
	if stopKubeRay != nil {
		Expect(stopKubeRay()).To(Succeed())
	}
	cancel()
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})
