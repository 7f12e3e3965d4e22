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

package controllers

// The fake API server of the model-based test (model_test.go): one controller-runtime fake client
// holds the truth; every write to it is logged, per kind, as the object's state right after the
// write (a watch stream). The operator's "cache" client serves Pods and TPUSliceAssignments from a
// view that has applied only a prefix of that stream, Sieve-style: the model delivers events one at
// a time, all at once, or drops them (a relist that jumps to the end), and the Pod view keeps only
// the Pods the operator's label selector selects (internal/operator.CacheOptions), so a Pod whose
// KubeRay labels are removed leaves it as if deleted, and its DELETED event records a tombstone.
// Writes through the cache client and the live reader go to the truth.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/slicectrl"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tombstones"
)

// watchEvent is an object's state after a write; nil obj is a deletion.
type watchEvent struct {
	key types.NamespacedName
	obj client.Object
}

// view is what the cache has applied of one kind's event stream.
type view struct {
	log  []watchEvent
	pos  int
	objs map[types.NamespacedName]client.Object
	// selects reports whether the cache keeps an object (its label selector).
	selects func(client.Object) bool
}

// world is the fake API server and the operator's views of it.
type world struct {
	base client.WithWatch // the truth, unlogged

	mu     sync.Mutex
	pods   *view
	slices *view
	// tombstones receive the DELETED events of the Pod view (the current operator's tombstones).
	tombstones *tombstones.Tombstones
	// violations are invariant breaches seen inside an API call (I6).
	violations []string
	// handMade are the Pods a user created past the webhook with a copied reserved token: the
	// operator never deletes an admitted Pod in favor of one (docs/spec.md §8).
	handMade map[string]bool
	// unsealed are the hand-made Pods whose copied token a user edited since: removed, fresh,
	// malformed or another Pod's. The promise above is for a Pod "(its annotation a seal)"
	// (docs/spec.md §8); one without is a Pod made past the webhook with a token of the user's
	// choosing, which binding by spec may prefer (a Pod whose annotation was edited is still found).
	unsealed map[string]bool
	// handDeleted are the slices a user deleted by hand: with them went the record of which Pod
	// each ID was handed to, so the check above is not made for their IDs.
	handDeleted map[string]bool
	// deletions name the Pods the operator deleted, for the history.
	deletions []string
	// corrupt are the slices whose stored status holds a line that does not parse (written by hand,
	// an older version or a bug), until a status write of the operator replaces it. The fake client
	// stores typed objects, so every read of such a slice is given what the lenient decoder makes of
	// the stored string: the valid lines as claims, the bad one in MalformedLines.
	corrupt map[types.NamespacedName]corruption
	// faults are how the next writes of the operator to TPUSliceAssignments (create, status update
	// or patch) fail, in order (faultWrites).
	faults []writeFault
	// hold, when set, holds every status update of the operator to a TPUSliceAssignment in flight,
	// unapplied, until it is closed (holdWrites); held counts the writes it holds.
	hold chan struct{}
	held int
}

// gateKey carries, in the context of a burst's claims, a gate that holds their cached Lists of
// TPUSliceAssignments until it is closed (admitAll): one per webhook replica, so that the
// replicas' batches run one after the other, in a fixed order, and a history replays the same.
type gateKey struct{}

func withGate(ctx context.Context, gate chan struct{}) context.Context {
	return context.WithValue(ctx, gateKey{}, gate)
}

// notHeldKey marks the context of a call whose writes a hold lets through: the model's reconciles,
// which it runs to completion within a step.
type notHeldKey struct{}

func notHeld(ctx context.Context) context.Context { return context.WithValue(ctx, notHeldKey{}, true) }

// waitHold blocks an operator's status write while a hold is set (holdWrites), counting it.
func (w *world) waitHold(ctx context.Context, operator bool, obj client.Object) {
	if _, ok := obj.(*tpuv1alpha1.TPUSliceAssignment); !ok || !operator || ctx.Value(notHeldKey{}) != nil {
		return
	}
	w.mu.Lock()
	hold := w.hold
	if hold != nil {
		w.held++
	}
	w.mu.Unlock()
	if hold != nil {
		<-hold
	}
}

