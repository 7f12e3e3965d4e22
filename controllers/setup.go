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

// Package controllers holds the TPUSliceAssignment reconciler, the claim reconciler: it binds
// claims to their Pods, releases claims and slices that no live Pod or RayCluster backs any more
// (docs/spec.md §8) and writes each slice's health (§11). Setup also starts the placement
// reconciler (controllers/placement, §12) on the same manager.
package controllers

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	placementctrl "github.com/ray-tpu/tpu-slice-operator/controllers/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/gate"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/slicectrl"
	"github.com/ray-tpu/tpu-slice-operator/internal/tombstones"
)

// DefaultBindSettle is the default BindSettle.
const DefaultBindSettle = time.Second

// DefaultPendingTTL is how long a claim may wait for its Pod before it is released: 38 s. It covers
// the longest a create can take after the claim's write: the API server cuts every create off at 34 s
// (allocator.CreateCutoff), counted from before its admission; an ID reserved by the write may be
// handed out up to the reservation window after it (2 s, allocator.DefaultReservationWindow); and an
// etcd write already sent can commit a little after the cut-off (allocator.CommitSlack, 2 s). So a
// create whose claim is released has failed, and I1 does not rest on the late-Pod repair (docs/spec.md
// §8). It is also the failover bound: the IDs a crashed holder reserved are freed this long after
// the reconciler first saw them (§3.5).
const DefaultPendingTTL = allocator.CreateCutoff + allocator.DefaultReservationWindow + allocator.CommitSlack

// Options configure the reconciler.
type Options struct {
	// PendingTTL is how long a claim may stay unbound before it is released (after a live check).
	PendingTTL time.Duration
	// MaxConcurrentReconciles is the number of slices reconciled at once.
	MaxConcurrentReconciles int
	// Tombstones are the claim tokens of Pods the operator saw leave its label-selected view
	// (shared with the webhook): their pending claims are released as soon as a read by name
	// confirms the Pod gone.
	Tombstones *tombstones.Tombstones
	// BindSettle is how long a slice must go without new claims (or, before its first, since its
	// creation) before the reconciler binds them and writes its conditions and hosts, so that this
	// bookkeeping does not race the admissions of a burst. Zero means DefaultBindSettle; a negative
	// value writes at once. Releases and repairs never wait.
	BindSettle time.Duration
	// Metrics receive what the reconciler counts (metrics.Default, the served set, when nil).
	Metrics *metrics.Metrics
	// Clock tells the time the reconciler times claims and settles by (clock.RealClock when nil).
	Clock clock.PassiveClock
	// AssemblyTimeout bounds how long the gated Pods of a ChosenDomain slice wait for the rest of
	// the slice's Pods before a domain is chosen for the slice anyway (docs/spec.md §4);
	// gate.DefaultAssemblyTimeout when zero.
	AssemblyTimeout time.Duration
	// PlacementNamespace is the namespace of the domain Leases (PlacementNamespaceOrDefault when
	// empty: the operator's own, as leader election's).
	PlacementNamespace string
	// SlicePlacement is how the operator places new multi-host slices (the webhook's
	// --slice-placement; "" is placement.DefaultMode, as for the webhook): with ChosenDomain, a
	// slice created with InterPodAffinity is warned of.
	SlicePlacement tpuv1alpha1.SlicePlacement
	// Capacity is how a ChosenDomain slice no domain fits asks the cluster for capacity
	// (docs/spec.md §12, "Capacity").
	Capacity placementctrl.CapacityOptions
}

// The Pod's namespace, as leader election and the webhook certificates find it.
const (
	podNamespaceEnv             = "POD_NAMESPACE"
	serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
	fallbackNamespace           = "default"
)

// PlacementNamespaceOrDefault returns o.PlacementNamespace, else the Pod's namespace ($POD_NAMESPACE,
// else the ServiceAccount's namespace, which leader election uses), else "default" (out of cluster).
func (o *Options) PlacementNamespaceOrDefault() string {
	if o.PlacementNamespace != "" {
		return o.PlacementNamespace
	}
	if ns := os.Getenv(podNamespaceEnv); ns != "" {
		return ns
	}
	if data, err := os.ReadFile(serviceAccountNamespaceFile); err == nil {
		if ns := strings.TrimSpace(string(data)); ns != "" {
			return ns
		}
	}
	return fallbackNamespace
}

// BindFlags registers the options' command-line flags.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.PendingTTL, "pending-claim-ttl", DefaultPendingTTL,
		"How long a claim whose Pod has never been seen may wait for it before it is released (confirmed by a live read). Keep it at least 36s (the API server's 34s cut-off for creates and 2s for an etcd write in flight) plus --claim-reservation-window, so that a Pod whose create is still in flight keeps its ID; it is also how long the IDs a crashed replica had reserved stay out of reach. A claim whose Pod was seen and then deleted is released at once.")
	fs.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", 4, "Slices reconciled at once.")
	fs.DurationVar(&o.BindSettle, "bind-settle", DefaultBindSettle,
		"How long a slice must go without new claims and new Pods before its claims are bound to their Pods and its conditions and hosts are written (bookkeeping: it waits for a burst of admissions, or of Pod and Node changes, to end, but at most five times this long; releases never wait).")
	fs.DurationVar(&o.AssemblyTimeout, "slice-assembly-timeout", gate.DefaultAssemblyTimeout,
		"How long the gated Pods of a ChosenDomain slice wait for the rest of the slice's Pods: once every worker ID has a live Pod, or once the oldest gated Pod is this old, the reconciler chooses one domain with room for the whole slice and releases the gated Pods onto it (Pods that come later follow them there).")
	o.Capacity.BindFlags(fs)
	fs.StringVar(&o.PlacementNamespace, "placement-namespace", "",
		"Namespace of the Leases that lock the domains chosen for ChosenDomain slices, one per domain (default: the operator's namespace, from $"+podNamespaceEnv+" or the ServiceAccount, as leader election).")
}

// Setup registers the claim reconciler ("tpusliceassignment") and the placement reconciler
// ("placement") with the manager.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.PendingTTL <= 0 {
		opts.PendingTTL = DefaultPendingTTL
	}
	if opts.BindSettle == 0 {
		opts.BindSettle = DefaultBindSettle
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = 4
	}
	if opts.AssemblyTimeout <= 0 {
		opts.AssemblyTimeout = gate.DefaultAssemblyTimeout
	}
	opts.PlacementNamespace = opts.PlacementNamespaceOrDefault()
	if err := metrics.RegisterSliceCollector(mgr.GetClient(), mgr.Elected()); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, slicectrl.NodeNameIndex, slicectrl.NodeNameIndexValue); err != nil {
		return fmt.Errorf("indexing Pods by %s: %w", slicectrl.NodeNameIndex, err)
	}
	if err := NewTPUSliceAssignmentReconciler(mgr, opts).SetupWithManager(mgr, opts.MaxConcurrentReconciles); err != nil {
		return err
	}
	return placementctrl.Setup(mgr, placementctrl.Options{
		Tombstones:              opts.Tombstones,
		BindSettle:              opts.BindSettle,
		AssemblyTimeout:         opts.AssemblyTimeout,
		LeaseNamespace:          opts.PlacementNamespace,
		SlicePlacement:          opts.SlicePlacement,
		Capacity:                opts.Capacity,
		Metrics:                 opts.Metrics,
		Clock:                   opts.Clock,
		MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
	})
}
