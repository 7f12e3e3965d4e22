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

// Package hostlists writes the ConfigMap a big slice's Pods take their host lists from
// (docs/spec.md §4, tpuenv.HostListsConfigMap): the webhook before it admits the slice's first Pod,
// the reconciler again when it is missing while a live Pod of the slice references it.
package hostlists

import (
	"context"
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
)

// Slice names the TPUSliceAssignment that owns a ConfigMap.
type Slice struct {
	Name string
	UID  types.UID
}

// ErrNotTheSlices is returned by Ensure when a ConfigMap of the name exists but is not the one the
// slice's Pods may read: other data, or not controlled by the slice (a ConfigMap written before the
// slice by someone else, or by a slice of the same name that was deleted and re-created).
var ErrNotTheSlices = errors.New("a ConfigMap of that name exists that is not the slice's")

// ErrSliceGone is returned by Ensure when the ConfigMap is one a former slice of the name left, but
// the slice that would adopt it is no longer the one of its name in the API server: deleted, or
// replaced by a newer slice, which is the one to adopt it.
var ErrSliceGone = errors.New("the slice is no longer the one of its name")

// Ensure makes sure that cm exists, controlled by slice: it creates it, and when a ConfigMap of its
// name is already there, reads it with reader (the API server: a cache may not have it yet) and
// checks that it holds cm's data and that slice controls it. One left by a former slice of the
// same name with the same data (LeftBySameName) is adopted, only while a live read shows slice as
// the slice of its name (else ErrSliceGone): its controller reference is moved to slice,
// conditional on the resourceVersion read. Any other is ErrNotTheSlices. It reports
// whether it created the ConfigMap. cm is not changed. It writes nothing unless a live read shows
// slice as the current one of its name (Current; else ErrSliceGone): its callers may have read the
// slice from a cache, or from a reservation made before the slice was replaced.
func Ensure(ctx context.Context, c client.Writer, reader client.Reader, slice Slice, cm *corev1.ConfigMap) (bool, error) {
	if err := Current(ctx, reader, cm.Namespace, slice); err != nil {
		return false, fmt.Errorf("writing ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	want := cm.DeepCopy()
	want.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: tpuv1alpha1.GroupVersion.String(), Kind: "TPUSliceAssignment",
		Name: slice.Name, UID: slice.UID, Controller: ptr.To(true),
	}}
	err := c.Create(ctx, want, client.FieldOwner(constants.FieldManager))
	if err == nil {
		return true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return false, fmt.Errorf("creating ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	got := &corev1.ConfigMap{}
	if err := reader.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
		return false, fmt.Errorf("reading ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	if IsTheSlices(got, slice, cm) {
		return false, nil
	}
	if !LeftBySameName(got, slice, cm) {
		return false, fmt.Errorf("ConfigMap %s/%s: %w", cm.Namespace, cm.Name, ErrNotTheSlices)
	}
	// A slice of this name was deleted and re-created before the garbage collector removed its
	// ConfigMap, which holds exactly the lists this slice's Pods need: the slice adopts it. Without
	// that every Pod of the new slice got its lists inline until the collector came (for good on a
	// cluster without one). Found by make bench (S7), where that made 1,024 Pods of 150 KiB.
	//
	// Only the slice of that name that exists adopts: the other owner is gone for good only while
	// it does. A reconcile of a slice already deleted, run on a cache behind, would otherwise take
	// the ConfigMap back from the slice that replaced it, and that slice's Pods would reference a
	// ConfigMap of a dead owner (found by the chaos suite: a RayCluster re-created after its
	// ConfigMap was deleted). Read again, after the ConfigMap: the slice may have been replaced
	// since the read above, and a newer slice's adoption since the ConfigMap was read changed its
	// resourceVersion, so the update below fails.
	if err := Current(ctx, reader, cm.Namespace, slice); err != nil {
		return false, fmt.Errorf("adopting ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	adopted := got.DeepCopy()
	for i, ref := range adopted.OwnerReferences {
		if ref.Controller != nil && *ref.Controller {
			adopted.OwnerReferences[i] = want.OwnerReferences[0]
		}
	}
	// Conditional on the resourceVersion read: a ConfigMap changed or re-created since is not taken.
	if err := c.Update(ctx, adopted, client.FieldOwner(constants.FieldManager)); err != nil {
		return false, fmt.Errorf("adopting ConfigMap %s/%s of a former slice %s: %w", cm.Namespace, cm.Name, slice.Name, err)
	}
	return false, nil
}

// Current returns nil when reader (the API server) shows slice as the TPUSliceAssignment of its
// name in namespace, not being deleted, and ErrSliceGone when it is gone or replaced by a slice of
// the same name and another UID. Ensure calls it before it writes: a ConfigMap created or adopted
// for a slice already replaced would have, until the current slice took it, a dead controller,
// which the garbage collector deletes under the Pods that reference it.
func Current(ctx context.Context, reader client.Reader, namespace string, slice Slice) error {
	current := &tpuv1alpha1.TPUSliceAssignment{}
	if err := reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: slice.Name}, current); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("slice %s/%s: %w", namespace, slice.Name, ErrSliceGone)
		}
		return fmt.Errorf("reading slice %s/%s: %w", namespace, slice.Name, err)
	}
	if current.UID != slice.UID || current.DeletionTimestamp != nil {
		return fmt.Errorf("slice %s/%s with UID %s: %w", namespace, slice.Name, slice.UID, ErrSliceGone)
	}
	return nil
}

