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

package placement

import (
	"context"
	"maps"
	"slices"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/gate"
	rules "github.com/ray-tpu/tpu-slice-operator/internal/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/slicectrl"
)

// What wakes a slice's placement (docs/spec.md §12): its own events and its Pods' (a slice that
// goes, a Pod that stops living, binds or is created bound at once; the rest a bind settle later,
// coalesced), and, for the slices waiting for a domain (DomainChosen False, NoDomainFits), a
// change of a TPU Node their Pods could use (candidates): a Node that appears, goes or changes
// what the chooser reads, a Pod bound to it that stops or goes, the domain Lease of its domain
// deleted. A Node that changes or goes, and a Pod that binds to a Node, also wake the slices of
// the unbound Pods pinned to it, which may be stranded.

type queue = slicectrl.Queue

func (r *Reconciler) add(q queue, reqs []reconcile.Request, urgent bool) {
	slicectrl.Enqueue(q, reqs, urgent, r.settle)
}

// sliceHandler enqueues a slice on its own events. A slice that goes frees what it held through
// its domain Lease, which its reconcile deletes, and its Pods, which leave their Nodes: those
// events wake the waiting slices that can use what they free (leaseHandler, boundPodHandler).
func (r *Reconciler) sliceHandler() handler.EventHandler {
	self := func(obj client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(obj)}}
	}
	return handler.Funcs{
		CreateFunc:  func(_ context.Context, e event.CreateEvent, q queue) { r.add(q, self(e.Object), false) },
		UpdateFunc:  func(_ context.Context, e event.UpdateEvent, q queue) { r.add(q, self(e.ObjectNew), false) },
		DeleteFunc:  func(_ context.Context, e event.DeleteEvent, q queue) { r.add(q, self(e.Object), true) },
		GenericFunc: func(_ context.Context, e event.GenericEvent, q queue) { r.add(q, self(e.Object), true) },
	}
}

// podHandler enqueues the slices a Pod event concerns (slicectrl.PodToSlices), and: for a Pod
// that binds or is created bound, the slices of the Pods pinned to its Node (pinnedToSlices); for
// a bound Pod that stops living or goes, the waiting slices its Node could change (its chips are
// free again), unless the bound Pods' cache is watched (boundPodHandler sees every such Pod).
func (r *Reconciler) podHandler() handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q queue) {
			reqs := slicectrl.PodToSlices(e.Object)
			for _, req := range reqs {
				r.bursts.podCreated(req.NamespacedName, r.clock.Now())
			}
			r.add(q, reqs, false)
			if pod, ok := e.Object.(*corev1.Pod); ok && pod.Spec.NodeName != "" {
				r.add(q, r.pinnedToSlices(ctx, pod.Spec.NodeName), false) // created bound, past the scheduler
			}
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q queue) {
			urgent := slicectrl.StoppedLiving(e.ObjectOld, e.ObjectNew)
			r.add(q, slicectrl.PodToSlices(e.ObjectOld), urgent)
			r.add(q, slicectrl.PodToSlices(e.ObjectNew), urgent)
			before, ok1 := e.ObjectOld.(*corev1.Pod)
			after, ok2 := e.ObjectNew.(*corev1.Pod)
			if ok1 && ok2 && before.Spec.NodeName == "" && after.Spec.NodeName != "" {
				r.add(q, r.pinnedToSlices(ctx, after.Spec.NodeName), false)
			}
			if urgent && r.boundCache == nil {
				r.freed(ctx, after, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q queue) {
			r.add(q, slicectrl.PodToSlices(e.Object), true)
			if r.boundCache == nil {
				r.freed(ctx, e.Object, q)
			}
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q queue) {
			r.add(q, slicectrl.PodToSlices(e.Object), true)
		},
	}
}

// nodeHandler enqueues, for a TPU Node that appeared, went or changed in what the chooser reads
// (placementChanged), the waiting slices it could change (nodeCouldChange) and the slices of the
// Pods pinned to it, a bind settle later (coalesced: a node pool under maintenance changes every
// Node at once).
func (r *Reconciler) nodeHandler() handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q queue) {
			r.add(q, r.pinnedToSlices(ctx, e.Object.GetName()), false)
			r.add(q, r.waitingSlicesFor(ctx, e.Object), false)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q queue) {
			if placementChanged(e.ObjectOld, e.ObjectNew) {
				r.add(q, r.pinnedToSlices(ctx, e.ObjectNew.GetName()), false)
				r.add(q, r.waitingSlicesFor(ctx, e.ObjectOld, e.ObjectNew), false)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q queue) {
			r.add(q, r.pinnedToSlices(ctx, e.Object.GetName()), false)
			r.add(q, r.waitingSlicesFor(ctx, e.Object), false)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q queue) {
			r.add(q, r.pinnedToSlices(ctx, e.Object.GetName()), false)
		},
	}
}

