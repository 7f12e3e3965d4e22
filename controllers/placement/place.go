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
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/gate"
	"github.com/ray-tpu/tpu-slice-operator/internal/health"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	rules "github.com/ray-tpu/tpu-slice-operator/internal/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/reads"
	"github.com/ray-tpu/tpu-slice-operator/internal/slicectrl"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// The placement step of a ChosenDomain slice (docs/spec.md §12): the webhook admits its Pods with
// the scheduling gate tpu.ray.io/slice-placement and no inter-pod terms; here the reconciler
// chooses one domain of spec.affinityTopologyKey with room for the whole slice
// (rules.Choose), takes it by creating the domain's Lease, records it in status.domain with
// condition DomainChosen, and releases every gated Pod with a nodeSelector on it.

// +kubebuilder:rbac:groups="",resources=pods,verbs=patch;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=system,resources=leases,verbs=get;list;watch;create;update;delete

const (
	// releaseConcurrency bounds the Pod patches one reconcile makes at once.
	releaseConcurrency = 64
	// heldRequeueDelay is how soon a slice chooses again after the domain it chose turned out to be
	// held (its Lease's create failed) more often than choose tries in one reconcile.
	heldRequeueDelay = 200 * time.Millisecond
	// noFitRecheck is how often a slice no domain fits chooses again without any event: Node,
	// Pod, slice and Lease events re-queue it sooner (waitingSlices).
	noFitRecheck = 30 * time.Second
	// chooseAttempts bounds the choices one reconcile makes when chosen domains turn out held.
	chooseAttempts = 3
	// priorityRecheck is how soon a slice that left a domain to a waiting slice of higher
	// priority chooses again: that slice's own reconcile takes the domain meanwhile.
	priorityRecheck = 5 * time.Second
)

var (
	// errDomainTaken is a Lease write that lost a race: choose again on fresh data.
	errDomainTaken = errors.New("domain lease changed since it was read")
	// errStatusConflict is a status write that lost a race: decide again on fresh data.
	errStatusConflict = errors.New("slice changed since it was read")
)

// place runs the placement step for slice, whose cached Pods are pods, and returns how soon to
// look at the slice again.
func (r *Reconciler) place(ctx context.Context, rc *rayv1.RayCluster, slice *tpuv1alpha1.TPUSliceAssignment,
	pods []corev1.Pod) (time.Duration, error) {
	switch slice.Spec.Placement {
	case tpuv1alpha1.PlacementInterPodAffinity:
		// Unset is the default, as the webhook reads it (rules.DecideMode).
		if cmp.Or(r.slicePlacement, rules.DefaultMode) == tpuv1alpha1.PlacementChosenDomain {
			r.warnInterPodAffinity(rc, slice)
		}
		return 0, nil
	case tpuv1alpha1.PlacementChosenDomain:
	default:
		return 0, nil
	}
	key := slice.Spec.AffinityTopologyKey
	if key == "" {
		return 0, nil
	}
	pods = slicectrl.Of(slice, pods)
	if !anyLive(pods) && len(slice.Status.Claims) > 0 {
		// The cache shows no live Pod, but a claim names one: it may only have left the
		// label-selected cache (docs/spec.md §8), and giving its domain back would let another
		// slice take the Node it runs on. A live read decides.
		lv, err := slicectrl.LivePods(ctx, r.reader, r.tombstones, slice)
		if err != nil {
			return 0, err
		}
		pods = slicectrl.Of(slice, lv.Pods)
	}
	if !anyLive(pods) {
		// No Pod left: the slice gives its domain back; its next Pods choose again.
		return 0, r.forgetDomain(ctx, slice)
	}
	if err := r.replaceStranded(ctx, slice, pods); err != nil {
		return 0, err
	}
	asm := gate.Assemble(slice.Spec.Hosts, pods, r.clock.Now(), r.assemblyTimeout)
	if len(asm.Gated) == 0 {
		if err := r.giveBack(ctx, slice, slice.Status.Domain); err != nil {
			return 0, err
		}
		return 0, r.withdrawCapacity(ctx, slice, true)
	}
	// A slice whose Pods already went to its domain releases a late Pod at once: waiting for the
	// rest would only keep the Pod from the domain the slice is in.
	committed := slice.Status.Domain != "" && gate.Committed(pods, key)
	if !asm.Ready && !committed {
		if wait := r.bursts.wait(client.ObjectKeyFromObject(slice), r.clock.Now()); wait > 0 {
			// Pods of the slice are still being created: each would change the message, and each
			// write would make the next claim's write conflict (docs/spec.md §8).
			return min(wait, asm.Wait), nil
		}
		return asm.Wait, r.waitForPods(ctx, rc, slice, asm)
	}
	return r.choose(ctx, rc, slice, pods, asm)
}

// anyLive reports whether a Pod of pods is live (lifecycle.PodLive).
func anyLive(pods []corev1.Pod) bool {
	for i := range pods {
		if lifecycle.PodLive(&pods[i]) {
			return true
		}
	}
	return false
}

