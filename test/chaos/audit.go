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
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/gate"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// I6 (docs/spec.md §9): the operator deletes a running Pod only when another live Pod of its slice
// holds its worker ID, and an unbound one also when it is stranded where it is pinned (§12). Every client that may delete Pods in the run (the runner, which also stands
// in for the garbage collector on a bare API server; KubeRay; each operator instance) talks to the API server through an
// audit transport that records each Pod DELETE it sends, with who sent it. An operator deletion is
// judged the moment it is sent, on a live read: the Pod must be live and carry a TPU identity, and
// another live Pod of the same RayCluster generation, slice (TPU_NAME) and host count must hold its
// worker ID by its spec (or have held it less than holderGrace ago, when the runner or KubeRay
// deleted the holder meanwhile). A watch on the run's Pods then attributes every DELETED event to
// one of the recorded deletions, or, on the local cluster, to the garbage collector (a Pod of a
// RayCluster generation the run deleted) or the namespace controller (a namespace the run deleted):
// a Pod that disappears otherwise was deleted by something the run does not know, which is also a
// violation.

// Actors that delete Pods. On the local cluster kube-controller-manager also does, unaudited: its
// garbage collector deletes the Pods of a RayCluster generation the run deleted, its namespace
// controller those of a namespace the run deleted (and kwok removes the Pods someone deleted once
// they terminated, a deletion already on record).
const (
	actorRunner    = "runner"
	actorKubeRay   = "kuberay"
	actorOperator  = "operator"
	actorGC        = "garbage-collector"
	actorNamespace = "namespace-controller"
)

// holderGrace is how long after its deletion a Pod still counts as holding its worker ID when an
// operator deletion is judged: the operator decided on a live read made a moment before the
// request, and another actor may have deleted the holder in between.
const holderGrace = 2 * time.Second

// collectionGrace is how long after a collection delete returned its Pods' DELETED events may
// still arrive.
const collectionGrace = 5 * time.Second

// auditor records and judges Pod deletions. One serves the whole suite; the runner of each gate
// setting watches its own namespace.
type auditor struct {
	// reader reads live state, through no audited transport.
	reader client.Reader

	mu sync.Mutex
	// single are the single-Pod deletions sent, by namespace/name.
	single map[string][]deletion
	// collections are the collection deletions sent.
	collections []collectionDeletion
	// gone are the Pods that stopped being live (deleted, terminating or finished), with the
	// identity they carried, as the watch saw them.
	gone []gonePod
	// violations are I6 violations not yet taken by the runner.
	violations []string
	// operatorDeleted counts the Pods an operator instance deleted (the API server answered 2xx).
	operatorDeleted int
	// judged counts the operator deletions judged and found to be true repairs.
	judged int
	// liveDeleted are the Pods (by UID) an operator instance sent a deletion for while they were
	// live, repairs included.
	liveDeleted map[types.UID]bool
	// strandDeleted are those of liveDeleted judged true deletions of stranded Pods (judgeStrand):
	// docs/spec.md §12 deletes such a Pod whatever its labels.
	strandDeleted map[types.UID]bool
	// releases counts the operator's releases of gated Pods judged (judgeRelease), and
	// timedOutReleases those of a slice missing IDs whose assembly timeout had passed.
	releases, timedOutReleases int
	// pins counts the releases whose pin on a Node was judged (judgePin) and passed; strands the
	// operator's deletions of stranded Pods judged true (judgeStrand).
	pins, strands int
	// nodesDeleted are the Nodes the run deleted (node-replace), with when.
	nodesDeleted map[string]time.Time
	// ownersGone are the RayCluster generations (UIDs) the run deleted and left to the garbage
	// collector; namespacesGone the namespaces it deleted.
	ownersGone     map[types.UID]bool
	namespacesGone map[string]bool
	// capacityDeleted counts the operator's deletions of its own capacity Pods (docs/spec.md §12,
	// "Capacity"): they hold no worker ID and are deleted once their slice is released.
	capacityDeleted int
	// logf writes to the run's history, when set: each strand judged and why, so that a
	// TPUPodStranded Event can be read against the Node's state at the deletion.
	logf func(format string, args ...any)
}

