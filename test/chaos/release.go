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
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/gate"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// "No partial binding" (docs/spec.md §12, issue 24): the operator releases a ChosenDomain slice
// as one unit. Every Pod PATCH an operator instance sends that takes the placement gate off
// (gate.ReleasePatch) is judged the moment it is sent, on a live read, before it reaches the API
// server:
//   - the domain it adds to the Pod's nodeSelector is the slice's status.domain (recorded before
//     any Pod is released);
//   - every worker ID 0..H-1 of the slice is held by a live Pod of the same RayCluster generation
//     (by its spec identity), or was until less than holderGrace ago (the runner or KubeRay may
//     have deleted it since the reconciler's read: a Pod the watch saw go, one terminating since,
//     or one whose deletion an audited actor sent while it carried that ID), unless the slice is already
//     committed to the domain (a live Pod of it bound, or ungated and selecting the domain: a
//     late Pod or a replacement joins it) or its oldest gated Pod was created more than the
//     assembly timeout ago (the bound §12 states for a slice whose Pods do not all arrive).
// So a slice never starts binding with hosts missing. The operators run with the default
// --slice-assembly-timeout.

// releaseSkew is what the assembly-timeout exception allows for the operator's clock against the
// API server's creation timestamps.
const releaseSkew = 2 * time.Second

type patchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value"`
}

// release judges an operator's Pod PATCH that takes the placement gate off, then sends it.
func (t *auditTransport) release(req *http.Request) (*http.Response, error) {
	ns, name, ok := podPath(req.URL.Path)
	if !ok || name == "" || req.Body == nil {
		return t.next.RoundTrip(req)
	}
	body, err := readBody(req)
	if err != nil {
		return nil, err
	}
	if key, domain, node, ok := releaseOf(body); ok {
		t.a.judgeRelease(req.Context(), ns, name, key, domain, node)
	}
	return t.next.RoundTrip(req)
}

// releaseOf reads a JSON patch: it is a release when it changes /spec/schedulingGates and adds a
// nodeSelector entry; key and domain are that entry, node the Node it pins the Pod to ("" for
// none: gate.PinnedNode of the affinity it adds).
func releaseOf(body []byte) (key, domain, node string, ok bool) {
	var ops []patchOp
	if json.Unmarshal(body, &ops) != nil {
		return "", "", "", false
	}
	gates := false
	pinned := &corev1.Pod{}
	const required = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"
	for _, op := range ops {
		switch {
		case op.Path == "/spec/schedulingGates" && (op.Op == "remove" || op.Op == "replace"):
			gates = true
		case op.Op == "add" && op.Path == "/spec/nodeSelector":
			var sel map[string]string
			if json.Unmarshal(op.Value, &sel) == nil && len(sel) == 1 {
				for k, v := range sel {
					key, domain = k, v
				}
			}
		case op.Op == "add" && strings.HasPrefix(op.Path, "/spec/nodeSelector/"):
			k := strings.TrimPrefix(op.Path, "/spec/nodeSelector/")
			key = strings.ReplaceAll(strings.ReplaceAll(k, "~1", "/"), "~0", "~")
			_ = json.Unmarshal(op.Value, &domain)
		case op.Op == "add" && op.Path == "/spec/affinity":
			_ = json.Unmarshal(op.Value, &pinned.Spec.Affinity)
		case op.Op == "add" && op.Path == "/spec/affinity/nodeAffinity":
			pinned.Spec.Affinity = &corev1.Affinity{}
			_ = json.Unmarshal(op.Value, &pinned.Spec.Affinity.NodeAffinity)
		case op.Op == "add" && op.Path == required:
			pinned.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}}
			_ = json.Unmarshal(op.Value, &pinned.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
		case op.Op == "add" && op.Path == required+"/nodeSelectorTerms":
			sel := &corev1.NodeSelector{}
			_ = json.Unmarshal(op.Value, &sel.NodeSelectorTerms)
			pinned.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: sel}}
		}
	}
	return key, domain, gate.PinnedNode(pinned), gates && key != ""
}

