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

package lifecycle

import (
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ray-tpu/tpu-slice-operator/controllers"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// pendingTTL is short here so that expiry scenarios run fast; I3 must hold within twice of it.
const pendingTTL = 2 * time.Second

// ctx lives as long as the suite.
var ctx = framework.SuiteContext()

var (
	env       *framework.Env
	k8sClient client.Client
	instances []*framework.Instance
)

func TestLifecycle(t *testing.T) {
	framework.RunSuite(t, "Claim lifecycle suite")
}

// replicas are the operator's instances: webhook replicas forwarding claims, the first reconciling.
var replicas = framework.Replicas(operator.Options{Controllers: controllers.Options{PendingTTL: pendingTTL}})

var _ = BeforeSuite(func() {
	env = framework.StartSuite()
	k8sClient = env.Client
	Expect(env.InstallRejectingWebhook(ctx)).To(Succeed())
	Expect(env.InstallDelayingWebhook(ctx)).To(Succeed())
	var err error
	instances, err = env.StartInstances(ctx, 3, replicas)
	Expect(err).NotTo(HaveOccurred())
})
