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
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// sliceUID is the UID of the slice the stub's claims are written to.
const sliceUID = types.UID("slice-2-uid")

// TestPodWebhookHostListsConfigMap checks that a Pod of a slice above --host-lists-configmap-above
// references the slice's ConfigMap, which the webhook writes once, owned by the slice, before it
// admits the Pod; and that every way the ConfigMap cannot be the slice's gives inline values instead
// (docs/spec.md §4).
func TestPodWebhookHostListsConfigMap(t *testing.T) {
	withUID := claimed
	withUID.SliceUID = sliceUID
	inConfigMap := multiHostIdentity(withUID)
	inConfigMap.HostListsInConfigMap = true
	inline := multiHostIdentity(withUID)
	wantConfigMap := tpuenv.HostListsConfigMap(testNS, inConfigMap, 1)
	wantConfigMap.OwnerReferences = []metav1.OwnerReference{{APIVersion: "tpu.ray.io/v1alpha1", Kind: "TPUSliceAssignment",
		Name: slice2, UID: sliceUID, Controller: ptr.To(true)}}
	// The slice as the API server has it: the claim the stub made, and its UID.
	slice := testutil.MakeSlice(slice2, testNS, clusterName, clusterUID, group, 2, 4).Claim(1, claimed.Token, "", "").Obj()
	slice.UID = sliceUID
	// newerSlice replaced slice under its name since the claim was made.
	newerSlice := slice.DeepCopy()
	newerSlice.UID = "a-newer-slice"
	former := wantConfigMap.DeepCopy()
	former.OwnerReferences[0].UID = "an-older-slice"
	foreign := wantConfigMap.DeepCopy()
	foreign.OwnerReferences[0].Name, foreign.OwnerReferences[0].UID = "another-slice", "another-slice-uid"
	otherData := wantConfigMap.DeepCopy()
	otherData.Data[tpuv1alpha1.SliceLabel] = "x"

	cases := map[string]struct {
		assignment allocator.Assignment
		above      int32
		existing   []client.Object
		createErr  error
		dryRun     bool
		admissions int
		// want is the identity every admitted Pod gets; wantConfigMap the ConfigMap then stored
		// (nil: none), wantCreates the creates the webhook sent.
		want          tpuenv.Values
		wantConfigMap *corev1.ConfigMap
		wantCreates   int
	}{
		"a slice above the flag: one ConfigMap for three Pods": {
			assignment: withUID, above: 1, admissions: 3, existing: []client.Object{slice.DeepCopy()},
			want: inConfigMap, wantConfigMap: wantConfigMap, wantCreates: 1,
		},
		"a slice at the flag's value keeps its lists inline": {
			assignment: withUID, above: 4, admissions: 1, want: inline,
		},
		"the default (64) keeps a 4-host slice inline": {
			assignment: withUID, admissions: 1, want: inline,
		},
		"-1 never": {
			assignment: withUID, above: -1, admissions: 1, want: inline,
		},
		"a dry run references the ConfigMap and writes nothing": {
			assignment: withUID, above: 1, admissions: 1, dryRun: true,
			want: func() tpuenv.Values { v := inConfigMap; v.ClaimToken = dryRunToken; return v }(),
		},
		"a claim made by a peer of an older version: the slice's UID is read": {
			assignment: claimed, above: 1, admissions: 1, existing: []client.Object{slice.DeepCopy()},
			want: inConfigMap, wantConfigMap: wantConfigMap, wantCreates: 1,
		},
		"the ConfigMap is already the slice's (another instance wrote it)": {
			assignment: withUID, above: 1, admissions: 2, existing: []client.Object{wantConfigMap.DeepCopy(), slice.DeepCopy()},
			want: inConfigMap, wantConfigMap: wantConfigMap, wantCreates: 1,
		},
		// docs/spec.md §4: a slice deleted and re-created before the garbage collector came.
		"a ConfigMap of that name a former slice of the same name left: adopted": {
			assignment: withUID, above: 1, admissions: 2, existing: []client.Object{former, slice.DeepCopy()},
			want: inConfigMap, wantConfigMap: wantConfigMap, wantCreates: 1,
		},
		// A hand-out names the slice its reservation was written to; one replaced since is not the
		// one of its name, and does not take the ConfigMap from the slice that replaced it.
		"a ConfigMap a former slice left, and the admission's slice has been replaced: inline": {
			assignment: withUID, above: 1, admissions: 2, existing: []client.Object{former, newerSlice},
			want: inline, wantConfigMap: former,
		},
		// The reconciler's path had this hole (a slice read from a cache behind); a reservation's
		// hand-out can name a replaced slice the same way.
		"the ConfigMap is missing and the admission's slice has been replaced: inline, nothing written": {
			assignment: withUID, above: 1, admissions: 2, existing: []client.Object{newerSlice},
			want: inline,
		},
		"the ConfigMap is missing and the admission's slice is gone: inline, nothing written": {
			assignment: withUID, above: 1, admissions: 1, want: inline,
		},
		"a ConfigMap of that name owned by another slice: inline": {
			assignment: withUID, above: 1, admissions: 2, existing: []client.Object{foreign, slice.DeepCopy()},
			want: inline, wantConfigMap: foreign, wantCreates: 2,
		},
		"a ConfigMap of that name with other data: inline": {
			assignment: withUID, above: 1, admissions: 1,
			existing: []client.Object{otherData.DeepCopy(), slice.DeepCopy()},
			want:     inline, wantConfigMap: otherData, wantCreates: 1,
		},
		"the create fails: inline, and the Pod is admitted": {
			assignment: withUID, above: 1, admissions: 2, existing: []client.Object{slice.DeepCopy()}, createErr: errors.New("etcd is unhappy"),
			want: inline, wantCreates: 2,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			creates := 0
			c := testutil.NewClientBuilder().WithObjects(tc.existing...).WithInterceptorFuncs(interceptor.Funcs{
				Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					if _, ok := obj.(*corev1.ConfigMap); ok {
						creates++
						if tc.createErr != nil {
							return tc.createErr
						}
					}
					return c.Create(ctx, obj, opts...)
				},
			}).Build()
			w := &podWebhook{planner: &stubClaimer{assignment: tc.assignment}, claimer: &stubClaimer{assignment: tc.assignment},
				clusters: c, live: c, metrics: metrics.New(), hostListsAbove: tc.above, hostLists: newHostListsWriter(c, c, c)}
			in := multiHostPod().Obj()
			for range tc.admissions {
				got, err := admit(t, w, in, admissionv1.Create, tc.dryRun)
				if err != nil {
					t.Fatalf("Default() = %v, want the Pod admitted", err)
				}
				if diff := cmp.Diff(applied(in, tc.want, 0), got); diff != "" {
					t.Errorf("Mutated Pod (-want +got):\n%s", diff)
				}
			}
			if creates != tc.wantCreates {
				t.Errorf("the webhook sent %d ConfigMap creates, want %d", creates, tc.wantCreates)
			}
			got := &corev1.ConfigMap{}
			err := c.Get(t.Context(), client.ObjectKeyFromObject(wantConfigMap), got)
			if tc.wantConfigMap == nil {
				if err == nil {
					t.Errorf("ConfigMap %s stored, want none", got.Name)
				}
				return
			}
			if err != nil {
				t.Fatalf("reading ConfigMap: %v", err)
			}
			if diff := cmp.Diff(tc.wantConfigMap, got, ignoreServerFields); diff != "" {
				t.Errorf("stored ConfigMap (-want +got):\n%s", diff)
			}
		})
	}
}