// writeFault is how the API server answers a faulted write.
type writeFault int

const (
	// faultRefused: the write is not applied and fails (an API server that answers 500).
	faultRefused writeFault = iota
	// faultLost: the write is applied, and its answer lost: the writer sees a timeout and keeps
	// the object it sent, as a client that never read the response does.
	faultLost
)

func (f writeFault) String() string {
	return map[writeFault]string{faultRefused: "refused", faultLost: "applied, answer lost"}[f]
}

// nextFault takes the fault of a write of obj, when it is the operator's (operator) write to a
// slice and a fault is armed.
func (w *world) nextFault(operator bool, obj client.Object) (writeFault, bool) {
	if _, ok := obj.(*tpuv1alpha1.TPUSliceAssignment); !ok || !operator {
		return 0, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.faults) == 0 {
		return 0, false
	}
	f := w.faults[0]
	w.faults = w.faults[1:]
	return f, true
}

// faultsFired counts the faults the operator's writes met, by kind, over all histories.
var faultsFired [faultLost + 1]atomic.Int64

// faulted runs the write of obj under fault f: refused, or applied with its answer lost (obj
// keeps what was sent).
func faulted(f writeFault, obj client.Object, write func() error) error {
	faultsFired[f].Add(1)
	if f == faultRefused {
		return apierrors.NewInternalError(errors.New("model: the write was refused"))
	}
	sent, _ := obj.DeepCopyObject().(client.Object)
	if err := write(); err != nil {
		return err
	}
	if err := copyInto(sent, obj); err != nil {
		return err
	}
	return apierrors.NewTimeoutError("model: the write was applied and its answer lost", 1)
}

// corruption is one malformed stored line of a slice.
type corruption struct {
	// id is the worker ID whose claim line was overwritten by the bad line, -1 for an extra line.
	id   int32
	line string
}

// decorate gives obj, a slice read by the operator, what decoding its stored string would give:
// a corrupted slice loses the claim its bad line replaced and reports the line. w.mu is held.
func (w *world) decorate(obj client.Object) {
	slice, ok := obj.(*tpuv1alpha1.TPUSliceAssignment)
	if !ok {
		return
	}
	bad, ok := w.corrupt[client.ObjectKeyFromObject(slice)]
	if !ok {
		return
	}
	slice.Status.Claims = slices.DeleteFunc(slice.Status.Claims, func(c tpuv1alpha1.WorkerClaim) bool { return c.WorkerID == bad.id })
	slice.Status.MalformedLines = append(slice.Status.MalformedLines, "claims line 1: "+strconv.Quote(bad.line)+": want <workerID> <token>")
}

// written forgets the corruption of a slice the operator wrote: its status is a new string now.
func (w *world) written(obj client.Object) {
	if _, ok := obj.(*tpuv1alpha1.TPUSliceAssignment); ok {
		w.mu.Lock()
		delete(w.corrupt, client.ObjectKeyFromObject(obj))
		w.mu.Unlock()
	}
}

// workerPodSelector is the operator's Pod cache selector (internal/operator.CacheOptions): worker
// Pods that carry ray.io/cluster and ray.io/group.
func workerPodSelector(obj client.Object) bool {
	l := obj.GetLabels()
	_, hasCluster := l[rayutils.RayClusterLabelKey]
	_, hasGroup := l[rayutils.RayNodeGroupLabelKey]
	return l[rayutils.RayNodeTypeLabelKey] == string(rayv1.WorkerNode) && hasCluster && hasGroup
}

