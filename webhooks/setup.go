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
	"context"
	"flag"
	"fmt"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
)

// +kubebuilder:webhookconfiguration:mutating=true,name=webhook-configuration
// +kubebuilder:webhookconfiguration:mutating=false,name=webhook-configuration

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=ray.io,resources=rayclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=tpu.ray.io,resources=tpusliceassignments,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=tpu.ray.io,resources=tpusliceassignments/status,verbs=get;update

// DefaultClaimTimeout bounds one Pod admission's claim, well inside the webhook's 10 s timeout.
const DefaultClaimTimeout = 6 * time.Second

// Options configure the webhooks.
type Options struct {
	// ClaimTimeout bounds the retries of one claim; past it the Pod is denied as transient.
	ClaimTimeout time.Duration
	// Allocator, when set, is used instead of a new one (tests read its Stats).
	Allocator *allocator.Allocator
}

// BindFlags registers the options' command-line flags.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.ClaimTimeout, "claim-timeout", DefaultClaimTimeout,
		"How long one Pod admission may retry its claim before it is denied as transient (below the webhook's 10s timeout).")
}

// Setup registers every webhook with the manager's webhook server.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.ClaimTimeout <= 0 {
		opts.ClaimTimeout = DefaultClaimTimeout
	}
	// Start the informers the Pod webhook reads through with the manager, rather than on the first
	// admission, which would otherwise wait for a full list. Until the leader's controllers start
	// them, nothing else does on the other replicas.
	for _, obj := range []client.Object{&tpuv1alpha1.TPUSliceAssignment{}, &rayv1.RayCluster{}, &corev1.Pod{}} {
		if _, err := mgr.GetCache().GetInformer(context.Background(), obj, cache.BlockUntilSynced(false)); err != nil {
			return fmt.Errorf("starting the informer for %T: %w", obj, err)
		}
	}
	alloc := opts.Allocator
	if alloc == nil {
		alloc = allocator.New(mgr.GetClient(), mgr.GetAPIReader(), opts.ClaimTimeout)
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &corev1.Pod{}).
		WithDefaulter(&podWebhook{client: mgr.GetClient(), reader: mgr.GetAPIReader(), allocator: alloc}).
		Complete(); err != nil {
		return err
	}
	return ctrl.NewWebhookManagedBy(mgr, &rayv1.RayCluster{}).
		WithValidator(&rayClusterWebhook{}).
		Complete()
}