type deletion struct {
	actor string
	uid   types.UID // the precondition, when the request had one
	at    time.Time
	// id is the TPU identity the Pod carried when the deletion was sent (a live read), if any:
	// the release check (release.go) counts it as held for holderGrace.
	id identity.Identity
}

type collectionDeletion struct {
	actor     string
	namespace string
	selector  labels.Selector
	start     time.Time
	end       time.Time // zero while in flight
}

type gonePod struct {
	uid types.UID
	id  identity.Identity
	at  time.Time
	// node is the Node the Pod was bound to, chips the google.com/tpu it requested.
	node  string
	chips int64
}

func newAuditor(reader client.Reader) *auditor {
	return &auditor{reader: reader, single: map[string][]deletion{}, liveDeleted: map[types.UID]bool{}, strandDeleted: map[types.UID]bool{},
		ownersGone: map[types.UID]bool{}, namespacesGone: map[string]bool{}}
}

// ownerDeleted records that the run deleted a RayCluster generation and left its Pods to the
// garbage collector.
func (a *auditor) ownerDeleted(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ownersGone[uid] = true
}

// namespaceDeleted records that the run deleted a namespace and left it to the namespace
// controller.
func (a *auditor) namespaceDeleted(ns string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.namespacesGone[ns] = true
}

// wrap returns cfg with every request of actor going through the audit transport.
func (a *auditor) wrap(cfg *rest.Config, actor string) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &auditTransport{next: rt, a: a, actor: actor} })
	return out
}

type auditTransport struct {
	next  http.RoundTripper
	a     *auditor
	actor string
}

func (t *auditTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPatch && t.actor == actorOperator {
		return t.release(req)
	}
	if req.Method != http.MethodDelete {
		return t.next.RoundTrip(req)
	}
	ns, name, ok := podPath(req.URL.Path)
	if !ok {
		return t.next.RoundTrip(req)
	}
	if name == "" {
		return t.collection(req, ns)
	}
	var uid types.UID
	if req.Body != nil {
		body, err := readBody(req)
		if err != nil {
			return nil, err
		}
		var opts metav1.DeleteOptions
		if json.Unmarshal(body, &opts) == nil && opts.Preconditions != nil && opts.Preconditions.UID != nil {
			uid = *opts.Preconditions.UID
		}
	}
	if t.actor == actorOperator {
		t.a.judge(req.Context(), ns, name, uid)
	}
	d := deletion{actor: t.actor, uid: uid, at: time.Now()}
	var pod corev1.Pod
	if t.a.reader.Get(req.Context(), client.ObjectKey{Namespace: ns, Name: name}, &pod) == nil && (uid == "" || pod.UID == uid) {
		d.id, _ = identity.FromPod(&pod)
	}
	t.a.mu.Lock()
	key := ns + "/" + name
	t.a.single[key] = append(t.a.single[key], d)
	t.a.mu.Unlock()
	resp, err := t.next.RoundTrip(req)
	if err == nil && t.actor == actorOperator && resp.StatusCode/100 == 2 {
		t.a.mu.Lock()
		t.a.operatorDeleted++
		t.a.mu.Unlock()
	}
	return resp, err
}

// readBody reads req's body and leaves it readable again for the request's transport.
func readBody(req *http.Request) ([]byte, error) {
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return body, nil
}

func (t *auditTransport) collection(req *http.Request, ns string) (*http.Response, error) {
	sel, err := labels.Parse(req.URL.Query().Get("labelSelector"))
	if err != nil {
		sel = labels.Everything()
	}
	t.a.mu.Lock()
	if t.actor == actorOperator {
		t.a.violations = append(t.a.violations, fmt.Sprintf("I6: an operator instance deleted a collection of Pods in %s (selector %q)", ns, sel))
	}
	i := len(t.a.collections)
	t.a.collections = append(t.a.collections, collectionDeletion{actor: t.actor, namespace: ns, selector: sel, start: time.Now()})
	t.a.mu.Unlock()
	resp, err := t.next.RoundTrip(req)
	t.a.mu.Lock()
	t.a.collections[i].end = time.Now()
	t.a.mu.Unlock()
	return resp, err
}

