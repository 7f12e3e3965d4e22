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

package chaos

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// The histories of issue 20: nothing a Pod carries, or a label hides, may reach the claims.
//
//   - unlabel-burst: KubeRay's labels removed from a Pod right after its create, while the claims
//     of its burst are still pending (docs/spec.md §8: it keeps its claim, nothing is deleted).
//   - mixed-hosts: Pods (and forged AdmissionReviews) of another host count in one batch with the
//     group's own creates (§10: they are denied within §5's 6 s, naming both counts; the group's
//     own Pods are not denied because of them; no slice of another host count appears).
//   - malformed-token: Pods with a hand-set identity and a claim-token annotation holding a space
//     or an injected line, made visible to the operator (§3.4 adoption; stored.go checks that no
//     malformed line and no injected claim is ever stored).
//   - absurd-topology: Pods and forged reviews of a 1024x1024 or 128x128x64 slice (§2: denied,
//     quickly, without the operator's memory growing).
//   - forged-index: forged reviews with KubeRay replica indexes far beyond the RayCluster's
//     desired replicas (§3.2: no slice beyond them).

// denialBound is how long a denial may take (docs/spec.md §5).
const denialBound = 6 * time.Second

// absurdHeapLimit is how much the process's heap may grow while an absurd topology is admitted:
// the memory limit of an operator replica (config/manager); the instances run in this process.
const absurdHeapLimit = 512 << 20

// kubeRayLabels are KubeRay's labels that select a worker Pod into the operator's cache.
var kubeRayLabels = []string{rayutils.RayNodeGroupLabelKey, rayutils.RayClusterLabelKey, rayutils.RayNodeTypeLabelKey}

// hostileStats is what the operations of this file did and measured, for the CHAOS line.
type hostileStats struct {
	unlabeled, mixedDenials, malformed, absurdDenials, forgedIndexes int
	maxMixedDenial, maxAbsurd                                        time.Duration
	absurdHeap                                                       uint64

	unlabeledPods []*unlabeledPod
	malformedPods []*malformedPod
}

// unlabeledPod is a Pod whose KubeRay labels the run removed right after its create.
type unlabeledPod struct {
	name  string
	uid   types.UID
	token string
	id    identity.Identity
	// removed are the labels removed, with their values.
	removed map[string]string
	// after is how long after its create returned the labels were gone, pending whether its claim
	// was still pending then.
	after   time.Duration
	pending bool
	// restoreAt is the step after which the labels are put back (-1: at the end of the run).
	restoreAt          int
	restored, reported bool
	done               bool
}

// malformedPod is a Pod created by hand with a malformed claim-token annotation.
type malformedPod struct {
	name     string
	uid      types.UID
	id       identity.Identity
	payload  string
	reported bool
	done     bool
}

// tracked reports whether the Pod is watched by one of this file's checks.
func (h *hostileStats) tracked(uid types.UID) bool {
	return slices.ContainsFunc(h.unlabeledPods, func(e *unlabeledPod) bool { return e.uid == uid }) ||
		slices.ContainsFunc(h.malformedPods, func(m *malformedPod) bool { return m.uid == uid })
}

// unlabeledNow reports whether the Pod's KubeRay labels were removed and not yet restored.
func (h *hostileStats) unlabeledNow(uid types.UID) bool {
	return slices.ContainsFunc(h.unlabeledPods, func(e *unlabeledPod) bool { return e.uid == uid && !e.restored })
}

// --- KubeRay labels removed during a burst (docs/spec.md §8) ---