// choose asks rules.Choose for a domain and acts on the answer.
func (r *Reconciler) choose(ctx context.Context, rc *rayv1.RayCluster, slice *tpuv1alpha1.TPUSliceAssignment,
	pods []corev1.Pod, asm gate.Assembly) (time.Duration, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("slice", klog.KObj(slice))
	// The cached Nodes are read, never written: a choice does not copy every TPU Node of the
	// cluster (the cache mutation detector checks that in every suite on a control plane).
	var nodes corev1.NodeList
	if err := r.client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return 0, fmt.Errorf("listing TPU Nodes for slice %s: %w", slice.Name, err)
	}
	usage, excluded, repelling, err := r.occupancy(ctx, slice, pods, nodes.Items)
	if err != nil {
		return 0, err
	}
	holds, otherHolds, err := r.holds(ctx, slice.Spec.AffinityTopologyKey)
	if err != nil {
		return 0, err
	}
	confirmed := false
	for range chooseAttempts {
		req := gate.NewRequest(slice, pods, nodes.Items, usage, excluded, holds)
		req.OtherHolds = otherHolds
		r.candidates.remember(slice, req.NodeSelector, req.NodeAffinity)
		choice, err := rules.Choose(req)
		if err != nil {
			// The slice's Pods request no TPU: nothing to choose for; they stay gated.
			log.Error(err, "Cannot choose a domain for slice")
			return 0, nil
		}
		leaves := choice.Outcome == rules.OutcomeChosen || req.Previous != ""
		if !choice.Kept && leaves && !req.PodsBound && !confirmed {
			// A domain other than the recorded one, or none (the recorded one given back), because
			// no cached Pod of the slice is bound or selects a domain yet. The cache may not show
			// the Pods a reconcile just released: released Pods never leave their domain, and
			// releasing the rest elsewhere splits the slice, giving the domain back lets another
			// slice take it (docs/spec.md §12). Found by the chaos run: a late host's reconcile,
			// its Pod cache behind the release of three Pods onto a pool that then lost a Node,
			// released the fourth onto another pool. A live read decides.
			lv, err := slicectrl.LivePods(ctx, r.reader, r.tombstones, slice)
			if err != nil {
				return 0, err
			}
			confirmed = true
			if live := slicectrl.Of(slice, lv.Pods); gate.Committed(live, slice.Spec.AffinityTopologyKey) {
				log.V(1).Info("Pods of the slice the cache shows gated were released; choosing on the live Pods")
				pods = live
				continue
			}
		}
		switch choice.Outcome {
		case rules.OutcomeNoFit, rules.OutcomeFallback:
			// With no Node of the key's label (any more, the fallback outcome), releasing the Pods
			// with no selector could split the slice over domains, and they carry no inter-pod
			// terms. Either way they stay gated, and the slice asks for capacity (capacity.go).
			ask, err := r.askCapacity(ctx, slice, pods, nodes.Items)
			if err != nil {
				return 0, err
			}
			return ask.requeue, r.noFit(ctx, rc, slice, choice.Reason, ask)
		}
		if !choice.Kept && !req.PodsBound {
			// The domain goes to the highest priority first (docs/spec.md §12, "Priority").
			higher, err := r.higherWaiting(ctx, slice, pods, choice.Domain, nodes.Items, usage, repelling, holds, otherHolds)
			if err != nil {
				return 0, err
			}
			if higher != "" {
				msg := fmt.Sprintf("%s=%s fits the slice, but slice %s of higher priority waits for it and takes it first", choice.Key, choice.Domain, higher)
				return priorityRecheck, r.noFit(ctx, rc, slice, msg, capacityAsk{})
			}
		}
		held, err := r.takeDomain(ctx, slice, choice.Key, choice.Domain)
		switch {
		case errors.Is(err, errDomainTaken):
			return heldRequeueDelay, nil
		case err != nil:
			return 0, err
		case held != nil:
			log.V(1).Info("Chosen domain is held by another slice; choosing again", "domain", choice.Domain, "holder", held.Slice)
			holds = append(holds, *held)
			continue
		}
		return r.release(ctx, rc, slice, choice, rules.UsableNodes(req, choice.Domain), asm)
	}
	return heldRequeueDelay, nil
}

