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

package identity

import (
	"net/http"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// denialBound is docs/spec.md §5's bound on a denial: the claim deadline.
const denialBound = allocator.DefaultTimeout

var _ = Describe("A Pod whose topology gives another host count than its group's numOfHosts", func() {
	// Each round creates, through the three webhook instances, the 4 Pods of a group of numOfHosts 4
	// (v6e 4x4, 4 chips per Pod) together with requests of the same group whose topology gives 2
	// hosts (v6e 2x4): Pods created through the API server ('2'), AdmissionReviews posted straight to
	// an instance ('f') and claims forwarded to one as a peer would ('w'), launched in the round's
	// order, gap apart (0: all at once). Group commit once planned a whole batch with its last
	// request's host count.
	rounds := []struct {
		name, order string
		gap         time.Duration
	}{
		{name: "odd Pods first", order: "22oooo", gap: 20 * time.Millisecond},
		{name: "odd Pods last", order: "oooo22", gap: 20 * time.Millisecond},
		{name: "interleaved, with a forged review and a forwarded claim", order: "o2ofo2wo", gap: 5 * time.Millisecond},
		{name: "all at once", order: "2o2o2ofwo", gap: 0},
		{name: "all at once, odd Pods in the middle", order: "oo22oo", gap: 0},
	}
	It("is denied at once naming both counts, and the group's own Pods all get their IDs, in any order", func() {
		for _, round := range rounds {
			By(round.name)
			ns := framework.CreateNamespace(ctx, suite.Client, "shape")
			rc := cluster(ns, "shape", "4x4", 4, 4, 1)
			watcher := watchI1(ns)
			odd := func() *corev1.Pod { return testutil.WorkerPodFor(rc, "tpu").Topology("tpu-v6e-slice", "2x4").Obj() }

			type answer struct {
				kind    byte
				err     error
				message string
				took    time.Duration
			}
			answers := make([]answer, len(round.order))
			var wg sync.WaitGroup
			for i := range len(round.order) {
				kind := round.order[i]
				inst := suite.Instances[i%len(suite.Instances)]
				wg.Go(func() {
					defer GinkgoRecover()
					a := answer{kind: kind}
					start := time.Now()
					switch kind {
					case 'o':
						a.err = suite.Client.Create(ctx, testutil.WorkerPodFor(rc, "tpu").Obj())
					case '2':
						a.err = suite.Client.Create(ctx, odd())
						if a.err != nil {
							a.message = a.err.Error()
						}
					case 'f':
						review, err := suite.PostAdmission(ctx, inst, podReview(ns, odd()))
						a.err = err
						if err == nil && review.Response != nil && !review.Response.Allowed && review.Response.Result != nil {
							a.message = review.Response.Result.Message
						}
					case 'w':
						status, body, err := suite.ForwardClaim(ctx, inst, allocator.Request{
							Namespace: ns, ClusterName: rc.Name, ClusterUID: rc.UID, GroupName: "tpu",
							Hosts: 2, Topology: "2x4", Accelerator: "tpu-v6e-slice", Claim: claims.Request{Token: "forged-" + ns},
						}, 2*denialBound)
						a.err, a.message = err, string(body)
						if err == nil && status != http.StatusOK {
							a.message = ""
						}
					}
					a.took = time.Since(start)
					answers[i] = a
				})
				time.Sleep(round.gap)
			}
			wg.Wait()

			var slowest time.Duration
			for i, a := range answers {
				if a.kind == 'o' {
					Expect(a.err).NotTo(HaveOccurred(), "the group's own Pod %d is admitted", i)
					continue
				}
				if a.kind == '2' {
					Expect(apierrors.IsForbidden(a.err)).To(BeTrue(), "odd Pod %d is denied for good, not as transient: %v", i, a.err)
				} else {
					Expect(a.err).NotTo(HaveOccurred())
				}
				Expect(a.message).To(And(ContainSubstring("topology 2x4 gives 2 hosts per slice"), ContainSubstring("has numOfHosts 4")),
					"request %d (%c) is denied naming both counts", i, a.kind)
				Expect(a.took).To(BeNumerically("<", denialBound), "request %d (%c) denied within docs/spec.md §5's bound", i, a.kind)
				slowest = max(slowest, a.took)
			}
			GinkgoWriter.Printf("SHAPE round=%q order=%s slowest_denial=%s\n", round.name, round.order, slowest)

			framework.ExpectIDs(ctx, suite.Client, ns, map[int32][]int{0: framework.Seq(4)})
			var list tpuv1alpha1.TPUSliceAssignmentList
			Expect(suite.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			Expect(list.Items).To(HaveLen(1))
			Expect(list.Items[0].Spec.Hosts).To(Equal(int32(4)), "no slice of the odd host count")
			Expect(list.Items[0].Spec.Topology).To(Equal("4x4"))
			expectSettled(ns)
			watcher.Stop()
			Expect(watcher.Violations()).To(BeEmpty(), "I1 on every Pod event")
		}
	})
})