// judgeRelease judges the operator's release of Pod ns/name onto key=domain.
func (a *auditor) judgeRelease(ctx context.Context, ns, name, key, domain, node string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	pod := &corev1.Pod{}
	if err := a.reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil || !tpuenv.HasGate(pod) {
		return // gone, or no longer gated: the patch's tests make it apply nothing
	}
	id, ok := identity.FromPod(pod)
	if !ok {
		a.violatef("§12: the operator released Pod %s, which carries no TPU identity", name)
		return
	}
	var slice tpuv1alpha1.TPUSliceAssignment
	if err := a.reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: id.SliceName()}, &slice); err != nil {
		if !apierrors.IsNotFound(err) {
			a.violatef("§12: the operator released Pod %s of slice %s, which could not be read: %v", name, id.SliceName(), err)
		}
		return // deleted since (its RayCluster or namespace went): nothing left to judge against
	}
	if slice.Status.Domain != domain || slice.Spec.AffinityTopologyKey != key {
		a.violatef("§12: the operator released Pod %s of slice %s onto %s=%s, but the slice records %s=%q",
			name, slice.Name, key, domain, slice.Spec.AffinityTopologyKey, slice.Status.Domain)
		return
	}
	var pods corev1.PodList
	if err := a.reader.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		a.violatef("§12: could not judge the operator's release of Pod %s: %v", name, err)
		return
	}
	if node != "" && !a.judgePin(ctx, pod, &slice, pods.Items, node) {
		return
	}
	held := make([]bool, id.Hosts)
	var oldestGated time.Time
	for i := range pods.Items {
		p := &pods.Items[i]
		pid, ok := identity.FromPod(p)
		if !ok || pid.SliceName() != id.SliceName() || pid.ClusterUID != id.ClusterUID || pid.Hosts != id.Hosts {
			continue
		}
		if !lifecycle.PodLive(p) {
			// Deleted less than holderGrace ago: the reconciler may have seen it live.
			if d := p.DeletionTimestamp; d != nil && pid.WorkerID >= 0 && pid.WorkerID < id.Hosts &&
				time.Since(d.Add(-time.Duration(ptr.Deref(p.DeletionGracePeriodSeconds, 0))*time.Second)) < holderGrace {
				held[pid.WorkerID] = true
			}
			continue
		}
		if p.Spec.NodeName != "" || (!tpuenv.HasGate(p) && p.Spec.NodeSelector[key] == domain) {
			a.countRelease(false)
			return // committed: a late Pod or a replacement joins the slice's domain
		}
		if pid.WorkerID >= 0 && pid.WorkerID < id.Hosts {
			held[pid.WorkerID] = true
		}
		if tpuenv.HasGate(p) && (oldestGated.IsZero() || p.CreationTimestamp.Time.Before(oldestGated)) {
			oldestGated = p.CreationTimestamp.Time
		}
	}
	a.heldByRecent(id, held)
	var missing []int32
	for w, ok := range held {
		if !ok {
			missing = append(missing, int32(w)) //nolint:gosec // w < hosts, an int32.
		}
	}
	if len(missing) == 0 {
		a.countRelease(false)
		return
	}
	if a.collectionDeletedSince(ns, time.Now().Add(-holderGrace)) {
		return // a collection deletion went through the namespace: not judged
	}
	if !oldestGated.IsZero() && time.Since(oldestGated) > gate.DefaultAssemblyTimeout-releaseSkew {
		a.countRelease(true)
		return
	}
	a.violatef("§12 (no partial binding): the operator released Pod %s of slice %s onto %s=%s while worker IDs %v of its %d had no live Pod and its oldest gated Pod was created %v ago (assembly timeout %v)",
		name, slice.Name, key, domain, missing, id.Hosts, time.Since(oldestGated).Round(time.Second), gate.DefaultAssemblyTimeout)
}

// nodeGoneGrace is how long after the run deleted a Node a pin on it is not judged: the
// reconciler's Node cache may still have shown it usable.
const nodeGoneGrace = 10 * time.Second

// nodeDeleted records that the run deletes Node name now.
func (a *auditor) nodeDeleted(name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.nodesDeleted == nil {
		a.nodesDeleted = map[string]time.Time{}
	}
	a.nodesDeleted[name] = time.Now()
}

// nodeDeletedSince reports whether the run deleted Node name after since.
func (a *auditor) nodeDeletedSince(name string, since time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.nodesDeleted[name]
	return ok && at.After(since)
}

