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

package e2e

import (
	"flag"
	"io"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/managerflags"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// Replicas that do not forward claims each claim for the admissions they get. If each also
// reserved IDs, a KubeRay Pod whose index labels name an ID another replica reserved would be
// denied until that replica gave the ID back, a window later: 524 s for a 256-host replica in
// `make bench` S7 with -forwarding=false before the manager turned reservations off without
// forwarding (docs/spec.md §3.5).
var _ = Describe("Three replicas started with the manager's default flags, without --claim-forwarding (docs/spec.md §3.5)", Ordered, Serial, func() {
	const hosts = 32
	var plain []*framework.Instance

	BeforeAll(func() {
		framework.SetMultiHostIndexing(true)
		stopOperator()
		DeferCleanup(func() {
			suite.ServeWebhooksFrom()
			for _, inst := range plain {
				Expect(inst.Stop()).To(Succeed())
			}
			startOperator(true)
		})
		var f managerflags.Flags
		fs := flag.NewFlagSet("manager", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.Bind(fs)
		Expect(f.Parse(fs, nil)).To(Succeed()) // no --claim-forwarding
		var err error
		plain, err = suite.StartInstances(ctx, webhookInstances, func(i int) framework.InstanceOptions {
			o := f.Operator
			o.DisableControllers = i > 0 // the leader's
			o.SlicePlacement = tpuv1alpha1.PlacementInterPodAffinity
			return framework.InstanceOptions{Operator: o}
		})
		Expect(err).NotTo(HaveOccurred())
	})

	It("admit KubeRay's indexed replica at the pace of the admissions, none waiting for another replica's reservation", func() {
		ns := framework.CreateNamespace(ctx, suite.Client, "plain")
		start := time.Now()
		rc := create(testutil.MakeRayCluster("plain", ns).TPUGroup("tpu", "tpu-v6e-slice", "8x16", 4, hosts, 1).Obj())
		Eventually(func() []corev1.Pod { return workerPods(rc, "tpu") }, 30*time.Second, 50*time.Millisecond).Should(HaveLen(hosts))
		created := time.Since(start)
		// Reserving replicas took at least a window (2 s) for each Pod sent to a replica that did
		// not hold its ID: about two in three.
		Expect(created).To(BeNumerically("<", 8*time.Second), "KubeRay created the %d-host replica in %s", hosts, created)
		AddReportEntry("replica created", created.Round(time.Millisecond).String())
		expectSettled(rc, map[string]int{"tpu": hosts})
	})
})