// LeftBySameName reports whether got is the ConfigMap want of a former TPUSliceAssignment of
// slice's name: controlled by a TPUSliceAssignment of that name and another UID, not being
// deleted, immutable and holding want's data exactly. Names are unique in a namespace, so while
// slice exists that former owner is gone for good, and the lists, which depend only on what the
// ConfigMap's name hashes, are this slice's (tpuenv.HostListsConfigMapName).
func LeftBySameName(got *corev1.ConfigMap, slice Slice, want *corev1.ConfigMap) bool {
	owner := metav1.GetControllerOfNoCopy(got)
	return owner != nil && owner.Kind == "TPUSliceAssignment" && owner.APIVersion == tpuv1alpha1.GroupVersion.String() &&
		owner.Name == slice.Name && owner.UID != slice.UID && slice.UID != "" && holds(got, want)
}

// holds reports whether got, not being deleted, is immutable and holds want's data exactly.
func holds(got, want *corev1.ConfigMap) bool {
	return got.DeletionTimestamp == nil && ptr.Deref(got.Immutable, false) && maps.Equal(got.Data, want.Data) && len(got.BinaryData) == 0
}

// IsTheSlices reports whether got is the ConfigMap want of slice: controlled by slice's UID, not
// being deleted, immutable and holding want's data exactly.
func IsTheSlices(got *corev1.ConfigMap, slice Slice, want *corev1.ConfigMap) bool {
	owner := metav1.GetControllerOfNoCopy(got)
	return owner != nil && owner.UID == slice.UID && holds(got, want)
}

// ErrNotControlled is returned by Replace for a ConfigMap the slice does not control: the
// operator deletes only what claims to be the slice's own.
var ErrNotControlled = errors.New("the ConfigMap is not controlled by the slice")

// Mismatch says why got, a ConfigMap of want's name, is not want ("" when it holds want's data,
// immutable and not being deleted): what a Warning about it names.
func Mismatch(got, want *corev1.ConfigMap) string {
	switch {
	case got.DeletionTimestamp != nil:
		return "is being deleted"
	case !maps.Equal(got.Data, want.Data) || len(got.BinaryData) > 0:
		return "holds other data"
	case !ptr.Deref(got.Immutable, false):
		return "is not immutable"
	}
	return ""
}

// Replace puts cm in the place of got, a ConfigMap of cm's name that slice controls but that is
// not cm (other data, or mutable: changed, or created with a forged owner reference; docs/spec.md
// §4): the slice's Pods read it at their next container start. While a live read shows slice as
// the one of its name (Current; else ErrSliceGone), it deletes got, conditional on the UID and
// resourceVersion read (a ConfigMap changed or re-created since is not deleted: the caller reads
// again), and creates cm with Ensure. A got that slice does not control is ErrNotControlled.
func Replace(ctx context.Context, c client.Writer, reader client.Reader, slice Slice, got, cm *corev1.ConfigMap) error {
	if owner := metav1.GetControllerOfNoCopy(got); owner == nil || owner.UID != slice.UID || slice.UID == "" {
		return fmt.Errorf("replacing ConfigMap %s/%s: %w", got.Namespace, got.Name, ErrNotControlled)
	}
	if err := Current(ctx, reader, cm.Namespace, slice); err != nil {
		return fmt.Errorf("replacing ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	uid, rv := got.UID, got.ResourceVersion
	if err := c.Delete(ctx, got, client.Preconditions{UID: &uid, ResourceVersion: &rv}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting ConfigMap %s/%s to replace it: %w", got.Namespace, got.Name, err)
	}
	if _, err := Ensure(ctx, c, reader, slice, cm); err != nil {
		return fmt.Errorf("replacing ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return nil
}
