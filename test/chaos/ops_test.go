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
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// group is the name of every run cluster's TPU worker group.
const group = "tpu"

// replacementTimeout bounds how long a replacement may take before the run calls it refused.
const replacementTimeout = 10 * time.Second

// --- label and annotation edits (docs/spec.md §8: hints, never proof) ---

// editedPod is a Pod whose labels or claim token were edited, with the values to restore (nil:
// absent).
type editedPod struct {
	name   string
	uid    types.UID
	labels map[string]*string
	token  *string
	// tokenEdited reports whether the token annotation was touched.
	tokenEdited bool
}

// editedLabels are the labels a user or a tool may remove or rewrite on a running worker Pod.
var editedLabels = []string{tpuv1alpha1.SliceLabel, tpuv1alpha1.WorkerIDLabel, constants.ReplicaIndexLabel}

// editLabels removes or rewrites some of a running worker Pod's tpu.ray.io/slice,
// tpu.ray.io/worker-id and replicaIndex labels and its claim-token annotation, and half the time
// first restores an earlier edit. None of it may release, move or duplicate an ID: the claims check
// after every step watches the Pod's claim for as long as it lives.
func (r *runner) editLabels() {
	if len(r.edited) > 0 && r.rng.IntN(2) == 0 {
		i := r.rng.IntN(len(r.edited))
		r.restore(r.edited[i])
		r.edited = append(r.edited[:i], r.edited[i+1:]...)
	}
	pods := r.workerPods(func(p *corev1.Pod) bool { _, ok := identity.FromPod(p); return ok && !r.wasEdited(p.UID) })
	if len(pods) == 0 {
		return
	}
	p := pods[r.rng.IntN(len(pods))]
	id, _ := identity.FromPod(&p)
	patch := client.MergeFrom(p.DeepCopy())
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	e := editedPod{name: p.Name, uid: p.UID, labels: map[string]*string{}}
	rewrites := map[string]string{
		tpuv1alpha1.SliceLabel:      naming.SliceName(id.Cluster, id.Group, id.Replica+1),
		tpuv1alpha1.WorkerIDLabel:   strconv.Itoa(int(id.WorkerID) + 1),
		constants.ReplicaIndexLabel: naming.ReplicaIndexValue(id.Group, id.Replica+1),
	}
	for _, k := range editedLabels {
		if r.rng.IntN(2) == 0 {
			continue
		}
		e.labels[k] = lookup(p.Labels, k)
		if r.rng.IntN(2) == 0 {
			delete(p.Labels, k)
		} else {
			p.Labels[k] = rewrites[k]
		}
	}
	if _, ok := e.labels[tpuv1alpha1.SliceLabel]; ok {
		// The scheduler places Pods by this label (the operator's affinity): measureOnePool leaves
		// both slices out.
		r.cl.labelTouched[id.SliceName()] = true
		r.cl.labelTouched[rewrites[tpuv1alpha1.SliceLabel]] = true
	}
	if r.rng.IntN(2) == 0 || len(e.labels) == 0 {
		e.token, e.tokenEdited = lookup(p.Annotations, tpuv1alpha1.ClaimTokenAnnotation), true
		if r.rng.IntN(2) == 0 {
			delete(p.Annotations, tpuv1alpha1.ClaimTokenAnnotation)
		} else {
			p.Annotations[tpuv1alpha1.ClaimTokenAnnotation] = fmt.Sprintf("edited-%d", r.rng.Uint32())
		}
	}
	if err := k8sClient.Patch(ctx, &p, patch); err == nil {
		r.edited = append(r.edited, e)
		GinkgoWriter.Printf("labels: Pod %s (worker ID %d of %s) now has labels %v, claim token %q\n",
			p.Name, id.WorkerID, id.SliceName(), p.Labels, p.Annotations[tpuv1alpha1.ClaimTokenAnnotation])
	}
}

