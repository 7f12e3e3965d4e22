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

// Package identity holds the integration tests of what links a claim to its Pod (docs/spec.md §3.4,
// §8) and of what no request can do (§10), on a real API server with three operator instances
// forwarding claims as in production. The pending TTL is the production default (60 s), so that
// every release these tests time is the fast one, never the TTL.
package identity

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// ctx lives as long as the suite.
var ctx = framework.SuiteContext()

var (
	env       *framework.Env
	k8sClient client.Client
	instances []*framework.Instance
)

func TestIdentity(t *testing.T) {
	framework.RunSuite(t, "Claim identity suite")
}

var _ = BeforeSuite(func() {
	env = framework.StartSuite()
	k8sClient = env.Client
	Expect(env.InstallDelayingWebhook(ctx)).To(Succeed())
	var err error
	instances, err = env.StartInstances(ctx, 3, framework.Replicas(operator.Options{}))
	Expect(err).NotTo(HaveOccurred())
})