func newWorld(objs ...client.Object) *world {
	// A tracker without managed fields: the operator writes no apply patches, and the fake's
	// field-managed tracker builds a REST mapper of the whole scheme on every write, which took
	// half of the model's run.
	scheme := testutil.Scheme()
	tracker := clienttesting.NewObjectTracker(scheme, serializer.NewCodecFactory(scheme).UniversalDecoder())
	w := &world{
		// Resource versions from one counter, as etcd's revision: a slice deleted and created again
		// never has a version of its former self (the fake's default restarts at 1 per object, and a
		// write planned on the deleted slice then landed on the new one).
		base: testutil.NewClientBuilder().WithScheme(scheme).WithObjectTracker(tracker).
			WithObjects(objs...).WithGlobalResourceVersionCounter().Build(),
		pods:     &view{objs: map[types.NamespacedName]client.Object{}, selects: workerPodSelector},
		slices:   &view{objs: map[types.NamespacedName]client.Object{}, selects: func(client.Object) bool { return true }},
		corrupt:  map[types.NamespacedName]corruption{},
		handMade: map[string]bool{}, unsealed: map[string]bool{}, handDeleted: map[string]bool{},
	}
	return w
}

// viewOf returns the view of obj's kind, nil for kinds the cache serves from the truth.
func (w *world) viewOf(obj any) *view {
	switch obj.(type) {
	case *corev1.Pod, *corev1.PodList:
		return w.pods
	case *tpuv1alpha1.TPUSliceAssignment, *tpuv1alpha1.TPUSliceAssignmentList:
		return w.slices
	}
	return nil
}

// record appends obj's state after a write to its kind's stream.
func (w *world) record(ctx context.Context, obj client.Object) {
	v := w.viewOf(obj)
	if v == nil {
		return
	}
	key := client.ObjectKeyFromObject(obj)
	fresh, _ := obj.DeepCopyObject().(client.Object)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.base.Get(ctx, key, fresh); err != nil {
		fresh = nil
	}
	v.log = append(v.log, watchEvent{key: key, obj: fresh})
}

// writer returns a client over the truth that logs every write. When operator is set, it is the
// operator's: every Pod deletion is checked against I6 first, and the UID precondition is enforced.
func (w *world) writer(operator bool) client.WithWatch {
	funcs := interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if f, ok := w.nextFault(operator, obj); ok {
				return faulted(f, obj, func() error {
					if err := c.Create(ctx, obj, opts...); err != nil {
						return err
					}
					w.record(ctx, obj)
					return nil
				})
			}
			if err := c.Create(ctx, obj, opts...); err != nil {
				return err
			}
			w.record(ctx, obj)
			return nil
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := c.Update(ctx, obj, opts...); err != nil {
				return err
			}
			w.record(ctx, obj)
			return nil
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := c.Patch(ctx, obj, patch, opts...); err != nil {
				return err
			}
			w.record(ctx, obj)
			return nil
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if pod, ok := obj.(*corev1.Pod); ok && operator {
				if err := w.checkPodDelete(ctx, pod, opts); err != nil {
					return err
				}
			}
			if err := c.Delete(ctx, obj, opts...); err != nil {
				return err
			}
			w.record(ctx, obj)
			return nil
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if slice, ok := obj.(*tpuv1alpha1.TPUSliceAssignment); ok && len(slice.Status.MalformedLines) > 0 {
				return tpuv1alpha1.ErrMalformedLines // what the status encoder says
			}
			update := func() error {
				if err := c.SubResource(sub).Update(ctx, obj, opts...); err != nil {
					return err
				}
				w.written(obj)
				w.record(ctx, obj)
				return nil
			}
			w.waitHold(ctx, operator, obj)
			if f, ok := w.nextFault(operator, obj); ok {
				return faulted(f, obj, update)
			}
			return update()
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			apply := func() error {
				if err := c.SubResource(sub).Patch(ctx, obj, patch, opts...); err != nil {
					return err
				}
				w.record(ctx, obj)
				return nil
			}
			if f, ok := w.nextFault(operator, obj); ok {
				return faulted(f, obj, apply)
			}
			return apply()
		},
	}
	if operator {
		funcs.Get = func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			w.decorate(obj)
			return nil
		}
		funcs.List = func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := c.List(ctx, list, opts...); err != nil {
				return err
			}
			if l, ok := list.(*tpuv1alpha1.TPUSliceAssignmentList); ok {
				w.mu.Lock()
				defer w.mu.Unlock()
				for i := range l.Items {
					w.decorate(&l.Items[i])
				}
			}
			return nil
		}
	}
	return interceptor.NewClient(w.base, funcs)
}