// judgePin judges the Node a release pins pod to: a Node of the slice's domain, and no other live
// Pod of the slice (same RayCluster generation) pinned to it, so that every Pod the
// operator releases has a Node of its own to bind to (docs/spec.md §12, "Pinning"). It reports
// whether the pin passed.
func (a *auditor) judgePin(ctx context.Context, pod *corev1.Pod, slice *tpuv1alpha1.TPUSliceAssignment, pods []corev1.Pod, node string) bool {
	n := &corev1.Node{}
	if err := a.reader.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
		if apierrors.IsNotFound(err) && a.nodeDeletedSince(node, time.Now().Add(-nodeGoneGrace)) {
			// Deleted (node-replace) since the reconciler read it: the Pod is stranded, and the
			// reconciler deletes it (checkPinsBind checks that it does).
			return true
		}
		a.violatef("§12 (pinning): the operator pinned Pod %s of slice %s to Node %s, which could not be read: %v", pod.Name, slice.Name, node, err)
		return false
	}
	if got := n.Labels[slice.Spec.AffinityTopologyKey]; got != slice.Status.Domain {
		a.violatef("§12 (pinning): the operator pinned Pod %s of slice %s to Node %s, which is in %s=%q, not the slice's domain %q",
			pod.Name, slice.Name, node, slice.Spec.AffinityTopologyKey, got, slice.Status.Domain)
		return false
	}
	id, _ := identity.FromPod(pod)
	for i := range pods {
		p := &pods[i]
		pid, ok := identity.FromPod(p)
		if p.UID == pod.UID || !ok || pid.SliceName() != id.SliceName() || pid.ClusterUID != id.ClusterUID || !lifecycle.PodLive(p) {
			continue
		}
		// A Pod of the slice released with the domain's selector alone (no free usable Node was
		// left for it, e.g. one of the domain's Nodes failed) may have bound to node after the
		// operator's live read: the pinned Pod is then stranded, and judgeStrand judges its
		// deletion. Only a Pod pinned to node itself (two pins on one Node) is the operator's.
		if gate.PinnedNode(p) == node && (p.Spec.NodeName == node || (p.Spec.NodeName == "" && !tpuenv.HasGate(p))) {
			a.violatef("§12 (pinning): the operator pinned Pod %s of slice %s to Node %s, which live Pod %s of the slice is pinned to",
				pod.Name, slice.Name, node, p.Name)
			return false
		}
	}
	a.mu.Lock()
	a.pins++
	a.mu.Unlock()
	return true
}

// heldByRecent marks in held the worker IDs of id's slice (same RayCluster generation and host
// count) that a Pod held until less than holderGrace ago: one the watch saw stop being live, or
// one whose deletion was sent (by any audited actor) while it carried that identity. The
// reconciler may have seen such a Pod live.
func (a *auditor) heldByRecent(id identity.Identity, held []bool) {
	same := func(o identity.Identity) bool {
		return o.SliceName() == id.SliceName() && o.ClusterUID == id.ClusterUID && o.Hosts == id.Hosts &&
			o.WorkerID >= 0 && o.WorkerID < id.Hosts
	}
	since := time.Now().Add(-holderGrace)
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, g := range a.gone {
		if g.at.After(since) && same(g.id) {
			held[g.id.WorkerID] = true
		}
	}
	for _, ds := range a.single {
		for _, d := range ds {
			if d.at.After(since) && same(d.id) {
				held[d.id.WorkerID] = true
			}
		}
	}
}

// collectionDeletedSince reports whether a collection deletion of Pods of ns was in flight or
// ended after since.
func (a *auditor) collectionDeletedSince(ns string, since time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.collections {
		if c.namespace == ns && (c.end.IsZero() || c.end.After(since)) {
			return true
		}
	}
	return false
}

func (a *auditor) countRelease(timedOut bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.releases++
	if timedOut {
		a.timedOutReleases++
	}
}

// releaseCounts returns the releases judged, those allowed by the assembly timeout, and the pins
// judged.
func (a *auditor) releaseCounts() (judged, timedOut, pins int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.releases, a.timedOutReleases, a.pins
}
