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
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/forward"
	"github.com/ray-tpu/tpu-slice-operator/internal/rendezvous"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// failoverMargin is what a Pod's wait after a holder crashed may add to the pending TTL: the
// reconcile that frees the IDs (a live scan and a write), the webhook's next read of the slice, and
// the creator's retry every 50 ms.
const failoverMargin = 1500 * time.Millisecond

var _ = Describe("Reservations (docs/spec.md §3.5)", func() {
	var ns string
	BeforeEach(func() { ns = framework.CreateNamespace(ctx, suite.Client, "resv") })

	// The failover bound: the IDs a crashed holder reserved are freed a pending TTL after the
	// reconciler first saw them, which was before the crash, unless the reconciler's own process
	// is the one restarted and its waits start over (with leader election, a standby replica that
	// takes over has watched the slices all along and keeps the first bound).
	DescribeTable("admits the rest of a slice within the failover bound when the holder of its reservations crashes mid-burst, and never hands out an ID twice",
		func(reconciler bool, bound time.Duration) {
			rc := clusterOwned(ns, "failover", func(owner int) bool { return (owner == 0) == reconciler })
			iw, err := suite.WatchI1(ctx, ns, nil)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(iw.Stop)
			holder := groupOwner(rc)

			By("admitting 20 Pods one after another: the owner of the group reserves blocks of IDs")
			for range 20 {
				framework.MustCreate(ctx, suite.Client, testutil.WorkerPodFor(rc, "tpu").Obj())
			}
			// Normally the holder now holds IDs it has not handed out (20..49); on a machine so loaded
			// that the 0.5 s window passed, it gave them back already, and the crash costs nothing.
			GinkgoWriter.Printf("failover: %d claims for 20 Pods when the holder crashes\n", framework.ClaimCount(ctx, suite.Client, ns))

			By("crashing the holder while the other 44 Pods are being created, one after another")
			waits := make(chan time.Duration, 44)
			done := make(chan struct{})
			go func() {
				defer GinkgoRecover()
				defer close(done)
				for range 44 {
					_, took, err := framework.CreateRetrying(ctx, suite.Client, testutil.WorkerPodFor(rc, "tpu").Obj(), testutil.Timeout)
					Expect(err).NotTo(HaveOccurred())
					waits <- took
				}
			}()
			Expect(suite.Instances[holder].Crash()).To(Succeed())
			inst, err := suite.StartInstance(ctx, replicas(holder))
			Expect(err).NotTo(HaveOccurred())
			suite.Instances[holder] = inst
			suite.ServeWebhooksFrom(suite.Instances...)
			Eventually(done, 2*testutil.Timeout).Should(BeClosed())
			close(waits)
			var longest time.Duration
			for w := range waits {
				longest = max(longest, w)
			}
			GinkgoWriter.Printf("failover: the longest wait of a Pod after the holder (instance %d) crashed was %s (bound %s)\n", holder, longest, bound)
			Expect(longest).To(BeNumerically("<=", bound), "the longest wait of one Pod's create")

			framework.ExpectIDs(ctx, suite.Client, ns, map[int32][]int{0: framework.Seq(64)})
			expectClaimsMatchPods(ns)
			iw.Stop()
			Expect(iw.Violations()).To(BeEmpty(), "I1 on every Pod watch event")
		},
		Entry("a webhook replica crashes: the pending TTL after the reconciler saw the reservation", false, pendingTTL+failoverMargin),
		Entry("the reconciler's own replica crashes and restarts: the TTL starts over", true, 2*pendingTTL+failoverMargin),
	)

	It("admits a slice's Pods without a wait when the group's ownership moves away from its live holder mid-burst", func() {
		rc := cluster(ns, "move", 64, 1)
		iw, err := suite.WatchI1(ctx, ns, nil)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(iw.Stop)
		holder := groupOwner(rc)
		for range 20 {
			framework.MustCreate(ctx, suite.Client, testutil.WorkerPodFor(rc, "tpu").Obj())
		}

		By("the holder leaves the webhook Service but keeps running (a failing readiness probe): the group moves to a peer")
		old := suite.Instances[holder]
		Expect(old.Unlist()).To(Succeed())
		others := slices.Delete(slices.Clone(suite.Instances), holder, holder+1)
		suite.ServeWebhooksFrom(others...)
		Expect(framework.WaitForPeers(ctx, others...)).To(Succeed())
		DeferCleanup(func() {
			Expect(old.Stop()).To(Succeed())
			inst, err := suite.StartInstance(ctx, replicas(holder))
			Expect(err).NotTo(HaveOccurred())
			suite.Instances[holder] = inst
			suite.ServeWebhooksFrom(suite.Instances...)
			Expect(framework.WaitForPeers(ctx, suite.Instances...)).To(Succeed())
		})
		Expect(ownerAddr(rc, others[0])).NotTo(Equal(endpointOf(old)))

		By("the other 44 Pods, one after another: the old holder's reservation ends with its window")
		var longest time.Duration
		for range 44 {
			_, took, err := framework.CreateRetrying(ctx, suite.Client, testutil.WorkerPodFor(rc, "tpu").Obj(), testutil.Timeout)
			Expect(err).NotTo(HaveOccurred())
			longest = max(longest, took)
		}
		GinkgoWriter.Printf("ownership move: the longest wait of a Pod was %s\n", longest)
		// The IDs the old holder reserved wait for its give-back at the window's end (0.5 s here):
		// measured about 1 s; the bound leaves room for a loaded machine.
		Expect(longest).To(BeNumerically("<=", 3*time.Second), "the longest wait of one Pod's create")
		framework.ExpectIDs(ctx, suite.Client, ns, map[int32][]int{0: framework.Seq(64)})
		expectClaimsMatchPods(ns)
		iw.Stop()
		Expect(iw.Violations()).To(BeEmpty(), "I1 on every Pod watch event")
	})

	It("keeps the ID of a late create that a crashed holder handed out, and frees the holder's other reserved IDs", func() {
		rc := cluster(ns, "late-holder", 64, 1)
		iw, err := suite.WatchI1(ctx, ns, nil)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(iw.Stop)
		holder := groupOwner(rc)
		framework.MustCreate(ctx, suite.Client, testutil.WorkerPodFor(rc, "tpu").Obj())
		handed, wrote := suite.Instances[holder].ReservedCount(), suite.Instances[holder].Counts().Writes

		By("a Pod handed a reserved ID whose create a slower webhook holds for 4 s")
		var late *corev1.Pod
		var lateErr error
		var wg sync.WaitGroup
		wg.Go(func() {
			late = testutil.WorkerPodFor(rc, "tpu").Label(framework.DelayLabel, "4s").Obj()
			lateErr = suite.Client.Create(ctx, late)
		})
		// Handed out from the reservation; on a machine so loaded that the 0.5 s window passed
		// first, claimed by a write of the holder instead: either way the holder answered.
		Eventually(func() bool {
			return suite.Instances[holder].ReservedCount() > handed || suite.Instances[holder].Counts().Writes > wrote
		}, testutil.Timeout, 10*time.Millisecond).Should(BeTrue())

		By("the holder crashes before the create commits")
		Expect(suite.Instances[holder].Crash()).To(Succeed())
		inst, err := suite.StartInstance(ctx, replicas(holder))
		Expect(err).NotTo(HaveOccurred())
		suite.Instances[holder] = inst
		suite.ServeWebhooksFrom(suite.Instances...)
		wg.Wait()
		Expect(lateErr).NotTo(HaveOccurred())
		lateID, err := strconv.Atoi(framework.WorkerID(late))
		Expect(err).NotTo(HaveOccurred())
		Expect(lateID).To(BeNumerically(">", 0), "the late Pod got an ID of its own (reserved ID 1, unless the machine was slow)")

		By("the late Pod keeps its ID, and the IDs the holder never handed out are freed (I3)")
		expectClaimsMatchPods(ns)
		framework.ExpectIDs(ctx, suite.Client, ns, map[int32][]int{0: {0, lateID}})
		Expect(suite.Client.Get(ctx, client.ObjectKeyFromObject(late), &corev1.Pod{})).To(Succeed(), "the late Pod was not deleted")
		iw.Stop()
		Expect(iw.Violations()).To(BeEmpty(), "I1 on every Pod watch event")
	})
})