// unlabelDuringBurst makes room in the burst or pre cluster, creates the Pods it misses at once and,
// the moment the first create returns (its claim still pending, before the bind settle), removes
// some of ray.io/group, ray.io/cluster and ray.io/node-type from that Pod. The labels stay off for
// some steps and are then restored (two times in three) or left off until the end of the run.
// checkUnlabeled then holds, as long as the Pod lives: its claim stays on its worker ID, no other
// Pod gets that ID (I1, checked on every step), and the operator never deletes it.
func (r *runner) unlabelDuringBurst() {
	i := burstCluster + r.rng.IntN(2)
	r.makeRoom(i, 1+r.rng.IntN(4))
	var remove []string
	for _, k := range kubeRayLabels {
		if r.rng.IntN(2) == 0 {
			remove = append(remove, k)
		}
	}
	if len(remove) == 0 {
		remove = []string{kubeRayLabels[r.rng.IntN(len(kubeRayLabels))]}
	}
	restoreAt := -1
	if r.rng.IntN(3) > 0 {
		restoreAt = r.ops + 2 + r.rng.IntN(8)
	}
	var (
		once   sync.Once
		edited *unlabeledPod
	)
	r.createMissing(i, func(p *corev1.Pod) { once.Do(func() { edited = removeLabels(p, remove) }) })
	if edited == nil {
		return
	}
	edited.restoreAt = restoreAt
	r.hostile.unlabeled++
	r.hostile.unlabeledPods = append(r.hostile.unlabeledPods, edited)
	GinkgoWriter.Printf("unlabel-burst: Pod %s (worker ID %d of slice %s) lost labels %v %v after its create (claim pending: %t); restored after op %d\n",
		edited.name, edited.id.WorkerID, edited.id.SliceName(), remove, edited.after.Round(time.Millisecond), edited.pending, restoreAt)
	r.check(false)
}

// removeLabels removes keys from the just-created Pod p, or returns nil if that failed.
func removeLabels(p *corev1.Pod, keys []string) *unlabeledPod {
	created := time.Now()
	id, ok := identity.FromPod(p)
	if !ok {
		return nil
	}
	e := &unlabeledPod{name: p.Name, uid: p.UID, token: identity.Token(p), id: id, removed: map[string]string{}}
	edited := p.DeepCopy()
	for _, k := range keys {
		if v, ok := edited.Labels[k]; ok {
			e.removed[k] = v
			delete(edited.Labels, k)
		}
	}
	if err := k8sClient.Patch(ctx, edited, client.MergeFrom(p)); err != nil {
		GinkgoWriter.Printf("unlabel-burst: removing labels of Pod %s: %v\n", p.Name, err)
		return nil
	}
	e.after = time.Since(created)
	if stored, err := listStored(ctx, k8sClient, p.Namespace); err == nil {
		e.pending = slices.ContainsFunc(stored, func(s storedSlice) bool {
			return s.name == id.SliceName() && slices.ContainsFunc(s.claims, func(c tpuv1alpha1.WorkerClaim) bool {
				return c.WorkerID == id.WorkerID && c.Token == e.token && c.PodUID == ""
			})
		})
	}
	return e
}

// tendUnlabeled restores the labels whose time has come.
func (r *runner) tendUnlabeled() { r.restoreUnlabeled(false) }

// restoreUnlabeled puts removed KubeRay labels back: those due, or all.
func (r *runner) restoreUnlabeled(all bool) {
	for _, e := range r.hostile.unlabeledPods {
		if e.restored || e.done || (!all && (e.restoreAt < 0 || r.ops < e.restoreAt)) {
			continue
		}
		e.restored = true
		p := &corev1.Pod{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: e.name}, p); err != nil || p.UID != e.uid {
			continue
		}
		patch := client.MergeFrom(p.DeepCopy())
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		maps.Copy(p.Labels, e.removed)
		if err := k8sClient.Patch(ctx, p, patch); err != nil {
			GinkgoWriter.Printf("unlabel-burst: restoring labels of Pod %s: %v\n", e.name, err)
		}
	}
}

// checkUnlabeled checks the Pods whose KubeRay labels were removed: while live, each holds a claim
// on its worker ID of its slice (pending with its token, or bound to it); once gone, no operator
// instance may have deleted it.
func (r *runner) checkUnlabeled(stored map[string]storedSlice) {
	for _, e := range r.hostile.unlabeledPods {
		if e.done {
			continue
		}
		p := &corev1.Pod{}
		err := k8sClient.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: e.name}, p)
		if apierrors.IsNotFound(err) || (err == nil && (p.UID != e.uid || !lifecycle.PodLive(p) || !r.current(p))) {
			// A stranded Pod (released, never bound, its pinned Node gone or taken: §12) is deleted
			// whatever its labels; the auditor judged that deletion on its own (judgeStrand).
			if audit.operatorDeletedLive(e.uid) && !audit.deletedStranded(e.uid) {
				r.violationf("§8, I6: an operator instance deleted Pod %s (worker ID %d of slice %s), whose KubeRay labels %v were removed right after its create (restored: %t)",
					e.name, e.id.WorkerID, e.id.SliceName(), keys(e.removed), e.restored)
			}
			e.done = true
			continue
		}
		s, ok := stored[e.id.SliceName()]
		if err != nil || e.reported || (ok && s.parseErr != nil) { // a slice that does not parse is stored.go's finding
			continue
		}
		if held, got := holdsClaim(s, ok, e.id, e.uid, e.token); !held {
			r.violationf("§8: live Pod %s (worker ID %d of slice %s), whose KubeRay labels %v were removed right after its create (restored: %t), no longer holds its claim: %s",
				e.name, e.id.WorkerID, e.id.SliceName(), keys(e.removed), e.restored, got)
			e.reported = true
		}
	}
}

