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
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/controllers"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// injectingToken is a claim-token annotation that, copied into status.workers as it is, reads as
// three claims: ID 0's token x, then claims of IDs 1 and 2 (issue #20, defect 1).
const injectingToken = "x\n1 y\n2 z"

var _ = Describe("Stored claim lines", func() {
	var ns string
	BeforeEach(func() {
		ns = framework.CreateNamespace(ctx, suite.Client, "lines")
	})

	It("never take a claim token a Pod carries that would inject claims or break the line", func() {
		rc := cluster(ns, "inject", "4x4", 4, 4, 1)
		w := watchNamespace(ns)
		DeferCleanup(w.stop)

		By("a worker Pod created without ray.io/node-type, out of the webhook's way, carrying TPU_WORKER_ID=0, TPU_NAME=tpu-0 and the token " + fmt.Sprintf("%q", injectingToken))
		p := testutil.WorkerPodFor(rc, "tpu").TPUIdentity("tpu", 0, 0).
			Annotation(tpuv1alpha1.ClaimTokenAnnotation, injectingToken).Label(framework.BypassLabel, "true").Obj()
		delete(p.Labels, rayutils.RayNodeTypeLabelKey)
		hand := framework.MustCreate(ctx, suite.Client, p)
		By("then the label ray.io/node-type=worker is added")
		patch := client.MergeFrom(hand.DeepCopy())
		hand.Labels[rayutils.RayNodeTypeLabelKey] = "worker"
		Expect(suite.Client.Patch(ctx, hand, patch)).To(Succeed())

		By("the Pod is recorded at ID 0 with a token of the operator's choosing, and nothing else is claimed")
		Eventually(func(g Gomega) {
			s := onlySlice(g, ns)
			g.Expect(s.Status.MalformedLines).To(BeEmpty())
			g.Expect(s.Status.Claims).To(HaveLen(1))
			c := s.Status.Claims[0]
			g.Expect(c.WorkerID).To(BeZero())
			g.Expect(c.PodUID).To(Equal(hand.UID))
			g.Expect(c.Token).NotTo(Equal(injectingToken))
			g.Expect(tpuv1alpha1.ValidToken(c.Token)).To(BeTrue())
		}, testutil.Timeout, testutil.Interval).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(onlySlice(g, ns).Status.Claims).To(HaveLen(1))
		}, testutil.ConsistentlyTime, testutil.Interval).Should(Succeed())

		By("the group's next Pods get IDs 1, 2 and 3, never 0 again")
		framework.CreatePods(ctx, suite.Client, rc, "tpu", 3)
		framework.ExpectIDs(ctx, suite.Client, ns, map[int32][]int{0: framework.Seq(4)})
		expectSettled(ns)

		By("on the watches: every stored status parsed, no claim named ID 1 or 2 before a Pod held it, and no two live Pods held one ID (I1)")
		w.expectClean()
	})
})