// higherWaiting returns the first (by namespace and name) slice of the same key, waiting for a
// domain (DomainChosen False, NoDomainFits), whose gated Pods have a higher priority than the
// slice's and for which rules.Choose, asked as its own reconcile would ask it (its Pods, the
// same Nodes, usage, anti-affinity exclusions and holds), chooses domain too; "" for none. Such a slice takes the domain
// first: a lower-priority slice never takes a domain from under a higher-priority one that waits.
func (r *Reconciler) higherWaiting(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment, pods []corev1.Pod,
	domain string, nodes []corev1.Node, usage map[string]*gate.Usage, repelling []corev1.Pod, holds []rules.Hold,
	otherHolds []rules.KeyHold) (string, error) {
	mine := gate.Priority(pods)
	var list tpuv1alpha1.TPUSliceAssignmentList
	if err := r.client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return "", fmt.Errorf("listing slices waiting for a domain: %w", err)
	}
	var waiting []*tpuv1alpha1.TPUSliceAssignment
	for i := range list.Items {
		s := &list.Items[i]
		c := apimeta.FindStatusCondition(s.Status.Conditions, tpuv1alpha1.ConditionDomainChosen)
		if (s.Namespace == slice.Namespace && s.Name == slice.Name) || s.Spec.Placement != tpuv1alpha1.PlacementChosenDomain ||
			s.Spec.AffinityTopologyKey != slice.Spec.AffinityTopologyKey ||
			c == nil || c.Status != metav1.ConditionFalse || c.Reason != tpuv1alpha1.ReasonNoDomainFits {
			continue
		}
		waiting = append(waiting, s)
	}
	slices.SortFunc(waiting, func(a, b *tpuv1alpha1.TPUSliceAssignment) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	for _, s := range waiting {
		var theirs corev1.PodList
		if err := r.client.List(ctx, &theirs, client.InNamespace(s.Namespace), client.MatchingFields{identity.SliceIndex: s.Name}); err != nil {
			return "", fmt.Errorf("listing the Pods of slice %s: %w", s.Name, err)
		}
		if gate.Priority(theirs.Items) <= mine {
			continue
		}
		// The same anti-affinity exclusions its own reconcile reads: a domain the slice could not
		// take would otherwise hold this one back for good.
		theirUIDs := make(map[types.UID]bool, len(theirs.Items))
		var target *corev1.Pod
		for i := range theirs.Items {
			theirUIDs[theirs.Items[i].UID] = true
			if target == nil && lifecycle.PodLive(&theirs.Items[i]) && tpuenv.HasGate(&theirs.Items[i]) {
				target = &theirs.Items[i]
			}
		}
		excluded := gate.Excluded(repelling, nodes, func(p *corev1.Pod) bool { return theirUIDs[p.UID] }, target)
		req := gate.NewRequest(s, theirs.Items, nodes, usage, excluded, holds)
		req.OtherHolds = otherHolds
		if c, err := rules.Choose(req); err == nil && c.Outcome == rules.OutcomeChosen && c.Domain == domain {
			return s.Namespace + "/" + s.Name, nil
		}
	}
	return "", nil
}

// occupancy reads what other Pods take of each Node, from the caches: what the Pods bound to it,
// whatever created them (the bound Pods' tracker), and the other slices' Pods pinned to it but not
// bound yet (the worker Pod cache) request, less the slice's own (gate.Usage); and the bound Pod
// whose required pod anti-affinity excludes the slice's Pods from it (gate.Excluded, judged on a
// gated Pod of the slice). Without a tracker (a reconciler built by hand) only the worker Pods
// count.
func (r *Reconciler) occupancy(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment, pods []corev1.Pod,
	nodes []corev1.Node) (map[string]*gate.Usage, map[string]string, []corev1.Pod, error) {
	var all corev1.PodList
	if err := r.client.List(ctx, &all, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, nil, fmt.Errorf("listing Pods for the resources requested on Nodes: %w", err)
	}
	// The slice's own capacity Pods are deleted once its Pods are released: the Nodes they hold
	// are the slice's.
	capacityPods, err := r.ownCapacityPods(ctx, slice)
	if err != nil {
		return nil, nil, nil, err
	}
	ownUIDs := make(map[types.UID]bool, len(pods)+len(capacityPods))
	for i := range pods {
		ownUIDs[pods[i].UID] = true
	}
	for i := range capacityPods {
		ownUIDs[capacityPods[i].UID] = true
	}
	for i := range all.Items {
		p := &all.Items[i]
		if id, ok := identity.FromPod(p); ok && p.Namespace == slice.Namespace && id.SliceName() == slice.Name {
			ownUIDs[p.UID] = true
		}
	}
	own := func(p *corev1.Pod) bool { return ownUIDs[p.UID] }
	var target *corev1.Pod
	for i := range pods {
		if lifecycle.PodLive(&pods[i]) && tpuenv.HasGate(&pods[i]) {
			target = &pods[i]
			break
		}
	}
	if r.bound == nil {
		return gate.NodeUsage(all.Items, own), gate.Excluded(all.Items, nodes, own, target), all.Items, nil
	}
	// The tracker sums every bound Pod; the worker Pods add those pinned and not bound yet, and
	// the slice's own bound Pods are taken off.
	var pinned, ownBound []corev1.Pod
	for i := range capacityPods {
		if p := &capacityPods[i]; p.Spec.NodeName != "" && r.bound.Has(p.UID, p.Spec.NodeName) {
			ownBound = append(ownBound, *p)
		}
	}
	for i := range all.Items {
		p := &all.Items[i]
		switch {
		case p.Spec.NodeName == "" && !own(p):
			pinned = append(pinned, *p)
		case p.Spec.NodeName != "" && own(p) && r.bound.Has(p.UID, p.Spec.NodeName):
			ownBound = append(ownBound, *p)
		}
	}
	usage := gate.NodeUsage(pinned, func(*corev1.Pod) bool { return false })
	takeOff := gate.NodeUsage(ownBound, func(*corev1.Pod) bool { return false })
	for i := range nodes {
		name := nodes[i].Name
		tracked, ok := r.bound.Usage(name)
		if !ok {
			continue
		}
		u := usage[name]
		if u == nil {
			u = &gate.Usage{Requests: corev1.ResourceList{}}
			usage[name] = u
		}
		u.Add(tracked)
		if off := takeOff[name]; off != nil {
			u.Sub(*off)
		}
	}
	repelling := append(r.bound.Repelling(), all.Items...)
	return usage, gate.Excluded(repelling, nodes, own, target), repelling, nil
}

