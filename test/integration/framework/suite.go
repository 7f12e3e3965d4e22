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

package framework

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
	"github.com/ray-tpu/tpu-slice-operator/internal/localenv"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
)

// suiteCtx is the context of the process's suite: a test binary runs one. StartSuite cancels it
// after the suite.
var suiteCtx, cancelSuite = context.WithCancel(context.Background())

// SuiteContext returns a context that lives as long as the suite (until after its last spec).
func SuiteContext() context.Context { return suiteCtx }

// RunSuite runs the Ginkgo specs of the calling package as test t, with Gomega failing them.
func RunSuite(t *testing.T, description string) {
	t.Helper()
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, description)
}

// StartSuite starts, from a suite's BeforeSuite, what Start starts. The controller-runtime log goes
// to GinkgoWriter in development mode (logOpts may change that). After the suite's last spec,
// SuiteContext is canceled, then the Env stopped (DeferCleanup: what a suite registers later runs
// before).
func StartSuite(logOpts ...zap.Opts) *Env {
	ginkgo.GinkgoHelper()
	startSuite(logOpts)
	env, err := Start()
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(func() error {
		cancelSuite()
		return env.Stop()
	})
	return env
}

// StartBareSuite is StartSuite for suites that install the operator from its own manifests: it
// starts what StartBare starts and returns it.
func StartBareSuite() (*envtest.Environment, client.Client) {
	ginkgo.GinkgoHelper()
	startSuite(nil)
	testEnv, c, err := StartBare()
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(func() error {
		cancelSuite()
		return testEnv.Stop()
	})
	return testEnv, c
}

// startSuite sets the logger, and cancels SuiteContext after the suite in any case.
func startSuite(logOpts []zap.Opts) {
	ctrl.SetLogger(zap.New(append([]zap.Opts{zap.WriteTo(ginkgo.GinkgoWriter), zap.UseDevMode(true)}, logOpts...)...))
	ginkgo.DeferCleanup(cancelSuite)
}

// Suite is what the specs of an operator suite share: the Env, started before the first spec
// (its Client is the administrator's), and the operator instances the suite started. A suite
// declares one as a package variable and runs it from its TestX function.
type Suite struct {
	*Env
	// Instances are the operator's instances StartReplicas started; a suite may stop, replace or
	// drop them.
	Instances []*Instance
	// Cluster is the local cluster StartCluster started, or nil on a bare API server.
	Cluster *localcluster.Cluster
}

// StartCluster adds the scheduler, kube-controller-manager and kwok Nodes of opts.Pools to the
// suite's control plane (Env.StartCluster), with a report entry of how long they took to start.
func (s *Suite) StartCluster(opts localcluster.Options) {
	ginkgo.GinkgoHelper()
	start := time.Now()
	var err error
	s.Cluster, err = s.Env.StartCluster(suiteCtx, opts)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.AddReportEntry("local cluster start", ginkgo.ReportEntryVisibilityAlways,
		fmt.Sprintf("kube-controller-manager, kube-scheduler and kwok with %d Nodes Ready in %s",
			len(s.Cluster.Nodes), time.Since(start).Round(10*time.Millisecond)))
}

// Run runs the Ginkgo specs of the calling package as test t. Before the first spec it starts the
// Env (StartSuite), then calls setup, which starts what the suite's specs need.
func (s *Suite) Run(t *testing.T, description string, setup func()) {
	t.Helper()
	ginkgo.BeforeSuite(func() {
		s.Env = StartSuite()
		setup()
	})
	RunSuite(t, description)
}

// StartReplicas starts n webhook replicas with the operator options base, as Replicas runs them,
// records them in Instances and waits until they serve admissions and know each other.
func (s *Suite) StartReplicas(n int, base operator.Options) {
	ginkgo.GinkgoHelper()
	var err error
	s.Instances, err = s.StartInstances(suiteCtx, n, Replicas(base))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
}

// SetMultiHostIndexing sets KubeRay's RayMultiHostIndexing gate, from a container's BeforeAll, and
// restores it after the container. The gate is process-global: containers that set it must be
// Serial, so that they never run at once.
func SetMultiHostIndexing(on bool) {
	ginkgo.GinkgoHelper()
	was, err := localenv.SetMultiHostIndexing(on)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(func() {
		_, err := localenv.SetMultiHostIndexing(was)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
	})
}