// holdsClaim reports whether stored slice s (found: ok) holds worker ID id.WorkerID for the Pod with
// this UID and claim token (bound to it, or pending with its token), and else what it holds.
func holdsClaim(s storedSlice, ok bool, id identity.Identity, uid types.UID, token string) (bool, string) {
	if !ok || s.clusterUID != id.ClusterUID {
		return false, "its slice is gone"
	}
	for _, c := range s.claims {
		if c.WorkerID != id.WorkerID {
			continue
		}
		if c.PodUID == uid || (c.PodUID == "" && c.Token == token) {
			return true, ""
		}
		return false, fmt.Sprintf("worker ID %d is claimed by token %s, Pod %q", c.WorkerID, c.Token, c.PodName)
	}
	return false, fmt.Sprintf("no claim on worker ID %d", id.WorkerID)
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// makeRoom deletes Pods of cluster i (one KubeRay leaves alone), none this file watches, until it
// misses at least n.
func (r *runner) makeRoom(i, n int) {
	pods := slices.DeleteFunc(r.podsOf(i), func(p corev1.Pod) bool { return r.hostile.tracked(p.UID) })
	r.rng.Shuffle(len(pods), func(a, b int) { pods[a], pods[b] = pods[b], pods[a] })
	for k := 0; k < len(pods) && r.missing(i) < n; k++ {
		r.deleteAndWait(&pods[k])
	}
}

// --- another host count in one batch (docs/spec.md §10, §5) ---

// mixedHostCounts creates, all at once, the Pods the burst cluster misses (a fresh generation one
// time in three, else after deleting some) together with one to three Pods of its group whose
// topology gives another host count, and posts up to two forged AdmissionReviews of such Pods to
// random instances. The odd ones must be denied within denialBound with both counts in the message;
// the group's own Pods must not be denied for a host count; no slice of another host count may
// appear.
func (r *runner) mixedHostCounts() {
	i := burstCluster
	if r.rng.IntN(3) == 0 {
		was := r.clusters[i].UID
		if r.recreate(i); r.clusters[i].UID == was {
			return
		}
		r.waitForGeneration(r.clusters[i])
	} else {
		r.makeRoom(i, 2+r.rng.IntN(7))
	}
	rc := r.clusters[i]
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(rc), rc); err != nil {
		return
	}
	want := rc.Spec.WorkerGroupSpecs[0].NumOfHosts
	odd := oddTopologyPods(rc)
	if len(odd) == 0 {
		return
	}
	before := r.storedNames(rc.UID)
	type try struct {
		odd  oddPod
		inst *framework.Instance // nil: a create through the API server
		// outcome
		created *corev1.Pod
		allowed bool
		denied  bool // permanently, as §10 says
		msg     string
		took    time.Duration
	}
	var tries []*try
	for range 1 + r.rng.IntN(3) {
		tries = append(tries, &try{odd: odd[r.rng.IntN(len(odd))]})
	}
	for range r.rng.IntN(3) {
		tries = append(tries, &try{odd: odd[r.rng.IntN(len(odd))], inst: r.instances[r.rng.IntN(len(r.instances))]})
	}
	reviews := make([]*admissionv1.AdmissionReview, len(tries))
	for k, t := range tries {
		if t.inst != nil {
			reviews[k] = r.review(t.odd.pod)
		}
	}
	var (
		wg      sync.WaitGroup
		ownErrs []error
	)
	n := r.missing(i)
	wg.Go(func() { ownErrs = createAll(rc, n, nil) })
	for k, t := range tries {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, denialBound+2*time.Second)
			defer cancel()
			start := time.Now()
			if t.inst == nil {
				p := t.odd.pod.DeepCopy()
				err := k8sClient.Create(cctx, p)
				t.took = time.Since(start)
				switch {
				case err == nil:
					t.created, t.allowed = p, true
				case apierrors.IsForbidden(err):
					t.denied, t.msg = true, err.Error()
				default:
					t.msg = err.Error()
				}
				return
			}
			answer, err := env.PostAdmission(cctx, t.inst, reviews[k])
			t.took = time.Since(start)
			switch {
			case err != nil || answer.Response == nil:
				t.msg = fmt.Sprintf("not answered: %v", err)
			case answer.Response.Allowed:
				t.allowed = true
				if token := patchedToken(answer.Response.Patch); token != "" {
					r.addForgedClaim(token)
				}
			case answer.Response.Result != nil:
				t.msg = answer.Response.Result.Message
				t.denied = answer.Response.Result.Code != http.StatusTooManyRequests
			}
		})
	}
	wg.Wait()
	r.forged += len(slices.DeleteFunc(slices.Clone(tries), func(t *try) bool { return t.inst == nil }))
	for _, t := range tries {
		what := fmt.Sprintf("a Pod of %s whose topology %s gives %d hosts (its group: %d)", rc.Name,
			t.odd.pod.Spec.NodeSelector[constants.TopologyNodeSelectorKey], t.odd.hosts, want)
		if t.inst != nil {
			what = "a forged AdmissionReview for " + what
		}
		switch {
		case t.allowed:
			where := ""
			if t.created != nil {
				if id, ok := identity.FromPod(t.created); ok {
					where = fmt.Sprintf(": worker ID %d of slice %s", id.WorkerID, id.SliceName())
				}
				_ = client.IgnoreNotFound(k8sClient.Delete(ctx, t.created))
			}
			r.violationf("§10: %s was admitted in one batch with the group's own creates%s", what, where)
		case t.denied:
			r.hostile.mixedDenials++
			r.hostile.maxMixedDenial = max(r.hostile.maxMixedDenial, t.took)
			if !namesHosts(t.msg, t.odd.hosts) || !namesHosts(t.msg, want) {
				r.violationf("§10: the denial of %s does not name both host counts: %s", what, t.msg)
			}
			if t.took > denialBound {
				r.violationf("§5: %s was denied after %v, over %v", what, t.took.Round(time.Millisecond), denialBound)
			}
		case faulted(t.msg) && t.took <= denialBound:
			// The instance's own read failed on a fault this run injected: a transient denial is
			// what §5 asks for then, and the creator's retry meets the host-count denial.
			r.hostile.mixedDenials++
			r.hostile.maxMixedDenial = max(r.hostile.maxMixedDenial, t.took)
		default:
			// Refused as transient (the creator retries it for good), an error, or no answer.
			r.violationf("§10, §5: %s was not denied within %v (%v): %s", what, denialBound, t.took.Round(time.Millisecond), t.msg)
		}
	}
	for _, err := range ownErrs {
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "hosts") {
			r.violationf("§10: a Pod of %s with its group's own topology (%d hosts) was denied in one batch with Pods of another host count: %v", rc.Name, want, err)
		}
	}
	stored, err := listStored(ctx, k8sClient, r.ns)
	if err == nil {
		for _, s := range stored {
			if s.clusterUID == rc.UID && s.hosts != want && !before[s.name] {
				r.violationf("§10: TPUSliceAssignment %s of %d hosts was created for the group of %s, whose slices have %d", s.name, s.hosts, rc.Name, want)
			}
		}
	}
	GinkgoWriter.Printf("mixed-hosts: %d own creates of %s (%d refused) with %d of other host counts\n", n, rc.Name, len(ownErrs), len(tries))
	r.check(false)
}

