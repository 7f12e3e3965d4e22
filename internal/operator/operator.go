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

// Package operator assembles the manager: scheme, caches, webhooks and reconcilers. The production
// binary, the local control plane (make run-local) and the integration tests all build their
// manager here, so they run the same code.
package operator

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/controllers"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/forward"
	"github.com/ray-tpu/tpu-slice-operator/internal/gate"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/nodes"
	"github.com/ray-tpu/tpu-slice-operator/internal/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/provisioning"
	"github.com/ray-tpu/tpu-slice-operator/internal/tombstones"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
	"github.com/ray-tpu/tpu-slice-operator/webhooks"
)

// Scheme holds every type the operator reads or writes.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(rayv1.AddToScheme(Scheme))
	utilruntime.Must(tpuv1alpha1.AddToScheme(Scheme))
	utilruntime.Must(provisioning.AddToScheme(Scheme))
}

// Default client-side limits of the operator's API client. controller-runtime's own default (20
// QPS, burst 30) throttles the admission path: every TPU Pod admission makes one or two API calls,
// and KubeRay creates a 64-host slice in one burst. The API server's priority and fairness still
// protect it.
const (
	DefaultKubeAPIQPS   = 500
	DefaultKubeAPIBurst = 1000
)

// Options configure the operator's webhooks and reconcilers.
type Options struct {
	// KubeAPIQPS and KubeAPIBurst limit the operator's API client (zero: the defaults above).
	KubeAPIQPS   float32
	KubeAPIBurst int
	// ClaimTimeout bounds the retries of one claim; past it the Pod is denied as transient
	// (allocator.DefaultTimeout when zero).
	ClaimTimeout time.Duration
	// ReservationWindow is how long after a claim write this replica hands out the worker IDs the
	// write reserved, with no write of their own (docs/spec.md §3.5): zero is
	// allocator.DefaultReservationWindow, negative turns reservations off.
	ReservationWindow time.Duration
	// MaxSliceHosts bounds the hosts of a slice: Pods and RayCluster groups of larger topologies
	// are denied (topology.DefaultMaxSliceHosts when zero).
	MaxSliceHosts int
	// SlicePlacement is --slice-placement: how a multi-host slice the operator places is kept in
	// one domain (placement.DefaultMode when empty; docs/spec.md §4).
	SlicePlacement tpuv1alpha1.SlicePlacement
	// Forward, when its Service is set, sends each claim to the replica that owns its worker group.
	Forward     forward.SetupOptions
	Webhooks    webhooks.Options
	Controllers controllers.Options
	// DisableWebhooks skips registering the admission webhooks (the reconciler alone).
	DisableWebhooks bool
	// DisableControllers skips the reconcilers (a webhook-only replica, as in tests with many instances).
	DisableControllers bool
	// Metrics receive what the webhooks, the allocator, claim forwarding and the reconcilers
	// count (metrics.Default, the served set, when nil).
	Metrics *metrics.Metrics
	// Tombstones, when set, records the Pod deletions the webhooks and reconcilers share (a new
	// set when nil).
	Tombstones *tombstones.Tombstones

	qps float64 // flag target for KubeAPIQPS (flag has no float32)
}

// CacheOptions limits what the manager caches: only KubeRay worker Pods, trimmed to the fields the
// operator reads, so memory stays flat in the number of other Pods in the cluster, and, with claim
// forwarding, only the EndpointSlices of the webhook Service.
func CacheOptions(opts Options) cache.Options {
	workerPods := labels.NewSelector()
	for _, req := range []struct {
		key    string
		op     selection.Operator
		values []string
	}{
		{rayutils.RayNodeTypeLabelKey, selection.Equals, []string{string(rayv1.WorkerNode)}},
		{rayutils.RayClusterLabelKey, selection.Exists, nil},
		{rayutils.RayNodeGroupLabelKey, selection.Exists, nil},
	} {
		r, err := labels.NewRequirement(req.key, req.op, req.values)
		utilruntime.Must(err)
		workerPods = workerPods.Add(*r)
	}
	hostListsConfigMaps := labels.NewSelector()
	sliceLabel, err := labels.NewRequirement(tpuv1alpha1.SliceLabel, selection.Exists, nil)
	utilruntime.Must(err)
	hostListsConfigMaps = hostListsConfigMaps.Add(*sliceLabel)
	byObject := map[client.Object]cache.ByObject{
		&corev1.Pod{}:  {Label: workerPods, Transform: TrimPod},
		&corev1.Node{}: nodes.CacheOptions(),
		// The host lists ConfigMaps of big slices (docs/spec.md §4), not every ConfigMap.
		&corev1.ConfigMap{}: {Label: hostListsConfigMaps},
		// The domain Leases of the placement step, in the operator's namespace only.
		&coordinationv1.Lease{}: {
			Namespaces: map[string]cache.Config{opts.Controllers.PlacementNamespaceOrDefault(): {}},
			Label:      labels.SelectorFromSet(labels.Set{gate.LeaseLabel: "true"}),
		},
	}
	if opts.Forward.Enabled() {
		byObject[&discoveryv1.EndpointSlice{}] = opts.Forward.CacheOptions()
	}
	return cache.Options{ByObject: byObject}
}