// holds returns the domains of key that domain Leases lock, and those of other keys (a Node in
// one is another slice's, docs/spec.md §12). A Lease whose holder slice is gone
// (confirmed by a live read by name and UID) is deleted instead, conditional on its UID and
// resourceVersion, and holds nothing.
func (r *Reconciler) holds(ctx context.Context, key string) ([]rules.Hold, []rules.KeyHold, error) {
	leases, err := r.leases(ctx)
	if err != nil {
		return nil, nil, err
	}
	kept := leases[:0]
	for i := range leases {
		lock, ok := gate.LockOf(&leases[i])
		if !ok {
			continue
		}
		alive, err := r.holderAlive(ctx, lock.Holder)
		if err != nil {
			return nil, nil, err
		}
		if !alive {
			if err := r.deleteLease(ctx, &leases[i], "its holder slice "+lock.Holder.Slice()+" is gone"); err != nil {
				return nil, nil, err
			}
			continue
		}
		kept = append(kept, leases[i])
	}
	return gate.Holds(kept, key), gate.OtherHolds(kept, key), nil
}

// leases lists the domain Leases from the cache.
func (r *Reconciler) leases(ctx context.Context) ([]coordinationv1.Lease, error) {
	var list coordinationv1.LeaseList
	if err := r.client.List(ctx, &list, client.InNamespace(r.leaseNamespace), client.MatchingLabels{gate.LeaseLabel: "true"}); err != nil {
		return nil, fmt.Errorf("listing domain Leases in %s: %w", r.leaseNamespace, err)
	}
	return list.Items, nil
}

// holderAlive reports whether the slice a Lease names exists with its UID: from the cache, and,
// when the cache says no, from the API server.
func (r *Reconciler) holderAlive(ctx context.Context, h gate.Holder) (bool, error) {
	s, err := reads.CacheThenLive(ctx, r.client, r.reader, types.NamespacedName{Namespace: h.Namespace, Name: h.Name},
		func(s *tpuv1alpha1.TPUSliceAssignment) bool { return s.UID == h.UID })
	if err != nil {
		return false, fmt.Errorf("reading slice %s of a domain Lease: %w", h.Slice(), err)
	}
	return s != nil && s.UID == h.UID, nil
}

// deleteLease deletes a domain Lease conditional on the UID and resourceVersion it was read with.
func (r *Reconciler) deleteLease(ctx context.Context, lease *coordinationv1.Lease, why string) error {
	uid, rv := lease.UID, lease.ResourceVersion
	if err := r.client.Delete(ctx, lease, client.Preconditions{UID: &uid, ResourceVersion: &rv}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil // gone, or taken over since it was read: no longer ours to delete.
		}
		return fmt.Errorf("deleting domain Lease %s: %w", lease.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Deleted domain Lease", "lease", klog.KObj(lease), "reason", why)
	return nil
}

// takeDomain takes domain of key for slice: it creates the domain's Lease. When the Lease exists
// it is the slice's own (nil, nil), another live slice's (its Hold), or a gone slice's, which is
// taken over with an update conditional on the resourceVersion read (errDomainTaken when that
// loses). Two slices, or two replicas, never both take one domain: one create, or one update of
// one resourceVersion, succeeds.
func (r *Reconciler) takeDomain(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment, key, domain string) (*rules.Hold, error) {
	me := gate.HolderOf(slice)
	lease := gate.NewLease(r.leaseNamespace, key, domain, me)
	err := r.client.Create(ctx, lease, client.FieldOwner(constants.FieldManager))
	if err == nil {
		ctrl.LoggerFrom(ctx).Info("Took domain for slice", "slice", klog.KObj(slice), "key", key, "domain", domain, "lease", lease.Name)
		return nil, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating domain Lease %s: %w", lease.Name, err)
	}
	existing := &coordinationv1.Lease{}
	if err := r.reader.Get(ctx, client.ObjectKeyFromObject(lease), existing); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errDomainTaken // deleted since: choose again.
		}
		return nil, fmt.Errorf("reading domain Lease %s: %w", lease.Name, err)
	}
	lock, ok := gate.LockOf(existing)
	if ok && lock.Holder.UID == slice.UID {
		return nil, nil
	}
	if ok {
		alive, err := r.holderAlive(ctx, lock.Holder)
		if err != nil {
			return nil, err
		}
		if alive {
			return &rules.Hold{Domain: domain, Slice: lock.Holder.Slice(), UID: lock.Holder.UID}, nil
		}
	}
	// The holder is gone (or the Lease says nothing readable): take it over, conditional on the
	// resourceVersion read.
	existing.Labels, existing.Annotations, existing.Spec = lease.Labels, lease.Annotations, lease.Spec
	if err := r.client.Update(ctx, existing, client.FieldOwner(constants.FieldManager)); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil, errDomainTaken
		}
		return nil, fmt.Errorf("taking over domain Lease %s: %w", lease.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Took over domain Lease of a gone slice", "slice", klog.KObj(slice), "domain", domain, "previousHolder", lock.Holder.String())
	return nil, nil
}

// giveBack deletes the slice's domain Leases other than keep's ("" for all).
func (r *Reconciler) giveBack(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment, keep string) error {
	leases, err := r.leases(ctx)
	if err != nil {
		return err
	}
	for i := range leases {
		lock, ok := gate.LockOf(&leases[i])
		if !ok || lock.Holder.UID != slice.UID || (keep != "" && lock.Domain == keep && lock.Key == slice.Spec.AffinityTopologyKey) {
			continue
		}
		if err := r.deleteLease(ctx, &leases[i], "slice "+slice.Name+" gives the domain back"); err != nil {
			return err
		}
	}
	return nil
}

