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
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/controllers"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

const webhookInstances = 3

// ctx lives as long as the suite.
var ctx = framework.SuiteContext()

// suite is the API server, KubeRay's RayCluster controller and the operator (its instances come and
// go with startOperator and stopOperator) the specs run against.
var suite framework.Suite

func TestE2E(t *testing.T) {
	suite.Run(t, "KubeRay end-to-end suite", func() {
		startOperator(true)
		stopKubeRay, err := suite.StartKubeRay(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(stopKubeRay)
	})
}

// startOperator starts the operator's instances (three webhook replicas forwarding claims as the
// production install runs them, the first also reconciling unless reconcile is false) and makes the
// webhook endpoint send admissions to them. The specs bind Pods themselves, as the scheduler would
// with today's inter-pod terms, and a gated Pod cannot be bound: the slices keep the terms
// (--slice-placement=InterPodAffinity); test/cluster runs the gates with a scheduler.
func startOperator(reconcile bool) {
	GinkgoHelper()
	suite.StartReplicas(webhookInstances, operator.Options{
		DisableControllers: !reconcile,
		Controllers:        controllers.Options{PendingTTL: pendingTTL},
		Metrics:            metrics.Default, // shared: adoptionCounts reads it across restarts
		SlicePlacement:     tpuv1alpha1.PlacementInterPodAffinity,
	})
}

// stopOperator stops every instance: the operator is uninstalled until startOperator.
func stopOperator() {
	GinkgoHelper()
	suite.ServeWebhooksFrom()
	for _, inst := range suite.Instances {
		Expect(inst.Stop()).To(Succeed())
	}
	suite.Instances = nil
}
