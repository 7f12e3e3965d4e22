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
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tombstones"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// TestEnsureHostLists checks the reconciler's repair of host lists ConfigMaps (docs/spec.md §8):
// it re-creates, owned by the slice, only a missing ConfigMap that a live Pod of the slice
// references under the name the Pod's own identity gives, and never touches one that exists.
func TestEnsureHostLists(t *testing.T) {
	const ns, sliceUID = "ml", types.UID("slice-uid")
	sliceName := naming.SliceName("rc", "tpu", 1)
	slice := testutil.MakeSlice(sliceName, ns, "rc", "rc-uid", "tpu", 1, 4).Obj()
	slice.UID = sliceUID
	vals := tpuenv.Values{GroupName: "tpu", ReplicaIndex: 1, Hosts: 4, Subdomain: "rc-headless", SliceName: sliceName,
		ClaimToken: "t", Topology: []int32{4, 4}, ChipsPerHost: 4, HostListsInConfigMap: true}
	// pod is worker w of the slice as the webhook admitted it, its lists in the slice's ConfigMap.
	pod := func(w int32) *corev1.Pod {
		p := testutil.MakeWorkerPod(ns, "rc", "rc-uid", "tpu").Named("w"+strconv.Itoa(int(w))).Topology("tpu-v6e-slice", "4x4").TPU(4).Obj()
		v := vals
		v.WorkerID = w
		tpuenv.Apply(p, v, []int{0})
		return p
	}
	want := tpuenv.HostListsConfigMap(ns, vals, 1)
	want.OwnerReferences = []metav1.OwnerReference{{APIVersion: "tpu.ray.io/v1alpha1", Kind: "TPUSliceAssignment",
		Name: sliceName, UID: sliceUID, Controller: ptr.To(true)}}
	former := want.DeepCopy()
	former.OwnerReferences[0].UID = "former-slice"
	foreign := want.DeepCopy()
	foreign.OwnerReferences[0].Name, foreign.OwnerReferences[0].UID = "another-slice", "another-slice-uid"
	forged := pod(2)
	forged.Spec.Containers[0].Env = append(forged.Spec.Containers[0].Env[:0:0], forged.Spec.Containers[0].Env...)
	for i, e := range forged.Spec.Containers[0].Env {
		if tpuenv.IsHostListsRef(e) {
			forged.Spec.Containers[0].Env[i].ValueFrom = &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "somebody-elses"}, Key: e.Name}}
		}
	}
	// otherShape is a Pod of the slice's name whose topology gives 16 hosts, referencing the very
	// name its own (unbounded) values hash to.
	otherShapeVals := vals
	otherShapeVals.Hosts, otherShapeVals.Topology = 16, []int32{8, 8}
	otherShape := testutil.MakeWorkerPod(ns, "rc", "rc-uid", "tpu").Named("big").Topology("tpu-v6e-slice", "8x8").TPU(4).Obj()
	tpuenv.Apply(otherShape, otherShapeVals, []int{0})
	otherShapeName := tpuenv.HostListsConfigMapName(otherShapeVals, 1)
	successor := slice.DeepCopy()
	successor.UID = "successor-uid"
	deleting := slice.DeepCopy()
	deleting.Finalizers, deleting.DeletionTimestamp = []string{"test/hold"}, &metav1.Time{Time: time.Unix(1, 0)}
	failed := pod(3)
	failed.Status.Phase = corev1.PodFailed
	// tampered is the slice's ConfigMap made mutable and changed (or created so, with an owner
	// reference naming the slice's UID): its Pods would read its data at their next start.
	tampered := want.DeepCopy()
	tampered.Immutable = nil
	tampered.Data = map[string]string{}
	for k := range want.Data {
		tampered.Data[k] = "attacker-0.evil,attacker-1.evil"
	}
	mutable := want.DeepCopy()
	mutable.Immutable = ptr.To(false)
	replaced := func(why string) []testutil.Event {
		return []testutil.Event{{Regarding: ns + "/" + sliceName, Type: corev1.EventTypeWarning, Reason: tpuv1alpha1.ReasonTPUSliceHostListsReplaced,
			Note: "ConfigMap " + want.Name + ", which live Pods of slice " + sliceName + " take their host lists from, is controlled by the slice but " +
				why + ": replacing it with the slice's own"}}
	}

	cases := map[string]struct {
		pods     []*corev1.Pod
		existing []client.Object
		// wantStored is the ConfigMap stored under want's name afterwards (nil: none).
		wantStored *corev1.ConfigMap
		wantNames  []string
		wantEvents []testutil.Event
		// notInCache makes the reconciler's cache miss every ConfigMap (one without the slice
		// label, or created a moment ago); its live reads and writes see the store.
		notInCache bool
		// cacheShows is the ConfigMap the reconciler's cache returns instead of the store's (a
		// cache behind).
		cacheShows *corev1.ConfigMap
	}{
		"a missing ConfigMap two live Pods reference is re-created once": {
			pods: []*corev1.Pod{pod(0), pod(1)}, existing: []client.Object{slice.DeepCopy()}, wantStored: want, wantNames: []string{want.Name},
			wantEvents: []testutil.Event{{Regarding: ns + "/" + sliceName, Type: corev1.EventTypeNormal, Reason: tpuv1alpha1.ReasonTPUSliceHostListsRecreated,
				Note: "Re-created ConfigMap " + want.Name + ", which live Pods of slice " + sliceName + " take their host lists from"}},
		},
		"the slice's own ConfigMap is left as it is": {
			pods: []*corev1.Pod{pod(0)}, existing: []client.Object{want.DeepCopy()}, wantStored: want, wantNames: []string{want.Name},
		},
		// docs/spec.md §4, §8: the slice was deleted and re-created before the garbage collector came.
		"a ConfigMap a former slice of the same name left is adopted": {
			pods: []*corev1.Pod{pod(0)}, existing: []client.Object{former.DeepCopy(), slice.DeepCopy()}, wantStored: want, wantNames: []string{want.Name},
		},
		// Found by the chaos suite: a reconcile of a slice already replaced, on a cache behind,
		// took the ConfigMap back from the slice of its name that adopted it.
		"a ConfigMap a former slice left is not adopted by a slice that is itself gone": {
			pods: []*corev1.Pod{pod(0)}, existing: []client.Object{former.DeepCopy()}, wantStored: former, wantNames: []string{want.Name},
		},
		// Found while diagnosing a chaos failure: a reconcile of a slice already replaced under its
		// name (its RayCluster re-created), on caches that still held it with its successor's Pods,
		// created the ConfigMap owned by the dead slice, which the garbage collector deletes.
		"a missing ConfigMap is not re-created for a slice that is gone": {
			pods: []*corev1.Pod{pod(0)}, wantNames: []string{want.Name},
		},
		"a missing ConfigMap is not re-created for a slice replaced by one of its name": {
			pods: []*corev1.Pod{pod(0)}, existing: []client.Object{successor}, wantNames: []string{want.Name},
		},
		"a missing ConfigMap is not re-created for a slice being deleted": {
			pods: []*corev1.Pod{pod(0)}, existing: []client.Object{deleting}, wantNames: []string{want.Name},
		},
		"a ConfigMap of another owner is reported, not changed": {
			pods: []*corev1.Pod{pod(0)}, existing: []client.Object{foreign.DeepCopy()}, wantStored: foreign, wantNames: []string{want.Name},
			wantEvents: []testutil.Event{{Regarding: ns + "/" + sliceName, Type: corev1.EventTypeWarning, Reason: tpuv1alpha1.ReasonTPUSliceHostListsForeign,
				Note: "ConfigMap " + want.Name + ", which live Pods of slice " + sliceName + " take their host lists from, is not the slice's (another owner or other data): delete it, and the operator writes the slice's own"}},
		},
		// docs/spec.md §4, §8: by the rule the webhook accepts an existing ConfigMap by.
		"a ConfigMap the slice controls with other data is reported and replaced": {
			pods: []*corev1.Pod{pod(0)}, existing: []client.Object{tampered.DeepCopy(), slice.DeepCopy()}, wantStored: want, wantNames: []string{want.Name},
			wantEvents: replaced("holds other data"),
		},
		"a mutable ConfigMap the slice controls is replaced by an immutable one": {
			pods: []*corev1.Pod{pod(0)}, existing: []client.Object{mutable.DeepCopy(), slice.DeepCopy()}, wantStored: want, wantNames: []string{want.Name},
			wantEvents: replaced("is not immutable"),
		},
		"a ConfigMap the slice controls with other data, missing from the cache, is replaced": {
			pods: []*corev1.Pod{pod(0)}, existing: []client.Object{tampered.DeepCopy(), slice.DeepCopy()}, notInCache: true,
			wantStored: want, wantNames: []string{want.Name}, wantEvents: replaced("holds other data"),
		},
		"a ConfigMap already replaced, still tampered in a cache behind, is neither reported nor deleted": {
			pods: []*corev1.Pod{pod(0)}, existing: []client.Object{want.DeepCopy(), slice.DeepCopy()}, cacheShows: tampered,
			wantStored: want, wantNames: []string{want.Name},
		},
		"a ConfigMap of a slice that is gone is not replaced": {
			pods: []*corev1.Pod{pod(0)}, existing: []client.Object{tampered.DeepCopy(), successor.DeepCopy()}, wantStored: tampered, wantNames: []string{want.Name},
		},
		"a reference the Pod's identity does not give is left alone": {
			pods: []*corev1.Pod{forged}, wantNames: []string{"somebody-elses"},
		},
		"a Pod of another host count (made past the webhook) gets nothing built, whatever its reference": {
			pods: []*corev1.Pod{otherShape}, wantNames: []string{otherShapeName},
		},
		"a Failed Pod's reference is not repaired": {
			pods: []*corev1.Pod{failed},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			store := testutil.NewClientBuilder().WithObjects(tc.existing...).Build()
			cached := store
			if tc.notInCache || tc.cacheShows != nil {
				cached = interceptor.NewClient(store, interceptor.Funcs{
					Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
						cm, ok := obj.(*corev1.ConfigMap)
						switch {
						case ok && tc.cacheShows != nil:
							tc.cacheShows.DeepCopyInto(cm)
							cm.ResourceVersion = "1"
							return nil
						case ok:
							return apierrors.NewNotFound(corev1.Resource("configmaps"), key.Name)
						}
						return c.Get(ctx, key, obj, opts...)
					},
				})
			}
			events := &testutil.EventRecorder{}
			r := newReconcileTestReconciler(cached, store, events, tombstones.New(0), clocktesting.NewFakePassiveClock(time.Unix(0, 0)))
			pods := make([]corev1.Pod, 0, len(tc.pods))
			for _, p := range tc.pods {
				pods = append(pods, *p)
			}
			names, err := r.ensureHostLists(t.Context(), slice, pods)
			if err != nil {
				t.Fatalf("ensureHostLists() = %v", err)
			}
			if diff := cmp.Diff(tc.wantNames, names); diff != "" {
				t.Errorf("names (-want +got):\n%s", diff)
			}
			got := &corev1.ConfigMap{}
			err = store.Get(t.Context(), client.ObjectKeyFromObject(want), got)
			switch {
			case tc.wantStored == nil && err == nil:
				t.Errorf("ConfigMap %s stored, want none", want.Name)
			case tc.wantStored != nil && err != nil:
				t.Errorf("reading ConfigMap %s: %v", want.Name, err)
			case tc.wantStored != nil:
				if diff := cmp.Diff(tc.wantStored, got, ignoreStoreFields); diff != "" {
					t.Errorf("stored ConfigMap (-want +got):\n%s", diff)
				}
			}
			if diff := cmp.Diff(tc.wantEvents, events.Recorded()); diff != "" {
				t.Errorf("Events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEnsureHostListsChecksAChangedConfigMapAgain: the reconciler builds a slice's lists once per
// ConfigMap it found to be the slice's, and checks again when the ConfigMap is another (deleted
// and created under the name, with an owner reference naming the slice) or changed.
func TestEnsureHostListsChecksAChangedConfigMapAgain(t *testing.T) {
	const ns, sliceUID = "ml", types.UID("slice-uid")
	sliceName := naming.SliceName("rc", "tpu", 1)
	slice := testutil.MakeSlice(sliceName, ns, "rc", "rc-uid", "tpu", 1, 4).Obj()
	slice.UID = sliceUID
	vals := tpuenv.Values{GroupName: "tpu", ReplicaIndex: 1, Hosts: 4, Subdomain: "rc-headless", SliceName: sliceName,
		ClaimToken: "t", Topology: []int32{4, 4}, ChipsPerHost: 4, HostListsInConfigMap: true}
	pod := testutil.MakeWorkerPod(ns, "rc", "rc-uid", "tpu").Named("w0").Topology("tpu-v6e-slice", "4x4").TPU(4).Obj()
	tpuenv.Apply(pod, vals, []int{0})
	want := tpuenv.HostListsConfigMap(ns, vals, 1)
	want.UID = "cm-1"
	want.OwnerReferences = []metav1.OwnerReference{{APIVersion: "tpu.ray.io/v1alpha1", Kind: "TPUSliceAssignment",
		Name: sliceName, UID: sliceUID, Controller: ptr.To(true)}}
	forged := want.DeepCopy()
	forged.UID, forged.Immutable = "cm-2", nil
	for k := range forged.Data {
		forged.Data[k] = "attacker-0.evil"
	}

	store := testutil.NewClientBuilder().WithObjects(slice.DeepCopy(), want.DeepCopy()).Build()
	events := &testutil.EventRecorder{}
	r := newReconcileTestReconciler(store, store, events, tombstones.New(0), clocktesting.NewFakePassiveClock(time.Unix(0, 0)))
	if _, err := r.ensureHostLists(t.Context(), slice, []corev1.Pod{*pod}); err != nil {
		t.Fatalf("ensureHostLists() = %v", err)
	}
	if got := events.Recorded(); len(got) != 0 {
		t.Fatalf("Events for the slice's own ConfigMap: %v", got)
	}
	if err := store.Delete(t.Context(), want.DeepCopy()); err != nil {
		t.Fatalf("deleting the ConfigMap: %v", err)
	}
	if err := store.Create(t.Context(), forged.DeepCopy()); err != nil {
		t.Fatalf("creating the forged ConfigMap: %v", err)
	}
	if _, err := r.ensureHostLists(t.Context(), slice, []corev1.Pod{*pod}); err != nil {
		t.Fatalf("ensureHostLists() = %v", err)
	}
	got := &corev1.ConfigMap{}
	if err := store.Get(t.Context(), client.ObjectKeyFromObject(want), got); err != nil {
		t.Fatalf("reading the ConfigMap: %v", err)
	}
	if diff := cmp.Diff(want.Data, got.Data); diff != "" || !ptr.Deref(got.Immutable, false) {
		t.Errorf("stored ConfigMap immutable=%v, data (-want +got):\n%s", ptr.Deref(got.Immutable, false), diff)
	}
	if got := events.Recorded(); len(got) != 1 || got[0].Reason != tpuv1alpha1.ReasonTPUSliceHostListsReplaced {
		t.Errorf("Events = %v, want one %s", got, tpuv1alpha1.ReasonTPUSliceHostListsReplaced)
	}

	// The slice re-created under its name (found by the RBAC suite): the ConfigMap checked for
	// its former self is adopted, not taken as checked.
	if err := store.Delete(t.Context(), got); err != nil {
		t.Fatalf("deleting the ConfigMap: %v", err)
	}
	if err := store.Create(t.Context(), want.DeepCopy()); err != nil { // its UID set, which the store does not
		t.Fatalf("creating the ConfigMap: %v", err)
	}
	if _, err := r.ensureHostLists(t.Context(), slice, []corev1.Pod{*pod}); err != nil {
		t.Fatalf("ensureHostLists() = %v", err)
	}
	if err := store.Delete(t.Context(), slice.DeepCopy()); err != nil {
		t.Fatalf("deleting the slice: %v", err)
	}
	successor := slice.DeepCopy()
	successor.UID, successor.ResourceVersion = "successor-uid", ""
	if err := store.Create(t.Context(), successor); err != nil {
		t.Fatalf("creating the successor: %v", err)
	}
	if _, err := r.ensureHostLists(t.Context(), successor, []corev1.Pod{*pod}); err != nil {
		t.Fatalf("ensureHostLists() = %v", err)
	}
	if err := store.Get(t.Context(), client.ObjectKeyFromObject(want), got); err != nil {
		t.Fatalf("reading the ConfigMap: %v", err)
	}
	if owner := metav1.GetControllerOfNoCopy(got); owner == nil || owner.UID != successor.UID {
		t.Errorf("ConfigMap controller = %v, want the successor %s", owner, successor.UID)
	}
}

// ignoreStoreFields ignores what the store sets on an object it holds.
var ignoreStoreFields = cmp.FilterPath(func(p cmp.Path) bool {
	switch p.Last().String() {
	case ".ResourceVersion", ".TypeMeta", ".ManagedFields":
		return true
	}
	return false
}, cmp.Ignore())