// checkPodDelete enforces the UID precondition the fake client ignores and checks I6: the operator
// deletes a live Pod only when another live Pod of its slice holds its worker ID.
func (w *world) checkPodDelete(ctx context.Context, pod *corev1.Pod, opts []client.DeleteOption) error {
	do := client.DeleteOptions{}
	do.ApplyOptions(opts)
	victim := &corev1.Pod{}
	if err := w.base.Get(ctx, client.ObjectKeyFromObject(pod), victim); err != nil {
		return err
	}
	if do.Preconditions != nil && do.Preconditions.UID != nil && *do.Preconditions.UID != victim.UID {
		return apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, pod.Name, errors.New("UID precondition failed"))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deletions = append(w.deletions, victim.Name)
	if !lifecycle.PodLive(victim) {
		return nil
	}
	id, ok := identity.FromPod(victim)
	if !ok {
		w.violations = append(w.violations, fmt.Sprintf("I6: the operator deleted live Pod %s, which carries no TPU identity", victim.Name))
		return nil
	}
	var all corev1.PodList
	if err := w.base.List(ctx, &all, client.InNamespace(victim.Namespace)); err != nil {
		return err
	}
	var handMade string
	for i := range all.Items {
		other := &all.Items[i]
		if oid, ok := identity.FromPod(other); ok && other.UID != victim.UID && lifecycle.PodLive(other) &&
			oid.SliceName() == id.SliceName() && oid.WorkerID == id.WorkerID {
			if !w.handMade[other.Name] || w.unsealed[other.Name] || w.handMade[victim.Name] {
				return nil
			}
			handMade = other.Name
		}
	}
	if handMade != "" {
		if !w.handDeleted[id.SliceName()] {
			w.violations = append(w.violations, fmt.Sprintf("I6: the operator deleted live Pod %s (slice %s, worker ID %d), which it admitted, in favor of %s, which a user made past the webhook",
				victim.Name, id.SliceName(), id.WorkerID, handMade))
		}
		return nil
	}
	w.violations = append(w.violations, fmt.Sprintf("I6: the operator deleted live Pod %s (slice %s, worker ID %d) although no other live Pod holds that ID",
		victim.Name, id.SliceName(), id.WorkerID))
	return nil
}

// cacheClient returns the operator's cached client: Pods and slices from the views, everything else
// (the RayCluster, Nodes) from the truth, writes to the truth.
func (w *world) cacheClient() client.WithWatch {
	return interceptor.NewClient(w.writer(true), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			v := w.viewOf(obj)
			if v == nil {
				return c.Get(ctx, key, obj, opts...)
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			cached := v.objs[key]
			if cached == nil {
				return apierrors.NewNotFound(schema.GroupResource{Resource: fmt.Sprintf("%T", obj)}, key.Name)
			}
			if err := copyInto(cached, obj); err != nil {
				return err
			}
			w.decorate(obj)
			return nil
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			v := w.viewOf(list)
			if v == nil {
				return c.List(ctx, list, opts...)
			}
			if gate, ok := ctx.Value(gateKey{}).(chan struct{}); ok {
				if _, ok := list.(*tpuv1alpha1.TPUSliceAssignmentList); ok {
					<-gate
				}
			}
			lo := client.ListOptions{}
			lo.ApplyOptions(opts)
			w.mu.Lock()
			defer w.mu.Unlock()
			matched := make([]client.Object, 0, len(v.objs))
			for _, obj := range v.objs {
				if listMatches(&lo, obj) {
					matched = append(matched, obj)
				}
			}
			slices.SortFunc(matched, func(a, b client.Object) int { return strings.Compare(a.GetName(), b.GetName()) })
			switch l := list.(type) {
			case *corev1.PodList:
				l.Items = nil
				for _, obj := range matched {
					l.Items = append(l.Items, *obj.(*corev1.Pod).DeepCopy())
				}
			case *tpuv1alpha1.TPUSliceAssignmentList:
				l.Items = nil
				for _, obj := range matched {
					l.Items = append(l.Items, *obj.(*tpuv1alpha1.TPUSliceAssignment).DeepCopy())
					w.decorate(&l.Items[len(l.Items)-1])
				}
			}
			return nil
		},
	})
}