// restore puts an edited Pod's labels and claim token back, if the Pod still exists.
func (r *runner) restore(e editedPod) {
	p := &corev1.Pod{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: e.name}, p); err != nil || p.UID != e.uid {
		return
	}
	patch := client.MergeFrom(p.DeepCopy())
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	for k, v := range e.labels {
		set(p.Labels, k, v)
	}
	if e.tokenEdited {
		set(p.Annotations, tpuv1alpha1.ClaimTokenAnnotation, e.token)
	}
	_ = k8sClient.Patch(ctx, p, patch)
}

func (r *runner) wasEdited(uid types.UID) bool {
	for _, e := range r.edited {
		if e.uid == uid {
			return true
		}
	}
	return false
}

func lookup(m map[string]string, k string) *string {
	if v, ok := m[k]; ok {
		return &v
	}
	return nil
}

func set(m map[string]string, k string, v *string) {
	if v == nil {
		delete(m, k)
	} else {
		m[k] = *v
	}
}

// --- copied manifests (docs/spec.md §8: a token is not a claim) ---

// createCopies gets a running worker Pod, strips what the API server sets (name, UID,
// resourceVersion, status), and creates it again one to three times, as `kubectl get pod -o yaml`
// and `kubectl create -f` would. Each copy admitted must hold its own ID, not the source's, and not
// carry the source's claim token. Copies of a KubeRay-managed group are extra Pods KubeRay scales
// down again; copies into a full group are refused as transient.
func (r *runner) createCopies() {
	// A Pod whose ray.io/group or ray.io/cluster is removed (hostile_test.go) is no TPU worker to
	// the webhook, and neither is its copy, which would run with its identity.
	pods := r.workerPods(func(p *corev1.Pod) bool { _, ok := identity.FromPod(p); return ok && !r.hostile.unlabeledNow(p.UID) })
	if len(pods) == 0 {
		return
	}
	src := pods[r.rng.IntN(len(pods))]
	srcID, _ := identity.FromPod(&src)
	if i := r.clusterOf(&src); i >= kubeRayClusters && len(r.freeSpots(i)) == 0 {
		// A full group refuses every copy: free one ID of it, so that a copy may be admitted.
		for _, p := range r.podsOf(i) {
			if p.UID != src.UID {
				if k8sClient.Delete(ctx, &p) == nil {
					r.waitGone(&p)
				}
				break
			}
		}
	}
	m := src.DeepCopy()
	m.ObjectMeta = metav1.ObjectMeta{
		GenerateName: src.GenerateName, Namespace: src.Namespace,
		Labels: m.Labels, Annotations: m.Annotations, OwnerReferences: m.OwnerReferences,
	}
	if m.GenerateName == "" {
		m.GenerateName = src.Name + "-copy-"
	}
	// The test's own bypass is not part of the manifest a user would copy.
	delete(m.Labels, framework.BypassLabel)
	m.Status = corev1.PodStatus{}
	for range 1 + r.rng.IntN(3) {
		c := m.DeepCopy()
		// A copy into a full group is refused as transient, with a Retry-After that client-go
		// honors ten times: one refusal is enough here.
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := k8sClient.Create(cctx, c)
		cancel()
		if err != nil {
			continue
		}
		if id, ok := identity.FromPod(c); ok && sameSpot(id, srcID) && r.stillHolds(&src) {
			r.violationf("§8: Pod %s, created from a copy of %s's manifest, kept its worker ID %d of slice %s", c.Name, src.Name, id.WorkerID, id.SliceName())
		}
		if t := identity.Token(&src); t != "" && identity.Token(c) == t {
			r.violationf("§8: Pod %s, created from a copy of %s's manifest, carries its claim token %s", c.Name, src.Name, t)
		}
	}
}

// stillHolds reports whether src still exists, not being deleted, after a copy of it was admitted.
// A copy is one more Pod of its group, so KubeRay may scale the group down by deleting any of its
// Pods, the source among them: its ID is then free, and a later copy may claim it as a new Pod
// (docs/spec.md §8 forbids keeping a held ID, not reusing a freed one). A source deleted after
// the copy's admission is also left out, so the check errs towards silence, never a false alarm.
func (r *runner) stillHolds(src *corev1.Pod) bool {
	var p corev1.Pod
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(src), &p); err != nil {
		return !apierrors.IsNotFound(err)
	}
	return p.UID == src.UID && p.DeletionTimestamp == nil
}