// boundPodHandler enqueues, when a Pod bound to a TPU Node (any Pod: the bound Pods' cache) stops
// living or goes, the waiting slices that Node could change: what the Pod took of it is free
// again. A Pod on a Node that is not a TPU Node (not in the Node cache) wakes none.
func (r *Reconciler) boundPodHandler() handler.TypedEventHandler[client.Object, reconcile.Request] {
	return handler.Funcs{
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q queue) {
			if slicectrl.StoppedLiving(e.ObjectOld, e.ObjectNew) {
				r.freed(ctx, e.ObjectNew, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q queue) { r.freed(ctx, e.Object, q) },
	}
}

// freed enqueues, for a bound Pod that stopped living or went, the waiting slices its Node could
// change: what the Pod took of it is free again.
func (r *Reconciler) freed(ctx context.Context, obj client.Object, q queue) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return
	}
	node := &corev1.Node{}
	if err := r.client.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node); err != nil {
		return // not a TPU Node, or gone: no domain gained room
	}
	r.add(q, r.waitingSlicesFor(ctx, node), false)
}

// pinnedToSlices returns the slices of the cached Pods that are unbound and pinned to Node node: a
// Pod that binds there may take the chips such a Pod waits for, and a Node that changes or goes
// may leave it unable to bind, and strand it (docs/spec.md §12, "Stranded Pods"), while nothing
// else of the pinned Pod's slice changes. A bind settle later is soon enough, and coalesces a
// pool's binds.
func (r *Reconciler) pinnedToSlices(ctx context.Context, node string) []reconcile.Request {
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.MatchingFields{slicectrl.NodeNameIndex: node}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing Pods pinned to Node", "node", node)
		return nil
	}
	seen := map[reconcile.Request]bool{}
	var reqs []reconcile.Request
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Spec.NodeName == "" { // pinned, not bound
			for _, req := range slicectrl.PodToSlices(p) {
				if !seen[req] {
					seen[req] = true
					reqs = append(reqs, req)
				}
			}
		}
	}
	return reqs
}

// leaseHandler enqueues, when a domain Lease goes, the waiting slices a Node of its domain could
// change: a domain held for one key holds its Nodes for every key (docs/spec.md §12), so they are
// free for slices of any key again. A Lease that is not a domain Lease (leader election's, one
// edited by hand) frees nothing.
func (r *Reconciler) leaseHandler() handler.EventHandler {
	return handler.Funcs{
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q queue) {
			lease, ok := e.Object.(*coordinationv1.Lease)
			if !ok {
				return
			}
			lock, ok := gate.LockOf(lease)
			if !ok {
				return
			}
			var nodes corev1.NodeList
			if err := r.client.List(ctx, &nodes, client.MatchingLabels{lock.Key: lock.Domain}, client.UnsafeDisableDeepCopy); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "Listing the Nodes of a domain given back", "key", lock.Key, "domain", lock.Domain)
				r.add(q, r.waitingSlices(ctx), false)
				return
			}
			objs := make([]client.Object, 0, len(nodes.Items))
			for i := range nodes.Items {
				objs = append(objs, &nodes.Items[i])
			}
			if len(objs) > 0 {
				r.add(q, r.waitingSlicesFor(ctx, objs...), false)
			}
		},
	}
}

// waitingSlices lists, from the cache, the ChosenDomain slices that no domain fitted when they
// last chose (DomainChosen False, NoDomainFits).
func (r *Reconciler) waitingSlices(ctx context.Context) []reconcile.Request {
	return r.waitingSlicesFor(ctx)
}