// TrimPod keeps the parts of a Pod the operator reads: name, UID, labels, the annotations below,
// owner, deletion state and phase, and of the spec what its TPU identity is read from (package
// identity): the node selectors, hostname and subdomain, and of each TPU container its name, TPU
// resources, the TPU_WORKER_ID and TPU_NAME variables and the references to a host lists
// ConfigMap (tpuenv.IsHostListsRef). For slice health (package health) it
// keeps spec.nodeName and the Ready condition; for the placement step (package gate) the
// scheduling gates and tolerations (the TPU chips requested are the TPU resources above).
// Everything else is dropped from the cache.
func TrimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	var annotations map[string]string
	for _, key := range keptAnnotations {
		if v, ok := pod.Annotations[key]; ok {
			if annotations == nil {
				annotations = make(map[string]string, len(keptAnnotations))
			}
			annotations[key] = v
		}
	}
	return &corev1.Pod{
		TypeMeta: pod.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:              pod.Name,
			Namespace:         pod.Namespace,
			UID:               pod.UID,
			ResourceVersion:   pod.ResourceVersion,
			CreationTimestamp: pod.CreationTimestamp,
			DeletionTimestamp: pod.DeletionTimestamp,
			Labels:            pod.Labels,
			Annotations:       annotations,
			OwnerReferences:   pod.OwnerReferences,
		},
		Spec:   trimSpec(&pod.Spec),
		Status: corev1.PodStatus{Phase: pod.Status.Phase, Conditions: readyOnly(pod.Status.Conditions)},
	}, nil
}

// readyOnly returns the Pod's Ready condition alone, nil when it has none.
func readyOnly(conds []corev1.PodCondition) []corev1.PodCondition {
	for _, c := range conds {
		if c.Type == corev1.PodReady {
			return []corev1.PodCondition{c}
		}
	}
	return nil
}

// keptAnnotations are the annotations the cache keeps: our claim token, the subslice topology a
// Pod's slice is read from, and the topology levels Kueue requires, a slice's placement key when
// it has no affinity (health.PlacementKey).
var keptAnnotations = []string{tpuv1alpha1.ClaimTokenAnnotation, tpuv1alpha1.PinnedNodeAnnotation, constants.SliceTopologyAnnotation,
	constants.KueuePodSetSliceRequiredTopologyAnnotation, constants.KueuePodSetRequiredTopologyAnnotation}

// identityEnv are the variables a Pod's TPU identity is read from.
var identityEnv = []string{constants.EnvWorkerID, constants.EnvName}

func trimSpec(spec *corev1.PodSpec) corev1.PodSpec {
	out := corev1.PodSpec{NodeSelector: spec.NodeSelector, Hostname: spec.Hostname, Subdomain: spec.Subdomain, NodeName: spec.NodeName,
		SchedulingGates: spec.SchedulingGates, Tolerations: spec.Tolerations, Priority: spec.Priority}
	if a := spec.Affinity; a != nil {
		// The required node selector alone: a released Pod's pin (gate.PinnedNode), and whether
		// a gated Pod can be pinned (gate.Pinnable).
		if a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
			out.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution,
			}}
		}
		// The required pod anti-affinity terms alone: the Nodes a bound Pod's terms keep a
		// slice off (gate.Excluded).
		if a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			if out.Affinity == nil {
				out.Affinity = &corev1.Affinity{}
			}
			out.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution,
			}
		}
	}
	// Every container keeps its name and requests, the init containers their restart policy too,
	// and the Pod its overhead: what a gated Pod needs of a Node, and what a Pod bound or pinned
	// to one takes of it (k8s.io/component-helpers' PodRequests, as kube-scheduler reads them).
	tpu := topology.TPUContainers(spec)
	out.Containers = make([]corev1.Container, 0, len(spec.Containers))
	for i := range spec.Containers {
		c := &spec.Containers[i]
		kept := corev1.Container{Name: c.Name, Resources: corev1.ResourceRequirements{Requests: c.Resources.Requests}}
		if slices.Contains(tpu, i) {
			kept.Resources.Limits = tpuOnly(c.Resources.Limits)
			for _, e := range c.Env {
				// The references to a host lists ConfigMap are kept for the reconciler, which
				// re-creates a missing one; inline host lists are dropped.
				if slices.Contains(identityEnv, e.Name) || tpuenv.IsHostListsRef(e) {
					kept.Env = append(kept.Env, e)
				}
			}
		}
		out.Containers = append(out.Containers, kept)
	}
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		out.InitContainers = append(out.InitContainers, corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy,
			Resources: corev1.ResourceRequirements{Requests: c.Resources.Requests}})
	}
	out.Overhead = spec.Overhead
	return out
}

