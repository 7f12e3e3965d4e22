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

package slicectrl

import (
	"context"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/gate"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/reads"
)

// NodeNameIndex indexes the cached Pods by spec.nodeName (or their pinned Node), so that a Node
// event finds the slices with a host on that Node, or a Pod pinned to it. An index rather than a
// map kept from Pod events: the informer updates it under its own lock with the same event that
// updates the Pod, so it cannot drift from the cache, and a Pod deleted or re-bound leaves it with
// no bookkeeping of ours.
const NodeNameIndex = "spec.nodeName"

// NodeNameIndexValue is NodeNameIndex's indexer: the node a Pod is bound to, or, while it is
// unbound, the Node it is pinned to (gate.PinnedNode: a Node that goes strands it, docs/spec.md
// §12), none otherwise.
func NodeNameIndexValue(obj client.Object) []string {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil
	}
	if pod.Spec.NodeName != "" {
		return []string{pod.Spec.NodeName}
	}
	if n := gate.PinnedNode(pod); n != "" {
		return []string{n}
	}
	return nil
}

// NodeReadyStatus is the status of a Node's Ready condition, "" without one.
func NodeReadyStatus(node *corev1.Node) corev1.ConditionStatus {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

// Queue is a controller's work queue.
type Queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// Enqueue adds reqs to q: at once when urgent (the event may free a worker ID, or placement must
// act on it) or when settle is not positive, else settle later, coalesced by the queue with the
// other events of that settle. During a burst there is one event per admission: a 2,240-host slice
// created Pod by Pod then costs a handful of reconciles instead of one per Pod, each of which
// reads every claim and Pod of the slice.
func Enqueue(q Queue, reqs []reconcile.Request, urgent bool, settle time.Duration) {
	for _, req := range reqs {
		if urgent || settle <= 0 {
			q.Add(req)
		} else {
			q.AddAfter(req, settle)
		}
	}
}

// StoppedLiving reports whether a Pod update made it terminating, Failed or Succeeded.
func StoppedLiving(oldObj, newObj client.Object) bool {
	before, ok1 := oldObj.(*corev1.Pod)
	after, ok2 := newObj.(*corev1.Pod)
	return ok1 && ok2 && lifecycle.PodLive(before) && !lifecycle.PodLive(after)
}

// PodToSlices maps a Pod to the slice its spec identity names and, when it differs, the slice its
// label names (a hint: the reconcile of that slice finds out whether the Pod holds anything there).
func PodToSlices(obj client.Object) []reconcile.Request {
	var reqs []reconcile.Request
	add := func(name string) {
		if name != "" && (len(reqs) == 0 || reqs[0].Name != name) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}})
		}
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		if id, ok := identity.FromPod(pod); ok {
			add(id.SliceName())
		}
	}
	add(obj.GetLabels()[tpuv1alpha1.SliceLabel])
	return reqs
}

// RayCluster returns the RayCluster name, or nil when it does not exist. A missing answer from
// the cache, or one of another UID than uid, is confirmed by a live read (reader) before anything
// is decided on it.
func RayCluster(ctx context.Context, cache, reader client.Reader, namespace, name string, uid types.UID) (*rayv1.RayCluster, error) {
	return reads.CacheThenLive(ctx, cache, reader, types.NamespacedName{Namespace: namespace, Name: name},
		func(rc *rayv1.RayCluster) bool { return uid == "" || rc.UID == uid })
}