// ownerAddr returns the owner of rc's group "tpu" as inst sees the webhook replicas.
func ownerAddr(rc *rayv1.RayCluster, inst *framework.Instance) string {
	GinkgoHelper()
	owner, ok := rendezvous.Owner(forward.GroupKey(allocator.Request{Namespace: rc.Namespace, ClusterUID: rc.UID, GroupName: "tpu"}), inst.Peers.Members())
	Expect(ok).To(BeTrue())
	return owner
}

// endpointOf returns how the instance is listed among the webhook replicas.
func endpointOf(inst *framework.Instance) string {
	GinkgoHelper()
	_, port, err := net.SplitHostPort(inst.Addr)
	Expect(err).NotTo(HaveOccurred())
	p, err := strconv.Atoi(port)
	Expect(err).NotTo(HaveOccurred())
	return framework.EndpointAddress(p)
}

// clusterOwned creates RayClusters named name, name-1, … (64 hosts, 1 replica) until one's group
// "tpu" is owned by an instance whose index ok accepts, and returns that one (the owner follows the
// RayCluster's UID, which the API server picks).
func clusterOwned(ns, name string, ok func(owner int) bool) *rayv1.RayCluster {
	GinkgoHelper()
	for i := range 32 {
		n := name
		if i > 0 {
			n = name + "-" + strconv.Itoa(i)
		}
		if rc := cluster(ns, n, 64, 1); ok(groupOwner(rc)) {
			return rc
		}
	}
	Fail("no RayCluster of 32 has its group owned by the instance asked for")
	return nil
}

// groupOwner returns the index in suite.Instances of the instance that owns rc's group "tpu" under
// claim forwarding: the holder of its reservations.
func groupOwner(rc *rayv1.RayCluster) int {
	GinkgoHelper()
	i, err := framework.GroupOwner(suite.Instances, rc.Namespace, rc.UID, "tpu")
	Expect(err).NotTo(HaveOccurred())
	return i
}