// releaseGone deletes the domain Leases held by the slice key names, once a live read confirms that
// slice gone (or of another UID).
func (r *Reconciler) releaseGone(ctx context.Context, key types.NamespacedName) error {
	leases, err := r.leases(ctx)
	if err != nil {
		return err
	}
	for i := range leases {
		lock, ok := gate.LockOf(&leases[i])
		if !ok || lock.Holder.Namespace != key.Namespace || lock.Holder.Name != key.Name {
			continue
		}
		alive, err := r.holderAlive(ctx, lock.Holder)
		if err != nil || alive {
			return err
		}
		if err := r.deleteLease(ctx, &leases[i], "its holder slice "+lock.Holder.Slice()+" is gone"); err != nil {
			return err
		}
	}
	return nil
}

// forgetDomain gives every domain of a slice with no Pod left back and clears status.domain and
// DomainChosen.
func (r *Reconciler) forgetDomain(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment) error {
	if err := r.giveBack(ctx, slice, ""); err != nil {
		return err
	}
	if err := r.withdrawCapacity(ctx, slice, true); err != nil {
		return err
	}
	if slice.Status.Domain == "" && apimeta.FindStatusCondition(slice.Status.Conditions, tpuv1alpha1.ConditionDomainChosen) == nil {
		return nil
	}
	updated := slice.DeepCopy()
	updated.Status.Domain = ""
	apimeta.RemoveStatusCondition(&updated.Status.Conditions, tpuv1alpha1.ConditionDomainChosen)
	return r.updatePlacement(ctx, updated)
}

// waitForPods records that the slice's gated Pods wait for the rest of its Pods.
func (r *Reconciler) waitForPods(ctx context.Context, rc *rayv1.RayCluster, slice *tpuv1alpha1.TPUSliceAssignment,
	asm gate.Assembly) error {
	msg := fmt.Sprintf(msgWaitingForPods, len(asm.Gated), missingHosts(asm.Missing), asm.Deadline.UTC().Format(time.RFC3339))
	if slice.Status.Domain != "" {
		msg += fmt.Sprintf("; %s=%s was chosen before", slice.Spec.AffinityTopologyKey, slice.Status.Domain)
	}
	before := apimeta.FindStatusCondition(slice.Status.Conditions, tpuv1alpha1.ConditionDomainChosen)
	changed, err := r.setDomainChosen(ctx, slice, slice.Status.Domain, metav1.ConditionFalse, tpuv1alpha1.ReasonWaitingForPods, msg)
	if err != nil || !changed {
		return err
	}
	if before == nil || before.Reason != tpuv1alpha1.ReasonWaitingForPods {
		r.recorder.Eventf(rc, slice, corev1.EventTypeNormal, tpuv1alpha1.ReasonTPUSliceGated, "Place", "%s",
			slicectrl.BoundedNote(fmt.Sprintf(noteTPUSliceGated, slice.Name, msg)))
	}
	return nil
}

// missingHosts names the missing worker IDs compactly.
func missingHosts(ids []int32) string {
	if len(ids) == 0 {
		return "none"
	}
	return health.Hosts(ids)
}

// noFit records that no domain fits the slice now; its Pods stay gated and the domain it had
// chosen, which no longer fits and holds no Pod, is given back.
func (r *Reconciler) noFit(ctx context.Context, rc *rayv1.RayCluster, slice *tpuv1alpha1.TPUSliceAssignment,
	msg string, ask capacityAsk) error {
	if err := r.giveBack(ctx, slice, ""); err != nil {
		return err
	}
	before := apimeta.FindStatusCondition(slice.Status.Conditions, tpuv1alpha1.ConditionDomainChosen)
	beforeCapacity := apimeta.FindStatusCondition(slice.Status.Conditions, tpuv1alpha1.ConditionCapacity)
	if beforeCapacity != nil {
		beforeCapacity = beforeCapacity.DeepCopy()
	}
	full := msg
	if ask.note != "" {
		full += "; " + ask.note
	}
	changed, err := r.setDomainChosen(ctx, slice, "", metav1.ConditionFalse, tpuv1alpha1.ReasonNoDomainFits, full, ask.cond)
	if err != nil || !changed {
		return err
	}
	if before == nil || before.Reason != tpuv1alpha1.ReasonNoDomainFits || before.Message != full {
		if before == nil || before.Reason != tpuv1alpha1.ReasonNoDomainFits || !strings.HasPrefix(before.Message, msg) {
			r.recorder.Eventf(rc, slice, corev1.EventTypeWarning, tpuv1alpha1.ReasonTPUSliceNoDomain, "Place", "%s",
				slicectrl.BoundedNote(fmt.Sprintf(noteTPUSliceNoDomain, slice.Name, msg)))
		}
		ctrl.LoggerFrom(ctx).Info("No domain fits slice; its Pods stay gated", "slice", klog.KObj(slice), "why", full)
	}
	if c := ask.cond; c != nil && (beforeCapacity == nil || beforeCapacity.Reason != c.Reason) {
		switch {
		case ask.warning:
			r.recorder.Eventf(rc, slice, corev1.EventTypeWarning, tpuv1alpha1.ReasonTPUSliceCapacityFailed, "Provision", "%s",
				slicectrl.BoundedNote(fmt.Sprintf(noteTPUSliceCapacity, slice.Name, c.Message)))
		case c.Reason == tpuv1alpha1.ReasonProvisioningRequested || c.Reason == tpuv1alpha1.ReasonCapacityPodsPending:
			r.recorder.Eventf(rc, slice, corev1.EventTypeNormal, tpuv1alpha1.ReasonTPUSliceCapacityRequested, "Provision", "%s",
				slicectrl.BoundedNote(fmt.Sprintf(noteTPUSliceCapacity, slice.Name, c.Message)))
		}
	}
	return nil
}

