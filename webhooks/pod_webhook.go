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

	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	podidentity "github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// +kubebuilder:webhook:path=/mutate--v1-pod,mutating=true,failurePolicy=fail,sideEffects=NoneOnDryRun,groups="",resources=pods,verbs=create,versions=v1,name=mpod.tpu.ray.io,admissionReviewVersions=v1,timeoutSeconds=10,reinvocationPolicy=IfNeeded

// podWebhook gives each KubeRay TPU worker Pod a unique worker ID in its slice and the environment,
// hostname, labels and affinity that go with it (docs/spec.md §1, §3–§5).
type podWebhook struct {
	planner Planner // dry runs and re-invocation checks
	claimer Claimer // claims
	// clusters reads RayClusters (the cache) for their Kueue and dynamic-slicing signals.
	clusters client.Reader
	// nodes lists the TPU Nodes, for a subslice's affinity (nil: none known).
	nodes placement.NodeLister
	// maxHosts bounds the hosts of a slice (topology.DefaultMaxSliceHosts when zero); it is checked
	// before any work that grows with the hosts.
	maxHosts int32
	// timeout bounds a whole admission, every API call of it included (allocator.DefaultTimeout
	// when zero), inside the webhook's 10 s timeout (docs/spec.md §5).
	timeout time.Duration
	// metrics receive the admissions' counts.
	metrics *metrics.Metrics
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
// Bounds come before work: the Pod's topology is parsed and its host count checked against
// --max-slice-hosts before anything that grows with the hosts (stripping a copied identity,
// placement, the claim, the environment) runs, and one deadline bounds the whole admission, every
// API read and write included (docs/spec.md §5, §10).
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
	slice, err := w.bound(pod)
	if err != nil {
		w.metrics.Admissions.WithLabelValues(metrics.ResultDeniedPermanent).Inc()
		return err
	}
	timeout := w.admissionTimeout()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	reinvoked, err := w.forgetCopiedIdentity(ctx, req.Namespace, pod, slice)
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
	err = w.assign(ctx, req, pod, slice)
	if err != nil && ctx.Err() != nil && apierrors.IsTooManyRequests(err) {
		// Whatever read or write the deadline cut, the user is told the same (docs/spec.md §5).
		err = timedOut(timeout)
	}
	w.metrics.Admissions.WithLabelValues(admissionResult(err, ptr.Deref(req.DryRun, false))).Inc()
	return err
}

