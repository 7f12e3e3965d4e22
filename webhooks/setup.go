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
	"crypto/tls"
	"flag"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/forward"
	"github.com/ray-tpu/tpu-slice-operator/internal/nodes"
	"github.com/ray-tpu/tpu-slice-operator/internal/tombstones"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/internal/validation"
)

// +kubebuilder:webhookconfiguration:mutating=true,name=webhook-configuration
// +kubebuilder:webhookconfiguration:mutating=false,name=webhook-configuration

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=ray.io,resources=rayclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=tpu.ray.io,resources=tpusliceassignments,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=tpu.ray.io,resources=tpusliceassignments/status,verbs=get;update
// +kubebuilder:rbac:urls=/tpu-claims/v1,verbs=post
// +kubebuilder:rbac:groups=discovery.k8s.io,namespace=system,resources=endpointslices,verbs=get;list;watch

// DefaultClaimTimeout bounds one Pod admission's claim, well inside the webhook's 10 s timeout.
const DefaultClaimTimeout = 6 * time.Second

// Options configure the webhooks.
type Options struct {
	// ClaimTimeout bounds the retries of one claim; past it the Pod is denied as transient.
	ClaimTimeout time.Duration
	// MaxSliceHosts bounds the hosts of a slice: larger topologies are denied.
	MaxSliceHosts int
	// Tombstones are the claim tokens of Pods the operator saw deleted (shared with the reconciler).
	Tombstones *tombstones.Tombstones
	// Allocator, when set, is used instead of a new one (tests read its Stats).
	Allocator *allocator.Allocator
	// Forward, when its Service is set, sends each claim to the replica that owns its worker group.
	Forward ForwardOptions
	// RayCluster configures the RayCluster validation: the slice host limit and the TPU Nodes it
	// warns about subsliced groups from (none when unset).
	RayCluster validation.Options
}

// DefaultWebhookPortName is the webhook Service's port name (config/webhook/service.yaml).
const DefaultWebhookPortName = "webhook"

// ForwardOptions configure claim forwarding between the replicas behind the webhook Service.
type ForwardOptions struct {
	// Service and Namespace name the webhook Service: its ready endpoints are the replicas.
	// An empty Service turns forwarding off.
	Service, Namespace string
	// PortName is the Service port the webhooks are served on (default DefaultWebhookPortName).
	PortName string
	// Self is this replica's address (host:port) as the Service's endpoints list it.
	Self string
	// ServingCertificate returns the certificate this replica's webhook server presents; peers
	// must present the same public key.
	ServingCertificate func() (*tls.Certificate, error)
	// Token returns the bearer token this replica presents to its peers.
	Token func() (string, error)
	// Stats, when set, receives the forwarding counts (tests and benchmarks).
	Stats *forward.Stats
	// Peers, when set, is the peer set to keep up to date (tests observe it); else a new one.
	Peers *forward.Peers
	// DialContext, when set, opens the connections to peers (tests).
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Enabled reports whether claims are forwarded.
func (o *ForwardOptions) Enabled() bool { return o.Service != "" }

func (o *ForwardOptions) validate() error {
	var missing []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"namespace", o.Namespace != ""},
		{"own address", o.Self != ""},
		{"serving certificate", o.ServingCertificate != nil},
		{"bearer token", o.Token != nil},
	} {
		if !f.set {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("claim forwarding through Service %s needs: %s", o.Service, strings.Join(missing, ", "))
	}
	return nil
}

// BindFlags registers the options' command-line flags.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.ClaimTimeout, "claim-timeout", DefaultClaimTimeout,
		"How long one Pod admission may retry its claim before it is denied as transient (below the webhook's 10s timeout).")
	fs.IntVar(&o.MaxSliceHosts, "max-slice-hosts", int(topology.DefaultMaxSliceHosts),
		"The most hosts (worker Pods) a TPU slice may have: Pods and RayCluster groups of larger topologies are denied. The default is a little above the largest TPU slice sold today (tpu7x: 2,304 hosts).")
}