var _ = Describe("A slice whose stored lines do not parse", Serial, func() {
	It("stops no other slice: it is reported, repaired from its live Pods, and a new operator instance becomes ready next to it", func() {
		ns := framework.CreateNamespace(ctx, suite.Client, "malformed")
		rc := cluster(ns, "bad", "4x4", 4, 4, 1)
		held := framework.CreatePods(ctx, suite.Client, rc, "tpu", 2)
		framework.ExpectBound(ctx, suite.Client, ns, 2)
		w := watchNamespace(ns)
		DeferCleanup(w.stop)

		By("the reconciler's instance stops, so that the bad lines stay stored while the rest is checked")
		Expect(suite.Instances[0].Stop()).To(Succeed())
		suite.ServeWebhooksFrom(suite.Instances[1:]...)
		restarted := false
		// The reconciler repairs a malformed slice once it has seen it for the pending TTL (creates
		// still in flight land first, docs/spec.md §8): the restarted instance's is short, and the
		// next specs get an instance with the default again.
		restart := func(ttl time.Duration) {
			if restarted {
				Expect(suite.Instances[0].Stop()).To(Succeed())
			}
			inst, err := suite.StartInstance(ctx, framework.InstanceOptions{
				Operator: operator.Options{Controllers: controllers.Options{PendingTTL: ttl}}, Forward: true})
			Expect(err).NotTo(HaveOccurred())
			suite.Instances[0], restarted = inst, true
			// The readiness check the operator serves on /readyz (cmd/main.go): every informer synced.
			ready := operator.CachesSynced(inst.Manager.GetCache())
			Eventually(func() error { return ready(httptest.NewRequest(http.MethodGet, "/readyz", nil)) },
				testutil.Timeout, testutil.Interval).Should(Succeed(), "a new operator instance becomes ready next to the malformed slice")
			suite.ServeWebhooksFrom(suite.Instances...)
			Expect(framework.WaitForPeers(ctx, suite.Instances...)).To(Succeed())
		}
		DeferCleanup(func() { restart(controllers.DefaultPendingTTL) })

		By("status.workers written by hand: ID 0's line with a token holding a space, ID 1's line, an injected second claim of ID 1, and a line naming ID 2 alone")
		byID := map[string]*corev1.Pod{}
		for _, p := range held {
			byID[framework.WorkerID(p)] = p
		}
		badLines := []string{
			fmt.Sprintf("0 a b %s %s", byID["0"].Name, byID["0"].UID),
			fmt.Sprintf("1 %s %s %s", byID["1"].Annotations[tpuv1alpha1.ClaimTokenAnnotation], byID["1"].Name, byID["1"].UID),
			"1 y",
			"2 a b",
		}
		sliceKey := writeRawWorkers(ns, strings.Join(badLines, "\n"), 2)
		// An instance hands out an ID it reserved while its cache is behind its own last write of
		// the slice (docs/spec.md §3.5): the refusal below holds once its cache shows the status
		// written by hand. Without this wait the create raced the cache, and lost once in CI.
		for _, inst := range suite.Instances[1:] {
			Eventually(func(g Gomega) {
				cached := &tpuv1alpha1.TPUSliceAssignment{}
				g.Expect(inst.Manager.GetCache().Get(ctx, sliceKey, cached)).To(Succeed())
				g.Expect(cached.Status.MalformedLines).NotTo(BeEmpty())
			}, testutil.Timeout, testutil.Interval).Should(Succeed())
		}

		By("a claim in the bad slice's group is denied as transient until the repair")
		err := suite.Client.Create(ctx, testutil.WorkerPodFor(rc, "tpu").Obj())
		Expect(err).To(MatchError(ContainSubstring("malformed claims being repaired by the operator")))
		Expect(apierrors.IsTooManyRequests(err)).To(BeTrue(), "the denial is transient: %v", err)

		By("another RayCluster's Pods are admitted meanwhile, on the running instances' caches")
		other := cluster(ns, "other", "4x4", 4, 4, 1)
		framework.CreatePods(ctx, suite.Client, other, "tpu", 4)

		By("a new operator instance, with the reconciler, starts and becomes ready")
		restart(5 * time.Second)

		By("the bad slice is repaired from its live Pods: IDs 0 and 1 bound to their Pods, ID 2 not claimed")
		Eventually(func(g Gomega) {
			s := &tpuv1alpha1.TPUSliceAssignment{}
			g.Expect(suite.Client.Get(ctx, sliceKey, s)).To(Succeed())
			g.Expect(s.Status.MalformedLines).To(BeEmpty())
			got := map[int32]types.UID{}
			for _, c := range s.Status.Claims {
				got[c.WorkerID] = c.PodUID
			}
			g.Expect(got).To(Equal(map[int32]types.UID{0: byID["0"].UID, 1: byID["1"].UID}))
			cond := apimeta.FindStatusCondition(s.Status.Conditions, tpuv1alpha1.ConditionMalformed)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Reason).To(Equal(tpuv1alpha1.ReasonMalformedLinesDropped))
			g.Expect(cond.Message).To(And(ContainSubstring(`"2 a b"`), ContainSubstring(`"1 y"`), ContainSubstring("0 a b")))
		}, testutil.Timeout, testutil.Interval).Should(Succeed())

		By("a Warning Event on the RayCluster names the lines")
		Eventually(func(g Gomega) {
			var list eventsv1.EventList
			g.Expect(suite.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			var notes []string
			for _, e := range list.Items {
				if e.Reason == tpuv1alpha1.ReasonTPUSliceMalformed && e.Regarding.Name == rc.Name {
					g.Expect(e.Type).To(Equal(corev1.EventTypeWarning))
					notes = append(notes, e.Note)
				}
			}
			g.Expect(notes).To(ContainElement(ContainSubstring(`"2 a b"`)))
		}, testutil.Timeout, testutil.Interval).Should(Succeed())

		By("the other RayCluster's slice is Claimed: the new instance's cache works")
		Eventually(func(g Gomega) {
			var list tpuv1alpha1.TPUSliceAssignmentList
			g.Expect(suite.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{tpuv1alpha1.ClusterLabel: other.Name})).To(Succeed())
			g.Expect(list.Items).To(HaveLen(1))
			g.Expect(apimeta.IsStatusConditionTrue(list.Items[0].Status.Conditions, tpuv1alpha1.ConditionClaimed)).To(BeTrue())
		}, testutil.Timeout, testutil.Interval).Should(Succeed())

		By("the bad group's next Pods get IDs 2 and 3: no ID is handed out twice")
		framework.CreatePods(ctx, suite.Client, rc, "tpu", 2)
		framework.ExpectIDs(ctx, suite.Client, ns, map[int32][]int{0: framework.Seq(4)})
		expectSettled(ns)
		w.expectNoLiveDuplicates()
	})
})

