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

package webhooks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/reads"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// +kubebuilder:webhook:path=/mutate--v1-pod,mutating=true,failurePolicy=fail,sideEffects=NoneOnDryRun,groups="",resources=pods,verbs=create,versions=v1,name=mpod.tpu.ray.io,admissionReviewVersions=v1,timeoutSeconds=10,reinvocationPolicy=IfNeeded

// podWebhook gives each KubeRay TPU worker Pod a unique worker ID in its slice and the environment,
// hostname, labels and affinity that go with it (docs/spec.md §1, §3–§5).
type podWebhook struct {
	planner Planner // dry runs and re-invocation checks
	claimer Claimer // claims
	// clusters and live read a Pod's RayCluster for its Kueue and dynamic-slicing signals: clusters
	// is the cache, live the API server, read when the cache does not have the Pod's RayCluster.
	clusters, live client.Reader
	// nodes lists the TPU Nodes, for a subslice's affinity (nil: none known).
	nodes placement.NodeLister
	// maxHosts bounds the hosts of a slice (topology.DefaultMaxSliceHosts when zero); it is checked
	// before any work that grows with the hosts.
	maxHosts int32
	// mode is --slice-placement ("" is placement.DefaultMode), handed to the allocator, which
	// decides a new slice's spec.placement from it.
	mode tpuv1alpha1.SlicePlacement
	// timeout bounds a whole admission, every API call of it included (allocator.DefaultTimeout
	// when zero), inside the webhook's 10 s timeout (docs/spec.md §5).
	timeout time.Duration
	// metrics receive the admissions' counts.
	metrics *metrics.Metrics
	// hostListsAbove is --host-lists-configmap-above (tpuenv.HostListsInConfigMap), and hostLists
	// writes the ConfigMaps of the slices it puts in one (nil: every Pod gets its lists inline).
	hostListsAbove int32
	hostLists      *hostListsWriter
	// clusterDomain is the cluster's DNS domain (tpuenv.DNSSearchDomain).
	clusterDomain string
}

var _ admission.Defaulter[*corev1.Pod] = &podWebhook{}

// IsTPUWorker reports whether the webhook handles pod: a KubeRay worker Pod (labels node-type=worker,
// cluster and group) with a container asking for TPUs. Deciding costs no API call.
func IsTPUWorker(pod *corev1.Pod) bool {
	l := pod.Labels
	return l[rayutils.RayNodeTypeLabelKey] == string(rayv1.WorkerNode) &&
		l[rayutils.RayClusterLabelKey] != "" && l[rayutils.RayNodeGroupLabelKey] != "" &&
		topology.ChipsPerPod(&pod.Spec) > 0
}

// Default claims a worker ID for a TPU worker Pod being created and applies it to the Pod.
//
// It reads the Pod once, into a workerPod, and checks its host count against --max-slice-hosts
// before anything that grows with the hosts; one deadline bounds the rest, every API call included
// (docs/spec.md §5, §10).
func (w *podWebhook) Default(ctx context.Context, pod *corev1.Pod) error {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return fmt.Errorf("reading admission request: %w", err)
	}
	if req.Operation != admissionv1.Create {
		w.metrics.Admissions.WithLabelValues(metrics.ResultNotCreate).Inc()
		return nil
	}
	if !IsTPUWorker(pod) {
		w.metrics.Admissions.WithLabelValues(metrics.ResultNotTPUWorker).Inc()
		return nil
	}
	worker, err := w.parse(req.Namespace, pod)
	if err != nil {
		w.metrics.Admissions.WithLabelValues(metrics.ResultDeniedPermanent).Inc()
		return err
	}
	timeout := w.admissionTimeout()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := w.readRayCluster(ctx, &worker); err != nil {
		w.metrics.Admissions.WithLabelValues(admissionResult(err, false)).Inc()
		if ctx.Err() != nil {
			return timedOut(timeout)
		}
		return err
	}
	reinvoked, err := w.forgetCopiedIdentity(ctx, worker)
	if err != nil {
		w.metrics.Admissions.WithLabelValues(metrics.ResultDeniedTransient).Inc()
		if ctx.Err() != nil {
			return timedOut(timeout)
		}
		return denyTransient("checking the TPU identity the Pod already carries: %v", err)
	}
	if reinvoked {
		w.metrics.Admissions.WithLabelValues(metrics.ResultAlreadyAssigned).Inc()
		return nil
	}
	err = w.assign(ctx, req, worker)
	if err != nil && ctx.Err() != nil && apierrors.IsTooManyRequests(err) {
		// Whatever read or write the deadline cut, the user is told the same (docs/spec.md §5).
		err = timedOut(timeout)
	}
	w.metrics.Admissions.WithLabelValues(admissionResult(err, ptr.Deref(req.DryRun, false))).Inc()
	return err
}