// release records the chosen domain, gives back any other, and releases the gated Pods onto it,
// each pinned to a free Node of usable (the domain's usable Nodes). A pinnable Pod for which no
// free Node is left stays gated, and the slice is looked at again after noFitRecheck: released
// with the nodeSelector alone, it could bind to the Node a sibling is pinned to and strand it.
func (r *Reconciler) release(ctx context.Context, rc *rayv1.RayCluster, slice *tpuv1alpha1.TPUSliceAssignment,
	choice rules.Choice, usable []string, asm gate.Assembly) (time.Duration, error) {
	reason := tpuv1alpha1.ReasonDomainFits
	if choice.Outcome == rules.OutcomeBound {
		reason = tpuv1alpha1.ReasonPodsBound
	}
	if _, err := r.setDomainChosen(ctx, slice, choice.Domain, metav1.ConditionTrue, reason, choice.Reason); err != nil {
		return 0, err
	}
	if err := r.giveBack(ctx, slice, choice.Domain); err != nil {
		return 0, err
	}
	gated, pins, err := r.pins(ctx, slice, asm.Gated, usable)
	if err != nil {
		return 0, err
	}
	toRelease := make([]*corev1.Pod, 0, len(gated))
	var held []string
	for _, p := range gated {
		if gate.Pinnable(p) && pins[p.UID] == "" {
			held = append(held, p.Name)
			continue
		}
		toRelease = append(toRelease, p)
	}
	var requeue time.Duration
	if len(held) > 0 {
		requeue = noFitRecheck
		ctrl.LoggerFrom(ctx).Info("No free usable Node of the slice's domain for gated Pods; they stay gated", "slice", klog.KObj(slice),
			"key", choice.Key, "domain", choice.Domain, "pods", held)
	}
	annotations, err := r.consumeAnnotations(ctx, slice)
	if err != nil {
		return 0, err
	}
	released, pinned, err := r.releasePods(ctx, toRelease, choice.Key, choice.Domain, pins, annotations)
	if err == nil && released > 0 {
		// The released Pods are pinned to the Nodes the slice's capacity Pods may hold.
		err = r.withdrawCapacity(ctx, slice, false)
	}
	if released > 0 {
		note := fmt.Sprintf(noteTPUSliceDomainChosen, released, slice.Name, choice.Key, choice.Domain, pinned, choice.Reason)
		if asm.TimedOut {
			note += fmt.Sprintf(" (released after the %s assembly timeout without %s)", r.assemblyTimeout, missingHosts(asm.Missing))
		}
		r.recorder.Eventf(rc, slice, corev1.EventTypeNormal, tpuv1alpha1.ReasonTPUSliceDomainChosen, "Place", "%s", slicectrl.BoundedNote(note))
		ctrl.LoggerFrom(ctx).Info("Released gated Pods of slice onto its domain", "slice", klog.KObj(slice), "key", choice.Key,
			"domain", choice.Domain, "pods", released, "pinned", pinned, "timedOut", asm.TimedOut)
	}
	return requeue, err
}

// pins returns the gated Pods to release and the Node each is pinned to (gate.AssignNodes), on a
// live read of the slice's Pods: a pin the cache has not seen yet, or a Pod bound since, must not
// be handed out again (two Pods pinned to one Node: one never binds). Without a pinnable gated Pod
// or a usable Node it reads nothing and pins nothing.
func (r *Reconciler) pins(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment, cached []*corev1.Pod,
	usable []string) ([]*corev1.Pod, map[types.UID]string, error) {
	if len(usable) == 0 || !slices.ContainsFunc(cached, gate.Pinnable) {
		return cached, nil, nil
	}
	lv, err := slicectrl.LivePods(ctx, r.reader, r.tombstones, slice)
	if err != nil {
		return nil, nil, err
	}
	live := slicectrl.Of(slice, lv.Pods)
	gated := make([]*corev1.Pod, 0, len(cached))
	for i := range live {
		if lifecycle.PodLive(&live[i]) && tpuenv.HasGate(&live[i]) {
			gated = append(gated, &live[i])
		}
	}
	return gated, gate.AssignNodes(gated, live, usable), nil
}