// writeRawWorkers writes status.workers of the namespace's only slice as text, bypassing the
// operator's encoder, as a user with kubectl edit --subresource=status would. It returns the
// slice's key.
func writeRawWorkers(ns, text string, claimed int64) types.NamespacedName {
	GinkgoHelper()
	var key types.NamespacedName
	Eventually(func(g Gomega) {
		key = client.ObjectKeyFromObject(onlySlice(g, ns))
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(tpuv1alpha1.GroupVersion.WithKind("TPUSliceAssignment"))
		g.Expect(suite.Client.Get(ctx, key, obj)).To(Succeed())
		g.Expect(unstructured.SetNestedField(obj.Object, text, "status", "workers")).To(Succeed())
		g.Expect(unstructured.SetNestedField(obj.Object, claimed, "status", "claimed")).To(Succeed())
		g.Expect(suite.Client.Status().Update(ctx, obj)).To(Succeed())
	}, testutil.Timeout, testutil.Interval).Should(Succeed())
	return key
}

func onlySlice(g Gomega, ns string) *tpuv1alpha1.TPUSliceAssignment {
	var list tpuv1alpha1.TPUSliceAssignmentList
	g.Expect(suite.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	g.Expect(list.Items).To(HaveLen(1))
	return &list.Items[0]
}

// nsWatch follows a namespace's Pods and slices on watches and records what breaks the
// invariants at any moment: two live Pods with one identity (I1), a stored status with lines that
// do not parse, and a claim of a worker ID no Pod carried when it was stored (an injected claim).
type nsWatch struct {
	mu         sync.Mutex
	live       map[types.UID]identity.Identity
	duplicates []string
	malformed  []string
	injected   []string
	stops      []func()
	done       sync.WaitGroup
}

func watchNamespace(ns string) *nsWatch {
	GinkgoHelper()
	wc, err := client.NewWithWatch(suite.Config, client.Options{Scheme: operator.Scheme})
	Expect(err).NotTo(HaveOccurred())
	w := &nsWatch{live: map[types.UID]identity.Identity{}}
	pods, err := wc.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns))
	Expect(err).NotTo(HaveOccurred())
	sliceWatch, err := wc.Watch(ctx, &tpuv1alpha1.TPUSliceAssignmentList{}, client.InNamespace(ns))
	Expect(err).NotTo(HaveOccurred())
	w.stops = []func(){pods.Stop, sliceWatch.Stop}
	w.done.Go(func() {
		for ev := range pods.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				w.pod(ev.Type, p)
			}
		}
	})
	w.done.Go(func() {
		for ev := range sliceWatch.ResultChan() {
			if s, ok := ev.Object.(*tpuv1alpha1.TPUSliceAssignment); ok && ev.Type != watch.Deleted {
				w.slice(s)
			}
		}
	})
	return w
}

