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

	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// webhookInstances is the number of independent operator instances serving the webhooks (docs/spec.md I5).
const webhookInstances = 3

// ctx lives as long as the suite.
var ctx = framework.SuiteContext()

// suite is the API server and the operator's webhook replicas the specs run against.
var suite framework.Suite

func TestWebhooks(t *testing.T) {
	suite.Run(t, "Webhook integration suite", func() {
		suite.StartReplicas(webhookInstances, operator.Options{})
	})
}