// workerPod is what one admission reads from the TPU worker Pod it admits, once, at its top
// (Default): every later step takes it instead of reading the Pod again.
type workerPod struct {
	pod                       *corev1.Pod
	namespace, cluster, group string
	// clusterUID is the UID of the Pod's controlling RayCluster ("" for none).
	clusterUID types.UID
	// slice is the Pod's slice (topology.FromPod), at most maxHosts hosts.
	slice topology.Slice
	// subdomain is the headless Service the hostname of a multi-host Pod lives under.
	subdomain string
	// carried is the TPU identity the Pod's spec already carries, if hasIdentity, and token its
	// claim-token annotation ("" for none): a re-invocation's or a copy's (forgetCopiedIdentity).
	carried     identity.Identity
	hasIdentity bool
	token       string
	// indexes are KubeRay's multi-host indexing labels, when present.
	indexes claims.Request
	// managed is the Kueue or dynamic-slicing signal of the Pod and its RayCluster (readRayCluster).
	managed placement.Signal
}

// parse reads pod, a TPU worker Pod created in namespace, and checks it: its errors are permanent
// denials. It parses the Pod's slice and bounds its hosts first, so that no work grows with a
// topology the operator refuses; parsing costs nothing per chip (topology.ParseTopology).
func (w *podWebhook) parse(namespace string, pod *corev1.Pod) (workerPod, error) {
	cluster, group := pod.Labels[rayutils.RayClusterLabelKey], pod.Labels[rayutils.RayNodeGroupLabelKey]
	slice, err := topology.FromPod(pod.Annotations, &pod.Spec)
	if err != nil {
		return workerPod{}, deny("TPU worker Pod of RayCluster %s group %s: %v", cluster, group, err)
	}
	maxHosts := cmp.Or(w.maxHosts, topology.DefaultMaxSliceHosts)
	if slice.Hosts > maxHosts {
		return workerPod{}, deny("TPU worker Pod of RayCluster %s group %s: topology %s gives a slice of %d hosts, more than this operator allows (--max-slice-hosts=%d)",
			cluster, group, slice.Topology, slice.Hosts, maxHosts)
	}
	subdomain := naming.HeadlessServiceName(cluster)
	if slice.Hosts > 1 {
		if problems := naming.ValidateSubdomain(subdomain); len(problems) > 0 {
			return workerPod{}, deny("multi-host TPU worker Pod of RayCluster %s needs the headless Service %q as its subdomain, which is not a valid DNS label (%s): shorten the RayCluster name",
				cluster, subdomain, strings.Join(problems, "; "))
		}
	}
	indexes, err := kubeRayIndexes(pod)
	if err != nil {
		return workerPod{}, deny("TPU worker Pod of RayCluster %s group %s: %v", cluster, group, err)
	}
	// Before the claim: a Pod whose host lists no form fits in one environment entry could never
	// start (docs/spec.md §4). Its replica is KubeRay's index, or 0 until the claim says (a
	// replica of more digits is checked again once claimed, with the whole environment).
	probe := tpuenv.Values{GroupName: group, ReplicaIndex: ptr.Deref(indexes.ReplicaIndex, 0), Hosts: slice.Hosts, Subdomain: subdomain,
		V7x: topology.IsV7x(slice.Accelerator)}
	if err := tpuenv.HostListsFit(probe, len(slice.TPUContainers)); err != nil {
		return workerPod{}, deny("TPU worker Pod of RayCluster %s group %s: %v", cluster, group, err)
	}
	_, clusterUID, _ := identity.Owner(pod)
	carried, hasIdentity := identity.FromParsedPod(pod, slice)
	return workerPod{
		pod: pod, namespace: namespace, cluster: cluster, group: group, clusterUID: clusterUID,
		slice: slice, subdomain: subdomain, carried: carried, hasIdentity: hasIdentity,
		token: identity.Token(pod), indexes: indexes,
	}, nil
}

