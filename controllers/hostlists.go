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
	"sync"

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

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;delete

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

// ensureHostListsOf makes sure ConfigMap name, which pod (of slice parsed) references, exists and
// is the slice's: controlled by the slice, immutable, with the data the Pod's identity gives, the
// rule the webhook accepts an existing ConfigMap by (hostlists.IsTheSlices). One the slice controls
// that is anything else is reported and replaced before a container of the slice starts with it
// (docs/spec.md §4, §8).
func (r *TPUSliceAssignmentReconciler) ensureHostListsOf(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment,
	pod *corev1.Pod, parsed topology.Slice, name string) error {
	log := ctrl.LoggerFrom(ctx).WithValues("slice", klog.KObj(slice), "pod", klog.KObj(pod), "configMap", name)
	owner := hostlists.Slice{Name: slice.Name, UID: slice.UID}
	got := &corev1.ConfigMap{}
	err := r.client.Get(ctx, types.NamespacedName{Namespace: slice.Namespace, Name: name}, got)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil && r.verifiedHostLists.has(got, slice.UID) {
		return nil // checked before for this slice, unchanged since (its UID and resourceVersion)
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
	// Only now the lists, which grow with the slice's hosts (bounded by --max-slice-hosts at
	// admission); once per ConfigMap and resourceVersion.
	want := tpuenv.HostListsConfigMap(slice.Namespace, vals, len(parsed.TPUContainers))
	if err == nil {
		switch {
		case hostlists.IsTheSlices(got, owner, want):
			r.verifiedHostLists.add(got, slice.UID)
			return nil
		case controlledBy(got, slice.UID):
			_, err := r.replaceHostLists(ctx, slice, owner, want)
			return err
		case !hostlists.LeftBySameName(got, owner, want):
			// Another owner's, with other data or of another name, or someone else's.
			r.recorder.Eventf(slice, nil, corev1.EventTypeWarning, tpuv1alpha1.ReasonTPUSliceHostListsForeign, "Observe",
				noteTPUSliceHostListsForeign, name, slice.Name, "another owner or other data")
			return nil
		}
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
		// The cache did not have it (created a moment ago, or without the slice label the cache
		// selects on): it may be one the slice controls with other data.
		if handled, err := r.replaceHostLists(ctx, slice, owner, want); handled || err != nil {
			return err
		}
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

// replaceHostLists replaces the ConfigMap of want's name, read live, when the slice controls it but
// it is not want (other data, or mutable: changed by hand, or created with a forged owner
// reference): a Warning Event and a log say so, then hostlists.Replace deletes it, conditional on
// its UID and resourceVersion, and creates want, immutable. The slice's running Pods read it at
// their next container start. It reports false when the ConfigMap is not the slice's to replace
// (another controller): the caller reports it as foreign. The live read keeps a cache behind
// (the replaced ConfigMap still in it) from reporting and deleting again.
func (r *TPUSliceAssignmentReconciler) replaceHostLists(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment, owner hostlists.Slice,
	want *corev1.ConfigMap) (bool, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("slice", klog.KObj(slice), "configMap", klog.KObj(want))
	got := &corev1.ConfigMap{}
	if err := r.reader.Get(ctx, client.ObjectKeyFromObject(want), got); err != nil {
		// Gone: its deletion wakes this slice, whose next reconcile re-creates it.
		return true, client.IgnoreNotFound(err)
	}
	switch {
	case hostlists.IsTheSlices(got, owner, want):
		r.verifiedHostLists.add(got, slice.UID)
		return true, nil
	case !controlledBy(got, slice.UID):
		return false, nil
	case got.DeletionTimestamp != nil:
		// Already going: its deletion wakes this slice, whose next reconcile re-creates it.
		log.V(1).Info("Host lists ConfigMap of the slice is being deleted; re-creating it once it is gone")
		return true, nil
	}
	// As Ensure: a reconcile on caches behind may hold a slice replaced under its name, whose
	// successor's lists (the same name) are not this one's to judge.
	if err := hostlists.Current(ctx, r.reader, slice.Namespace, owner); err != nil {
		if errors.Is(err, hostlists.ErrSliceGone) {
			log.V(1).Info("Slice is no longer the one of its name; leaving the host lists ConfigMap to it")
			return true, nil
		}
		return true, err
	}
	why := hostlists.Mismatch(got, want)
	log.Info("Host lists ConfigMap controlled by the slice is not the slice's; replacing it", "reason", why,
		"resourceVersion", got.ResourceVersion)
	r.recorder.Eventf(slice, nil, corev1.EventTypeWarning, tpuv1alpha1.ReasonTPUSliceHostListsReplaced, "Replace",
		noteTPUSliceHostListsReplaced, got.Name, slice.Name, why)
	err := hostlists.Replace(ctx, r.client, r.reader, owner, got, want)
	if errors.Is(err, hostlists.ErrSliceGone) {
		log.V(1).Info("Slice is no longer the one of its name; leaving the host lists ConfigMap to it")
		return true, nil
	}
	return true, err
}

// controlledBy reports whether uid is the controller of obj.
func controlledBy(obj metav1.Object, uid types.UID) bool {
	ref := metav1.GetControllerOfNoCopy(obj)
	return ref != nil && ref.UID == uid && uid != ""
}

// maxVerifiedHostLists bounds the ConfigMaps a verifiedConfigMaps remembers; past it, it forgets
// them all and checks each again once.
const maxVerifiedHostLists = 4096

// verifiedConfigMaps remembers, by UID, the resourceVersion at which each host lists ConfigMap was
// found to be the slice's, and that slice's UID, so that a reconcile builds a slice's lists
// (O(hosts)) only when its ConfigMap or the slice changed (a slice re-created under its name
// must adopt the ConfigMap its former self left). The zero value is ready to use.
type verifiedConfigMaps struct {
	mu   sync.Mutex
	seen map[types.UID]verifiedConfigMap
}

type verifiedConfigMap struct {
	resourceVersion string
	slice           types.UID
}

// has reports whether cm, at its resourceVersion, was found to be the ConfigMap of slice.
func (v *verifiedConfigMaps) has(cm *corev1.ConfigMap, slice types.UID) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	got, ok := v.seen[cm.UID]
	return ok && cm.UID != "" && got == verifiedConfigMap{resourceVersion: cm.ResourceVersion, slice: slice}
}

func (v *verifiedConfigMaps) add(cm *corev1.ConfigMap, slice types.UID) {
	if cm.UID == "" {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.seen == nil || len(v.seen) >= maxVerifiedHostLists {
		v.seen = make(map[types.UID]verifiedConfigMap)
	}
	v.seen[cm.UID] = verifiedConfigMap{resourceVersion: cm.ResourceVersion, slice: slice}
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
