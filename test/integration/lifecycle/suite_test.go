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

	. "github.com/onsi/gomega"

	"github.com/ray-tpu/tpu-slice-operator/controllers"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// pendingTTL is short here so that expiry scenarios run fast; I3 must hold within twice of it.
const pendingTTL = 2 * time.Second

// ctx lives as long as the suite.
var ctx = framework.SuiteContext()

// suite is the API server, with a rejecting and a delaying webhook beside the operator's, and
// the operator's webhook replicas the specs run against.
var suite framework.Suite

// options are the operator options of every webhook replica, replicas(i) all of replica i's (the
// first reconciles).
var (
	options  = operator.Options{Controllers: controllers.Options{PendingTTL: pendingTTL}}
	replicas = framework.Replicas(options)
)

func TestLifecycle(t *testing.T) {
	suite.Run(t, "Claim lifecycle suite", func() {
		Expect(suite.InstallRejectingWebhook(ctx)).To(Succeed())
		Expect(suite.InstallDelayingWebhook(ctx)).To(Succeed())
		suite.StartReplicas(3, options)
	})
}