// podPath parses /api/v1/namespaces/<ns>/pods[/<name>]; name is empty for a collection.
func podPath(path string) (ns, name string, ok bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) < 5 || parts[0] != "api" || parts[1] != "v1" || parts[2] != "namespaces" || parts[4] != "pods" {
		return "", "", false
	}
	switch len(parts) {
	case 5:
		return parts[3], "", true
	case 6:
		return parts[3], parts[5], true
	}
	return "", "", false // a subresource
}

// judge decides, on a live read, whether the operator's deletion of Pod ns/name (precondition uid)
// is the repair docs/spec.md §8 allows, and records a violation when it is not.
func (a *auditor) judge(ctx context.Context, ns, name string, uid types.UID) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	pod := &corev1.Pod{}
	if err := a.reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil || (uid != "" && pod.UID != uid) {
		return // gone already, or another Pod of that name: the request deletes nothing running
	}
	if !lifecycle.PodLive(pod) {
		return
	}
	if capacityPod(pod) {
		// The operator's own capacity Pod, deleted once its slice was released (§12, "Capacity").
		a.mu.Lock()
		a.capacityDeleted++
		a.mu.Unlock()
		return
	}
	a.mu.Lock()
	a.liveDeleted[pod.UID] = true
	a.mu.Unlock()
	id, ok := identity.FromPod(pod)
	if !ok {
		a.violatef("I6: the operator deleted live Pod %s, which carries no TPU identity", name)
		return
	}
	if node := gate.PinnedNode(pod); node != "" && pod.Spec.NodeName == "" && !tpuenv.HasGate(pod) {
		a.judgeStrand(ctx, pod, id, node)
		return
	}
	var pods corev1.PodList
	if err := a.reader.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		a.violatef("I6: could not judge the operator's deletion of Pod %s: %v", name, err)
		return
	}
	for i := range pods.Items {
		if h := &pods.Items[i]; h.UID != pod.UID && lifecycle.PodLive(h) && holds(h, id) {
			a.mu.Lock()
			a.judged++
			a.mu.Unlock()
			return
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, g := range a.gone {
		if g.uid != pod.UID && sameSpot(g.id, id) && time.Since(g.at) < holderGrace {
			a.judged++
			return
		}
	}
	a.violations = append(a.violations, fmt.Sprintf(
		"I6: the operator deleted live Pod %s (worker ID %d of slice %s, %d hosts, RayCluster UID %s) although no other live Pod of its slice holds that ID",
		name, id.WorkerID, id.SliceName(), id.Hosts, id.ClusterUID))
}

// judgeStrand judges the operator's deletion of a live Pod that is released, unbound and pinned
// to node (docs/spec.md §12, "Stranded Pods"; I6): "no Pod deleted by placement while its slice
// could still fit" there. The Node must be gone (not found, being deleted, or deleted by the run
// less than nodeGoneGrace ago), or no longer carry a label the Pod's nodeSelector requires
// (relabelled out of the domain), or the Pods bound to it (live, or gone less than holderGrace
// ago; of any kind, but for the slice's own capacity Pods, which the operator counts as its
// slice's) must leave it fewer TPU chips than the Pod requests. Each judgement goes to the run's
// history with the Node's state.
func (a *auditor) judgeStrand(ctx context.Context, pod *corev1.Pod, id identity.Identity, node string) {
	n := &corev1.Node{}
	switch err := a.reader.Get(ctx, client.ObjectKey{Name: node}, n); {
	case apierrors.IsNotFound(err):
		a.countStrand(pod, node, "the Node is not found")
		return
	case err != nil:
		a.violatef("I6: could not judge the operator's deletion of stranded Pod %s: %v", pod.Name, err)
		return
	case n.DeletionTimestamp != nil || a.nodeDeletedSince(node, time.Now().Add(-nodeGoneGrace)):
		a.countStrand(pod, node, "the Node is being deleted, or was deleted and created again")
		return
	}
	for k, v := range pod.Spec.NodeSelector {
		if got, ok := n.Labels[k]; !ok || got != v {
			a.countStrand(pod, node, fmt.Sprintf("the Node's %s is %q, the Pod selects %q", k, got, v))
			return
		}
	}
	var bound corev1.PodList
	if err := a.reader.List(ctx, &bound, client.MatchingFields{"spec.nodeName": node}); err != nil {
		a.violatef("I6: could not judge the operator's deletion of stranded Pod %s: %v", pod.Name, err)
		return
	}
	var used int64
	var holders []string
	for i := range bound.Items {
		q := &bound.Items[i]
		if q.UID == pod.UID || !lifecycle.PodLive(q) || (q.Namespace == pod.Namespace && capacityPod(q) && q.Labels[tpuv1alpha1.CapacityForLabel] == id.SliceName()) {
			continue
		}
		if c := gate.PodChips(q); c > 0 {
			used += c
			holders = append(holders, fmt.Sprintf("%s/%s (%d)", q.Namespace, q.Name, c))
		}
	}
	a.mu.Lock()
	for _, g := range a.gone {
		if g.node == node && g.uid != pod.UID && time.Since(g.at) < holderGrace && g.chips > 0 {
			used += g.chips
			holders = append(holders, fmt.Sprintf("%s, gone %v ago (%d)", g.uid, time.Since(g.at).Round(time.Millisecond), g.chips))
		}
	}
	a.mu.Unlock()
	var alloc int64
	if q, ok := n.Status.Allocatable[constants.TPUResourceName]; ok {
		alloc = q.Value()
	}
	if used > 0 && alloc-used < gate.PodChips(pod) {
		a.countStrand(pod, node, fmt.Sprintf("%d of its %d TPU chips taken by %v, the Pod requests %d", used, alloc, holders, gate.PodChips(pod)))
		return
	}
	a.violatef("I6: the operator deleted live Pod %s (worker ID %d of slice %s) as stranded on Node %s, which exists with the labels the Pod selects and %d of its %d TPU chips free for its %d (bound there: %v)",
		pod.Name, id.WorkerID, id.SliceName(), node, alloc-used, alloc, gate.PodChips(pod), holders)
}

// capacityPod reports whether p is a capacity Pod of the operator's: labeled with the slice it
// is for, controlled by a TPUSliceAssignment, and without a TPU identity.
func capacityPod(p *corev1.Pod) bool {
	_, labeled := p.Labels[tpuv1alpha1.CapacityForLabel]
	ref := metav1.GetControllerOfNoCopy(p)
	_, worker := identity.FromPod(p)
	return labeled && ref != nil && ref.Kind == sliceKind && !worker
}

// sliceKind is the kind of the operator's TPUSliceAssignments.
const sliceKind = "TPUSliceAssignment"

// countStrand records the deletion of pod, pinned to node, as a true strand, and why.
func (a *auditor) countStrand(pod *corev1.Pod, node, why string) {
	a.mu.Lock()
	a.strands++
	a.strandDeleted[pod.UID] = true
	logf := a.logf
	a.mu.Unlock()
	if logf != nil {
		logf("strand judged: the operator deletes Pod %s pinned to Node %s: %s\n", pod.Name, node, why)
	}
}

// capacityDeletions returns the operator's deletions of its capacity Pods.
func (a *auditor) capacityDeletions() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.capacityDeleted
}