// bound parses the Pod's slice and checks its host count against --max-slice-hosts: the first
// thing an admission does, so that no work grows with a topology the operator refuses.
// Parsing costs nothing per chip (topology.ParseTopology).
func (w *podWebhook) bound(pod *corev1.Pod) (topology.Slice, error) {
	cluster, group := pod.Labels[rayutils.RayClusterLabelKey], pod.Labels[rayutils.RayNodeGroupLabelKey]
	slice, err := topology.FromPod(pod.Annotations, &pod.Spec)
	if err != nil {
		return topology.Slice{}, deny("TPU worker Pod of RayCluster %s group %s: %v", cluster, group, err)
	}
	maxHosts := cmp.Or(w.maxHosts, topology.DefaultMaxSliceHosts)
	if slice.Hosts > maxHosts {
		return topology.Slice{}, deny("TPU worker Pod of RayCluster %s group %s: topology %s gives a slice of %d hosts, more than this operator allows (--max-slice-hosts=%d)",
			cluster, group, slice.Topology, slice.Hosts, maxHosts)
	}
	return slice, nil
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
// unchanged. Otherwise the Pod is a copy (a manifest copied from a running worker, a template, a
// dry-run output): a token is not a claim, so the copied identity is stripped and the Pod is
// admitted as a new one (docs/spec.md §8).
//
// slice is the Pod's own slice, already bounded (bound): the identity stripped is at most that
// large.
func (w *podWebhook) forgetCopiedIdentity(ctx context.Context, namespace string, pod *corev1.Pod, slice topology.Slice) (bool, error) {
	prev, hasIdentity := podidentity.FromPod(pod)
	token := podidentity.Token(pod)
	if !hasIdentity && token == "" {
		return false, nil
	}
	if hasIdentity && token != "" {
		reinvoked, err := w.planner.Reinvoked(ctx, namespace, prev.SliceName(), token, prev.WorkerID)
		if err != nil || reinvoked {
			return reinvoked, err
		}
	}
	old := tpuenv.Identity{ClaimToken: token}
	if hasIdentity {
		old = tpuenv.Identity{
			GroupName: prev.Group, ReplicaIndex: prev.Replica, WorkerID: prev.WorkerID, Hosts: prev.Hosts,
			Subdomain: pod.Spec.Subdomain, V7x: topology.IsV7x(pod.Spec.NodeSelector[constants.AcceleratorNodeSelectorKey]),
			SliceName: prev.SliceName(), ClaimToken: token,
			Topology: slice.Topology.Dims, ChipsPerHost: slice.ChipsPerPod,
		}
	}
	tpuenv.Strip(pod, old, slice.TPUContainers)
	ctrl.LoggerFrom(ctx).Info("TPU worker Pod carries a copied TPU identity; admitting it as a new Pod",
		"namespace", namespace, "generateName", pod.GenerateName, "copiedSlice", old.SliceName, "copiedWorkerID", old.WorkerID)
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

// assign claims a worker ID for a TPU worker Pod and applies the identity to it.
func (w *podWebhook) assign(ctx context.Context, req admission.Request, pod *corev1.Pod, slice topology.Slice) error {
	in, err := w.prepare(ctx, req.Namespace, pod, slice)
	if err != nil {
		return err
	}
	log := ctrl.LoggerFrom(ctx).WithValues("namespace", req.Namespace, "generateName", pod.GenerateName,
		"rayCluster", in.request.ClusterName, "group", in.request.GroupName)
	dryRun := ptr.Deref(req.DryRun, false)
	var assignment allocator.Assignment
	if dryRun {
		assignment, err = w.planner.Plan(ctx, in.request)
		assignment.Token = dryRunToken
	} else {
		assignment, err = w.claimer.Claim(ctx, in.request)
	}
	if err != nil {
		log.Info("TPU worker ID claim denied", "err", err)
		return denial(err)
	}
	id := in.identity(assignment)
	tpuenv.Apply(pod, id, in.slice.TPUContainers)
	log.V(1).Info("Assigned TPU worker ID", "slice", assignment.SliceName, "replica", assignment.Replica,
		"workerID", assignment.WorkerID, "affinityTopologyKey", id.AffinityTopologyKey, "placedBy", in.placed.Source.String(),
		"dryRun", dryRun)
	return nil
}

// workerPod is what the Pod webhook reads from a TPU worker Pod before it claims: the claim request,
// the slice's shape, the headless Service the Pod's hostname lives under, and its placement.
type workerPod struct {
	request   allocator.Request
	slice     topology.Slice
	subdomain string
	placed    placement.Decision
}

// prepare reads what a claim needs from pod, whose slice (bounded) is slice, and checks it; its
// errors are the Pod's denials.
func (w *podWebhook) prepare(ctx context.Context, namespace string, pod *corev1.Pod, slice topology.Slice) (workerPod, error) {
	cluster, group := pod.Labels[rayutils.RayClusterLabelKey], pod.Labels[rayutils.RayNodeGroupLabelKey]
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
	placed, err := w.place(ctx, namespace, cluster, pod, slice)
	if err != nil {
		if errors.Is(err, placement.ErrInvalidTopologyKey) {
			return workerPod{}, deny("TPU worker Pod of RayCluster %s group %s: %v", cluster, group, err)
		}
		return workerPod{}, denyTransient("TPU worker Pod of RayCluster %s group %s: %v", cluster, group, err)
	}
	return workerPod{slice: slice, subdomain: subdomain, placed: placed, request: allocator.Request{
		Namespace: namespace, ClusterName: cluster, ClusterUID: ownerUID(pod), GroupName: group,
		Hosts: slice.Hosts, Topology: slice.Topology.String(), Accelerator: slice.Accelerator,
		AffinityTopologyKey: placed.Key, Claim: indexes,
	}}, nil
}

// identity is what the Pod gets for assignment. Every Pod of a slice gets the affinity key the
// slice recorded at its first claim.
func (in workerPod) identity(assignment allocator.Assignment) tpuenv.Identity {
	key := cmp.Or(assignment.AffinityTopologyKey, in.placed.Key)
	return tpuenv.Identity{
		GroupName: in.request.GroupName, ReplicaIndex: assignment.Replica, WorkerID: assignment.WorkerID,
		Hosts: in.slice.Hosts, Subdomain: in.subdomain, V7x: topology.IsV7x(in.slice.Accelerator),
		SliceName: assignment.SliceName, ClaimToken: assignment.Token,
		Topology: in.slice.Topology.Dims, ChipsPerHost: in.slice.ChipsPerPod,
		AffinityTopologyKey: key, NoAffinity: key == "",
	}
}

// place chooses the topologyKey of the slice affinity of a multi-host Pod (placement.Decide): the
// Kueue and dynamic-slicing signals are read on the Pod and its RayCluster (the cache), and the TPU
// Nodes only for a subslice.
func (w *podWebhook) place(ctx context.Context, namespace, cluster string, pod *corev1.Pod, slice topology.Slice) (placement.Decision, error) {
	objs := []placement.Object{{Kind: "Pod", Labels: pod.Labels, Annotations: pod.Annotations}}
	rc := &rayv1.RayCluster{}
	if w.clusters != nil && w.clusters.Get(ctx, types.NamespacedName{Namespace: namespace, Name: cluster}, rc) == nil {
		objs = append(objs, placement.Object{Kind: "RayCluster", Labels: rc.Labels, Annotations: rc.Annotations})
	}
	in := placement.Input{Pod: pod, Slice: slice, Managed: placement.Managed(objs...)}
	if w.nodes != nil {
		in.Nodes = func() ([]placement.Node, error) { return w.nodes.ListNodes(ctx, pod.Spec.NodeSelector) }
	}
	return placement.Decide(in)
}

// dryRunToken is the claim token a dry run's Pod carries. No claim ever has it, so a Pod created
// from a dry run's output is admitted as a new Pod.
const dryRunToken = "dry-run"

// ownerUID returns the UID of the Pod's controlling RayCluster, set by KubeRay at creation ("" for
// none).
func ownerUID(pod *corev1.Pod) types.UID {
	_, uid, _ := podidentity.Owner(pod)
	return uid
}

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
