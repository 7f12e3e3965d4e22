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

package framework

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/gate"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
)

// PlacementWatcher follows the TPU worker Pods of one namespace through a watch and checks, at
// every Pod event, how the operator places its slices as units (docs/spec.md §4), for each slice
// with a placement (spec.placement set; Kueue's and dynamic slicing's are not checked):
//
//   - one domain: the slice's live Pods carry nodeSelectors on, and are bound to Nodes of, one
//     value of the slice's affinity key;
//   - one slice per domain: no two slices occupy (by nodeSelector or Node) one domain at once;
//   - a ChosenDomain slice's Pod leaves the operator's scheduling gate only with a nodeSelector on
//     the slice's recorded status.domain, and only once the slice has a live Pod for every host
//     (ReleaseWhole): no Pod of a slice that waits for a domain, or for its own Pods, is ever
//     released, so none is ever bound;
//   - a released Pod pinned to a Node (docs/spec.md §12, "Pinning") is pinned to a Node of the
//     slice's domain that no other live Pod of the slice is bound or pinned to, and a pinned Pod
//     binds only to its Node.
//
// It also records when it saw each slice's Pods created, released and bound (Timeline).
type PlacementWatcher struct {
	c client.Reader
	w watch.Interface
	// nodeLabels are the Nodes' labels, read when the watch started.
	nodeLabels map[string]map[string]string
	// releaseWhole makes a release before the slice's Pods all exist a violation.
	releaseWhole bool
	done         chan struct{}
	stopOnce     sync.Once

	mu     sync.Mutex
	pods   map[types.UID]*watchedPod
	slices map[string]*tpuv1alpha1.TPUSliceAssignment
	errs   []string
	// reported are the violations in errs, each reported once.
	reported map[string]bool
	// pins counts the releases with a pin it checked.
	pins int
}

// watchedPod is what the watcher keeps of one Pod.
type watchedPod struct {
	name, slice string
	live, gated bool
	// selector is the Pod's nodeSelector value on its slice's key ("" for none).
	selector string
	// pin is the Node the Pod is pinned to (gate.PinnedNode), "" for none.
	pin      string
	node     string
	seen     time.Time
	released time.Time
	bound    time.Time
}

// SliceTimeline is when a PlacementWatcher saw a slice's live Pods reach each step: the latest
// Pod first seen, the latest released from the operator's gate (or first seen without it), the
// latest bound. A zero time means some live Pod has not reached that step yet.
type SliceTimeline struct {
	Pods                     int
	Created, Released, Bound time.Time
}

// ReleaseToBound is how long the slice's users waited from the last Pod's creation until every
// Pod was bound to a Node, and whether they all are.
func (t SliceTimeline) ReleaseToBound() (time.Duration, bool) {
	if t.Bound.IsZero() || t.Created.IsZero() {
		return 0, false
	}
	return t.Bound.Sub(t.Created), true
}

// WatchPlacement starts a PlacementWatcher on namespace ns. With releaseWhole, releasing a Pod
// before its slice has a live Pod for every host is a violation (false for a spec in which the
// operator's assembly timeout may pass). Stop it with Stop.
func (e *Env) WatchPlacement(ctx context.Context, ns string, releaseWhole bool) (*PlacementWatcher, error) {
	var nodes corev1.NodeList
	if err := e.Client.List(ctx, &nodes); err != nil {
		return nil, err
	}
	pw := &PlacementWatcher{
		c: e.Client, nodeLabels: map[string]map[string]string{}, releaseWhole: releaseWhole, done: make(chan struct{}),
		pods: map[types.UID]*watchedPod{}, slices: map[string]*tpuv1alpha1.TPUSliceAssignment{}, reported: map[string]bool{},
	}
	for i := range nodes.Items {
		pw.nodeLabels[nodes.Items[i].Name] = nodes.Items[i].Labels
	}
	wc, err := client.NewWithWatch(e.Config, client.Options{Scheme: e.Client.Scheme()})
	if err != nil {
		return nil, err
	}
	if pw.w, err = wc.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	go func() {
		defer close(pw.done)
		for ev := range pw.w.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok {
				pw.observe(ctx, pod, ev.Type == watch.Deleted)
			}
		}
	}()
	return pw, nil
}