// strandCount returns the operator's deletions of stranded Pods judged true.
func (a *auditor) strandCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.strands
}

// holds reports whether Pod h's spec holds worker ID id.WorkerID of the same slice as id: same
// RayCluster generation, TPU_NAME and host count.
func holds(h *corev1.Pod, id identity.Identity) bool {
	hid, ok := identity.FromPod(h)
	return ok && sameSpot(hid, id)
}

func sameSpot(a, b identity.Identity) bool {
	return a.Cluster == b.Cluster && a.ClusterUID == b.ClusterUID && a.Group == b.Group && a.Replica == b.Replica &&
		a.WorkerID == b.WorkerID && a.Hosts == b.Hosts && a.Hosts > 0
}

func (a *auditor) violatef(format string, args ...any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.violations = append(a.violations, fmt.Sprintf(format, args...))
}

// takeViolations returns the violations recorded since the last call.
func (a *auditor) takeViolations() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.violations
	a.violations = nil
	return out
}

// counts returns the Pods the operator deleted and how many of its deletions were judged repairs.
func (a *auditor) counts() (deleted, judged int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.operatorDeleted, a.judged
}

// deletedStranded reports whether the operator's deletion of the Pod with this UID was judged a true
// deletion of a stranded Pod (judgeStrand). The judgement is made before the request is sent, so
// it is known once the Pod is gone.
func (a *auditor) deletedStranded(uid types.UID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.strandDeleted[uid]
}