// readRayCluster reads the Pod's RayCluster, from the cache or, when the cache does not have it
// (a RayCluster created a moment ago) or has another of its name, from the API server, and records
// the Kueue and dynamic-slicing signal of the Pod and its RayCluster. A RayCluster that does not
// exist gives no signal; a failed read is a transient denial.
func (w *podWebhook) readRayCluster(ctx context.Context, worker *workerPod) error {
	key := types.NamespacedName{Namespace: worker.namespace, Name: worker.cluster}
	rc, err := reads.CacheThenLive(ctx, w.clusters, w.live, key, func(rc *rayv1.RayCluster) bool {
		return worker.clusterUID == "" || rc.UID == worker.clusterUID
	}, client.UnsafeDisableDeepCopy) // only its labels and annotations are read, here
	if err != nil {
		// As the allocator's read of the same RayCluster: a refusal the API server would repeat
		// is permanent, anything else transient (docs/operations.md).
		if apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) || apierrors.IsInvalid(err) {
			return deny("reading RayCluster %s/%s: %v", key.Namespace, key.Name, err)
		}
		return denyTransient("reading RayCluster %s/%s: %v", key.Namespace, key.Name, err)
	}
	objs := []placement.Object{{Kind: "Pod", Labels: worker.pod.Labels, Annotations: worker.pod.Annotations}}
	if rc != nil {
		objs = append(objs, placement.Object{Kind: "RayCluster", Labels: rc.Labels, Annotations: rc.Annotations})
	}
	worker.managed = placement.Managed(objs...)
	return nil
}

func (w *podWebhook) admissionTimeout() time.Duration {
	if w.timeout > 0 {
		return w.timeout
	}
	return allocator.DefaultTimeout
}

// timedOut is the denial of an admission whose deadline passed, whichever API call it cut.
func timedOut(timeout time.Duration) error {
	return denyTransient("timed out after %s admitting the TPU worker Pod (API server slow or heavily contended)", timeout)
}

// forgetCopiedIdentity handles a Pod that arrives already carrying a TPU identity or a claim token.
// If it is this admission coming back (webhook re-invocation: its token is a pending claim of the
// slice its spec names, and no live Pod carries it), it reports true and the Pod is returned
// unchanged. Otherwise the Pod is a copy: its identity is stripped and it is admitted as a new one
// (docs/spec.md §8; docs/design.md, what links a claim to its Pod).
func (w *podWebhook) forgetCopiedIdentity(ctx context.Context, worker workerPod) (bool, error) {
	prev, pod := worker.carried, worker.pod
	if !worker.hasIdentity && worker.token == "" {
		return false, nil
	}
	if worker.hasIdentity && worker.token != "" {
		reinvoked, err := w.planner.Reinvoked(ctx, worker.namespace, prev.SliceName(), worker.token, prev.WorkerID)
		if err != nil || reinvoked {
			return reinvoked, err
		}
	}
	old := tpuenv.Values{ClaimToken: worker.token}
	if worker.hasIdentity {
		old = tpuenv.ValuesOf(prev, worker.slice, pod.Spec.Subdomain)
		old.ClaimToken = worker.token
	}
	tpuenv.Strip(pod, old, worker.slice.TPUContainers)
	ctrl.LoggerFrom(ctx).Info("TPU worker Pod carries a copied TPU identity; admitting it as a new Pod",
		"namespace", worker.namespace, "generateName", pod.GenerateName, "copiedSlice", old.SliceName, "copiedWorkerID", old.WorkerID)
	return false, nil
}

// admissionResult is the metrics label of an admission's outcome.
func admissionResult(err error, dryRun bool) string {
	switch {
	case err == nil && dryRun:
		return metrics.ResultDryRun
	case err == nil:
		return metrics.ResultAssigned
	case apierrors.IsTooManyRequests(err):
		return metrics.ResultDeniedTransient
	default:
		return metrics.ResultDeniedPermanent
	}
}

