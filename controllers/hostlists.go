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
	"errors"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/hostlists"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update

// maxHostListsConfigMaps is the most names status.hostListsConfigMaps holds (its MaxItems).
const maxHostListsConfigMaps = 16

// ensureHostLists re-creates, owned by the slice, each host lists ConfigMap that a live Pod of the
// slice references and that is missing (docs/spec.md §4): the webhook wrote it before admitting the
// Pod, and it is gone (deleted by hand, or never written when the webhook fell back to inline
// values for another Pod). It returns the names the live Pods reference, sorted, at most
// maxHostListsConfigMaps. A reference the Pod's own identity does not give (a hand-written or
// copied one) is left alone: the reconciler writes only what it can compute from the Pod.
func (r *TPUSliceAssignmentReconciler) ensureHostLists(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment, pods []corev1.Pod) ([]string, error) {
	var names []string
	for i := range pods {
		pod := &pods[i]
		if !lifecycle.PodLive(pod) {
			continue
		}
		parsed, err := topology.FromPod(pod.Annotations, &pod.Spec)
		if err != nil {
			continue
		}
		for _, name := range tpuenv.ReferencedHostListsConfigMaps(pod, parsed.TPUContainers) {
			if slices.Contains(names, name) {
				continue
			}
			names = append(names, name)
			if err := r.ensureHostListsOf(ctx, slice, pod, parsed, name); err != nil {
				return nil, err
			}
		}
	}
	slices.Sort(names)
	if len(names) > maxHostListsConfigMaps {
		names = names[:maxHostListsConfigMaps]
	}
	return names, nil
}

// ensureHostListsOf makes sure ConfigMap name, which pod (of slice parsed) references, exists.
func (r *TPUSliceAssignmentReconciler) ensureHostListsOf(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment,
	pod *corev1.Pod, parsed topology.Slice, name string) error {
	log := ctrl.LoggerFrom(ctx).WithValues("slice", klog.KObj(slice), "pod", klog.KObj(pod), "configMap", name)
	owner := hostlists.Slice{Name: slice.Name, UID: slice.UID}
	got := &corev1.ConfigMap{}
	err := r.client.Get(ctx, types.NamespacedName{Namespace: slice.Namespace, Name: name}, got)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil {
		if ref := metav1.GetControllerOfNoCopy(got); ref != nil && ref.UID == slice.UID {
			return nil // the slice's: written from the slice's Pods, immutable
		}
	}
	id, ok := identity.FromParsedPod(pod, parsed)
	// The slice's host count was bounded when it was created; a Pod that says another (one made
	// past the webhook, with any topology) gets nothing built for it.
	if !ok || id.SliceName() != slice.Name || id.Hosts != slice.Spec.Hosts {
		return nil
	}
	vals := tpuenv.ValuesOf(id, parsed, pod.Spec.Subdomain)
	if tpuenv.HostListsConfigMapName(vals, len(parsed.TPUContainers)) != name {
		log.V(1).Info("Pod references a host lists ConfigMap its identity does not give; leaving it alone")
		return nil
	}
	// Only now the lists, which grow with the slice's hosts (bounded by --max-slice-hosts at admission).
	want := tpuenv.HostListsConfigMap(slice.Namespace, vals, len(parsed.TPUContainers))
	if err == nil && !hostlists.LeftBySameName(got, owner, want) {
		// Another owner's, with other data or of another name, or someone else's.
		if !hostlists.IsTheSlices(got, owner, want) {
			r.recorder.Eventf(slice, nil, corev1.EventTypeWarning, tpuv1alpha1.ReasonTPUSliceHostListsForeign, "Observe",
				noteTPUSliceHostListsForeign, name, slice.Name, "another owner or other data")
		}
		return nil
	}
	// Missing, or left by a former slice of this name, which Ensure adopts. Ensure writes only for
	// the slice of its name, read live: this reconcile read the slice and the Pods from caches, and
	// a slice replaced under its name (a RayCluster re-created) may still be in them, with the Pods
	// of its successor, which reference the same name. Created for the dead slice, the ConfigMap had
	// a controller the garbage collector deletes it for, until the successor adopted it (found while
	// diagnosing a chaos failure: a Pod taking its lists from a ConfigMap of a former slice's UID).
	created, err := hostlists.Ensure(ctx, r.client, r.reader, owner, want)
	switch {
	case errors.Is(err, hostlists.ErrSliceGone):
		// This reconcile read the slice from a cache behind: the slice is gone or replaced, and
		// the one of its name now adopts the ConfigMap when its own reconcile or admission comes.
		log.V(1).Info("Slice is no longer the one of its name; leaving the host lists ConfigMap to it")
		return nil
	case errors.Is(err, hostlists.ErrNotTheSlices):
		r.recorder.Eventf(slice, nil, corev1.EventTypeWarning, tpuv1alpha1.ReasonTPUSliceHostListsForeign, "Observe",
			noteTPUSliceHostListsForeign, name, slice.Name, "another owner or other data")
		return nil
	case err != nil:
		return err
	case created:
		log.Info("Re-created the host lists ConfigMap the slice's live Pods reference")
		r.recorder.Eventf(slice, nil, corev1.EventTypeNormal, tpuv1alpha1.ReasonTPUSliceHostListsRecreated, "Create",
			noteTPUSliceHostListsRecreated, name, slice.Name)
	}
	return nil
}

// configMapToSlice maps a host lists ConfigMap to the slice its label names, whichever slice
// owns it: the deletion of a slice's ConfigMap, or of one of a former slice of the same name,
// reconciles the slice whose Pods may reference it.
func configMapToSlice(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[tpuv1alpha1.SliceLabel]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}