// releasePods patches each gated Pod, releaseConcurrency at once, with ReleasePatch, pinned to
// its Node in pins. A patch that fails its test (the Pod was released or changed since it was
// read) or finds the Pod gone is skipped: the Pod's own event reconciles the slice again. It
// returns how many Pods it released, and how many of them pinned.
func (r *Reconciler) releasePods(ctx context.Context, gated []*corev1.Pod, key, domain string,
	pins map[types.UID]string, annotations map[string]string) (released, pinned int, _ error) {
	var (
		mu    sync.Mutex
		errs  []error
		wg    sync.WaitGroup
		slots = make(chan struct{}, releaseConcurrency)
	)
	for _, pod := range gated {
		node := pins[pod.UID]
		patch, err := gate.ReleasePatchWith(pod, key, domain, node, annotations)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name}}
			err := r.client.Patch(ctx, target, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(constants.FieldManager))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				released++
				if node != "" {
					pinned++
				}
			case apierrors.IsNotFound(err), apierrors.IsInvalid(err), apierrors.IsConflict(err):
				ctrl.LoggerFrom(ctx).V(1).Info("Gated Pod changed since it was read; not released now", "pod", klog.KObj(pod), "err", err.Error())
			default:
				errs = append(errs, fmt.Errorf("releasing Pod %s: %w", pod.Name, err))
			}
		})
	}
	wg.Wait()
	return released, pinned, errors.Join(errs...)
}

// replaceStranded deletes the slice's released Pods that can never bind where they are pinned
// (gate.Stranded: their Node is gone, or Pods bound to it took its chips), so that their owner
// re-creates them and they are released onto a free Node of the domain. The caches only
// nominate: each is confirmed on live reads of the slice's Pods, the Node and the Pods bound to
// it, and deleted conditional on the UID and resourceVersion read, so a Pod that bound since is
// never deleted.
func (r *Reconciler) replaceStranded(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment, pods []corev1.Pod) error {
	if !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Spec.NodeName == "" && gate.PinnedNode(&p) != "" }) {
		return nil
	}
	cached, err := r.cachedNodeView(ctx)
	if err != nil {
		return err
	}
	if len(gate.Stranded(pods, cached)) == 0 {
		return nil
	}
	lv, err := slicectrl.LivePods(ctx, r.reader, r.tombstones, slice)
	if err != nil {
		return err
	}
	var errs []error
	view := r.liveNodeView(ctx, &errs)
	boundTo := view.BoundTo
	view.BoundTo = func(node string) []*corev1.Pod {
		// The slice's own capacity Pods are deleted once its Pods are released: they strand none.
		return slices.DeleteFunc(boundTo(node), func(p *corev1.Pod) bool { return p.Namespace == slice.Namespace && ownedBy(p, sliceOf(slice)) })
	}
	for _, s := range gate.Stranded(slicectrl.Of(slice, lv.Pods), view) {
		uid, rv := s.Pod.UID, s.Pod.ResourceVersion
		if err := r.client.Delete(ctx, s.Pod, client.Preconditions{UID: &uid, ResourceVersion: &rv}); err != nil {
			if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				errs = append(errs, fmt.Errorf("deleting stranded Pod %s: %w", s.Pod.Name, err))
			}
			continue
		}
		r.recorder.Eventf(s.Pod, slice, corev1.EventTypeWarning, tpuv1alpha1.ReasonTPUPodStranded, "Delete", "%s",
			slicectrl.BoundedNote(fmt.Sprintf(noteTPUPodStranded, slice.Name, slice.Spec.AffinityTopologyKey, slice.Status.Domain, s.Node, s.Why)))
		r.metrics.PodsDeleted.Inc()
		ctrl.LoggerFrom(ctx).Info("Deleted a released Pod that cannot bind where it is pinned", "pod", klog.KObj(s.Pod),
			"slice", klog.KObj(slice), "node", s.Node, "why", s.Why)
	}
	return errors.Join(errs...)
}

// cachedNodeView is gate.NodeView on the caches: the TPU Nodes, and the worker Pods bound to them.
func (r *Reconciler) cachedNodeView(ctx context.Context) (gate.NodeView, error) {
	var all corev1.PodList
	if err := r.client.List(ctx, &all, client.UnsafeDisableDeepCopy); err != nil {
		return gate.NodeView{}, fmt.Errorf("listing Pods for the Nodes they are bound to: %w", err)
	}
	nodes := map[string]*corev1.Node{}
	get := func(name string) *corev1.Node {
		if n, ok := nodes[name]; ok {
			return n
		}
		n := &corev1.Node{}
		if err := r.client.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
			n = nil
		}
		nodes[name] = n
		return n
	}
	workers := gate.BoundByNode(all.Items)
	boundTo := workers
	if r.bound != nil {
		// The Pods of other kinds bound to the Node (a Job's, say) take chips too: they stand as
		// one Pod with the chips the tracker counts beyond the worker Pods'. This view only
		// nominates; the live view names them.
		boundTo = func(name string) []*corev1.Pod {
			out := workers(name)
			tracked, ok := r.bound.Usage(name)
			if !ok {
				return out
			}
			chips := tracked.Requests[constants.TPUResourceName]
			for _, p := range out {
				if r.bound.Has(p.UID, name) {
					chips.Sub(*resource.NewQuantity(gate.PodChips(p), resource.DecimalSI))
				}
			}
			if chips.Sign() > 0 {
				other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "(Pods not of KubeRay)", UID: types.UID("other-pods-on-" + name)},
					Spec: corev1.PodSpec{NodeName: name, Containers: []corev1.Container{{Name: "tpu",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{constants.TPUResourceName: chips}}}}}}
				out = append(slices.Clip(out), other)
			}
			return out
		}
	}
	return gate.NodeView{
		Gone:             func(name string) bool { n := get(name); return n == nil || n.DeletionTimestamp != nil },
		AllocatableChips: func(name string) int64 { return allocatableChips(get(name)) },
		BoundTo:          boundTo,
		Labels: func(name string) (map[string]string, bool) {
			n := get(name)
			return nodeLabels(n), n != nil
		},
	}, nil
}

