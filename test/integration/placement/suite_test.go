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

// Package placement checks the reconciler's placement step for ChosenDomain slices (docs/spec.md
// §4) on a bare API server: no scheduler is needed to see the choice, the Lease, the status and
// the released Pods. The specs create the slice and its gated Pods themselves, as the webhook
// would admit them (the proxy admits Pods unchanged), and TPU Nodes with a status as a kubelet
// would report it.
package placement

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/controllers"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

const (
	// assemblyTimeout is short here so that the incomplete slice's spec is quick.
	assemblyTimeout = 4 * time.Second
	// leaseNamespace holds the domain Leases.
	leaseNamespace = "tpu-placement"
)

// ctx lives as long as the suite.
var ctx = framework.SuiteContext()

// suite is the API server and one operator instance running the reconciler; Pods are admitted
// unchanged (Bypass).
var suite framework.Suite

func TestPlacement(t *testing.T) {
	suite.Run(t, "Placement suite", func() {
		Expect(suite.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNamespace}})).To(Succeed())
		suite.Bypass(true)
		suite.Instances = []*framework.Instance{startOperator()}
	})
}

// options are the operator's: the placement step on, a short assembly timeout.
func options() operator.Options {
	return operator.Options{Controllers: controllers.Options{
		PendingTTL: 3 * time.Second, AssemblyTimeout: assemblyTimeout, PlacementNamespace: leaseNamespace,
		SlicePlacement: tpuv1alpha1.PlacementChosenDomain,
	}}
}

// startOperator starts an operator instance running the reconciler.
func startOperator() *framework.Instance {
	inst, err := suite.StartInstance(ctx, framework.InstanceOptions{Operator: options()})
	Expect(err).NotTo(HaveOccurred())
	return inst
}
