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

// Package placement holds the placement reconciler: for a ChosenDomain slice it chooses one domain
// of the slice's key with room for the whole slice, takes it by a Lease, records it in
// status.domain with condition DomainChosen, releases the slice's gated Pods onto it pinned to a
// Node each, replaces the released Pods that can never bind, and asks for capacity when no domain
// fits (docs/spec.md §12). The rules it decides by are in internal/placement and internal/gate;
// the claims and health of the slice are the claim reconciler's (package controllers).
//
// It writes only status.domain and the DomainChosen and Capacity conditions of a slice, each
// write conditional on the resourceVersion read. The claim reconciler's health write, which the
// slice's update event triggers, derives Scheduled's reason from DomainChosen (docs/spec.md §11).
package placement

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/boundpods"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/provisioning"
	"github.com/ray-tpu/tpu-slice-operator/internal/slicectrl"
	"github.com/ray-tpu/tpu-slice-operator/internal/tombstones"
)

// +kubebuilder:rbac:groups=tpu.ray.io,resources=tpusliceassignments,verbs=get;list;watch
// +kubebuilder:rbac:groups=tpu.ray.io,resources=tpusliceassignments/status,verbs=get;update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=ray.io,resources=rayclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// conflictRequeueDelay is how soon a slice is placed again after a status write lost a conflict.
const conflictRequeueDelay = 50 * time.Millisecond

// Options configure the placement reconciler.
type Options struct {
	// Tombstones are the claim tokens of Pods the operator saw leave its label-selected view: the
	// live reads of a slice's Pods look such a Pod up by name (slicectrl.LivePods).
	Tombstones *tombstones.Tombstones
	// BindSettle is how long a slice must go without a new Pod before its DomainChosen is written
	// while it waits for the rest of its Pods, and how much later a non-urgent event is handled
	// (coalesced); not positive: at once.
	BindSettle time.Duration
	// AssemblyTimeout bounds how long the gated Pods of a slice wait for the rest of its Pods
	// (--slice-assembly-timeout; controllers.Setup makes zero gate.DefaultAssemblyTimeout, a
	// reconciler built by hand in a test releases at once).
	AssemblyTimeout time.Duration
	// LeaseNamespace is the namespace of the domain Leases.
	LeaseNamespace string
	// SlicePlacement is how the webhook places new multi-host slices: with ChosenDomain (or unset,
	// the default), a slice placed with InterPodAffinity is warned of.
	SlicePlacement tpuv1alpha1.SlicePlacement
	// Capacity is how a slice no domain fits asks for capacity.
	Capacity CapacityOptions
	// Metrics receive what the reconciler counts (metrics.Default when nil).
	Metrics *metrics.Metrics
	// Clock tells the time (clock.RealClock when nil).
	Clock clock.PassiveClock
	// Bound sums what the Pods bound to each Node take of it, whatever created them (nil: only the
	// worker Pods in the cache count, as in tests that build the reconciler by hand).
	Bound *boundpods.Tracker
	// MaxConcurrentReconciles is the number of slices placed at once.
	MaxConcurrentReconciles int
}

// Reconciler places the ChosenDomain slices (docs/spec.md §12).
type Reconciler struct {
	client          client.Client
	reader          client.Reader
	recorder        recorder.EventRecorder
	tombstones      *tombstones.Tombstones
	clock           clock.PassiveClock
	metrics         *metrics.Metrics
	settle          time.Duration
	assemblyTimeout time.Duration
	leaseNamespace  string
	slicePlacement  tpuv1alpha1.SlicePlacement
	// capacity is how a slice no domain fits asks for capacity (capacity.go).
	capacity CapacityOptions
	// warned holds the UIDs of the slices warned of inter-pod affinity.
	warned sync.Map
	// bursts times the creations of each slice's Pods (waitForPods waits for them to end).
	bursts *bursts
	// bound sums what the Pods bound to each Node take of it (see Options.Bound).
	bound *boundpods.Tracker
	// boundCache is the bound Pods' cache, watched so that a Pod leaving a Node wakes the slices
	// waiting for a domain (nil with bound).
	boundCache cache.Cache
	// candidates are the Nodes each slice's gated Pods can use, by its last choice (handlers.go).
	candidates candidates
	workers    int
}

// New returns a placement reconciler that reads through c (the manager's cache), reads live
// through reader, writes through c and records Events with rec.
func New(c client.Client, reader client.Reader, rec recorder.EventRecorder, opts Options) *Reconciler {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.Default
	}
	return &Reconciler{
		client: c, reader: reader, recorder: rec, tombstones: opts.Tombstones, clock: opts.Clock, metrics: opts.Metrics,
		settle: opts.BindSettle, assemblyTimeout: opts.AssemblyTimeout, leaseNamespace: opts.LeaseNamespace,
		slicePlacement: opts.SlicePlacement, capacity: opts.Capacity.withDefaults(), bursts: newBursts(opts.BindSettle),
		bound: opts.Bound, workers: max(opts.MaxConcurrentReconciles, 1),
	}
}

