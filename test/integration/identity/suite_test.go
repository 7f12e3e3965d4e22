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

	. "github.com/onsi/gomega"

	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// ctx lives as long as the suite.
var ctx = framework.SuiteContext()

// suite is the API server, with a delaying webhook beside the operator's, and the operator's three
// webhook replicas the specs run against.
var suite framework.Suite

func TestIdentity(t *testing.T) {
	suite.Run(t, "Claim identity suite", func() {
		Expect(suite.InstallDelayingWebhook(ctx)).To(Succeed())
		suite.StartReplicas(3, operator.Options{})
	})
}