// Setup registers every webhook with the manager's webhook server.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.ClaimTimeout <= 0 {
		opts.ClaimTimeout = DefaultClaimTimeout
	}
	// Start the informers the Pod webhook reads through with the manager, rather than on the first
	// admission, which would otherwise wait for a full list. Until the leader's controllers start
	// them, nothing else does on the other replicas.
	for _, obj := range []client.Object{&tpuv1alpha1.TPUSliceAssignment{}, &rayv1.RayCluster{}, &corev1.Pod{}, &corev1.Node{}} {
		if _, err := mgr.GetCache().GetInformer(context.Background(), obj, cache.BlockUntilSynced(false)); err != nil {
			return fmt.Errorf("starting the informer for %T: %w", obj, err)
		}
	}
	maxHosts := int32(min(opts.MaxSliceHosts, math.MaxInt32)) //nolint:gosec // clamped.
	if opts.RayCluster.MaxSliceHosts == 0 {
		opts.RayCluster.MaxSliceHosts = maxHosts
	}
	tpuNodes := nodes.Lister{Reader: mgr.GetClient()}
	if opts.RayCluster.Nodes == nil {
		opts.RayCluster.Nodes = tpuNodes
	}
	alloc := opts.Allocator
	if alloc == nil {
		alloc = allocator.New(mgr.GetClient(), mgr.GetAPIReader(), allocator.Options{
			Timeout: opts.ClaimTimeout, MaxSliceHosts: maxHosts, Tombstones: opts.Tombstones,
		})
	}
	var claimer forward.Claimer = alloc
	if opts.Forward.Enabled() {
		router, err := setupForwarding(mgr, alloc, opts)
		if err != nil {
			return err
		}
		claimer = router
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &corev1.Pod{}).
		WithDefaulter(&podWebhook{allocator: alloc, claimer: claimer, clusters: mgr.GetClient(), nodes: tpuNodes}).
		Complete(); err != nil {
		return err
	}
	return ctrl.NewWebhookManagedBy(mgr, &rayv1.RayCluster{}).
		WithValidator(&rayClusterWebhook{validator: validation.New(opts.RayCluster)}).
		Complete()
}

// setupForwarding returns the Router that sends claims to their group's owner, keeps its peers in
// step with the webhook Service's EndpointSlices, and serves the claims peers forward, behind
// Kubernetes authentication (TokenReview) and authorization (SubjectAccessReview on Path).
func setupForwarding(mgr ctrl.Manager, alloc *allocator.Allocator, opts Options) (*forward.Router, error) {
	fo := opts.Forward
	if err := fo.validate(); err != nil {
		return nil, err
	}
	if fo.PortName == "" {
		fo.PortName = DefaultWebhookPortName
	}
	log := mgr.GetLogger().WithName("claim-forwarding")
	peers := fo.Peers
	if peers == nil {
		peers = forward.NewPeers(fo.Self)
	}
	router := forward.NewRouter(alloc, peers, forward.Options{
		Timeout: opts.ClaimTimeout, ServingCertificate: fo.ServingCertificate, Token: fo.Token, Log: log, Stats: fo.Stats,
		DialContext: fo.DialContext,
	})

	informer, err := mgr.GetCache().GetInformer(context.Background(), &discoveryv1.EndpointSlice{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("starting the EndpointSlice informer: %w", err)
	}
	refresh := func() {
		var list discoveryv1.EndpointSliceList
		if err := mgr.GetCache().List(context.Background(), &list, client.InNamespace(fo.Namespace),
			client.MatchingLabels{discoveryv1.LabelServiceName: fo.Service}); err != nil {
			log.Error(err, "Listing the webhook Service's EndpointSlices")
			return
		}
		members := forward.ReadyAddresses(list.Items, fo.PortName)
		if !slices.Equal(members, peers.Members()) {
			log.Info("Webhook replicas changed", "replicas", members, "self", fo.Self)
			peers.Set(members)
		}
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { refresh() },
		UpdateFunc: func(any, any) { refresh() },
		DeleteFunc: func(any) { refresh() },
	}); err != nil {
		return nil, fmt.Errorf("watching the webhook Service's EndpointSlices: %w", err)
	}

	handler, err := forward.Authenticated(mgr.GetConfig(), mgr.GetHTTPClient(), log, router)
	if err != nil {
		return nil, fmt.Errorf("building the authentication of forwarded claims: %w", err)
	}
	mgr.GetWebhookServer().Register(forward.Path, handler)
	return router, nil
}