// liveNodeView is gate.NodeView on live reads: each Node by name, and the Pods bound to it by a
// field selector. A read that fails is recorded in errs and reads as a Node that takes the Pod.
func (r *Reconciler) liveNodeView(ctx context.Context, errs *[]error) gate.NodeView {
	type read struct {
		node   *corev1.Node // nil: not found
		failed bool
	}
	nodes := map[string]read{}
	get := func(name string) read {
		if rd, ok := nodes[name]; ok {
			return rd
		}
		n := &corev1.Node{}
		rd := read{node: n}
		switch err := r.reader.Get(ctx, types.NamespacedName{Name: name}, n); {
		case apierrors.IsNotFound(err):
			rd.node = nil
		case err != nil:
			*errs = append(*errs, fmt.Errorf("reading Node %s: %w", name, err))
			rd.failed = true
		}
		nodes[name] = rd
		return rd
	}
	return gate.NodeView{
		Gone: func(name string) bool {
			rd := get(name)
			return !rd.failed && (rd.node == nil || rd.node.DeletionTimestamp != nil)
		},
		AllocatableChips: func(name string) int64 {
			if rd := get(name); !rd.failed {
				return allocatableChips(rd.node)
			}
			return math.MaxInt64
		},
		Labels: func(name string) (map[string]string, bool) {
			rd := get(name)
			return nodeLabels(rd.node), !rd.failed && rd.node != nil
		},
		BoundTo: func(name string) []*corev1.Pod {
			var list corev1.PodList
			if err := r.reader.List(ctx, &list, client.MatchingFields{slicectrl.NodeNameIndex: name}); err != nil {
				*errs = append(*errs, fmt.Errorf("listing the Pods bound to Node %s: %w", name, err))
				return nil
			}
			var out []*corev1.Pod
			for i := range list.Items {
				if lifecycle.PodLive(&list.Items[i]) && list.Items[i].Spec.NodeName == name {
					out = append(out, &list.Items[i])
				}
			}
			return out
		},
	}
}

// nodeLabels is a Node's labels, nil for no Node.
func nodeLabels(n *corev1.Node) map[string]string {
	if n == nil {
		return nil
	}
	return n.Labels
}

// allocatableChips is a Node's allocatable google.com/tpu, 0 for none (or no Node).
func allocatableChips(n *corev1.Node) int64 {
	if n == nil {
		return 0
	}
	q, ok := n.Status.Allocatable[constants.TPUResourceName]
	if !ok {
		return 0
	}
	return q.Value()
}

// setDomainChosen writes status.domain and DomainChosen, and the Capacity condition when extra
// gives it, in one update conditional on the slice's resourceVersion: placement's own status
// fields, nothing else. The claim reconciler derives Scheduled's reason from DomainChosen in its
// next health write, which the slice's update event triggers (docs/spec.md §11). It reports
// whether it wrote; a lost conflict is an error, so that the slice is decided again.
func (r *Reconciler) setDomainChosen(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment,
	domain string, status metav1.ConditionStatus, reason, msg string, extra ...*metav1.Condition) (bool, error) {
	updated := slice.DeepCopy()
	updated.Status.Domain = domain
	changed := slice.Status.Domain != domain
	if apimeta.SetStatusCondition(&updated.Status.Conditions, metav1.Condition{
		Type: tpuv1alpha1.ConditionDomainChosen, Status: status, Reason: reason, Message: slicectrl.BoundedMessage(msg),
		ObservedGeneration: slice.Generation,
	}) {
		changed = true
	}
	for _, c := range extra {
		if c == nil {
			continue
		}
		c.ObservedGeneration = slice.Generation
		if apimeta.SetStatusCondition(&updated.Status.Conditions, *c) {
			changed = true
		}
	}
	if !changed {
		return false, nil
	}
	if err := r.updatePlacement(ctx, updated); err != nil {
		return false, err
	}
	*slice = *updated
	return true, nil
}

// updatePlacement writes the slice's status, conditional on its resourceVersion.
func (r *Reconciler) updatePlacement(ctx context.Context, updated *tpuv1alpha1.TPUSliceAssignment) error {
	if err := r.client.Status().Update(ctx, updated, client.FieldOwner(constants.FieldManager)); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return errStatusConflict
		}
		return fmt.Errorf("recording the domain of slice %s: %w", updated.Name, err)
	}
	return nil
}

// warnInterPodAffinity records, once per slice and process, that a slice is placed with
// inter-pod terms while the operator chooses domains: no TPU Node matching its Pods'
// nodeSelector had a value of its key when it was created.
func (r *Reconciler) warnInterPodAffinity(rc *rayv1.RayCluster, slice *tpuv1alpha1.TPUSliceAssignment) {
	if _, warned := r.warned.LoadOrStore(slice.UID, true); warned {
		return
	}
	r.recorder.Eventf(rc, slice, corev1.EventTypeWarning, tpuv1alpha1.ReasonTPUSliceInterPodAffinity, "Place",
		noteTPUSliceInterPodAffinity, slice.Name, slice.Spec.AffinityTopologyKey)
}
