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
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/forward"
	"github.com/ray-tpu/tpu-slice-operator/internal/rendezvous"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

var _ = Describe("Claim forwarding between webhook replicas", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("claims locally when the owner is listed but does not answer, and keeps IDs unique", func() {
		By("listing a replica that is not running (a Pod whose endpoint is still ready)")
		dead := framework.EndpointSlice(closedPort())
		Expect(suite.Client.Create(ctx, dead)).To(Succeed())
		DeferCleanup(func() {
			Expect(client.IgnoreNotFound(suite.Client.Delete(ctx, dead))).To(Succeed())
			Eventually(func() error { return framework.WaitForPeers(ctx, suite.Instances...) }).Should(Succeed())
		})
		deadAddr := framework.EndpointAddress(int(*dead.Ports[0].Port))
		Eventually(func() bool {
			for _, inst := range suite.Instances {
				if !slices.Contains(inst.Peers.Members(), deadAddr) {
					return false
				}
			}
			return true
		}, testutil.Timeout, testutil.Interval).Should(BeTrue(), "every instance lists the dead replica")

		By("creating RayClusters until one's worker group is owned by the dead replica")
		members := suite.Instances[0].Peers.Members()
		var rcName string
		for i := 0; rcName == ""; i++ {
			Expect(i).To(BeNumerically("<", 64), "no group of 64 is owned by one of %d replicas", len(members))
			rc := createCluster(testutil.MakeRayCluster(fmt.Sprintf("rc-%d", i), ns).
				TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 1).ManagedByMultiKueue().Obj())
			key := forward.GroupKey(allocator.Request{Namespace: ns, ClusterUID: rc.UID, GroupName: "tpu"})
			if owner, _ := rendezvous.Owner(key, members); owner == deadAddr {
				rcName = rc.Name
				By("creating the 4 Pods of " + rc.Name + " concurrently")
				before := framework.TotalCounts(suite.Instances)
				var wg sync.WaitGroup
				errs := make([]error, 4)
				for j := range 4 {
					wg.Go(func() { errs[j] = suite.Client.Create(ctx, workerPod(rc, "tpu").Obj()) })
				}
				wg.Wait()
				for _, err := range errs {
					Expect(err).NotTo(HaveOccurred())
				}
				after := framework.TotalCounts(suite.Instances)
				Expect(after.Fallbacks-before.Fallbacks).To(Equal(int64(4)), "every claim fell back to its own replica")
				Expect(after.Forwarded - before.Forwarded).To(BeZero())
			}
		}
		report, err := framework.CheckAdmitted(ctx, suite.Client, ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(report.LivePods).To(Equal(4))
		for _, ids := range report.IDs {
			Expect(ids).To(Equal([]int{0, 1, 2, 3}))
		}
	})

	It("refuses forwarded claims from callers that are not authenticated or not allowed, and makes no claim", func() {
		inst := suite.Instances[0]
		httpClient := &http.Client{Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // loopback to our own test server.
		}}
		post := func(token string) int {
			body := []byte(`{"request":{"Namespace":"` + ns + `","ClusterName":"rc","ClusterUID":"u","GroupName":"g","Hosts":4,"DesiredReplicas":1,"Claim":{"Token":"t"}},"timeoutMillis":1000}`)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+inst.Addr+forward.Path, bytes.NewReader(body))
			Expect(err).NotTo(HaveOccurred())
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := httpClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			Expect(resp.Body.Close()).To(Succeed())
			return resp.StatusCode
		}
		served := inst.Counts().Served

		By("no token")
		Expect(post("")).To(Equal(http.StatusUnauthorized))
		By("a token the API server does not know")
		Expect(post("not-a-token")).To(Equal(http.StatusUnauthorized))
		By("a valid token of a ServiceAccount without the permission to post claims")
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "someone", Namespace: ns}}
		Expect(suite.Client.Create(ctx, sa)).To(Succeed())
		token, err := framework.ServiceAccountToken(ctx, suite.Client, ns, sa.Name)
		Expect(err).NotTo(HaveOccurred())
		Expect(post(token)).To(Equal(http.StatusForbidden))

		Expect(inst.Counts().Served).To(Equal(served), "no refused request reached the allocator")
		expectNoSlices(ns)
	})
})

// closedPort returns a loopback port nothing listens on.
func closedPort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	port := l.Addr().(*net.TCPAddr).Port
	Expect(l.Close()).To(Succeed())
	return port
}