// Setup registers the placement reconciler with the manager: it decides the capacity mode (auto:
// by whether the API server serves ProvisioningRequests) and starts the bound Pods' cache.
func Setup(mgr ctrl.Manager, opts Options) error {
	capacity, err := opts.Capacity.resolve(mgr.GetRESTMapper())
	if err != nil {
		return err
	}
	opts.Capacity = capacity
	ctrl.Log.WithName("setup").Info("Capacity for slices no domain fits", "mode", capacity.Mode, "class", capacity.Class,
		"wait", capacity.Wait, "timeout", capacity.Timeout)
	bound, boundCache, err := watchBoundPods(mgr)
	if err != nil {
		return err
	}
	opts.Bound = bound
	r := New(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder("tpu-slice-operator"), opts)
	r.boundCache = boundCache
	return r.SetupWithManager(mgr)
}

// SetupWithManager watches what placement reads (handlers.go): the slices, their worker Pods, the
// TPU Nodes, the domain Leases, the Pods bound to Nodes (the bound Pods' cache) and, when the
// capacity mode creates them, the slices' ProvisioningRequests.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		Named("placement").
		Watches(&tpuv1alpha1.TPUSliceAssignment{}, r.sliceHandler()).
		Watches(&corev1.Pod{}, r.podHandler()).
		Watches(&corev1.Node{}, r.nodeHandler()).
		Watches(&coordinationv1.Lease{}, r.leaseHandler()).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.workers})
	if r.boundCache != nil {
		b = b.WatchesRawSource(source.Kind(r.boundCache, client.Object(&corev1.Pod{}), r.boundPodHandler()))
	}
	if r.capacity.Mode == CapacityProvisioningRequest {
		// A request's conditions (Provisioned, Failed) wake its slice.
		b = b.Watches(&provisioning.ProvisioningRequest{}, handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(),
			&tpuv1alpha1.TPUSliceAssignment{}, handler.OnlyControllerOwner()))
	}
	return b.Complete(r)
}

// Reconcile places one slice: it gives a deleted slice's domain Leases back, and runs the
// placement step (place.go) for a slice whose RayCluster exists. A slice whose RayCluster is gone
// is the claim reconciler's to delete; its deletion gives its domain back here.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	slice := &tpuv1alpha1.TPUSliceAssignment{}
	if err := r.client.Get(ctx, req.NamespacedName, slice); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		r.bursts.forget(req.NamespacedName)
		r.candidates.forget(req.NamespacedName)
		return ctrl.Result{}, r.releaseGone(ctx, req.NamespacedName)
	}
	if slice.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	rc, err := slicectrl.RayCluster(ctx, r.client, r.reader, slice.Namespace, slice.Spec.RayClusterName, slice.Spec.RayClusterUID)
	if err != nil {
		return ctrl.Result{}, err
	}
	if rc == nil || rc.UID != slice.Spec.RayClusterUID {
		return ctrl.Result{}, nil
	}
	pods, err := slicectrl.CachedPods(ctx, r.client, slice)
	if err != nil {
		return ctrl.Result{}, err
	}
	after, err := r.place(ctx, rc, slice, pods)
	switch {
	case errors.Is(err, errStatusConflict):
		return ctrl.Result{RequeueAfter: conflictRequeueDelay}, nil
	case err != nil:
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

// bursts is when this process saw each slice's Pods created, on its own clock.
type bursts struct {
	mu     sync.Mutex
	slices map[types.NamespacedName]*slicectrl.Burst
	settle time.Duration
}

func newBursts(settle time.Duration) *bursts {
	return &bursts{slices: map[types.NamespacedName]*slicectrl.Burst{}, settle: settle}
}

// podCreated records that a Pod of the slice key names was created at now.
func (b *bursts) podCreated(key types.NamespacedName, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.slices[key]; s != nil {
		s.Mark(now, b.settle)
		return
	}
	s := slicectrl.NewBurst(now)
	b.slices[key] = &s
}

// wait is how long the slice's Pods may still be coming: 0 when this process saw none created
// within a settle (slicectrl.Burst.Wait).
func (b *bursts) wait(key types.NamespacedName, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.slices[key]
	if s == nil {
		return 0
	}
	return s.Wait(now, b.settle)
}

// forget drops what was seen of a slice that is gone.
func (b *bursts) forget(key types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.slices, key)
}

// watchBoundPods starts, with the manager, a cache of the live Pods bound to a Node, whatever
// created them (boundpods.CacheOptions: a field selector, each Pod trimmed to its Node, requests
// and anti-affinity), and returns the Tracker its informer keeps. The manager's own Pod cache
// holds KubeRay worker Pods only; placement must count every Pod on a Node, as kube-scheduler
// does (docs/spec.md §12, "The choice").
func watchBoundPods(mgr ctrl.Manager) (*boundpods.Tracker, cache.Cache, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient(),
		ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: boundpods.CacheOptions()},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("creating the bound Pods' cache: %w", err)
	}
	informer, err := c.GetInformer(context.Background(), &corev1.Pod{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, nil, fmt.Errorf("starting the bound Pods' informer: %w", err)
	}
	t := boundpods.NewTracker()
	if _, err := informer.AddEventHandler(t.Handler()); err != nil {
		return nil, nil, fmt.Errorf("watching bound Pods: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, nil, fmt.Errorf("adding the bound Pods' cache: %w", err)
	}
	return t, c, nil
}