// waitingSlicesFor is waitingSlices narrowed, when nodes are given, to the slices one of the Nodes
// could change (nodeCouldChange: a Node of the slice's key and accelerator that its Pods could
// use, not every waiting slice of the cluster), and, when nodes are given, also the slices in one
// of the Nodes' domain that are not Scheduled: one may hold a Pod gated for want of a free Node
// there.
func (r *Reconciler) waitingSlicesFor(ctx context.Context, nodes ...client.Object) []reconcile.Request {
	var list tpuv1alpha1.TPUSliceAssignmentList
	if err := r.client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing slices waiting for a domain")
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		s := &list.Items[i]
		if s.Spec.Placement != tpuv1alpha1.PlacementChosenDomain {
			continue
		}
		c := apimeta.FindStatusCondition(s.Status.Conditions, tpuv1alpha1.ConditionDomainChosen)
		if c == nil {
			continue
		}
		waiting := c.Status == metav1.ConditionFalse && c.Reason == tpuv1alpha1.ReasonNoDomainFits
		// A slice in a domain whose Pods are not all bound may hold a Pod gated for want of a
		// free Node there (release): a Node of that domain wakes it. Scheduled is the claim
		// reconciler's health, read from the slice as stored.
		held := c.Status == metav1.ConditionTrue && s.Status.Domain != "" && len(nodes) > 0 &&
			!apimeta.IsStatusConditionTrue(s.Status.Conditions, tpuv1alpha1.ConditionScheduled)
		if !waiting && !held {
			continue
		}
		if len(nodes) > 0 && !slices.ContainsFunc(nodes, func(n client.Object) bool {
			return nodeCouldChange(s, n) && r.candidates.could(s, n) && (waiting || n.GetLabels()[s.Spec.AffinityTopologyKey] == s.Status.Domain)
		}) {
			continue
		}
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(s)})
	}
	return reqs
}

// placementChanged reports whether a Node update changed what the domain chooser (and the
// stranded Pods' judge) reads of it (placement.CandidateFromNode, gate.Stranded): its labels, its
// NoSchedule and NoExecute taints (not a PreferNoSchedule one, which the cluster autoscaler sets
// on scale-down candidates), unschedulable flag, deletion, Ready status or allocatable resources.
func placementChanged(oldObj, newObj client.Object) bool {
	before, ok1 := oldObj.(*corev1.Node)
	after, ok2 := newObj.(*corev1.Node)
	if !ok1 || !ok2 {
		return true
	}
	hard := func(n *corev1.Node) []corev1.Taint {
		return slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool {
			return t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute
		})
	}
	return !maps.Equal(before.Labels, after.Labels) || before.Spec.Unschedulable != after.Spec.Unschedulable ||
		(before.DeletionTimestamp == nil) != (after.DeletionTimestamp == nil) ||
		!slices.EqualFunc(hard(before), hard(after), func(a, b corev1.Taint) bool { return a.Key == b.Key && a.Effect == b.Effect && a.Value == b.Value }) ||
		slicectrl.NodeReadyStatus(before) != slicectrl.NodeReadyStatus(after) ||
		!equality.Semantic.DeepEqual(before.Status.Allocatable, after.Status.Allocatable)
}

// nodeCouldChange reports whether Node n can change the choice of waiting slice s: n has a value
// of the slice's key (a Node without one is in no domain of it) and, when the slice names its
// accelerator, carries that accelerator.
func nodeCouldChange(s *tpuv1alpha1.TPUSliceAssignment, n client.Object) bool {
	labels := n.GetLabels()
	if labels[s.Spec.AffinityTopologyKey] == "" {
		return false
	}
	return s.Spec.Accelerator == "" || labels[constants.AcceleratorNodeSelectorKey] == s.Spec.Accelerator
}

// candidates remembers, for each slice that chose, which Nodes its gated Pods can use
// (rules.NodeMatcher of their nodeSelector and required node affinity, what the chooser counts):
// a Node no Pod of the slice can use changes nothing of its choice. A slice it does not know (not
// chosen since this process started, or a new slice of the name) is woken by every Node of its
// key and accelerator.
type candidates struct {
	m sync.Map // types.NamespacedName → candidateFilter
}

type candidateFilter struct {
	uid   types.UID
	match func(name string, labels map[string]string) bool
}

// remember records the Nodes slice's gated Pods can use: those matching their nodeSelector and
// required node affinity, as the chooser was asked.
func (c *candidates) remember(slice *tpuv1alpha1.TPUSliceAssignment, selector map[string]string, affinity *corev1.NodeSelector) {
	c.m.Store(client.ObjectKeyFromObject(slice), candidateFilter{uid: slice.UID, match: rules.NodeMatcher(selector, affinity)})
}

// forget drops a slice that went (its reconcile finds it gone).
func (c *candidates) forget(key types.NamespacedName) { c.m.Delete(key) }

// could reports whether Node n may be one slice s's Pods can use: true unless s's last choice
// showed its Pods cannot.
func (c *candidates) could(s *tpuv1alpha1.TPUSliceAssignment, n client.Object) bool {
	v, ok := c.m.Load(client.ObjectKeyFromObject(s))
	if !ok {
		return true
	}
	f := v.(candidateFilter) //nolint:forcetypeassert // only remember stores.
	return f.uid != s.UID || f.match(n.GetName(), n.GetLabels())
}