// namesHosts reports whether a denial message names a host count ("4 hosts", not "64 hosts").
func namesHosts(msg string, hosts int32) bool {
	return regexp.MustCompile(fmt.Sprintf(`(^|[^0-9])%d hosts`, hosts)).MatchString(msg)
}

// storedNames returns the names of the stored slices of a RayCluster generation.
func (r *runner) storedNames(uid types.UID) map[string]bool {
	out := map[string]bool{}
	stored, _ := listStored(ctx, k8sClient, r.ns)
	for _, s := range stored {
		if s.clusterUID == uid {
			out[s.name] = true
		}
	}
	return out
}

// --- malformed claim tokens (docs/spec.md §3.4, §8) ---

// createMalformedToken creates, with the webhook out of the way and without ray.io/node-type (no
// webhook or cache sees it), a Pod of the pre cluster on a free worker ID with the identity the
// reference webhook gives it and a claim-token annotation holding a space or an injected line
// ("x\n1 y\n2 z"), then adds the label. The operator must adopt it within ten seconds on its own
// worker ID (an invalid token counts as none); stored.go checks that no malformed line and no
// claim with a fragment of the token is ever stored, checkMalformed that its claim never sits on
// another ID, and I1 holds on every step.
func (r *runner) createMalformedToken() {
	rc := r.clusters[preCluster]
	spots := r.freeSpots(preCluster)
	if len(spots) == 0 {
		pods := slices.DeleteFunc(r.podsOf(preCluster), func(p corev1.Pod) bool { return r.hostile.tracked(p.UID) })
		if len(pods) == 0 || !r.deleteAndWait(&pods[r.rng.IntN(len(pods))]) {
			return
		}
		if spots = r.freeSpots(preCluster); len(spots) == 0 {
			return
		}
	}
	s := spots[r.rng.IntN(len(spots))]
	n := r.rng.Uint32()
	var payload string
	var fragments []string
	if r.rng.IntN(2) == 0 {
		fragments = []string{fmt.Sprintf("a%d", n), fmt.Sprintf("b%d", n)}
		payload = fragments[0] + " " + fragments[1]
	} else {
		fragments = []string{fmt.Sprintf("x%d", n), fmt.Sprintf("y%d", n), fmt.Sprintf("z%d", n)}
		payload = fmt.Sprintf("%s\n1 %s\n2 %s", fragments[0], fragments[1], fragments[2])
	}
	r.stored.inject(payload, fragments...)
	p := handMadePod(rc, s).WithoutLabel(rayutils.RayNodeTypeLabelKey).Annotation(tpuv1alpha1.ClaimTokenAnnotation, payload).Obj()
	if err := k8sClient.Create(ctx, p); err != nil {
		GinkgoWriter.Printf("malformed-token: creating a Pod of %s: %v\n", rc.Name, err)
		return
	}
	r.bypassed[p.UID] = true
	id, _ := identity.FromPod(p)
	m := &malformedPod{name: p.Name, uid: p.UID, id: id, payload: payload}
	r.hostile.malformed++
	r.hostile.malformedPods = append(r.hostile.malformedPods, m)
	time.Sleep(time.Duration(100+r.rng.IntN(500)) * time.Millisecond)
	patch := client.MergeFrom(p.DeepCopy())
	p.Labels[rayutils.RayNodeTypeLabelKey] = string(rayv1.WorkerNode)
	if err := k8sClient.Patch(ctx, p, patch); err != nil {
		GinkgoWriter.Printf("malformed-token: labeling Pod %s: %v\n", p.Name, err)
		return
	}
	GinkgoWriter.Printf("malformed-token: Pod %s (worker ID %d of slice %s) carries claim token %q\n", p.Name, id.WorkerID, id.SliceName(), payload)
	deadline := time.Now().Add(10 * time.Second)
	for {
		stored, err := listStored(ctx, k8sClient, r.ns)
		if err == nil && slices.ContainsFunc(stored, func(s storedSlice) bool {
			return slices.ContainsFunc(s.claims, func(c tpuv1alpha1.WorkerClaim) bool { return c.PodUID == p.UID })
		}) {
			break
		}
		live := &corev1.Pod{}
		if k8sClient.Get(ctx, client.ObjectKeyFromObject(p), live) != nil || live.UID != p.UID || !lifecycle.PodLive(live) {
			break
		}
		if time.Now().After(deadline) {
			r.violationf("§3.4: Pod %s, created by hand with worker ID %d of slice %s and the malformed claim-token annotation %q, holds no claim (as stored) 10 s after it became visible",
				p.Name, id.WorkerID, id.SliceName(), payload)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.check(false)
}

// checkMalformed checks the Pods created with a malformed claim token: a claim bound to one sits on
// the worker ID of the slice its spec holds (I3), never on an ID a line of its token named.
func (r *runner) checkMalformed(stored map[string]storedSlice) {
	for _, m := range r.hostile.malformedPods {
		if m.done || m.reported {
			continue
		}
		p := &corev1.Pod{}
		err := k8sClient.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: m.name}, p)
		if apierrors.IsNotFound(err) || (err == nil && (p.UID != m.uid || !lifecycle.PodLive(p) || !r.current(p))) {
			m.done = true
			continue
		}
		for _, s := range stored {
			for _, c := range s.claims {
				if c.PodUID == m.uid && (s.name != m.id.SliceName() || c.WorkerID != m.id.WorkerID) {
					r.violationf("I3: Pod %s runs with worker ID %d of slice %s (claim token %q), but a claim on worker ID %d of slice %s is bound to it",
						m.name, m.id.WorkerID, m.id.SliceName(), m.payload, c.WorkerID, s.name)
					m.reported = true
				}
			}
		}
	}
}