// --- Pods from before the operator (docs/spec.md §3.4: adoption) ---

// spot is a worker ID of a replica.
type spot struct{ replica, id int32 }

// createPreexisting creates, with the webhook out of the way, Pods of the pre cluster that carry a
// TPU identity set by hand as the reference webhook sets it. Two times in five the cluster is first
// deleted and re-created (a new generation the operator has never admitted a Pod of), some of its
// Pods are created by hand and the rest at once through the webhook: the first admission of the
// group must adopt the hand-made Pods before it gives out an ID (the allocator, or the reconciler
// if it was first). Otherwise up to three hand-made Pods join the running generation on free IDs
// (deleting a Pod first if none is free), and the reconciler must adopt them. Either way every
// hand-made Pod must hold a bound claim within ten seconds; I1 is checked after the burst and after
// every step.
//
// The webhook is bypassed for these Pods only (framework.BypassLabel), not globally as Env.Bypass
// does: KubeRay keeps creating Pods of its clusters at any moment, and a global bypass would let
// them in without an identity.
func (r *runner) createPreexisting() {
	var created []*corev1.Pod
	if r.rng.IntN(5) < 2 {
		old := r.clusters[preCluster].UID
		if r.recreate(preCluster); r.clusters[preCluster].UID == old {
			return
		}
		spots := r.freeSpots(preCluster)
		r.rng.Shuffle(len(spots), func(i, j int) { spots[i], spots[j] = spots[j], spots[i] })
		created = r.createByHand(spots[:1+r.rng.IntN(len(spots)-1)])
		r.burst(preCluster)
	} else {
		spots := r.freeSpots(preCluster)
		if pods := r.podsOf(preCluster); len(spots) == 0 && len(pods) > 0 {
			victim := pods[r.rng.IntN(len(pods))]
			if k8sClient.Delete(ctx, &victim) != nil || !r.waitGone(&victim) {
				return
			}
			spots = r.freeSpots(preCluster)
		}
		if len(spots) == 0 {
			return
		}
		r.rng.Shuffle(len(spots), func(i, j int) { spots[i], spots[j] = spots[j], spots[i] })
		created = r.createByHand(spots[:1+r.rng.IntN(min(3, len(spots)))])
	}
	r.expectAdopted(created)
}

// freeSpots returns the worker IDs of cluster i's desired replicas that no live Pod of its current
// generation holds by its spec.
func (r *runner) freeSpots(i int) []spot {
	rc := r.clusters[i]
	g := rc.Spec.WorkerGroupSpecs[0]
	taken := map[spot]bool{}
	for _, p := range r.podsOf(i) {
		if id, ok := identity.FromPod(&p); ok {
			taken[spot{id.Replica, id.WorkerID}] = true
		}
	}
	desired, _ := claims.DesiredReplicas(rc, g.GroupName)
	var out []spot
	for replica := range desired {
		for id := range g.NumOfHosts {
			if s := (spot{replica, id}); !taken[s] {
				out = append(out, s)
			}
		}
	}
	return out
}

// createByHand creates, bypassing the webhook, a Pod of the pre cluster for each spot with the
// identity the reference webhook gives it: TPU_WORKER_ID, TPU_NAME, TPU_WORKER_HOSTNAMES,
// hostname, subdomain and the replicaIndex label, and none of this operator's labels.
func (r *runner) createByHand(spots []spot) []*corev1.Pod {
	var out []*corev1.Pod
	for _, s := range spots {
		p := handMadePod(r.clusters[preCluster], s).Obj()
		if err := k8sClient.Create(ctx, p); err == nil {
			r.bypassed[p.UID] = true
			out = append(out, p)
		}
	}
	return out
}

