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

// Package webhooks holds the operator's admission webhooks: a mutating webhook that gives every
// KubeRay TPU worker Pod a unique TPU identity, and a validating webhook for RayCluster TPU groups.
// The handlers are thin: topology math, ID choice and the mutation live in internal packages.
package webhooks

import (
	"cmp"
	"context"
	"fmt"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/nodes"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
	"github.com/ray-tpu/tpu-slice-operator/internal/validation"
)

// +kubebuilder:webhookconfiguration:mutating=true,name=webhook-configuration
// +kubebuilder:webhookconfiguration:mutating=false,name=webhook-configuration

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=ray.io,resources=rayclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=tpu.ray.io,resources=tpusliceassignments,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=tpu.ray.io,resources=tpusliceassignments/status,verbs=get;update

// Claimer commits the claim of a Pod being admitted: the allocator, or claim forwarding's Router
// in front of it (internal/forward).
type Claimer interface {
	Claim(ctx context.Context, req allocator.Request) (allocator.Assignment, error)
}

// Planner answers, without writing, what the Pod webhook asks besides claims: where a dry run
// would go, and whether a Pod that carries a claim is this admission coming back.
type Planner interface {
	Plan(ctx context.Context, req allocator.Request) (allocator.Assignment, error)
	Reinvoked(ctx context.Context, namespace, slice, token string, workerID int32) (bool, error)
}

// Options configure the webhooks.
type Options struct {
	// MaxSliceHosts bounds the hosts of a Pod's slice, checked before any work that grows with them
	// (topology.DefaultMaxSliceHosts when zero).
	MaxSliceHosts int32
	// SlicePlacement is --slice-placement: how a multi-host slice the operator places is kept in
	// one domain, decided when its first claim creates it (placement.DefaultMode when empty).
	SlicePlacement tpuv1alpha1.SlicePlacement
	// Timeout bounds one Pod admission, every API call of it included (allocator.DefaultTimeout
	// when zero).
	Timeout time.Duration
	// RayCluster configures the RayCluster validation: the slice host limit and the TPU Nodes it
	// warns about subsliced groups from (the manager's TPU Node cache when unset).
	RayCluster validation.Options
	// Metrics receive the admissions' counts (metrics.Default, the served set, when nil).
	Metrics *metrics.Metrics
	// HostListsConfigMapAbove is --host-lists-configmap-above: the Pods of a multi-host slice of
	// more hosts take their host lists from the slice's ConfigMap (tpuenv.HostListsInConfigMap:
	// 0 is tpuenv.DefaultHostListsConfigMapAbove, a negative value never).
	HostListsConfigMapAbove int32
	// ClusterDomain is --cluster-domain, the cluster's DNS domain (tpuenv.DefaultClusterDomain
	// when empty): the search domain of a Pod whose host lists name bare hostnames ends in it.
	ClusterDomain string
}

// Setup registers the Pod webhook, which claims through claimer and plans through planner, and the
// RayCluster webhook with the manager's webhook server.
func Setup(mgr ctrl.Manager, claimer Claimer, planner Planner, opts Options) error {
	// Start the informers the Pod webhook reads through with the manager, rather than on the first
	// admission, which would otherwise wait for a full list. Until the leader's controllers start
	// them, nothing else does on the other replicas.
	for _, obj := range []client.Object{&tpuv1alpha1.TPUSliceAssignment{}, &rayv1.RayCluster{}, &corev1.Pod{}, &corev1.Node{}} {
		if _, err := mgr.GetCache().GetInformer(context.Background(), obj, cache.BlockUntilSynced(false)); err != nil {
			return fmt.Errorf("starting the informer for %T: %w", obj, err)
		}
	}
	tpuNodes := nodes.Lister{Reader: mgr.GetClient()}
	if opts.RayCluster.Nodes == nil {
		opts.RayCluster.Nodes = tpuNodes
	}
	// The Pod webhook answers with patches it builds itself (podWebhook.Handle), so it is
	// registered as a handler rather than through the builder's defaulter.
	mgr.GetWebhookServer().Register(podPath, &admission.Webhook{
		Handler: &podWebhook{planner: planner, claimer: claimer, clusters: mgr.GetClient(), live: mgr.GetAPIReader(), nodes: tpuNodes,
			maxHosts: opts.MaxSliceHosts, mode: opts.SlicePlacement, timeout: opts.Timeout, metrics: cmp.Or(opts.Metrics, metrics.Default),
			hostListsAbove: opts.HostListsConfigMapAbove, clusterDomain: cmp.Or(opts.ClusterDomain, tpuenv.DefaultClusterDomain), hostLists: newHostListsWriter(mgr.GetClient(), mgr.GetClient(), mgr.GetAPIReader())},
		LogConstructor: podLogConstructor,
	})
	return ctrl.NewWebhookManagedBy(mgr, &rayv1.RayCluster{}).
		WithValidator(&rayClusterWebhook{validator: validation.New(opts.RayCluster)}).
		Complete()
}