func tpuOnly(list corev1.ResourceList) corev1.ResourceList {
	if q, ok := list[constants.TPUResourceName]; ok {
		return corev1.ResourceList{constants.TPUResourceName: q}
	}
	return nil
}

// ReservationWindowFlag is the flag of Options.ReservationWindow. Its default depends on another
// flag of the manager's, --claim-forwarding: the manager completes it after parsing
// (managerflags.Flags.Parse).
const ReservationWindowFlag = "claim-reservation-window"

// BindFlags registers the client flags; the webhook and controller options bind their own.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.Float64Var(&o.qps, "kube-api-qps", DefaultKubeAPIQPS, "Client-side QPS limit of the operator's API client.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", DefaultKubeAPIBurst, "Client-side burst limit of the operator's API client.")
	fs.DurationVar(&o.ClaimTimeout, "claim-timeout", allocator.DefaultTimeout,
		"How long one Pod admission may retry its claim before it is denied as transient (below the webhook's 10s timeout).")
	o.ReservationWindow = allocator.DefaultReservationWindow
	fs.Func(ReservationWindowFlag, fmt.Sprintf(
		"How long after a claim write this replica hands out, with no write of their own, the block of a slice's free worker IDs the write reserved (at most --claim-timeout, a quarter of --pending-claim-ttl, and what that TTL leaves after 36s: the API server's 34s create cut-off and 2s of commit slack; none leaves reservations off); 0 makes every claim write its own. "+
			"Without --claim-forwarding reservations are off unless this flag is given: set it only for a single replica, since replicas that each reserve deny each other's Pods. (default %s with --claim-forwarding)",
		allocator.DefaultReservationWindow), func(v string) error {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			return err
		case d < 0:
			return errors.New("must not be negative")
		case d == 0:
			d = -1 // off; zero in Options is the default
		}
		o.ReservationWindow = d
		return nil
	})
	fs.IntVar(&o.MaxSliceHosts, "max-slice-hosts", int(topology.DefaultMaxSliceHosts),
		"The most hosts (worker Pods) a TPU slice may have: Pods and RayCluster groups of larger topologies are denied. The default is a little above the largest TPU slice sold today (tpu7x: 2,304 hosts).")
	o.Webhooks.HostListsConfigMapAbove = tpuenv.DefaultHostListsConfigMapAbove
	fs.Var((*hostListsAboveFlag)(&o.Webhooks.HostListsConfigMapAbove), "host-lists-configmap-above",
		"The Pods of a multi-host slice of more hosts than this take TPU_WORKER_HOSTNAMES, TPU_PROCESS_ADDRESSES and TORCH_TPU_SLICEBUILDER_ADDRESSES from one immutable ConfigMap per slice (valueFrom.configMapKeyRef) instead of inline values, so that a Pod's size does not grow with its slice; -1 keeps them inline always.")
	fs.StringVar(&o.Webhooks.ClusterDomain, "cluster-domain", tpuenv.DefaultClusterDomain,
		"The cluster's DNS domain (the kubelet's --cluster-domain). A slice whose host lists would not fit in one environment entry with qualified names lists its hosts by bare hostname, and its Pods get the search domain <cluster>-headless.<namespace>.svc.<this domain>.")
	o.SlicePlacement = placement.DefaultMode
	fs.Var((*slicePlacementFlag)(&o.SlicePlacement), "slice-placement", fmt.Sprintf(
		"How a multi-host slice the operator places (not Kueue or dynamic slicing, no cloud.google.com/ pod affinity term of the user's) is kept in one domain, decided when the slice is created: "+
			"%s admits its Pods with the scheduling gate %s and releases them with a nodeSelector on a domain the operator chose for the whole slice "+
			"(a slice with no TPU Node matching its Pods' nodeSelector labeled with its affinity key falls back to %s); %s gives its Pods required pod affinity and anti-affinity instead.",
		tpuv1alpha1.PlacementChosenDomain, tpuv1alpha1.PlacementSchedulingGate, tpuv1alpha1.PlacementInterPodAffinity, tpuv1alpha1.PlacementInterPodAffinity))
	o.Controllers.BindFlags(fs)
}

