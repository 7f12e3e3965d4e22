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

package webhook

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// webhookInstances is the number of independent operator instances serving the webhooks (docs/spec.md I5).
const webhookInstances = 3

// ctx lives as long as the suite.
var ctx = framework.SuiteContext()

var (
	env       *framework.Env
	k8sClient client.Client
	instances []*framework.Instance
)

func TestWebhooks(t *testing.T) {
	framework.RunSuite(t, "Webhook integration suite")
}

var _ = BeforeSuite(func() {
	env = framework.StartSuite()
	k8sClient = env.Client
	var err error
	instances, err = env.StartInstances(ctx, webhookInstances, framework.Replicas(operator.Options{}))
	Expect(err).NotTo(HaveOccurred())
})
