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

import (
	"hash/fnv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/slicectrl"
)

// observations is what the reconciler's process has seen of each slice, timed by its own clock:
// when a pending claim was first seen (the pending TTL counts from there) and when the slice's set
// of claims last changed (the bind settle counts from there). Timing on the observer's clock alone
// means the decisions never compare two machines' clocks: a claim's claimedAt is written by the
// webhook replica that made it. Every replica observes the slices from its start, through its
// informer (observer), whether or not it is the leader: a replica elected after the leader died
// frees a dead holder's reserved IDs a pending TTL after it first saw them, not a TTL after its
// election (docs/spec.md §3.5). After a restart everything is seen anew, which only makes the
// waits longer.
type observations struct {
	mu     sync.Mutex
	slices map[types.NamespacedName]*observed
	// settle is the bind settle (--bind-settle): a change that comes a settle or more after the
	// last one starts a new burst.
	settle time.Duration
}

type observed struct {
	fingerprint uint64
	// burst times the changes of the slice's claims and the creations of its Pods (see
	// settleWait).
	burst     slicectrl.Burst
	firstSeen map[string]time.Time
	// malformedSince is when the slice was first seen holding stored lines that do not parse,
	// zero while it holds none.
	malformedSince time.Time
}

// newObservations returns empty observations for a reconciler with the given bind settle.
func newObservations(settle time.Duration) *observations {
	return &observations{slices: map[types.NamespacedName]*observed{}, settle: settle}
}

// podCreated records that a Pod of a slice already seen was created at now: with reservations a
// burst of admissions adds claims only once per block, so its Pods, not its claims, tell that the
// burst goes on (docs/spec.md §8, "Bookkeeping waits for bursts").
func (o *observations) podCreated(key types.NamespacedName, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if s := o.slices[key]; s != nil {
		s.burst.Mark(now, o.settle)
	}
}

// settleWait returns how long the slice's bookkeeping must still wait at now: until it has gone a
// bind settle without a change, but never more than slicectrl.SettleCapFactor settles after its
// burst began (a slice whose Pods keep coming still gets its claims bound and its health written,
// once per that long). When the cap is what ends the wait, the next wait counts from now.
func (o *observations) settleWait(key types.NamespacedName, now time.Time) time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.slices[key]
	if s == nil {
		return 0
	}
	return s.burst.Wait(now, o.settle)
}

// observe records the slice as seen at now and returns how long each of its pending claims has
// been seen.
func (o *observations) observe(key types.NamespacedName, slice *tpuv1alpha1.TPUSliceAssignment, now time.Time) func(tpuv1alpha1.WorkerClaim) time.Duration {
	fp := fingerprint(slice.Status.Claims)
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.slices[key]
	if s == nil {
		s = &observed{fingerprint: fp, burst: slicectrl.NewBurst(now), firstSeen: map[string]time.Time{}}
		o.slices[key] = s
	} else if s.fingerprint != fp {
		s.fingerprint = fp
		s.burst.Mark(now, o.settle)
	}
	pending := make(map[string]time.Time, len(s.firstSeen))
	for _, c := range slice.Status.Claims {
		if c.PodUID != "" {
			continue
		}
		if t, ok := s.firstSeen[c.Token]; ok {
			pending[c.Token] = t
		} else {
			pending[c.Token] = now
		}
	}
	s.firstSeen = pending
	return func(c tpuv1alpha1.WorkerClaim) time.Duration {
		o.mu.Lock()
		defer o.mu.Unlock()
		if t, ok := pending[c.Token]; ok {
			return now.Sub(t)
		}
		return 0
	}
}

// malformedFor records whether the slice's stored status holds lines that do not parse, seen at
// now, and returns for how long it has been seen holding them (0 when it holds none).
func (o *observations) malformedFor(key types.NamespacedName, malformed bool, now time.Time) time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.slices[key]
	if s == nil {
		s = &observed{burst: slicectrl.NewBurst(now), firstSeen: map[string]time.Time{}}
		o.slices[key] = s
	}
	if !malformed {
		s.malformedSince = time.Time{}
		return 0
	}
	if s.malformedSince.IsZero() {
		s.malformedSince = now
	}
	return now.Sub(s.malformedSince)
}

// observer records every slice this process's informer delivers, as the reconciler does when it
// reads one, and forgets the slices deleted.
func (r *TPUSliceAssignmentReconciler) observer() toolscache.ResourceEventHandler {
	see := func(obj any) {
		if slice, ok := obj.(*tpuv1alpha1.TPUSliceAssignment); ok {
			r.seen.observe(client.ObjectKeyFromObject(slice), slice, r.clock.Now())
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { see(obj) },
		UpdateFunc: func(_, obj any) { see(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if slice, ok := obj.(*tpuv1alpha1.TPUSliceAssignment); ok {
				r.seen.forget(client.ObjectKeyFromObject(slice))
			}
		},
	}
}

// forget drops what was seen of a slice that is gone.
func (o *observations) forget(key types.NamespacedName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.slices, key)
}

// fingerprint identifies a set of claims by their worker IDs and tokens, in any order: binding a
// claim (or sorting the list) does not change it, a new or released claim does.
func fingerprint(list []tpuv1alpha1.WorkerClaim) uint64 {
	var sum uint64
	for _, c := range list {
		h := fnv.New64a()
		_, _ = h.Write([]byte{byte(c.WorkerID), byte(c.WorkerID >> 8), byte(c.WorkerID >> 16), byte(c.WorkerID >> 24)})
		_, _ = h.Write([]byte(c.Token))
		sum += h.Sum64()
	}
	return sum + uint64(len(list))
}