// Stop stops the watch and waits for the last check; later calls do nothing.
func (pw *PlacementWatcher) Stop() {
	pw.stopOnce.Do(func() {
		pw.w.Stop()
		<-pw.done
	})
}

// Violations returns the violations seen so far, each once.
func (pw *PlacementWatcher) Violations() []string {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	return slices.Clone(pw.errs)
}

// Timeline returns what the watcher saw of the live Pods of slice name.
func (pw *PlacementWatcher) Timeline(name string) SliceTimeline {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	var t SliceTimeline
	var unreleased, unbound bool
	for _, p := range pw.pods {
		if p.slice != name || !p.live {
			continue
		}
		t.Pods++
		t.Created = later(t.Created, p.seen)
		unreleased = unreleased || p.released.IsZero()
		unbound = unbound || p.bound.IsZero()
		t.Released = later(t.Released, p.released)
		t.Bound = later(t.Bound, p.bound)
	}
	if unreleased {
		t.Released = time.Time{}
	}
	if unbound {
		t.Bound = time.Time{}
	}
	return t
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (pw *PlacementWatcher) observe(ctx context.Context, pod *corev1.Pod, deleted bool) {
	id, ok := identity.FromPod(pod)
	if !ok {
		return
	}
	now := time.Now()
	pw.mu.Lock()
	defer pw.mu.Unlock()
	p := pw.pods[pod.UID]
	if p == nil {
		p = &watchedPod{name: pod.Name, slice: id.SliceName(), seen: now}
		pw.pods[pod.UID] = p
	}
	s := pw.slice(ctx, pod.Namespace, p.slice, false)
	wasGated := p.gated || p.released.IsZero()
	p.live = !deleted && lifecycle.PodLive(pod)
	p.gated = slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
		return g.Name == tpuv1alpha1.PlacementSchedulingGate
	})
	if s != nil {
		p.selector = pod.Spec.NodeSelector[s.Spec.AffinityTopologyKey]
	}
	if !p.gated && p.released.IsZero() {
		p.released = now
	}
	p.pin = gate.PinnedNode(pod)
	if pod.Spec.NodeName != "" && p.bound.IsZero() {
		p.node, p.bound = pod.Spec.NodeName, now
		if p.pin != "" && p.node != p.pin {
			pw.violatef("Pod %s of slice %s pinned to Node %s is bound to %s", p.name, p.slice, p.pin, p.node)
		}
	}
	if s == nil || s.Spec.Placement == "" || !p.live {
		return
	}
	if s.Spec.Placement == tpuv1alpha1.PlacementChosenDomain && wasGated && !p.gated {
		pw.checkRelease(ctx, pod, p, s)
	}
	pw.checkDomains(p.slice)
}

// checkRelease checks the release of Pod p of ChosenDomain slice s: a nodeSelector on the domain
// the slice records (read again: it was written before the release), and, with releaseWhole, a
// live Pod for every host of the slice. Called with mu held.
func (pw *PlacementWatcher) checkRelease(ctx context.Context, pod *corev1.Pod, p *watchedPod, s *tpuv1alpha1.TPUSliceAssignment) {
	if fresh := pw.slice(ctx, pod.Namespace, p.slice, true); fresh != nil {
		s = fresh
	}
	switch {
	case p.selector == "":
		pw.violatef("Pod %s of slice %s released with no nodeSelector on %s", p.name, p.slice, s.Spec.AffinityTopologyKey)
	case s.Status.Domain != p.selector:
		pw.violatef("Pod %s of slice %s released onto %s=%s, but the slice records domain %q", p.name, p.slice, s.Spec.AffinityTopologyKey, p.selector, s.Status.Domain)
	}
	if p.pin != "" {
		pw.checkPin(ctx, p, s)
	}
	if !pw.releaseWhole {
		return
	}
	live := 0
	for _, q := range pw.pods {
		if q.slice == p.slice && q.live {
			live++
		}
	}
	if live < int(s.Spec.Hosts) {
		pw.violatef("Pod %s of slice %s released with %d of its %d Pods created", p.name, p.slice, live, s.Spec.Hosts)
	}
}