// assign chooses the slice affinity key of the Pod, claims a worker ID for it (a plan for a dry
// run) and applies the identity to the Pod.
func (w *podWebhook) assign(ctx context.Context, req admission.Request, worker workerPod) error {
	affinity, err := w.place(ctx, worker)
	if err != nil {
		return err
	}
	request := worker.request(affinity, w.mode)
	log := ctrl.LoggerFrom(ctx).WithValues("namespace", req.Namespace, "generateName", worker.pod.GenerateName,
		"rayCluster", request.ClusterName, "group", request.GroupName)
	dryRun := ptr.Deref(req.DryRun, false)
	var assignment allocator.Assignment
	if dryRun {
		assignment, err = w.planner.Plan(ctx, request)
		assignment.Token = dryRunToken
	} else {
		assignment, err = w.claimer.Claim(ctx, request)
	}
	if err != nil {
		log.Info("TPU worker ID claim denied", "err", err)
		return denial(err)
	}
	vals := worker.values(assignment, affinity.Key)
	vals.HostListsInConfigMap = w.hostLists != nil && tpuenv.HostListsInConfigMap(vals.Hosts, w.hostListsAbove)
	if vals.HostListsInConfigMap && !dryRun {
		// The ConfigMap exists before the Pod does, so its containers never wait for it; a Pod
		// whose slice's ConfigMap cannot be written gets its host lists inline (docs/spec.md §4).
		if err := w.hostLists.ensure(ctx, req.Namespace, assignment, vals, len(worker.slice.TPUContainers)); err != nil {
			log.Info("Could not write the slice's host lists ConfigMap; the Pod gets them inline", "slice", assignment.SliceName, "err", err)
			vals.HostListsInConfigMap = false
		}
	}
	vals.DNSSearch = tpuenv.DNSSearchDomain(worker.subdomain, req.Namespace, w.clusterDomain)
	if err := tpuenv.HostListsFit(vals, len(worker.slice.TPUContainers)); err != nil {
		// Only a replica index of more digits than the check before the claim took gets here:
		// the claim is left to the pending TTL, as any denied Pod's (docs/spec.md §8).
		log.Info("TPU worker Pod denied: its host lists cannot be passed to a container", "err", err)
		return deny("TPU worker Pod of RayCluster %s group %s: %v", request.ClusterName, request.GroupName, err)
	}
	tpuenv.Apply(worker.pod, vals, worker.slice.TPUContainers)
	if err := tpuenv.ExecFits(worker.pod, vals, worker.slice.TPUContainers); err != nil {
		log.Info("TPU worker Pod denied: its containers could not start", "err", err)
		return deny("TPU worker Pod of RayCluster %s group %s: %v", request.ClusterName, request.GroupName, err)
	}
	log.V(1).Info("Assigned TPU worker ID", "slice", assignment.SliceName, "replica", assignment.Replica,
		"workerID", assignment.WorkerID, "affinityTopologyKey", vals.AffinityTopologyKey, "placedBy", affinity.Source.String(),
		"placement", assignment.Placement, "dryRun", dryRun)
	return nil
}

// place chooses the topologyKey of the slice affinity of a multi-host Pod (placement.Decide), from
// the Pod, its Kueue and dynamic-slicing signal and, only for a subslice, the TPU Nodes. Its errors
// are the Pod's denials.
func (w *podWebhook) place(ctx context.Context, worker workerPod) (placement.KeyChoice, error) {
	in := placement.Input{Pod: worker.pod, Slice: worker.slice, Managed: worker.managed}
	if w.nodes != nil {
		in.Nodes = func() ([]placement.Node, error) { return w.nodes.ListNodes(ctx, worker.pod.Spec.NodeSelector) }
	}
	affinity, err := placement.Decide(in)
	switch {
	case errors.Is(err, placement.ErrInvalidTopologyKey):
		return placement.KeyChoice{}, deny("TPU worker Pod of RayCluster %s group %s: %v", worker.cluster, worker.group, err)
	case err != nil:
		return placement.KeyChoice{}, denyTransient("TPU worker Pod of RayCluster %s group %s: %v", worker.cluster, worker.group, err)
	}
	return affinity, nil
}