// handMadePod is a worker Pod of rc with the identity of spot s as the reference webhook gives it,
// labeled to pass the registered webhook endpoint unchanged.
func handMadePod(rc *rayv1.RayCluster, s spot) *testutil.PodWrapper {
	hosts := rc.Spec.WorkerGroupSpecs[0].NumOfHosts
	subdomain := naming.HeadlessServiceName(rc.Name)
	p := testutil.WorkerPodFor(rc, group).TPUIdentity(group, s.replica, s.id).
		Env(0, constants.EnvWorkerHostnames, tpuenv.WorkerHostnames(group, s.replica, hosts, subdomain)).
		Label(constants.ReplicaIndexLabel, naming.ReplicaIndexValue(group, s.replica)).
		Label(framework.BypassLabel, "true")
	p.Spec.Hostname, p.Spec.Subdomain = naming.Hostname(group, s.replica, s.id), subdomain
	return p
}

// expectAdopted waits until each of pods that is still live holds a claim bound to it.
func (r *runner) expectAdopted(pods []*corev1.Pod) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		missing := r.unbound(pods)
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, p := range missing {
				id, _ := identity.FromPod(p)
				r.violationf("§3.4: Pod %s, created with the webhook out of the way with worker ID %d of slice %s, holds no claim 10 s later",
					p.Name, id.WorkerID, id.SliceName())
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// unbound returns the live Pods among pods that no claim is bound to.
func (r *runner) unbound(pods []*corev1.Pod) []*corev1.Pod {
	list, err := r.listSlices()
	if err != nil {
		return nil
	}
	bound := map[types.UID]bool{}
	for _, s := range list.Items {
		for _, c := range s.Status.Claims {
			bound[c.PodUID] = true
		}
	}
	var out []*corev1.Pod
	for _, p := range pods {
		live := &corev1.Pod{}
		if k8sClient.Get(ctx, client.ObjectKeyFromObject(p), live) == nil && live.UID == p.UID && !bound[p.UID] {
			out = append(out, p)
		}
	}
	return out
}

// --- deletes right after creates (docs/spec.md §8: fast release) ---

// deleteAfterCreate fills the burst or pre cluster, deletes one of its Pods and creates its
// replacement, deletes that replacement the moment its create returns (its claim is still
// pending) and creates the next one. Both replacements are timed from the moment the deletion was
// visible (a Get answers NotFound) to their admission; max_replace_s reports the slowest.
func (r *runner) deleteAfterCreate() {
	i := burstCluster + r.rng.IntN(2)
	r.burst(i)
	pods := r.podsOf(i)
	if len(pods) == 0 {
		return
	}
	first := pods[r.rng.IntN(len(pods))]
	if k8sClient.Delete(ctx, &first) != nil || !r.waitGone(&first) {
		return
	}
	victim := r.replace(i)
	if victim == nil {
		return
	}
	if k8sClient.Delete(ctx, victim) != nil || !r.waitGone(victim) {
		return
	}
	r.replace(i)
}

// replace creates a Pod of cluster i, retrying refusals every 50 ms as KubeRay would, and records
// how long its admission took.
func (r *runner) replace(i int) *corev1.Pod {
	p, took, err := framework.CreateRetrying(ctx, k8sClient, testutil.WorkerPodFor(r.clusters[i], group).Obj(), replacementTimeout)
	if err != nil {
		r.violationf("§8: the replacement of a Pod of %s deleted a moment ago was not admitted within %v: %w", r.clusters[i].Name, replacementTimeout, err)
		return nil
	}
	r.replaceTimes = append(r.replaceTimes, took)
	return p
}

// waitGone waits until the API server no longer has the Pod: its deletion is visible.
func (r *runner) waitGone(p *corev1.Pod) bool {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		got := &corev1.Pod{}
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(p), got)
		if apierrors.IsNotFound(err) || (err == nil && got.UID != p.UID) {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// --- odd topologies (docs/spec.md §10: another host count is denied) ---

// createOddTopology creates a Pod of a group that has live Pods, whose topology nodeSelector
// gives another host count. It must be denied with a message naming both counts, and no Pod may
// be deleted because of it (I6, judged on every deletion).
func (r *runner) createOddTopology() {
	i, ok := r.liveGroup()
	if !ok {
		return
	}
	rc := r.clusters[i]
	pod, hosts, ok := oddTopologyPod(rc)
	if !ok {
		return
	}
	created, err := r.createSettled(pod)
	want := rc.Spec.WorkerGroupSpecs[0].NumOfHosts
	switch {
	case err == nil:
		// Legitimate only if the group's live Pods were all gone by then (KubeRay scaled down).
		if len(r.podsOf(i)) > 0 {
			r.violationf("§10: Pod %s, whose topology gives %d hosts, was admitted next to the live slices of %d hosts of %s", created.Name, hosts, want, rc.Name)
		}
		_ = k8sClient.Delete(ctx, created)
	case apierrors.IsForbidden(err) && (!strings.Contains(err.Error(), fmt.Sprintf("gives %d hosts per slice", hosts)) ||
		!strings.Contains(err.Error(), fmt.Sprintf("a slice of %d hosts", want))):
		r.violationf("§10: the denial of a Pod of %s whose topology gives %d hosts (not %d) does not name both counts: %v", rc.Name, hosts, want, err)
	case !apierrors.IsForbidden(err):
		GinkgoWriter.Printf("odd-topology Pod of %s: still refused as transient: %v\n", rc.Name, err)
	}
}

// liveGroup picks a cluster whose group has live Pods with its own topology's identity.
func (r *runner) liveGroup() (int, bool) {
	var candidates []int
	for i, rc := range r.clusters {
		hosts := rc.Spec.WorkerGroupSpecs[0].NumOfHosts
		for _, p := range r.podsOf(i) {
			if id, ok := identity.FromPod(&p); ok && id.Hosts == hosts {
				candidates = append(candidates, i)
				break
			}
		}
	}
	if len(candidates) == 0 {
		return 0, false
	}
	return candidates[r.rng.IntN(len(candidates))], true
}

// oddTopologyPod returns a worker Pod of rc's group whose topology nodeSelector gives another host
// count than the group's, and that count.
func oddTopologyPod(rc *rayv1.RayCluster) (*corev1.Pod, int32, bool) {
	pods := oddTopologyPods(rc)
	if len(pods) == 0 {
		return nil, 0, false
	}
	return pods[0].pod, pods[0].hosts, true
}

// oddPod is a worker Pod whose topology gives another host count than its group's.
type oddPod struct {
	pod   *corev1.Pod
	hosts int32
}

// oddTopologyPods returns a worker Pod of rc's group for each topology that gives another host
// count than the group's.
func oddTopologyPods(rc *rayv1.RayCluster) []oddPod {
	g := rc.Spec.WorkerGroupSpecs[0]
	accelerator := g.Template.Spec.NodeSelector[constants.AcceleratorNodeSelectorKey]
	candidates := []string{"2x2", "2x4", "4x4"}
	if strings.Count(g.Template.Spec.NodeSelector[constants.TopologyNodeSelectorKey], "x") == 2 {
		candidates = []string{"2x2x1", "2x2x2", "2x2x4"}
	}
	var out []oddPod
	for _, topo := range candidates {
		pod := testutil.WorkerPodFor(rc, group).Topology(accelerator, topo).Obj()
		if shape, err := topology.FromPod(pod.Annotations, &pod.Spec); err == nil && shape.Hosts != g.NumOfHosts {
			out = append(out, oddPod{pod: pod, hosts: shape.Hosts})
		}
	}
	return out
}

// --- stale generations (docs/spec.md §10: a deleted generation's create is denied) ---

// createStaleUID creates a Pod whose ownerReference names a deleted RayCluster generation: half the
// time one deleted earlier in the run, else the generation of a cluster it deletes and re-creates
// now. It must be denied. After a re-create it waits until every instance's cache has seen the new
// generation: a create that arrives before the operator could know of the deletion races it as
// any in-flight create does.
func (r *runner) createStaleUID() {
	var old *rayv1.RayCluster
	if len(r.deletedGenerations) > 0 && r.rng.IntN(2) == 0 {
		old = r.deletedGenerations[r.rng.IntN(len(r.deletedGenerations))]
	} else {
		i := r.rng.IntN(len(r.clusters))
		was := r.clusters[i].UID
		if r.recreate(i); r.clusters[i].UID == was {
			return
		}
		old = r.deletedGenerations[len(r.deletedGenerations)-1]
		r.waitForGeneration(r.clusters[i])
	}
	created, err := r.createSettled(testutil.WorkerPodFor(old, group).Obj())
	switch {
	case err == nil:
		id, _ := identity.FromPod(created)
		r.violationf("§10: Pod %s of deleted RayCluster generation %s (UID %s) was admitted with worker ID %d of slice %s",
			created.Name, old.Name, old.UID, id.WorkerID, id.SliceName())
	case apierrors.IsForbidden(err) && !strings.Contains(err.Error(), "has been deleted"):
		r.violationf("§10: the denial of a Pod of deleted RayCluster generation %s (UID %s) does not say so: %v", old.Name, old.UID, err)
	case !apierrors.IsForbidden(err):
		GinkgoWriter.Printf("stale-UID Pod of %s: still refused as transient: %v\n", old.Name, err)
	}
}

// waitForGeneration waits until every running instance's cache holds rc's generation.
func (r *runner) waitForGeneration(rc *rayv1.RayCluster) {
	deadline := time.Now().Add(10 * time.Second)
	for _, inst := range r.instances {
		for time.Now().Before(deadline) {
			got := &rayv1.RayCluster{}
			if inst.Manager.GetCache().Get(ctx, client.ObjectKeyFromObject(rc), got) == nil && got.UID == rc.UID {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// --- forged AdmissionReviews (docs/spec.md §10: admission only adds a claim, or denies) ---

// postForged posts one to three AdmissionReviews straight to a random webhook instance, over TLS
// with no credentials, for Pods that are never created: of an odd topology next to a live group or
// of a deleted generation (both must be denied), or plain Pods of a current cluster (each may hold
// one ID, pending, until the pending TTL; checked after every step).
func (r *runner) postForged() {
	for range 1 + r.rng.IntN(3) {
		inst := r.instances[r.rng.IntN(len(r.instances))]
		var pod *corev1.Pod
		kind := "plain"
		switch r.rng.IntN(3) {
		case 0:
			if i, ok := r.liveGroup(); ok {
				pod, _, ok = oddTopologyPod(r.clusters[i])
				kind = map[bool]string{true: "another host count", false: "plain"}[ok]
			}
		case 1:
			if len(r.deletedGenerations) > 0 {
				pod, kind = testutil.WorkerPodFor(r.deletedGenerations[r.rng.IntN(len(r.deletedGenerations))], group).Obj(), "a deleted generation"
			}
		}
		if pod == nil {
			pod, kind = testutil.WorkerPodFor(r.clusters[r.rng.IntN(len(r.clusters))], group).Obj(), "plain"
		}
		answer, err := env.PostAdmission(ctx, inst, r.review(pod))
		if err != nil || answer.Response == nil {
			GinkgoWriter.Printf("forged AdmissionReview not answered: %v\n", err)
			continue
		}
		r.forged++
		switch {
		case kind != "plain" && answer.Response.Allowed:
			r.violationf("§10: a forged AdmissionReview for a Pod of %s (%s) was allowed", pod.Labels["ray.io/cluster"], kind)
		case answer.Response.Allowed:
			if token := patchedToken(answer.Response.Patch); token != "" {
				r.forgedClaims = append(r.forgedClaims, forgedClaim{token: token, posted: time.Now()})
			}
		}
	}
}

// review is the AdmissionReview the API server would send for creating pod.
func (r *runner) review(pod *corev1.Pod) *admissionv1.AdmissionReview {
	raw, _ := json.Marshal(pod)
	return &admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: uuid.NewUUID(), Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: r.ns, Operation: admissionv1.Create,
			Object: runtime.RawExtension{Raw: raw},
		},
	}
}

// patchedToken returns the claim token a webhook answer's JSON patch sets.
func patchedToken(patch []byte) string {
	var ops []struct {
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if json.Unmarshal(patch, &ops) != nil {
		return ""
	}
	for _, op := range ops {
		switch op.Path {
		case "/metadata/annotations/" + strings.ReplaceAll(tpuv1alpha1.ClaimTokenAnnotation, "/", "~1"):
			var v string
			_ = json.Unmarshal(op.Value, &v)
			return v
		case "/metadata/annotations":
			var m map[string]string
			_ = json.Unmarshal(op.Value, &m)
			return m[tpuv1alpha1.ClaimTokenAnnotation]
		}
	}
	return ""
}

// --- helpers ---

// clusterOf returns the index of the cluster whose current generation owns p, -1 for none.
func (r *runner) clusterOf(p *corev1.Pod) int {
	ref := metav1.GetControllerOfNoCopy(p)
	for i, rc := range r.clusters {
		if ref != nil && ref.UID == rc.UID {
			return i
		}
	}
	return -1
}

// podsOf returns the live TPU worker Pods of cluster i's current generation, by their controller
// ownerReference: a Pod whose KubeRay labels were removed is still one of them.
func (r *runner) podsOf(i int) []corev1.Pod {
	uid := r.clusters[i].UID
	var pods corev1.PodList
	if err := k8sClient.List(ctx, &pods, client.InNamespace(r.ns)); err != nil {
		return nil
	}
	var out []corev1.Pod
	for j := range pods.Items {
		p := &pods.Items[j]
		if ref := metav1.GetControllerOfNoCopy(p); ref != nil && ref.UID == uid && lifecycle.PodLive(p) && topology.ChipsPerPod(&p.Spec) > 0 {
			out = append(out, *p)
		}
	}
	return out
}

// deleteAndWait deletes a Pod as a user would, finishes it as its kubelet would when it was bound,
// and waits until the deletion is visible.
func (r *runner) deleteAndWait(p *corev1.Pod) bool {
	if client.IgnoreNotFound(k8sClient.Delete(ctx, p)) != nil {
		return false
	}
	if p.Spec.NodeName != "" {
		r.finishTerminating()
	}
	return r.waitGone(p)
}

// createSettled creates pod, retrying transient refusals (and a webhook instance that is not
// answering) for a few seconds, and returns the stored Pod or the last error.
func (r *runner) createSettled(pod *corev1.Pod) (*corev1.Pod, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		p := pod.DeepCopy()
		err := k8sClient.Create(ctx, p)
		if err == nil {
			return p, nil
		}
		if transient := apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err); !transient || time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// trickle creates the Pods a burst cluster is missing (deleting some first, up to 8 missing) one
// at a time, as KubeRay does, with a pause of trickleGap (past three quarters of the instances'
// reservation window) after the first and, at random, after later ones: the hand-out after each
// pause renews the holder's reservation off the admission path while the next creates are handed
// its bridge (docs/spec.md §3.5). A third of the time an instance (the holder, a third of those
// times) is restarted right after a pause, while its renewal may be in flight.
func (r *runner) trickle() {
	i := burstCluster + r.rng.IntN(2)
	rc := r.clusters[i]
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(rc), rc); err != nil {
		return
	}
	pods := r.podsOf(i)
	for k := 0; k < len(pods) && r.missing(i) < 8; k++ {
		r.deleteAndWait(&pods[k])
	}
	n := min(r.missing(i), 8)
	restartAt := -1
	if r.rng.IntN(3) == 0 && n > 1 {
		restartAt = 1 + r.rng.IntN(n-1)
	}
	created, refused := 0, []string{}
	for k := range n {
		if k == 1 || (k > 1 && r.rng.IntN(4) == 0) {
			time.Sleep(trickleGap)
		}
		// What a refusal means is the check's concern; the line below says how many there were.
		if _, err := r.createSettled(testutil.WorkerPodFor(rc, group).Obj()); err != nil {
			refused = append(refused, err.Error())
		} else {
			created++
		}
		if k == restartAt {
			r.restartInstance(r.rng.IntN(len(r.instances)))
		}
	}
	GinkgoWriter.Printf("trickle into %s: %d missing, %d created, restart after create %d, refused: %q\n", rc.Name, n, created, restartAt, refused)
	r.check(false)
}

// trickleGap is 80 % of the instances' reservation window (a quarter of the suite's pending TTL,
// internal/operator's reservationWindow): a hand-out after it finds the block more than three
// quarters through its window, and still inside it.
const trickleGap = pendingTTL / 4 * 8 / 10