func (w *nsWatch) pod(t watch.EventType, p *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	id, ok := identity.FromPod(p)
	if t == watch.Deleted || !ok || !lifecycle.PodLive(p) {
		delete(w.live, p.UID)
		return
	}
	for uid, other := range w.live {
		if uid != p.UID && other.SliceName() == id.SliceName() && other.WorkerID == id.WorkerID {
			w.duplicates = append(w.duplicates, fmt.Sprintf("Pods %s and %s both hold worker ID %d of %s", uid, p.UID, id.WorkerID, id.SliceName()))
		}
	}
	w.live[p.UID] = id
}

func (w *nsWatch) slice(s *tpuv1alpha1.TPUSliceAssignment) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(s.Status.MalformedLines) > 0 {
		w.malformed = append(w.malformed, strings.Join(s.Status.MalformedLines, "; "))
	}
	held := map[int32]bool{}
	for _, id := range w.live {
		if id.SliceName() == s.Name {
			held[id.WorkerID] = true
		}
	}
	for _, c := range s.Status.Claims {
		// A bound claim names a Pod this watch may not have seen yet; a pending one is the
		// webhook's, made before its Pod exists. Only a claim neither bound nor made by the
		// webhook's tokens (its hex tokens, or the seals of the secrets it hands reserved IDs
		// with, docs/spec.md §3.5) can be an injected one.
		if c.PodUID == "" && !held[c.WorkerID] && !webhookToken(c.Token) {
			w.injected = append(w.injected, fmt.Sprintf("slice %s claims worker ID %d with token %q", s.Name, c.WorkerID, c.Token))
		}
	}
}

// webhookToken reports whether s is a token the webhook writes: 16 hex digits, or a seal
// (identity.Seal: its prefix and 32 hex digits).
func webhookToken(s string) bool {
	if seal, ok := strings.CutPrefix(s, identity.SealPrefix); ok {
		return strings.Trim(seal, "0123456789abcdef") == "" && len(seal) == 32
	}
	return strings.Trim(s, "0123456789abcdef") == "" && len(s) == 16
}

func (w *nsWatch) stop() {
	for _, stop := range w.stops {
		stop()
	}
	w.done.Wait()
}

// expectClean checks that the watches saw no duplicate, no malformed status and no injected claim.
func (w *nsWatch) expectClean() {
	GinkgoHelper()
	w.mu.Lock()
	defer w.mu.Unlock()
	Expect(w.duplicates).To(BeEmpty(), "I1 on the Pod watch")
	Expect(w.malformed).To(BeEmpty(), "stored statuses that do not parse")
	Expect(w.injected).To(BeEmpty(), "claims no Pod carried")
}

func (w *nsWatch) expectNoLiveDuplicates() {
	GinkgoHelper()
	w.mu.Lock()
	defer w.mu.Unlock()
	Expect(w.duplicates).To(BeEmpty(), "I1 on the Pod watch")
}