// ignoreServerFields ignores what the API server (here the fake client) sets on a stored object.
var ignoreServerFields = cmp.FilterPath(func(p cmp.Path) bool {
	switch p.Last().String() {
	case ".ResourceVersion", ".TypeMeta", ".ManagedFields":
		return true
	}
	return false
}, cmp.Ignore())

// TestHostListsWriterRemembersWithoutWork checks that once an instance wrote a slice's ConfigMap,
// the slice's later admissions do no work that grows with its hosts (docs/spec.md §10: the lists of
// a 2,240-host slice are ~100 KB; built on every admission they would cost O(hosts²) per slice).
func TestHostListsWriterRemembersWithoutWork(t *testing.T) {
	slice := testutil.MakeSlice(slice0, testNS, clusterName, clusterUID, group, 0, 2240).Obj()
	slice.UID = sliceUID
	c := testutil.NewClientBuilder().WithObjects(slice).Build()
	w := newHostListsWriter(c, c, c)
	vals := tpuenv.Values{GroupName: group, ReplicaIndex: 0, Hosts: 2240, Subdomain: headless, SliceName: slice0,
		Topology: []int32{16, 20, 28}, ChipsPerHost: 4, HostListsInConfigMap: true}
	assignment := allocator.Assignment{SliceName: slice0, SliceUID: sliceUID, Token: "t"}
	if err := w.ensure(t.Context(), testNS, assignment, vals, 1); err != nil {
		t.Fatalf("ensure() = %v", err)
	}
	allocs := testing.AllocsPerRun(20, func() {
		if err := w.ensure(t.Context(), testNS, assignment, vals, 1); err != nil {
			t.Fatalf("ensure() = %v", err)
		}
	})
	// The name's hash takes a few allocations; one per host would be thousands.
	if allocs > 32 {
		t.Errorf("ensure() of a remembered ConfigMap of a 2,240-host slice made %.0f allocations, want a few", allocs)
	}
}
