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

package controllers

import (
	"context"
	"fmt"
	"slices"

	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/nodes"
	"github.com/ray-tpu/tpu-slice-operator/internal/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// scanPageSize bounds the Pods one page of a namespace scan holds in memory (TPU Pods can be large).
const scanPageSize = 100

// unlistedPods reads, a page at a time, the namespace's Pods from the API server and returns those
// whose spec identity names the slice and that are not among have, whatever their labels. It is the
// read before a pending claim expires (see decide): rare, and the only one that finds a Pod whose
// KubeRay labels were removed before any informer saw it.
func (r *TPUSliceAssignmentReconciler) unlistedPods(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment, have []corev1.Pod) ([]corev1.Pod, error) {
	known := make(map[types.UID]bool, len(have))
	for i := range have {
		known[have[i].UID] = true
	}
	var out []corev1.Pod
	opts := []client.ListOption{client.InNamespace(slice.Namespace), client.Limit(scanPageSize)}
	for {
		var page corev1.PodList
		if err := r.reader.List(ctx, &page, opts...); err != nil {
			return nil, fmt.Errorf("scanning Pods of namespace %s for slice %s: %w", slice.Namespace, slice.Name, err)
		}
		for i := range page.Items {
			p := &page.Items[i]
			if id, ok := identity.FromPod(p); ok && id.SliceName() == slice.Name && !known[p.UID] {
				out = append(out, *p)
			}
		}
		if page.Continue == "" {
			return out, nil
		}
		opts = []client.ListOption{client.InNamespace(slice.Namespace), client.Limit(scanPageSize), client.Continue(page.Continue)}
	}
}

// recreate creates the slice key names when live Pods still carry an identity of it although it
// does not exist: Pods created before the operator ran, or a create that committed after its slice
// was deleted (a scale-down while it was in flight). The returned slice is then reconciled as any
// other, which records those Pods' claims (docs/spec.md §8). It returns nil when no live Pod of a
// live RayCluster's UID names the slice.
func (r *TPUSliceAssignmentReconciler) recreate(ctx context.Context, key types.NamespacedName) (*tpuv1alpha1.TPUSliceAssignment, error) {
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.InNamespace(key.Namespace), client.MatchingFields{identity.SliceIndex: key.Name}); err != nil {
		return nil, err
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		id, ok := identity.FromPod(pod)
		if !ok || !lifecycle.PodLive(pod) {
			continue
		}
		spec, ok, err := r.specFor(ctx, pod, id)
		if err != nil || !ok {
			return nil, err
		}
		if err := r.recreatedPlacement(ctx, &spec, pods.Items, pod); err != nil {
			return nil, err
		}
		slice := claims.NewSlice(key.Namespace, spec)
		if err := r.client.Create(ctx, slice, client.FieldOwner(constants.FieldManager)); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return nil, nil // another writer was first; its create event reconciles it.
			}
			return nil, fmt.Errorf("re-creating slice %s for its live Pods: %w", key.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("Re-created TPUSliceAssignment that live Pods hold worker IDs of", "slice", key, "pod", pod.Name)
		return slice, nil
	}
	return nil, nil
}

// recreatedPlacement gives a re-created slice the placement its live Pods show: when one of them
// carries the operator's scheduling gate, the slice was ChosenDomain and must be again, or those
// Pods would wait gated for good; its key is chosen again as the webhook chose it (placement.Decide,
// from the Pod and, for a subslice, the TPU Nodes). Otherwise the slice is re-created without a
// placement, as before: its Pods keep whatever terms they carry (docs/spec.md §8, §12).
func (r *TPUSliceAssignmentReconciler) recreatedPlacement(ctx context.Context, spec *tpuv1alpha1.TPUSliceAssignmentSpec, pods []corev1.Pod, pod *corev1.Pod) error {
	name := naming.SliceName(spec.RayClusterName, spec.GroupName, spec.ReplicaIndex)
	gated := slices.ContainsFunc(pods, func(p corev1.Pod) bool {
		id, ok := identity.FromPod(&p)
		return ok && lifecycle.PodLive(&p) && tpuenv.HasGate(&p) && id.SliceName() == name
	})
	if !gated {
		return nil
	}
	shape, ok := sliceShape(pod)
	if !ok {
		return nil
	}
	choice, err := placement.Decide(placement.Input{Pod: pod, Slice: shape, Nodes: func() ([]placement.Node, error) {
		return nodes.Lister{Reader: r.client}.ListNodes(ctx, pod.Spec.NodeSelector)
	}})
	if err != nil {
		return fmt.Errorf("choosing the affinity key of a re-created slice: %w", err)
	}
	if choice.Key != "" {
		spec.Placement, spec.AffinityTopologyKey = tpuv1alpha1.PlacementChosenDomain, choice.Key
	}
	return nil
}

// specFor returns the spec of the slice a live Pod's identity names, and false when its RayCluster
// UID or worker group no longer exists (the Pod awaits the garbage collector or KubeRay).
func (r *TPUSliceAssignmentReconciler) specFor(ctx context.Context, pod *corev1.Pod, id identity.Identity) (tpuv1alpha1.TPUSliceAssignmentSpec, bool, error) {
	rc, err := r.rayCluster(ctx, pod.Namespace, id.Cluster, id.ClusterUID)
	if err != nil || rc == nil || !id.OfClusterUID(rc.UID) {
		return tpuv1alpha1.TPUSliceAssignmentSpec{}, false, err
	}
	if _, ok := claims.DesiredReplicas(rc, id.Group); !ok {
		return tpuv1alpha1.TPUSliceAssignmentSpec{}, false, nil
	}
	// A Pod whose topology gives no slice cannot have one re-created for it: nothing to do.
	shape, ok := sliceShape(pod)
	if !ok {
		return tpuv1alpha1.TPUSliceAssignmentSpec{}, false, nil
	}
	return tpuv1alpha1.TPUSliceAssignmentSpec{
		RayClusterName: id.Cluster,
		RayClusterUID:  rc.UID,
		GroupName:      id.Group,
		ReplicaIndex:   id.Replica,
		ReplicaName:    pod.Labels[rayutils.RayWorkerReplicaNameKey],
		Hosts:          shape.Hosts,
		Topology:       shape.Topology.String(),
		Accelerator:    shape.Accelerator,
	}, true, nil
}

// sliceShape returns the slice a Pod's topology and TPU resources describe, if they describe one.
func sliceShape(pod *corev1.Pod) (topology.Slice, bool) {
	shape, err := topology.FromPod(pod.Annotations, &pod.Spec)
	return shape, err == nil
}