func copyInto(from, to client.Object) error {
	switch t := to.(type) {
	case *corev1.Pod:
		from.(*corev1.Pod).DeepCopyInto(t)
	case *tpuv1alpha1.TPUSliceAssignment:
		from.(*tpuv1alpha1.TPUSliceAssignment).DeepCopyInto(t)
	default:
		return fmt.Errorf("model cache: cannot copy %T", to)
	}
	return nil
}

// cacheIndexes are the field indexes the operator registers on its Pod cache.
var cacheIndexes = map[string]client.IndexerFunc{
	identity.SliceIndex:     identity.SliceIndexValue,
	identity.TokenIndex:     identity.TokenIndexValue,
	slicectrl.NodeNameIndex: slicectrl.NodeNameIndexValue,
}

func listMatches(lo *client.ListOptions, obj client.Object) bool {
	if lo.Namespace != "" && obj.GetNamespace() != lo.Namespace {
		return false
	}
	if lo.LabelSelector != nil && !lo.LabelSelector.Matches(labels.Set(obj.GetLabels())) {
		return false
	}
	if lo.FieldSelector != nil {
		for _, req := range lo.FieldSelector.Requirements() {
			index := cacheIndexes[req.Field]
			if index == nil || !slices.Contains(index(obj), req.Value) {
				return false
			}
		}
	}
	return true
}

// deliver applies up to n events of v's stream (all when n < 0) one by one; a Pod leaving the
// view records a tombstone, as the informer's DELETED event does. It returns how many it applied.
func (w *world) deliver(v *view, n int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	applied := 0
	for v.pos < len(v.log) && (n < 0 || applied < n) {
		e := v.log[v.pos]
		v.pos++
		applied++
		prev := v.objs[e.key]
		if e.obj != nil && v.selects(e.obj) {
			v.objs[e.key] = e.obj
			continue
		}
		delete(v.objs, e.key)
		if prev != nil {
			w.tombstone(cmpObj(e.obj, prev))
		}
	}
	return applied
}

// drop jumps v to the end of its stream as a relist after a broken watch does: the events in
// between are lost, and only objects gone from the view fire a DELETED (DeletedFinalStateUnknown,
// with the last state the cache had). It returns how many events it skipped.
func (w *world) drop(v *view) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	skipped := len(v.log) - v.pos
	before := maps.Clone(v.objs)
	for _, e := range v.log[v.pos:] {
		if e.obj != nil && v.selects(e.obj) {
			v.objs[e.key] = e.obj
		} else {
			delete(v.objs, e.key)
		}
	}
	for key, obj := range before {
		if _, ok := v.objs[key]; !ok {
			w.tombstone(obj)
		}
	}
	v.pos = len(v.log)
	return skipped
}

// relist makes every view a fresh, caught-up cache (a restarted process): no events fire.
func (w *world) relist() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range []*view{w.pods, w.slices} {
		v.objs = map[types.NamespacedName]client.Object{}
		for _, e := range v.log {
			if e.obj != nil && v.selects(e.obj) {
				v.objs[e.key] = e.obj
			} else {
				delete(v.objs, e.key)
			}
		}
		v.pos = len(v.log)
	}
}

func cmpObj(a, b client.Object) client.Object {
	if a != nil {
		return a
	}
	return b
}

// tombstone records a Pod's DELETED event in the current operator's tombstones; w.mu is held.
func (w *world) tombstone(obj client.Object) {
	if pod, ok := obj.(*corev1.Pod); ok && w.tombstones != nil {
		w.tombstones.Record(pod)
	}
}

// takeViolations returns and clears the violations seen inside API calls.
func (w *world) takeViolations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := w.violations
	w.violations = nil
	return v
}

// takeDeletions returns and clears the Pods the operator deleted.
func (w *world) takeDeletions() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.deletions
	w.deletions = nil
	return d
}

// lag returns how many events of each view are not delivered yet.
func (w *world) lag() (pods, slices int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pods.log) - w.pods.pos, len(w.slices.log) - w.slices.pos
}