// checkPin checks the pin of released Pod p of slice s: a Node of the slice's domain, and no other
// live Pod of the slice bound or pinned to it. Called with mu held.
func (pw *PlacementWatcher) checkPin(ctx context.Context, p *watchedPod, s *tpuv1alpha1.TPUSliceAssignment) {
	pw.pins++
	labels, ok := pw.nodeLabels[p.pin]
	if !ok {
		var n corev1.Node
		if err := pw.c.Get(ctx, client.ObjectKey{Name: p.pin}, &n); err == nil {
			labels = n.Labels
			pw.nodeLabels[p.pin] = labels
		}
	}
	if got := labels[s.Spec.AffinityTopologyKey]; got != s.Status.Domain {
		pw.violatef("Pod %s of slice %s pinned to Node %s in %s=%q, not the slice's domain %q", p.name, p.slice, p.pin,
			s.Spec.AffinityTopologyKey, got, s.Status.Domain)
	}
	for _, q := range pw.pods {
		if q != p && q.slice == p.slice && q.live && (q.node == p.pin || (q.node == "" && !q.gated && q.pin == p.pin)) {
			pw.violatef("Pod %s of slice %s pinned to Node %s, which Pod %s of the slice is bound or pinned to", p.name, p.slice, p.pin, q.name)
		}
	}
}

// Pins returns how many releases with a pin on a Node the watcher checked.
func (pw *PlacementWatcher) Pins() int {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	return pw.pins
}

// checkDomains checks that slice name occupies at most one domain and shares it with no other
// slice. Called with mu held.
func (pw *PlacementWatcher) checkDomains(name string) {
	occupied := pw.occupied()
	mine := occupied[name]
	if len(mine) > 1 {
		pw.violatef("slice %s split over domains %v", name, slices.Sorted(maps.Keys(mine)))
	}
	for other, domains := range occupied {
		if other == name {
			continue
		}
		for d := range mine {
			if domains[d] {
				pair := []string{name, other}
				slices.Sort(pair)
				pw.violatef("slices %s and %s both in domain %s", pair[0], pair[1], d)
			}
		}
	}
}

// occupied returns, for each slice with a placement, the domains its live Pods are released onto
// (nodeSelector) or bound in (their Node's value of the slice's key). Called with mu held.
func (pw *PlacementWatcher) occupied() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, p := range pw.pods {
		s := pw.slices[p.slice]
		if !p.live || s == nil || s.Spec.Placement == "" {
			continue
		}
		if out[p.slice] == nil {
			out[p.slice] = map[string]bool{}
		}
		if p.selector != "" && !p.gated {
			out[p.slice][p.selector] = true
		}
		if p.node != "" {
			out[p.slice][pw.nodeLabels[p.node][s.Spec.AffinityTopologyKey]] = true
		}
	}
	return out
}

// slice returns slice name of namespace ns, read from the API server the first time (or again
// with fresh), nil if it cannot be read. Called with mu held.
func (pw *PlacementWatcher) slice(ctx context.Context, ns, name string, fresh bool) *tpuv1alpha1.TPUSliceAssignment {
	if s, ok := pw.slices[name]; ok && !fresh {
		return s
	}
	var s tpuv1alpha1.TPUSliceAssignment
	if err := pw.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		return nil
	}
	pw.slices[name] = &s
	return &s
}

// violatef records a violation the first time it is seen. Called with mu held.
func (pw *PlacementWatcher) violatef(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !pw.reported[msg] {
		pw.reported[msg] = true
		pw.errs = append(pw.errs, msg)
	}
}
