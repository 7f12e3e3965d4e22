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

// Package cluster checks the local cluster (internal/localcluster) on the test framework's control
// plane: the real scheduler places a TPU Pod in its pool, kwok runs it, the garbage collector and
// the namespace controller clean up, and a Node fails and recovers on demand.
package cluster

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// ctx lives as long as the suite; AfterSuite cancels it.
var ctx, cancel = context.WithCancel(context.Background())

var (
	env       *envtest.Environment
	k8sClient client.Client
	cluster   *localcluster.Cluster
)

// pools are two small v6e pools of one 4x4 slice (4 hosts of 4 chips) each, and a CPU pool of one
// Node.
var pools = []localcluster.Pool{
	{Name: "pool-a", Accelerator: "tpu-v6e-slice", Topology: "4x4"},
	{Name: "pool-b", Accelerator: "tpu-v6e-slice", Topology: "4x4", SubBlocks: 2},
	localcluster.CPUPool(1),
}

func TestCluster(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Local cluster suite")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	start := time.Now()
	var err error
	env, k8sClient, err = framework.StartBare()
	Expect(err).NotTo(HaveOccurred())
	apiServerUp := time.Now()
	cluster, err = localcluster.Start(ctx, env, localcluster.Options{Pools: pools})
	Expect(err).NotTo(HaveOccurred())
	AddReportEntry("cluster start", ReportEntryVisibilityAlways,
		"etcd+kube-apiserver "+apiServerUp.Sub(start).Round(10*time.Millisecond).String()+
			", controller-manager+scheduler+kwok with every Node Ready "+time.Since(apiServerUp).Round(10*time.Millisecond).String())
})

var _ = AfterSuite(func() {
	cancel()
	if cluster != nil {
		Expect(cluster.Stop()).To(Succeed())
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})
