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
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/ray-tpu/tpu-slice-operator/controllers"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// pendingTTL is short here so that expiry scenarios run fast; I3 must hold within twice of it.
const pendingTTL = 2 * time.Second

// ctx lives as long as the suite; AfterSuite cancels it.
var ctx, cancel = context.WithCancel(context.Background())

var (
	env       *framework.Env
	k8sClient client.Client
	instances []*framework.Instance
)

func TestLifecycle(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Claim lifecycle suite")
}

func instanceOptions(reconciler bool) framework.InstanceOptions {
	return framework.InstanceOptions{
		Operator: operator.Options{
			DisableControllers: !reconciler,
			Controllers:        controllers.Options{PendingTTL: pendingTTL},
		},
		Forward: true, // as the production install runs
	}
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var err error
	env, err = framework.Start()
	Expect(err).NotTo(HaveOccurred())
	k8sClient = env.Client
	Expect(env.InstallRejectingWebhook(ctx)).To(Succeed())
	Expect(env.InstallDelayingWebhook(ctx)).To(Succeed())
	instances, err = env.StartInstances(ctx, 3, func(i int) framework.InstanceOptions { return instanceOptions(i == 0) })
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	cancel()
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})