// --- absurd topologies (docs/spec.md §2, §5) ---

// absurdShapes are slices far beyond --max-slice-hosts, each with a copied TPU identity (which the
// webhook strips before it admits a copy).
var absurdShapes = []struct {
	accelerator, topology string
	containers            int
}{
	{"tpu-v6e-slice", "1024x1024", 1},
	{"tpu7x", "128x128x64", 16},
}

// createAbsurdTopology creates a Pod, or posts a forged AdmissionReview to a random instance, of a
// current cluster's group with one of absurdShapes, one-chip TPU containers and a copied
// TPU_WORKER_ID and TPU_NAME. It must be denied within denialBound, the process's heap must not
// grow by absurdHeapLimit meanwhile (sampled every 20 ms), and every instance must still answer a
// review within denialBound afterwards.
func (r *runner) createAbsurdTopology() {
	rc := r.clusters[r.rng.IntN(len(r.clusters))]
	shape := absurdShapes[r.rng.IntN(len(absurdShapes))]
	inst := r.instances[r.rng.IntN(len(r.instances))]
	forged := r.rng.IntN(2) == 0
	containers := make([]corev1.Container, shape.containers)
	for c := range containers {
		containers[c] = testutil.MakeContainer(fmt.Sprintf("tpu-%d", c)).TPU(1).Obj()
	}
	pod := testutil.WorkerPodFor(rc, group).Containers(containers...).Topology(shape.accelerator, shape.topology).
		TPUIdentity(group, 0, 0).Obj()
	delete(pod.Annotations, constants.SliceTopologyAnnotation) // the subslice cluster's: the topology is the slice's own
	what := fmt.Sprintf("a Pod of %s with topology %s of %s and %d one-chip containers", rc.Name, shape.topology, shape.accelerator, shape.containers)
	var review *admissionv1.AdmissionReview
	if forged {
		what = "a forged AdmissionReview for " + what
		review = r.review(pod)
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	stop := sampleHeap()
	start := time.Now()
	var allowed, denied bool
	var msg string
	if forged {
		r.forged++
		answer, err := env.PostAdmission(cctx, inst, review)
		switch {
		case err != nil || answer.Response == nil:
			msg = fmt.Sprintf("not answered: %v", err)
		case answer.Response.Allowed:
			allowed = true
			if token := patchedToken(answer.Response.Patch); token != "" {
				r.addForgedClaim(token)
			}
		default:
			denied = true
		}
	} else {
		err := k8sClient.Create(cctx, pod)
		allowed, denied, msg = err == nil, apierrors.IsForbidden(err), fmt.Sprint(err)
		if allowed {
			_ = client.IgnoreNotFound(k8sClient.Delete(ctx, pod))
		}
	}
	took := time.Since(start)
	growth := stop()
	r.hostile.absurdHeap = max(r.hostile.absurdHeap, growth)
	GinkgoWriter.Printf("absurd-topology: %s: allowed=%t denied=%t after %v, heap +%d MiB\n", what, allowed, denied, took.Round(time.Millisecond), growth>>20)
	switch {
	case allowed:
		r.violationf("§2: %s was admitted", what)
	case !denied:
		r.violationf("§2, §5: %s was not denied within %v (%v): %s", what, denialBound, took.Round(time.Millisecond), msg)
	default:
		r.hostile.absurdDenials++
		r.hostile.maxAbsurd = max(r.hostile.maxAbsurd, took)
		if took > denialBound {
			r.violationf("§5: %s was denied after %v, over %v", what, took.Round(time.Millisecond), denialBound)
		}
	}
	if growth > absurdHeapLimit {
		r.violationf("§2: the operator's heap grew by %d MiB while %s was admitted (limit %d MiB)", growth>>20, what, absurdHeapLimit>>20)
	}
	// Every instance still answers, at once.
	probe := testutil.MakePod("probe", r.ns).Obj()
	for k, inst := range r.instances {
		pctx, cancel := context.WithTimeout(ctx, denialBound)
		answer, err := env.PostAdmission(pctx, inst, r.review(probe))
		cancel()
		if err != nil || answer.Response == nil || !answer.Response.Allowed {
			r.violationf("§5: operator instance %d did not admit a Pod that is no TPU worker within %v after %s: %v", k, denialBound, what, err)
		}
	}
}

// sampleHeap samples the process's heap every 20 ms until the returned function is called, which
// returns the largest growth over the heap at the start.
func sampleHeap() func() uint64 {
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	done, result := make(chan struct{}), make(chan uint64, 1)
	go func() {
		peak := base.HeapAlloc
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
			select {
			case <-done:
				result <- peak - base.HeapAlloc
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		return <-result
	}
}

// --- forged replica indexes (docs/spec.md §3.2) ---

// postForgedIndexes posts two to five AdmissionReviews straight to random instances for Pods of a
// current cluster carrying KubeRay's RayMultiHostIndexing labels with replica indexes 5 to 39
// beyond the replicas the RayCluster asks for (claims.DesiredReplicas: clamped by min and max). No
// TPUSliceAssignment may appear for a replica index at or beyond them.
func (r *runner) postForgedIndexes() {
	rc := r.clusters[r.rng.IntN(len(r.clusters))]
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(rc), rc); err != nil {
		return
	}
	desired, ok := claims.DesiredReplicas(rc, group)
	if !ok {
		return
	}
	hosts := rc.Spec.WorkerGroupSpecs[0].NumOfHosts
	before := r.storedNames(rc.UID)
	var indexes []int32
	for range 2 + r.rng.IntN(4) {
		replica := desired + 5 + r.rng.Int32N(35)
		host := int32(-1)
		if hosts > 1 {
			host = r.rng.Int32N(hosts)
		}
		pod := testutil.WorkerPodFor(rc, group).KubeRayIndexes(replica, fmt.Sprintf("%s-%05d", group, r.rng.IntN(100000)), host).Obj()
		inst := r.instances[r.rng.IntN(len(r.instances))]
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		answer, err := env.PostAdmission(cctx, inst, r.review(pod))
		cancel()
		if err != nil || answer.Response == nil {
			GinkgoWriter.Printf("forged-index: AdmissionReview not answered: %v\n", err)
			continue
		}
		r.forged++
		r.hostile.forgedIndexes++
		indexes = append(indexes, replica)
		if answer.Response.Allowed {
			if token := patchedToken(answer.Response.Patch); token != "" {
				r.addForgedClaim(token)
			}
		}
	}
	stored, err := listStored(ctx, k8sClient, r.ns)
	if err != nil {
		return
	}
	for _, s := range stored {
		if s.clusterUID == rc.UID && s.replica >= desired && !before[s.name] {
			r.violationf("§3.2: forged AdmissionReviews with replica indexes %v created TPUSliceAssignment %s (replica %d) for RayCluster %s, which asks for %d replicas",
				indexes, s.name, s.replica, rc.Name, desired)
		}
	}
}

// --- checks ---

// checkHostile takes stored.go's findings and runs this file's per-step checks.
func (r *runner) checkHostile() {
	found, _ := r.stored.take()
	for _, v := range found {
		r.violationf("%s", v)
	}
	if len(r.hostile.unlabeledPods) == 0 && len(r.hostile.malformedPods) == 0 {
		return
	}
	list, err := listStored(ctx, k8sClient, r.ns)
	if err != nil {
		return
	}
	byName := make(map[string]storedSlice, len(list))
	for _, s := range list {
		byName[s.name] = s
	}
	r.checkUnlabeled(byName)
	r.checkMalformed(byName)
}

// addForgedClaim records a claim a forged AdmissionReview made (checkForgedClaims).
func (r *runner) addForgedClaim(token string) {
	r.forgedMu.Lock()
	defer r.forgedMu.Unlock()
	r.forgedClaims = append(r.forgedClaims, forgedClaim{token: token, posted: time.Now()})
}

// faulted reports whether a denial's message is a transient one caused by a fault this run injected
// into an operator instance's API calls (faults.go).
func faulted(msg string) bool {
	return strings.Contains(msg, allocator.TransientNote) && strings.Contains(msg, "injected ")
}