// request is the claim request of the Pod, whose slice affinity Decide chose, under
// --slice-placement=mode.
func (worker workerPod) request(affinity placement.KeyChoice, mode tpuv1alpha1.SlicePlacement) allocator.Request {
	return allocator.Request{
		Namespace: worker.namespace, ClusterName: worker.cluster, ClusterUID: worker.clusterUID, GroupName: worker.group,
		Hosts: worker.slice.Hosts, Topology: worker.slice.Topology.String(), Accelerator: worker.slice.Accelerator,
		AffinityTopologyKey: affinity.Key, Claim: worker.indexes,
		Placement: allocator.PlacementRequest{Mode: mode, Source: affinity.Source, NodeSelector: worker.pod.Spec.NodeSelector},
	}
}

// values are what tpuenv writes into the Pod for assignment. Every Pod of a slice gets the
// affinity key the slice recorded at its first claim, else affinityKey, the Pod's own, and the
// placement the slice recorded when it was created (a gate, or inter-pod terms on the key).
func (worker workerPod) values(assignment allocator.Assignment, affinityKey string) tpuenv.Values {
	key := cmp.Or(assignment.AffinityTopologyKey, affinityKey)
	return tpuenv.Values{
		GroupName: worker.group, ReplicaIndex: assignment.Replica, WorkerID: assignment.WorkerID,
		Hosts: worker.slice.Hosts, Subdomain: worker.subdomain, V7x: topology.IsV7x(worker.slice.Accelerator),
		SliceName: assignment.SliceName, Namespace: worker.namespace, ClaimToken: assignment.Token,
		Topology: worker.slice.Topology.Dims, ChipsPerHost: worker.slice.ChipsPerPod,
		AffinityTopologyKey: key, NoAffinity: key == "", Placement: assignment.Placement,
	}
}

// dryRunToken is the claim token a dry run's Pod carries. No claim ever has it, so a Pod created
// from a dry run's output is admitted as a new Pod.
const dryRunToken = "dry-run"

// kubeRayIndexes reads KubeRay's multi-host indexing labels (RayMultiHostIndexing), when present.
func kubeRayIndexes(pod *corev1.Pod) (claims.Request, error) {
	var out claims.Request
	if v, ok := pod.Labels[rayutils.RayWorkerReplicaIndexKey]; ok {
		i, err := parseIndex(rayutils.RayWorkerReplicaIndexKey, v)
		if err != nil {
			return out, err
		}
		out.ReplicaIndex = &i
	}
	if v, ok := pod.Labels[rayutils.RayHostIndexKey]; ok && out.ReplicaIndex != nil {
		i, err := parseIndex(rayutils.RayHostIndexKey, v)
		if err != nil {
			return out, err
		}
		out.HostIndex = &i
	}
	if out.ReplicaIndex != nil {
		out.ReplicaName = pod.Labels[rayutils.RayWorkerReplicaNameKey]
	}
	return out, nil
}

func parseIndex(key, v string) (int32, error) {
	i, err := strconv.ParseInt(v, 10, 32)
	if err != nil || i < 0 {
		return 0, fmt.Errorf("label %s=%q is not a non-negative integer", key, v)
	}
	return int32(i), nil
}

// deny returns a permanent denial: the Pod must be fixed.
func deny(format string, args ...any) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusForbidden,
		Reason:  metav1.StatusReasonForbidden,
		Message: fmt.Sprintf(format, args...),
	}}
}

// denyTransient returns a denial the Pod's creator should retry as is.
func denyTransient(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...) + "; " + allocator.TransientNote
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusTooManyRequests,
		Reason:  metav1.StatusReasonTooManyRequests,
		Message: msg,
		Details: &metav1.StatusDetails{RetryAfterSeconds: 1},
	}}
}

func denial(err error) error {
	var d *allocator.DeniedError
	if errors.As(err, &d) && d.Transient {
		return denyTransient("%s", d.Message)
	}
	if d != nil {
		return deny("%s", d.Message)
	}
	return denyTransient("%v", err)
}
