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

// Package boundpods is the placement step's view of every Pod bound to a Node, whatever created
// it (docs/spec.md §12, "The choice"): kube-scheduler counts them all when it judges whether a
// Pod fits a Node, so the domain chooser must too. The manager's own Pod cache holds KubeRay
// worker Pods only; this one holds the live bound Pods of the cluster (a field selector), each
// trimmed by Trim to its Node, its effective requests and its required pod anti-affinity, and a
// Tracker keeps their sum per Node, so that a choice reads one entry per Node instead of
// listing the cluster's Pods.
package boundpods

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	resourcehelper "k8s.io/component-helpers/resource"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
)

// Selector selects the Pods bound to a Node that have not finished: the scheduler's view of
// what a Node holds (a Succeeded or Failed Pod holds nothing).
func Selector() fields.Selector {
	return fields.AndSelectors(
		fields.OneTermNotEqualSelector("spec.nodeName", ""),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
	)
}

// CacheOptions are the options of the bound Pods' cache: Selector, trimmed by Trim.
func CacheOptions() cache.ByObject {
	return cache.ByObject{Field: Selector(), Transform: Trim}
}

// Trim keeps of a Pod its name, namespace, UID, resourceVersion, deletion state, phase, the Node it
// is bound to, its required pod anti-affinity terms (a bound Pod's terms keep a slice off their
// domain, gate.Excluded) and, as its overhead, its effective requests (k8s.io/component-helpers'
// PodRequests: containers, init containers and overhead, as kube-scheduler's NodeResourcesFit
// counts a Pod on a Node; PodRequests of the trimmed Pod is the same). Everything else, every
// container included, is dropped.
func Trim(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		TypeMeta: pod.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			DeletionTimestamp: pod.DeletionTimestamp,
		},
		// The effective requests as the Pod's overhead, with no container: PodRequests of the
		// trimmed Pod is the original's, without a Container struct per Pod in the cache.
		Spec: corev1.PodSpec{
			NodeName: pod.Spec.NodeName,
			Overhead: resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}),
		},
		Status: corev1.PodStatus{Phase: pod.Status.Phase},
	}
	if a := pod.Spec.Affinity; a != nil && a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
		out.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution,
		}}
	}
	return out, nil
}

// Usage is what Pods take of one Node, as kube-scheduler counts it: their effective requests
// summed, and their number.
type Usage struct {
	Requests corev1.ResourceList
	Pods     int64
}

// Add adds o to u.
func (u *Usage) Add(o Usage) {
	u.Pods += o.Pods
	for name, q := range o.Requests {
		sum := u.Requests[name]
		sum.Add(q)
		u.Requests[name] = sum
	}
}

// Sub takes o off u.
func (u *Usage) Sub(o Usage) {
	u.Pods -= o.Pods
	for name, q := range o.Requests {
		sum := u.Requests[name]
		sum.Sub(q)
		u.Requests[name] = sum
	}
}

// amount is one resource of a tracked Pod's requests, in thousandths of its unit.
type amount struct {
	name  corev1.ResourceName
	milli int64
}

// entry is one tracked Pod: its Node and requests, compact (a ResourceList per Pod costs a map).
type entry struct {
	node     string
	requests []amount
}

// Tracker sums, per Node, the requests of the live Pods bound to it, from the bound Pods'
// informer (its event handler), and keeps the few Pods with required pod anti-affinity terms.
// It is safe for concurrent use.
type Tracker struct {
	mu     sync.RWMutex
	pods   map[types.UID]entry
	nodes  map[string]*Usage
	repels map[types.UID]*corev1.Pod
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker {
	return &Tracker{pods: map[types.UID]entry{}, nodes: map[string]*Usage{}, repels: map[types.UID]*corev1.Pod{}}
}

// Handler is the informer event handler that keeps t up to date.
func (t *Tracker) Handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.set(obj) },
		UpdateFunc: func(_, obj any) { t.set(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				t.mu.Lock()
				defer t.mu.Unlock()
				t.remove(pod.UID)
			}
		},
	}
}

// Set records pod (a bound Pod, or one no longer live or bound, which is forgotten).
func (t *Tracker) set(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.remove(pod.UID)
	if pod.Spec.NodeName == "" || !lifecycle.PodLive(pod) {
		return
	}
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	e := entry{node: pod.Spec.NodeName, requests: make([]amount, 0, len(requests))}
	for name, q := range requests {
		e.requests = append(e.requests, amount{name: name, milli: q.MilliValue()})
	}
	t.pods[pod.UID] = e
	u := t.nodes[e.node]
	if u == nil {
		u = &Usage{Requests: corev1.ResourceList{}}
		t.nodes[e.node] = u
	}
	u.Pods++
	for _, a := range e.requests {
		sum := u.Requests[a.name]
		sum.Add(*resource.NewMilliQuantity(a.milli, resource.DecimalSI))
		u.Requests[a.name] = sum
	}
	if a := pod.Spec.Affinity; a != nil && a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
		t.repels[pod.UID] = pod
	}
}

// remove forgets the Pod of uid; t.mu is held.
func (t *Tracker) remove(uid types.UID) {
	delete(t.repels, uid)
	e, ok := t.pods[uid]
	if !ok {
		return
	}
	delete(t.pods, uid)
	u := t.nodes[e.node]
	if u == nil {
		return
	}
	u.Pods--
	for _, a := range e.requests {
		sum := u.Requests[a.name]
		sum.Sub(*resource.NewMilliQuantity(a.milli, resource.DecimalSI))
		if sum.IsZero() {
			delete(u.Requests, a.name)
		} else {
			u.Requests[a.name] = sum
		}
	}
	if u.Pods <= 0 {
		delete(t.nodes, e.node)
	}
}

// Usage returns a copy of what the tracked Pods take of node, and whether any Pod is bound to it.
func (t *Tracker) Usage(node string) (Usage, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	u, ok := t.nodes[node]
	if !ok {
		return Usage{}, false
	}
	return Usage{Requests: u.Requests.DeepCopy(), Pods: u.Pods}, true
}

// Has reports whether the Pod of uid is tracked (bound and live) on node.
func (t *Tracker) Has(uid types.UID, node string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	e, ok := t.pods[uid]
	return ok && e.node == node
}

// Repelling returns the tracked Pods with required pod anti-affinity terms. They are read, never
// modified.
func (t *Tracker) Repelling() []corev1.Pod {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]corev1.Pod, 0, len(t.repels))
	for _, p := range t.repels {
		out = append(out, *p)
	}
	return out
}

// Len is the number of Pods tracked.
func (t *Tracker) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.pods)
}

// String summarizes t, for logs.
func (t *Tracker) String() string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return fmt.Sprintf("%d bound Pods on %d Nodes", len(t.pods), len(t.nodes))
}