// reservationWindow is the allocator's reservation window: the option (zero: the default), at most
// a quarter of the pending TTL and at most what the TTL leaves after the API server's create cut-off
// and the commit slack. A reserved ID reaches its Pod up to a window after the write that stored it,
// that Pod is stored within the cut-off (and the slack), and the reconciler releases a claim whose
// Pod it has not seen a pending TTL after it first saw it, so the TTL must cover all three
// (docs/spec.md §3.5): a TTL from the cut-off up that leaves no room turns reservations off. A TTL
// shortened below the cut-off (tests, whose creates are fast) keeps only the quarter.
func reservationWindow(opts Options) time.Duration {
	window := cmp.Or(opts.ReservationWindow, allocator.DefaultReservationWindow)
	ttl := cmp.Or(max(opts.Controllers.PendingTTL, 0), controllers.DefaultPendingTTL)
	limit := ttl / 4
	if ttl >= allocator.CreateCutoff {
		limit = min(limit, ttl-allocator.CreateCutoff-allocator.CommitSlack)
	}
	if limit <= 0 {
		return -1
	}
	return min(window, limit)
}

// hostListsAboveFlag is --host-lists-configmap-above: a positive number of hosts, or -1.
type hostListsAboveFlag int32

func (f *hostListsAboveFlag) String() string { return strconv.Itoa(int(*f)) }

func (f *hostListsAboveFlag) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n == 0 || n < -1 {
		return errors.New("must be a positive number of hosts, or -1 for never")
	}
	*f = hostListsAboveFlag(n)
	return nil
}

// slicePlacementFlag is --slice-placement: ChosenDomain or InterPodAffinity.
type slicePlacementFlag tpuv1alpha1.SlicePlacement

func (f *slicePlacementFlag) String() string { return string(*f) }

func (f *slicePlacementFlag) Set(v string) error {
	if !placement.ValidMode(tpuv1alpha1.SlicePlacement(v)) {
		return fmt.Errorf("must be %s or %s", tpuv1alpha1.PlacementChosenDomain, tpuv1alpha1.PlacementInterPodAffinity)
	}
	*f = slicePlacementFlag(v)
	return nil
}

// RESTConfig returns a copy of cfg with the operator's client limits, asking for no compression.
//
// The operator runs next to the API server, as kube-scheduler and kube-controller-manager do, and
// like them (kubernetes/kubernetes#80919) it does not ask for gzip: on a local network compressing
// every watch event costs the API server and the operator CPU, and each request latency, for bytes
// the network carries anyway. kube-apiserver 1.37 gzips each watch event for every watcher that
// asks: in `make bench` S7 that was 6-7 % of the API server's CPU, and decompressing took 7 % of
// the bench process's, about half of each the operator's watches (docs/performance.md).
func RESTConfig(cfg *rest.Config, opts Options) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.DisableCompression = true
	out.QPS, out.Burst = opts.KubeAPIQPS, opts.KubeAPIBurst
	if opts.qps != 0 {
		out.QPS = float32(opts.qps)
	}
	if out.QPS == 0 {
		out.QPS = DefaultKubeAPIQPS
	}
	if out.Burst == 0 {
		out.Burst = DefaultKubeAPIBurst
	}
	return out
}

// New builds a manager with the operator's webhooks and reconcilers registered.
func New(cfg *rest.Config, mgrOpts manager.Options, opts Options) (manager.Manager, error) {
	cfg = RESTConfig(cfg, opts)
	if mgrOpts.Scheme == nil {
		mgrOpts.Scheme = Scheme
	}
	if mgrOpts.Cache.ByObject == nil {
		mgrOpts.Cache.ByObject = CacheOptions(opts).ByObject
	}
	mgr, err := manager.New(cfg, mgrOpts)
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if _, err := Setup(mgr, opts); err != nil {
		return nil, err
	}
	return mgr, nil
}

