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

// Package tombstones remembers, for a while, the claim tokens of TPU worker Pods that the operator's
// Pod informer saw leave its view. A pending claim (one not yet bound to a Pod UID) whose Pod was seen
// and is gone can then be released at once (docs/spec.md §8, fast release) instead of waiting for the
// pending TTL, which exists only for creates whose Pod was never seen.
//
// The informer selects worker Pods by KubeRay's labels, so its DELETED event means "left the view":
// the Pod was deleted, or only lost one of those labels (a user isolating it) and runs on. A
// tombstone is therefore a hint that names the Pod (name and UID) and never a proof: the reconciler
// and the allocator read that Pod by name from the API server, UID checked, and release its claim
// only when the read shows it gone, terminating or finished. After a restart the tombstones are gone
// and the TTL applies, as before.
package tombstones

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
)

// DefaultRetention is how long a tombstone is kept: longer than the pending TTL, after which the
// claim would be released anyway.
const DefaultRetention = 10 * time.Minute

// maxEntries bounds memory when Pods are deleted faster than tombstones expire.
const maxEntries = 200_000

// Pod is what a tombstone remembers of a Pod that left the informer's view.
type Pod struct {
	Name string
	UID  types.UID
	// Slice and WorkerID are the place its spec names (identity.FromPod), Slice "" when it names
	// none. The token annotation can be copied or edited; only a Pod whose spec names a claim's
	// slice and worker ID can stand for that claim (docs/spec.md §8).
	Slice    string
	WorkerID int32
}

type key struct{ namespace, token string }

type entry struct {
	pod Pod
	at  time.Time
}

// Tombstones is safe for concurrent use. The zero value is not usable: use New.
type Tombstones struct {
	retention time.Duration
	clock     clock.PassiveClock

	mu      sync.Mutex
	entries map[key]entry
	// records counts Record calls, to drop expired tombstones every expireEvery of them.
	records int
}

// expireEvery is how many records pass between two sweeps of expired tombstones.
const expireEvery = 1024

// New returns an empty set keeping tombstones for retention (DefaultRetention when zero).
func New(retention time.Duration) *Tombstones {
	if retention <= 0 {
		retention = DefaultRetention
	}
	return &Tombstones{retention: retention, clock: clock.RealClock{}, entries: map[key]entry{}}
}

// Record remembers that pod left the informer's view (deleted, or out of its label selector), if it
// carries a claim token.
func (t *Tombstones) Record(pod *corev1.Pod) {
	token := identity.Token(pod)
	if token == "" {
		return
	}
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.records++
	if len(t.entries) >= maxEntries || t.records%expireEvery == 0 {
		t.expire(now)
	}
	if len(t.entries) < maxEntries {
		gone := Pod{Name: pod.Name, UID: pod.UID}
		if id, ok := identity.FromPod(pod); ok {
			gone.Slice, gone.WorkerID = id.SliceName(), id.WorkerID
		}
		t.entries[key{pod.Namespace, token}] = entry{pod: gone, at: now}
	}
}

// Lookup returns the Pod that carried token in namespace and left the informer's view: a Pod to read
// by name before acting, not one known to be gone.
func (t *Tombstones) Lookup(namespace, token string) (Pod, bool) {
	if t == nil || token == "" {
		return Pod{}, false
	}
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.entries[key{namespace, token}]
	if !ok || now.Sub(e.at) > t.retention {
		return Pod{}, false
	}
	return e.pod, true
}

// expire drops the tombstones past their retention; t.mu is held.
func (t *Tombstones) expire(now time.Time) {
	for k, e := range t.entries {
		if now.Sub(e.at) > t.retention {
			delete(t.entries, k)
		}
	}
}

// Len returns the number of tombstones kept (expired ones included until they are dropped).
func (t *Tombstones) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}

// Handler returns the informer event handler that records the Pods leaving its view.
func (t *Tombstones) Handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				t.Record(pod)
			}
		},
	}
}
