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

package hostlists

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
)

// TestEnsure: the ConfigMap is created for its slice; one of its name that is the slice's is kept;
// one a former slice of the same name left with the same data is adopted (docs/spec.md §4); any
// other is not the slice's and stays as it is.
func TestEnsure(t *testing.T) {
	slice := Slice{Name: "rc-tpu-1a2b3c4d-0", UID: "new"}
	want := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: slice.Name + "-hosts-0123456789"},
		Immutable:  ptr.To(true),
		Data:       map[string]string{"TPU_WORKER_HOSTNAMES": "h-0,h-1"},
	}
	ownedBy := func(kind, name string, uid types.UID) func(*corev1.ConfigMap) {
		return func(cm *corev1.ConfigMap) {
			cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: tpuv1alpha1.GroupVersion.String(), Kind: kind,
				Name: name, UID: uid, Controller: ptr.To(true)}}
		}
	}
	existing := func(edits ...func(*corev1.ConfigMap)) *corev1.ConfigMap {
		cm := want.DeepCopy()
		for _, e := range edits {
			e(cm)
		}
		return cm
	}
	cases := map[string]struct {
		existing    *corev1.ConfigMap
		wantCreated bool
		wantErr     error
		wantOwner   types.UID // the controller's UID stored afterwards
		// stored is the UID of the slice of that name the API server holds ("" for slice's own,
		// "none" for no slice).
		stored types.UID
		// wantNone: no ConfigMap of the name is stored afterwards.
		wantNone bool
	}{
		"none yet: created": {wantCreated: true, wantOwner: "new"},
		// Found while diagnosing a chaos failure: the reconciler's slice came from a cache behind.
		"none yet, and the slice is gone from the API server: nothing created": {
			stored: "none", wantErr: ErrSliceGone, wantNone: true,
		},
		"none yet, and the slice has been replaced by one of its name: nothing created": {
			stored: "newer", wantErr: ErrSliceGone, wantNone: true,
		},
		"the slice's already": {
			existing: existing(ownedBy("TPUSliceAssignment", slice.Name, "new")), wantOwner: "new",
		},
		"left by a former slice of the same name: adopted": {
			existing: existing(ownedBy("TPUSliceAssignment", slice.Name, "old")), wantOwner: "new",
		},
		"left by a former slice, but the adopter is gone from the API server: not adopted": {
			existing: existing(ownedBy("TPUSliceAssignment", slice.Name, "old")), stored: "none",
			wantErr: ErrSliceGone, wantOwner: "old",
		},
		"the newer slice's, and the adopter is the older one, read from a cache behind: not taken back": {
			existing: existing(ownedBy("TPUSliceAssignment", slice.Name, "newer")), stored: "newer",
			wantErr: ErrSliceGone, wantOwner: "newer",
		},
		"a former slice's with other data: not the slice's": {
			existing: existing(ownedBy("TPUSliceAssignment", slice.Name, "old"), func(cm *corev1.ConfigMap) {
				cm.Data = map[string]string{"TPU_WORKER_HOSTNAMES": "x-0,x-1"}
			}),
			wantErr: ErrNotTheSlices, wantOwner: "old",
		},
		"another slice's: not the slice's": {
			existing: existing(ownedBy("TPUSliceAssignment", "other-tpu-0", "old")), wantErr: ErrNotTheSlices, wantOwner: "old",
		},
		"owned by another kind: not the slice's": {
			existing: existing(ownedBy("Deployment", slice.Name, "old")), wantErr: ErrNotTheSlices, wantOwner: "old",
		},
		"a former slice's that is not immutable: not the slice's": {
			existing: existing(ownedBy("TPUSliceAssignment", slice.Name, "old"), func(cm *corev1.ConfigMap) { cm.Immutable = nil }),
			wantErr:  ErrNotTheSlices, wantOwner: "old",
		},
		"no owner: not the slice's": {existing: existing(), wantErr: ErrNotTheSlices},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			scheme := runtime.NewScheme()
			if err := clientgoscheme.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			if err := tpuv1alpha1.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			b := fake.NewClientBuilder().WithScheme(scheme)
			if tc.existing != nil {
				b = b.WithObjects(tc.existing)
			}
			if tc.stored != "none" {
				stored := &tpuv1alpha1.TPUSliceAssignment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: slice.Name, UID: slice.UID}}
				if tc.stored != "" {
					stored.UID = tc.stored
				}
				b = b.WithObjects(stored)
			}
			c := b.Build()
			created, err := Ensure(t.Context(), c, c, slice, want)
			if created != tc.wantCreated || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("Ensure() = %t, %v; want %t, %v", created, err, tc.wantCreated, tc.wantErr)
			}
			var got corev1.ConfigMap
			err = c.Get(t.Context(), client.ObjectKeyFromObject(want), &got)
			if tc.wantNone {
				if !apierrors.IsNotFound(err) {
					t.Errorf("reading ConfigMap %s = %v, want NotFound", want.Name, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var owner types.UID
			if ref := metav1.GetControllerOfNoCopy(&got); ref != nil {
				owner = ref.UID
			}
			if diff := cmp.Diff(tc.wantOwner, owner); diff != "" {
				t.Errorf("controller UID after Ensure (-want +got):\n%s", diff)
			}
			wantData := want.Data
			if tc.existing != nil {
				wantData = tc.existing.Data // never changed: the data are immutable
			}
			if diff := cmp.Diff(wantData, got.Data); diff != "" {
				t.Errorf("data after Ensure (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReplace: a ConfigMap the slice controls that is not the slice's is deleted and the slice's
// created in its place (docs/spec.md §4); one the slice does not control, one changed since it was
// read, or one of a slice that is gone is left as it is.
func TestReplace(t *testing.T) {
	slice := Slice{Name: "rc-tpu-1a2b3c4d-0", UID: "slice-uid"}
	want := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: slice.Name + "-hosts-0123456789"},
		Immutable:  ptr.To(true),
		Data:       map[string]string{"TPU_WORKER_HOSTNAMES": "h-0,h-1"},
	}
	bad := func(owner types.UID) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: want.Name, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: tpuv1alpha1.GroupVersion.String(), Kind: "TPUSliceAssignment", Name: slice.Name, UID: owner, Controller: ptr.To(true)}}},
			Data: map[string]string{"TPU_WORKER_HOSTNAMES": "attacker-0,attacker-1"},
		}
	}
	cases := map[string]struct {
		existing *corev1.ConfigMap
		// stale makes the ConfigMap Replace is given one read before a change.
		stale     bool
		sliceGone bool
		wantErr   error
		wantData  map[string]string
	}{
		"controlled by the slice, other data: replaced": {existing: bad(slice.UID), wantData: want.Data},
		"controlled by another slice: refused":          {existing: bad("other-uid"), wantErr: ErrNotControlled, wantData: bad("").Data},
		"the slice is gone: left":                       {existing: bad(slice.UID), sliceGone: true, wantErr: ErrSliceGone, wantData: bad("").Data},
		"changed since it was read: not deleted":        {existing: bad(slice.UID), stale: true, wantData: bad("").Data},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			scheme := runtime.NewScheme()
			if err := clientgoscheme.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			if err := tpuv1alpha1.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			b := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.existing)
			if !tc.sliceGone {
				b = b.WithObjects(&tpuv1alpha1.TPUSliceAssignment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: slice.Name, UID: slice.UID}})
			}
			c := b.Build()
			got := &corev1.ConfigMap{}
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(want), got); err != nil {
				t.Fatal(err)
			}
			if tc.stale {
				changed := got.DeepCopy()
				changed.Labels = map[string]string{"touched": "yes"}
				if err := c.Update(t.Context(), changed); err != nil {
					t.Fatal(err)
				}
			}
			err := Replace(t.Context(), c, c, slice, got, want)
			switch {
			case tc.stale && !apierrors.IsConflict(err):
				t.Errorf("Replace() = %v, want a conflict", err)
			case !tc.stale && !errors.Is(err, tc.wantErr):
				t.Errorf("Replace() = %v, want %v", err, tc.wantErr)
			case !tc.stale && tc.wantErr == nil && err != nil:
				t.Errorf("Replace() = %v", err)
			}
			stored := &corev1.ConfigMap{}
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(want), stored); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantData, stored.Data); diff != "" {
				t.Errorf("data after Replace (-want +got):\n%s", diff)
			}
		})
	}
}