// operatorDeletedLive reports whether an operator instance sent a deletion of the Pod with this UID
// while it was live, whether or not the deletion was judged a repair.
func (a *auditor) operatorDeletedLive(uid types.UID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.liveDeleted[uid]
}

// attribute finds the recorded deletion of a Pod whose DELETED event the watch saw.
func (a *auditor) attribute(pod *corev1.Pod) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, d := range a.single[pod.Namespace+"/"+pod.Name] {
		if d.uid == "" || d.uid == pod.UID {
			return d.actor, true
		}
	}
	for _, c := range a.collections {
		if c.namespace == pod.Namespace && c.selector.Matches(labels.Set(pod.Labels)) &&
			(c.end.IsZero() || time.Since(c.end) < collectionGrace) {
			return c.actor, true
		}
	}
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil && a.ownersGone[ref.UID] {
		return actorGC, true
	}
	if a.namespacesGone[pod.Namespace] {
		return actorNamespace, true
	}
	return "", false
}

// collectedByController reports whether kube-controller-manager deleted a Pod the run's actors
// did not: a capacity Pod whose slice is gone (the garbage collector), or a Pod bound to a Node
// that is gone (the Pod garbage collector; the stand-in autoscaler's scale-down deletes a Node it
// found idle, and a Pod may have bound to it between its read and the deletion).
func (a *auditor) collectedByController(pod *corev1.Pod) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if capacityPod(pod) {
		ref := metav1.GetControllerOfNoCopy(pod)
		var s tpuv1alpha1.TPUSliceAssignment
		err := a.reader.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: ref.Name}, &s)
		if apierrors.IsNotFound(err) || (err == nil && (s.UID != ref.UID || s.DeletionTimestamp != nil)) {
			return true
		}
	}
	if pod.Spec.NodeName != "" {
		if err := a.reader.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, &corev1.Node{}); apierrors.IsNotFound(err) {
			a.mu.Lock()
			logf := a.logf
			a.mu.Unlock()
			if logf != nil {
				logf("audit: Pod %s, bound to Node %s, which is gone, was deleted by the Pod garbage collector\n", pod.Name, pod.Spec.NodeName)
			}
			return true
		}
	}
	return false
}

// watchNamespace watches the namespace's Pods until ctx ends: it records the Pods that stop being
// live (for judging later deletions) and attributes every deletion. It returns once the watch runs.
func (a *auditor) watchNamespace(ctx context.Context, wc client.WithWatch, ns string) error {
	w, err := wc.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns))
	if err != nil {
		return err
	}
	go func() {
		rv := ""
		for {
			for ev := range w.ResultChan() {
				pod, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				rv = pod.ResourceVersion
				a.observe(ev.Type, pod)
			}
			if ctx.Err() != nil {
				return
			}
			// The server ended the watch: resume where it stopped.
			for {
				w, err = wc.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
				if err == nil || ctx.Err() != nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if ctx.Err() != nil {
				return
			}
		}
	}()
	return nil
}

func (a *auditor) observe(t watch.EventType, pod *corev1.Pod) {
	if t != watch.Deleted && lifecycle.PodLive(pod) {
		return
	}
	if id, ok := identity.FromPod(pod); ok || pod.Spec.NodeName != "" {
		// A Pod of any kind bound to a Node held chips there (judgeStrand); only a worker's
		// identity makes it a holder of its ID (judge).
		a.mu.Lock()
		a.gone = append(a.gone, gonePod{uid: pod.UID, id: id, at: time.Now(), node: pod.Spec.NodeName, chips: gate.PodChips(pod)})
		// Keep only what a judgment can still use.
		for len(a.gone) > 0 && time.Since(a.gone[0].at) > time.Minute {
			a.gone = a.gone[1:]
		}
		a.mu.Unlock()
	}
	if t != watch.Deleted {
		return
	}
	if _, ok := a.attribute(pod); !ok && !a.collectedByController(pod) {
		id, _ := identity.FromPod(pod)
		a.violatef("I6: Pod %s (worker ID %d of slice %s) was deleted, and neither the runner, KubeRay nor an operator instance sent that deletion",
			pod.Name, id.WorkerID, id.SliceName())
	}
}