// Setup registers the operator's webhooks and reconcilers with mgr, and what they share: the Pod
// cache's indexes by spec identity and claim token, and the tombstones of deleted Pods. It returns
// the parts it built.
func Setup(mgr manager.Manager, opts Options) (*Parts, error) {
	deleted, err := watchPods(mgr, opts.Tombstones)
	if err != nil {
		return nil, err
	}
	opts.Controllers.Tombstones = deleted
	if opts.Controllers.SlicePlacement == "" {
		// The reconciler warns of a slice the webhook had to place with inter-pod terms only
		// while the operator chooses domains.
		opts.Controllers.SlicePlacement = opts.SlicePlacement
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.Default
	}
	opts.Controllers.Metrics, opts.Webhooks.Metrics = opts.Metrics, opts.Metrics
	parts := &Parts{}
	if !opts.DisableWebhooks {
		if err := parts.setupWebhooks(mgr, opts, deleted); err != nil {
			return nil, fmt.Errorf("setting up webhooks: %w", err)
		}
	}
	if !opts.DisableControllers {
		if err := controllers.Setup(mgr, opts.Controllers); err != nil {
			return nil, fmt.Errorf("setting up controllers: %w", err)
		}
	}
	return parts, nil
}

// Parts are what Setup built that a caller may inspect (the integration tests and the benchmark).
type Parts struct {
	// Allocator is what the Pod webhook claims through (nil without webhooks).
	Allocator *allocator.Allocator
	// Router forwards claims to their group's owner (nil without forwarding).
	Router *forward.Router
}

// setupWebhooks builds the allocator the Pod webhook claims through, with claim forwarding's Router
// in front of it when forwarding is on, and registers the webhooks.
func (p *Parts) setupWebhooks(mgr manager.Manager, opts Options, deleted *tombstones.Tombstones) error {
	maxHosts := int32(min(opts.MaxSliceHosts, math.MaxInt32)) //nolint:gosec // clamped.
	if maxHosts <= 0 {
		maxHosts = topology.DefaultMaxSliceHosts
	}
	alloc := allocator.New(mgr.GetClient(), mgr.GetAPIReader(), allocator.Options{
		Timeout: opts.ClaimTimeout, MaxSliceHosts: maxHosts, Tombstones: deleted, Metrics: opts.Metrics,
		ReservationWindow: reservationWindow(opts),
	})
	var claimer webhooks.Claimer = alloc
	if opts.Forward.Enabled() {
		fo := opts.Forward
		fo.Router.Timeout, fo.Router.Metrics = opts.ClaimTimeout, opts.Metrics
		router, err := forward.Setup(mgr, alloc, fo)
		if err != nil {
			return err
		}
		claimer, p.Router = router, router
	}
	p.Allocator = alloc
	if opts.Webhooks.RayCluster.MaxSliceHosts == 0 {
		opts.Webhooks.RayCluster.MaxSliceHosts = maxHosts
	}
	opts.Webhooks.MaxSliceHosts, opts.Webhooks.Timeout = maxHosts, opts.ClaimTimeout
	if opts.Webhooks.SlicePlacement == "" {
		opts.Webhooks.SlicePlacement = opts.SlicePlacement
	}
	return webhooks.Setup(mgr, claimer, alloc, opts.Webhooks)
}

// watchPods registers the Pod cache's field indexes and returns the tombstones its informer records.
func watchPods(mgr manager.Manager, deleted *tombstones.Tombstones) (*tombstones.Tombstones, error) {
	ctx := context.Background()
	for name, index := range map[string]client.IndexerFunc{
		identity.SliceIndex: identity.SliceIndexValue,
		identity.TokenIndex: identity.TokenIndexValue,
	} {
		if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, name, index); err != nil {
			return nil, fmt.Errorf("indexing Pods by %s: %w", name, err)
		}
	}
	informer, err := mgr.GetCache().GetInformer(ctx, &corev1.Pod{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("starting the Pod informer: %w", err)
	}
	if deleted == nil {
		deleted = tombstones.New(0)
	}
	if _, err := informer.AddEventHandler(deleted.Handler()); err != nil {
		return nil, fmt.Errorf("watching Pod deletions: %w", err)
	}
	return deleted, nil
}

// CachesSynced is a readiness check that passes once every informer of c has synced.
func CachesSynced(c cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("informers have not synced yet")
		}
		return nil
	}
}
