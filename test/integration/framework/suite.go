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
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
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
