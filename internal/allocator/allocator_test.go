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

package allocator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

const (
	testNS      = "team-a"
	clusterName = "rc"
	groupName   = "tpu"
	clusterUID  = types.UID("rc-uid-2")
	// oldUID is the UID of a deleted RayCluster of the same name.
	oldUID = types.UID("rc-uid-1")
	// newToken stands, in wanted claims, for the token Claim returned.
	newToken = "<returned token>"
	// timeout is the claim timeout of the tests that expect success.
	timeout = 30 * time.Second
)

var (
	// now is the allocator's clock: the time of every claim the tests make.
	now = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	// earlier is the time of the claims a test starts with.
	earlier = now.Add(-time.Hour)

	sliceGVR = schema.GroupResource{Group: tpuv1alpha1.GroupVersion.Group, Resource: "tpusliceassignments"}

	// cmpSlices compares stored slices, ignoring what the fake API server sets.
	cmpSlices = cmp.Options{
		cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ResourceVersion", "CreationTimestamp", "ManagedFields"),
		// The claims are stored sorted by worker ID (tpuv1alpha1.ClaimList).
		cmpopts.SortSlices(func(a, b tpuv1alpha1.WorkerClaim) bool { return a.WorkerID < b.WorkerID }),
		cmpopts.IgnoreTypes(metav1.TypeMeta{}),
		cmpopts.EquateEmpty(),
	}
	sortSlices = cmpopts.SortSlices(func(a, b tpuv1alpha1.TPUSliceAssignment) bool { return a.Name < b.Name })
)

// newClient returns a fake API server holding objs (and, unless they hold one, the test
// RayCluster asking for one replica), enforcing resourceVersions, with faults injected by funcs.
func newClient(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) client.WithWatch {
	t.Helper()
	if !slices.ContainsFunc(objs, func(o client.Object) bool { _, ok := o.(*rayv1.RayCluster); return ok }) {
		objs = append(objs, rayCluster(1))
	}
	return testutil.NewClientBuilder().WithObjects(objs...).WithInterceptorFuncs(funcs).Build()
}

// newAllocator returns an Allocator whose clock stands at now.
func newAllocator(c client.Client, reader client.Reader, timeout time.Duration) *Allocator {
	return New(c, reader, Options{Timeout: timeout, Metrics: metrics.New(), Clock: clocktesting.NewFakePassiveClock(now)})
}

// request asks for a worker ID in the v6e group "tpu" of slices of hosts hosts.
func request(hosts int32) Request {
	return Request{
		Namespace:   testNS,
		ClusterName: clusterName,
		ClusterUID:  clusterUID,
		GroupName:   groupName,
		Hosts:       hosts,
		Topology:    "4x4",
		Accelerator: "tpu-v6e-slice",
	}
}

// rayCluster is the test RayCluster (UID clusterUID) whose group "tpu" asks for desired replicas
// of 4 hosts (v6e 4x4, 4 chips per Pod).
func rayCluster(desired int32) *rayv1.RayCluster {
	return testutil.MakeRayCluster(clusterName, testNS).UID(clusterUID).
		TPUGroup(groupName, "tpu-v6e-slice", "4x4", 4, 4, desired).Obj()
}

// rayClusterOf is the test RayCluster whose group "tpu" asks for desired replicas of numOfHosts
// hosts (the requests' host count, docs/spec.md §10).
func rayClusterOf(numOfHosts, desired int32) *rayv1.RayCluster {
	return testutil.MakeRayCluster(clusterName, testNS).UID(clusterUID).
		TPUGroup(groupName, "tpu-v6e-slice", "4x4", 4, numOfHosts, desired).Obj()
}

func indexed(req Request, replica, host int32, replicaName string) Request {
	req.Claim = claims.Request{ReplicaIndex: ptr.To(replica), HostIndex: ptr.To(host), ReplicaName: replicaName}
	return req
}

func sliceName(replica int32) string { return naming.SliceName(clusterName, groupName, replica) }

// existingSlice is a slice of the group as a webhook left it, findable by its labels.
func existingSlice(replica int32, uid types.UID) *testutil.SliceWrapper {
	return testutil.MakeSlice(sliceName(replica), testNS, clusterName, uid, groupName, replica, 4).SelectorLabels()
}

// fullSlice is a 4-host slice of the current cluster whose IDs are all bound to Pods w-<replica>-<id>.
func fullSlice(replica int32) *testutil.SliceWrapper {
	s := existingSlice(replica, clusterUID)
	for id := range int32(4) {
		name := podName(replica, id)
		s.Claim(id, "t-"+name, name, types.UID("uid-"+name))
	}
	return s
}

func podName(replica, id int32) string { return fmt.Sprintf("w-%d-%d", replica, id) }

// livePod is the running Pod bound to claim id of replica in fullSlice.
func livePod(replica, id int32) *testutil.PodWrapper {
	name := podName(replica, id)
	return testutil.MakePod(name, testNS).UID(types.UID("uid-" + name)).Phase(corev1.PodRunning)
}

func livePods(replica int32, except ...int32) []client.Object {
	out := make([]client.Object, 0, 4)
	for id := range int32(4) {
		if !slices.Contains(except, id) {
			out = append(out, livePod(replica, id).Obj())
		}
	}
	return out
}

// createdSlice is a slice as the allocator creates it, holding claims.
func createdSlice(replica int32, replicaName string, held ...tpuv1alpha1.WorkerClaim) tpuv1alpha1.TPUSliceAssignment {
	return *newSlice(replica, replicaName).Claims(held...).Obj()
}

// newSlice builds on the slice the allocator creates for replica, before any claim.
func newSlice(replica int32, replicaName string) *testutil.SliceWrapper {
	return &testutil.SliceWrapper{TPUSliceAssignment: *claims.NewSlice(testNS, sliceSpec(request(4), replica, claims.Write{ReplicaName: replicaName}))}
}

func claim(id int32, token string) tpuv1alpha1.WorkerClaim {
	return tpuv1alpha1.WorkerClaim{WorkerID: id, Token: token}
}

func storedSlices(t *testing.T, c client.Reader) []tpuv1alpha1.TPUSliceAssignment {
	t.Helper()
	var list tpuv1alpha1.TPUSliceAssignmentList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatalf("listing slices: %v", err)
	}
	slices.SortFunc(list.Items, func(a, b tpuv1alpha1.TPUSliceAssignment) int { return strings.Compare(a.Name, b.Name) })
	return list.Items
}

// withToken replaces newToken in the wanted slices by the token Claim returned.
func withToken(want []tpuv1alpha1.TPUSliceAssignment, token string) []tpuv1alpha1.TPUSliceAssignment {
	out := make([]tpuv1alpha1.TPUSliceAssignment, len(want))
	for i := range want {
		out[i] = *want[i].DeepCopy()
		for j := range out[i].Status.Claims {
			if out[i].Status.Claims[j].Token == newToken {
				out[i].Status.Claims[j].Token = token
			}
		}
	}
	return out
}

func objs(groups ...[]client.Object) []client.Object { return slices.Concat(groups...) }

// setDesired sets the replica count the test RayCluster asks for.
func setDesired(t *testing.T, c client.Client, desired int32) {
	t.Helper()
	rc := &rayv1.RayCluster{}
	if err := c.Get(t.Context(), types.NamespacedName{Namespace: testNS, Name: clusterName}, rc); err != nil {
		t.Fatal(err)
	}
	rc.Spec.WorkerGroupSpecs[0].Replicas = ptr.To(desired)
	if err := c.Update(t.Context(), rc); err != nil {
		t.Fatal(err)
	}
}

func TestClaim(t *testing.T) {
	cases := map[string]struct {
		objs []client.Object
		req  Request
		// desired is the replica count the RayCluster asks for.
		desired        int32
		want           Assignment
		wantErr        error
		wantSlices     []tpuv1alpha1.TPUSliceAssignment
		wantCacheFresh bool
	}{
		"the first claim of a group creates its slice and records one claim": {
			req:        request(4),
			desired:    1,
			want:       Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 0},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{createdSlice(0, "", claim(0, newToken))},
		},
		"a partly claimed slice gives its lowest free ID": {
			objs:    []client.Object{existingSlice(0, clusterUID).Claim(0, "a", "", "").Claim(2, "b", "", "").Obj()},
			req:     request(4),
			desired: 1,
			want:    Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 1},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{
				*existingSlice(0, clusterUID).Claim(0, "a", "", "").Claim(2, "b", "", "").
					Claim(1, newToken, "", "").Obj(),
			},
		},
		"a full first slice opens replica 1 when the group asks for two": {
			objs:    objs([]client.Object{fullSlice(0).Obj()}, livePods(0)),
			req:     request(4),
			desired: 2,
			want:    Assignment{SliceName: sliceName(1), Replica: 1, WorkerID: 0},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{
				*fullSlice(0).Obj(),
				createdSlice(1, "", claim(0, newToken)),
			},
		},
		"a started slice is finished before a missing replica index is refilled": {
			objs:    objs([]client.Object{fullSlice(0).Obj(), existingSlice(2, clusterUID).Claim(0, "a", "", "").Obj()}, livePods(0)),
			req:     request(4),
			desired: 3,
			want:    Assignment{SliceName: sliceName(2), Replica: 2, WorkerID: 1},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{
				*fullSlice(0).Obj(),
				*existingSlice(2, clusterUID).Claim(0, "a", "", "").Claim(1, newToken, "", "").Obj(),
			},
		},
		"a missing replica index is refilled before a new one is opened": {
			objs:    objs([]client.Object{fullSlice(0).Obj(), fullSlice(2).Obj()}, livePods(0), livePods(2)),
			req:     request(4),
			desired: 4,
			want:    Assignment{SliceName: sliceName(1), Replica: 1, WorkerID: 0},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{
				*fullSlice(0).Obj(),
				createdSlice(1, "", claim(0, newToken)),
				*fullSlice(2).Obj(),
			},
		},
		"every slice full with live Pods is a transient denial": {
			objs:       objs([]client.Object{fullSlice(0).Obj()}, livePods(0)),
			req:        request(4),
			desired:    1,
			wantErr:    &DeniedError{Transient: true, Message: "all 1 slices of 4 hosts the worker group asks for are fully claimed; a claim of a Pod that was just created or deleted may still be settling"},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{*fullSlice(0).Obj()},
		},
		"a suspended group (no replicas) is a transient denial and opens no slice": {
			req:     request(4),
			desired: 0,
			wantErr: &DeniedError{Transient: true, Message: "the worker group asks for no replicas (suspended or scaled to zero), so no slice may be opened"},
		},
		"a pending claim whose Pod may still be in flight is not taken over": {
			objs: objs([]client.Object{existingSlice(0, clusterUID).
				Claim(0, "t-w-0-0", "w-0-0", "uid-w-0-0").
				Claim(1, "t-w-0-1", "w-0-1", "uid-w-0-1").
				Claim(2, "t-w-0-2", "w-0-2", "uid-w-0-2").
				Claim(3, "pending", "", "").Obj()}, livePods(0, 3)),
			req:     request(4),
			desired: 1,
			wantErr: &DeniedError{Transient: true, Message: "all 1 slices of 4 hosts the worker group asks for are fully claimed; a claim of a Pod that was just created or deleted may still be settling"},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{*existingSlice(0, clusterUID).
				Claim(0, "t-w-0-0", "w-0-0", "uid-w-0-0").
				Claim(1, "t-w-0-1", "w-0-1", "uid-w-0-1").
				Claim(2, "t-w-0-2", "w-0-2", "uid-w-0-2").
				Claim(3, "pending", "", "").Obj()},
		},
		"the ID of a bound claim whose Pod is gone is taken over": {
			objs:       objs([]client.Object{fullSlice(0).Obj()}, livePods(0, 2)),
			req:        request(4),
			desired:    1,
			want:       Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 2},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{*fullSlice(0).Unclaim(2).Claims(claim(2, newToken)).Obj()},
		},
		"the lowest ID whose Pod is terminating is taken over": {
			objs: objs([]client.Object{fullSlice(0).Obj()}, livePods(0, 1, 3),
				[]client.Object{
					livePod(0, 1).Terminating().Finalizer("example.com/keep").Obj(),
					livePod(0, 3).Terminating().Finalizer("example.com/keep").Obj(),
				}),
			req:        request(4),
			desired:    1,
			want:       Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 1},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{*fullSlice(0).Unclaim(1).Claims(claim(1, newToken)).Obj()},
		},
		"the ID of a bound claim whose Pod failed is taken over": {
			objs:       objs([]client.Object{fullSlice(0).Obj()}, livePods(0, 0), []client.Object{livePod(0, 0).Phase(corev1.PodFailed).Obj()}),
			req:        request(4),
			desired:    1,
			want:       Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 0},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{*fullSlice(0).Unclaim(0).Claims(claim(0, newToken)).Obj()},
		},
		"the ID of a bound claim whose Pod name now belongs to another Pod is taken over": {
			objs:       objs([]client.Object{fullSlice(0).Obj()}, livePods(0, 3), []client.Object{livePod(0, 3).UID("someone-else").Obj()}),
			req:        request(4),
			desired:    1,
			want:       Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 3},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{*fullSlice(0).Unclaim(3).Claims(claim(3, newToken)).Obj()},
		},
		"the slice of a deleted RayCluster of the same name is replaced by the new UID's": {
			objs: []client.Object{existingSlice(0, oldUID).
				Claim(0, "old-0", "old-pod-0", "old-uid-0").
				Claim(1, "old-1", "", "").Obj()},
			req:        request(4),
			desired:    1,
			want:       Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 0},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{createdSlice(0, "", claim(0, newToken))},
		},
		"slices of other groups and clusters are left alone": {
			objs: []client.Object{
				testutil.MakeSlice(naming.SliceName(clusterName, "other", 0), testNS, clusterName, clusterUID, "other", 0, 4).SelectorLabels().
					Claim(0, "x", "", "").Obj(),
				testutil.MakeSlice(naming.SliceName("rc2", groupName, 0), testNS, "rc2", "rc2-uid", groupName, 0, 4).SelectorLabels().
					Claim(0, "y", "", "").Obj(),
			},
			req:     request(4),
			desired: 1,
			want:    Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 0},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{
				createdSlice(0, "", claim(0, newToken)),
				*testutil.MakeSlice(naming.SliceName(clusterName, "other", 0), testNS, clusterName, clusterUID, "other", 0, 4).SelectorLabels().
					Claim(0, "x", "", "").Obj(),
				*testutil.MakeSlice(naming.SliceName("rc2", groupName, 0), testNS, "rc2", "rc2-uid", groupName, 0, 4).SelectorLabels().
					Claim(0, "y", "", "").Obj(),
			},
		},
		"KubeRay's indexes place the Pod exactly": {
			desired:    2,
			req:        indexed(request(4), 1, 3, "tpu-xk2p9"),
			want:       Assignment{SliceName: sliceName(1), Replica: 1, WorkerID: 3},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{createdSlice(1, "tpu-xk2p9", claim(3, newToken))},
		},
		"KubeRay's indexes beyond the desired replicas, which the live RayCluster confirms, are a permanent denial": {
			desired: 1,
			req:     indexed(request(4), 1, 3, "tpu-xk2p9"),
			wantErr: &DeniedError{Message: claims.BeyondDesiredMessage(1, 1)},
		},
		"KubeRay's indexes join the slice of the same replica name": {
			objs:    []client.Object{existingSlice(1, clusterUID).ReplicaName("tpu-xk2p9").Claim(0, "a", "", "").Obj()},
			desired: 2,
			req:     indexed(request(4), 1, 2, "tpu-xk2p9"),
			want:    Assignment{SliceName: sliceName(1), Replica: 1, WorkerID: 2},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{
				*existingSlice(1, clusterUID).ReplicaName("tpu-xk2p9").Claim(0, "a", "", "").Claim(2, newToken, "", "").Obj(),
			},
		},
		"KubeRay's indexes with another replica name replace the slice once the old replica's Pods are gone": {
			objs: []client.Object{existingSlice(1, clusterUID).ReplicaName("tpu-old").
				Claim(2, "a", "old-a", "uid-old-a").Claim(3, "b", "old-b", "uid-old-b").Obj()},
			desired: 2,
			req:     indexed(request(4), 1, 2, "tpu-xk2p9"),
			want:    Assignment{SliceName: sliceName(1), Replica: 1, WorkerID: 2},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{
				*newSlice(1, "tpu-xk2p9").ReplacedReplicaNames("tpu-old").Claims(claim(2, newToken)).Obj(),
			},
		},
		"KubeRay's indexes with another replica name wait while the old replica's claims may have live Pods": {
			objs: []client.Object{existingSlice(1, clusterUID).ReplicaName("tpu-old").
				Claim(2, "a", "", "").Claim(3, "b", "", "").Obj()},
			desired: 2,
			req:     indexed(request(4), 1, 2, "tpu-xk2p9"),
			wantErr: &DeniedError{Transient: true, Message: "replica 1 is still held by 2 claims of KubeRay replica tpu-old; it is replaced by tpu-xk2p9 once those Pods are gone"},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{*existingSlice(1, clusterUID).ReplicaName("tpu-old").
				Claim(2, "a", "", "").Claim(3, "b", "", "").Obj()},
		},
		"KubeRay's indexes on an ID held by a pending claim are a transient denial": {
			objs:    []client.Object{existingSlice(0, clusterUID).Claim(1, "a", "", "").Obj()},
			desired: 1,
			req:     indexed(request(4), 0, 1, ""),
			wantErr: &DeniedError{Transient: true, Message: "worker ID 1 of replica 0 is held by another Pod (a claim whose Pod has not been seen yet); it is released once that Pod is gone"},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{
				*existingSlice(0, clusterUID).Claim(1, "a", "", "").Obj(),
			},
		},
		"KubeRay's indexes on an ID whose Pod is gone take it over": {
			objs:       objs([]client.Object{fullSlice(0).Obj()}, livePods(0, 1)),
			desired:    1,
			req:        indexed(request(4), 0, 1, ""),
			want:       Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 1},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{*fullSlice(0).Unclaim(1).Claims(claim(1, newToken)).Obj()},
		},
		"KubeRay's host index outside the slice is a permanent denial": {
			desired: 1,
			req:     indexed(request(4), 0, 4, "tpu-xk2p9"),
			wantErr: &DeniedError{Message: "KubeRay labels place the Pod at replica 0, host 4, outside a slice of 4 hosts"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, interceptor.Funcs{}, append(tc.objs, rayCluster(tc.desired))...)
			a := newAllocator(c, c, timeout)
			got, err := a.Claim(t.Context(), tc.req)
			if diff := cmp.Diff(tc.wantErr, err); diff != "" {
				t.Errorf("Claim() error (-want,+got):\n%s", diff)
			}
			if err == nil && got.Token == "" {
				t.Error("Claim() returned no token")
			}
			want := tc.want
			want.Token = got.Token
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Claim() (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(withToken(tc.wantSlices, got.Token), storedSlices(t, c), cmpSlices, sortSlices); diff != "" {
				t.Errorf("stored slices (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestClaimSequentialFillsSlicesInOrder(t *testing.T) {
	c := newClient(t, interceptor.Funcs{})
	a := newAllocator(c, c, timeout)
	type slot struct{ Replica, WorkerID int32 }
	var got []slot
	tokens := map[slot]string{}
	for i, desired := range []int32{1, 1, 1, 1, 2} {
		setDesired(t, c, desired)
		asg, err := a.Claim(t.Context(), request(4))
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		p := slot{asg.Replica, asg.WorkerID}
		got = append(got, p)
		tokens[p] = asg.Token
	}
	want := []slot{{0, 0}, {0, 1}, {0, 2}, {0, 3}, {1, 0}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("placements (-want,+got):\n%s", diff)
	}
	wantSlices := []tpuv1alpha1.TPUSliceAssignment{
		createdSlice(0, "",
			claim(0, tokens[slot{0, 0}]), claim(1, tokens[slot{0, 1}]),
			claim(2, tokens[slot{0, 2}]), claim(3, tokens[slot{0, 3}])),
		createdSlice(1, "", claim(0, tokens[slot{1, 0}])),
	}
	if diff := cmp.Diff(wantSlices, storedSlices(t, c), cmpSlices); diff != "" {
		t.Errorf("stored slices (-want,+got):\n%s", diff)
	}
	if got := countsOf(a).committed; got != 5 {
		t.Errorf("claims committed = %d, want 5", got)
	}
	// Scaled back to one slice, the group has no free ID left: its pending claims are not taken over.
	setDesired(t, c, 1)
	_, err := a.Claim(t.Context(), request(4))
	var denied *DeniedError
	if !errors.As(err, &denied) || !denied.Transient {
		t.Errorf("sixth claim: got error %v, want a transient *DeniedError", err)
	}
}

// TestClaimFaults injects API errors and checks that the claim still lands exactly once.
func TestClaimFaults(t *testing.T) {
	conflict := apierrors.NewConflict(sliceGVR, sliceName(0), errors.New("the object has been modified"))
	cases := map[string]struct {
		// funcs returns the faults; calls counts the intercepted calls.
		funcs         func(calls *atomic.Int32) interceptor.Funcs
		want          Assignment
		wantSlices    func(token string) []tpuv1alpha1.TPUSliceAssignment
		wantConflicts int64
	}{
		"status update conflicts are retried until the claim lands": {
			funcs: func(calls *atomic.Int32) interceptor.Funcs {
				return interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
					if calls.Add(1) <= 3 {
						return conflict
					}
					return c.SubResource(sub).Update(ctx, obj, opts...)
				}}
			},
			want: Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 0},
			wantSlices: func(token string) []tpuv1alpha1.TPUSliceAssignment {
				return []tpuv1alpha1.TPUSliceAssignment{createdSlice(0, "", claim(0, token))}
			},
			wantConflicts: 3,
		},
		"a slice another replica created first is re-read and joined": {
			funcs: func(calls *atomic.Int32) interceptor.Funcs {
				return interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					if calls.Add(1) > 1 {
						return c.Create(ctx, obj, opts...)
					}
					// Another webhook replica wins the race for the slice and claims ID 0.
					other := obj.DeepCopyObject().(*tpuv1alpha1.TPUSliceAssignment)
					if err := c.Create(ctx, other); err != nil {
						return err
					}
					other.Status.Claims = []tpuv1alpha1.WorkerClaim{claim(0, "other")}
					other.Status.Claimed = 1
					if err := c.Status().Update(ctx, other); err != nil {
						return err
					}
					return apierrors.NewAlreadyExists(sliceGVR, obj.GetName())
				}}
			},
			want: Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 1},
			wantSlices: func(token string) []tpuv1alpha1.TPUSliceAssignment {
				return []tpuv1alpha1.TPUSliceAssignment{createdSlice(0, "", claim(0, "other"), claim(1, token))}
			},
			wantConflicts: 1,
		},
		"a failed list is retried": {
			funcs: func(calls *atomic.Int32) interceptor.Funcs {
				return interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
					if calls.Add(1) == 1 {
						return apierrors.NewInternalError(errors.New("etcd leader changed"))
					}
					return c.List(ctx, list, opts...)
				}}
			},
			want: Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 0},
			wantSlices: func(token string) []tpuv1alpha1.TPUSliceAssignment {
				return []tpuv1alpha1.TPUSliceAssignment{createdSlice(0, "", claim(0, token))}
			},
		},
		"a failed create is retried": {
			funcs: func(calls *atomic.Int32) interceptor.Funcs {
				return interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					if calls.Add(1) == 1 {
						return apierrors.NewServiceUnavailable("apiserver shutting down")
					}
					return c.Create(ctx, obj, opts...)
				}}
			},
			want: Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 0},
			wantSlices: func(token string) []tpuv1alpha1.TPUSliceAssignment {
				return []tpuv1alpha1.TPUSliceAssignment{createdSlice(0, "", claim(0, token))}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var calls atomic.Int32
			c := newClient(t, tc.funcs(&calls))
			a := newAllocator(c, c, timeout)
			got, err := a.Claim(t.Context(), request(4))
			if err != nil {
				t.Fatalf("Claim() error: %v", err)
			}
			want := tc.want
			want.Token = got.Token
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Claim() (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantSlices(got.Token), storedSlices(t, c), cmpSlices); diff != "" {
				t.Errorf("stored slices (-want,+got):\n%s", diff)
			}
			if got := countsOf(a).conflicts; got != tc.wantConflicts {
				t.Errorf("claim conflicts = %d, want %d", got, tc.wantConflicts)
			}
			// One claim per write: every conflict is one lost write.
			if got := countsOf(a).lostWrites; got != tc.wantConflicts {
				t.Errorf("lost writes = %d, want %d", got, tc.wantConflicts)
			}
			if got := countsOf(a).committed; got != 1 {
				t.Errorf("claims committed = %d, want 1", got)
			}
		})
	}
}

// staleCache returns a client that writes to live but reads from cache, like a manager's client
// whose informers lag behind the API server.
func staleCache(live, cache client.WithWatch) client.WithWatch {
	return interceptor.NewClient(live, interceptor.Funcs{
		Get: func(ctx context.Context, _ client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			return cache.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, _ client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			return cache.List(ctx, list, opts...)
		},
	})
}

// counts are what an allocator's claim metrics counted.
type counts struct{ committed, attempts, conflicts, lostWrites int64 }

func countsOf(a *Allocator) counts {
	return counts{
		committed:  int64(metrics.Value(a.m.Results.WithLabelValues(metrics.ClaimCommitted))),
		attempts:   int64(metrics.Sum(a.m.Attempts)),
		conflicts:  int64(metrics.Sum(a.m.Conflicts)),
		lostWrites: int64(metrics.Value(a.m.LostWrites)),
	}
}

// updateStatus writes the status of s over the stored slice of that name, which gets a newer
// resourceVersion than any copy read before.
func updateStatus(t *testing.T, c client.Client, s *tpuv1alpha1.TPUSliceAssignment) {
	t.Helper()
	var cur tpuv1alpha1.TPUSliceAssignment
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(s), &cur); err != nil {
		t.Fatal(err)
	}
	cur.Status = s.Status
	if err := c.Status().Update(t.Context(), &cur); err != nil {
		t.Fatal(err)
	}
}

// TestClaimStaleCache checks that uniqueness and takeovers never rest on the cache.
func TestClaimStaleCache(t *testing.T) {
	cases := map[string]struct {
		// cached and live are the objects of the cache and of the API server; updated are then
		// written to the API server only, so that the cache holds an older resourceVersion.
		cached, live, updated []client.Object
		req                   Request
		want                  Assignment
		wantErr               error
		wantSlices            []tpuv1alpha1.TPUSliceAssignment
		wantConflicts         int64
	}{
		"an ID the cache still sees free but another replica took is not claimed twice": {
			cached:        []client.Object{existingSlice(0, clusterUID).Claim(0, "a", "", "").Obj()},
			live:          []client.Object{existingSlice(0, clusterUID).Claim(0, "a", "", "").Obj()},
			updated:       []client.Object{existingSlice(0, clusterUID).Claim(0, "a", "", "").Claim(1, "b", "", "").Obj()},
			req:           request(4),
			want:          Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 2},
			wantConflicts: 1,
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{*existingSlice(0, clusterUID).
				Claim(0, "a", "", "").Claim(1, "b", "", "").Claim(2, newToken, "", "").Obj()},
		},
		"a slice the cache does not know yet is joined, not created again": {
			live: []client.Object{existingSlice(0, clusterUID).Claim(0, "a", "", "").Obj()},
			req:  request(4),
			want: Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 1},
			// The AlreadyExists of the create counts as a conflict.
			wantConflicts: 1,
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{*existingSlice(0, clusterUID).
				Claim(0, "a", "", "").Claim(1, newToken, "", "").Obj()},
		},
		"a slice the cache sees full is checked live before denying": {
			cached: objs([]client.Object{fullSlice(0).Obj()}, livePods(0)),
			live:   objs([]client.Object{fullSlice(0).Obj()}, livePods(0)),
			updated: []client.Object{existingSlice(0, clusterUID).
				Claim(0, "t-w-0-0", "w-0-0", "uid-w-0-0").
				Claim(1, "t-w-0-1", "w-0-1", "uid-w-0-1").
				Claim(3, "t-w-0-3", "w-0-3", "uid-w-0-3").Obj()},
			req:  request(4),
			want: Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 2},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{*existingSlice(0, clusterUID).
				Claim(0, "t-w-0-0", "w-0-0", "uid-w-0-0").
				Claim(1, "t-w-0-1", "w-0-1", "uid-w-0-1").
				Claim(3, "t-w-0-3", "w-0-3", "uid-w-0-3").
				Claim(2, newToken, "", "").Obj()},
		},
		"a Pod the cache still sees alive is not taken over, even if it is gone": {
			cached:     objs([]client.Object{fullSlice(0).Obj()}, livePods(0)),
			live:       objs([]client.Object{fullSlice(0).Obj()}, livePods(0, 1)),
			req:        request(4),
			wantErr:    &DeniedError{Transient: true, Message: "all 1 slices of 4 hosts the worker group asks for are fully claimed; a claim of a Pod that was just created or deleted may still be settling"},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{*fullSlice(0).Obj()},
		},
		"a Pod the cache sees terminating but that is live is not taken over": {
			cached: objs([]client.Object{fullSlice(0).Obj()}, livePods(0, 1),
				[]client.Object{livePod(0, 1).Terminating().Finalizer("example.com/keep").Obj()}),
			live:       objs([]client.Object{fullSlice(0).Obj()}, livePods(0)),
			req:        request(4),
			wantErr:    &DeniedError{Transient: true, Message: "all 1 slices of 4 hosts the worker group asks for are fully claimed; a claim of a Pod that was just created or deleted may still be settling"},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{*fullSlice(0).Obj()},
		},
		"a Pod the cache does not know yet but that is live is not taken over": {
			cached:     []client.Object{fullSlice(0).Obj()},
			live:       objs([]client.Object{fullSlice(0).Obj()}, livePods(0)),
			req:        request(4),
			wantErr:    &DeniedError{Transient: true, Message: "all 1 slices of 4 hosts the worker group asks for are fully claimed; a claim of a Pod that was just created or deleted may still be settling"},
			wantSlices: []tpuv1alpha1.TPUSliceAssignment{*fullSlice(0).Obj()},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			live := newClient(t, interceptor.Funcs{}, tc.live...)
			for _, obj := range tc.updated {
				updateStatus(t, live, obj.(*tpuv1alpha1.TPUSliceAssignment))
			}
			cache := newClient(t, interceptor.Funcs{}, tc.cached...)
			a := newAllocator(staleCache(live, cache), live, timeout)
			got, err := a.Claim(t.Context(), tc.req)
			if diff := cmp.Diff(tc.wantErr, err); diff != "" {
				t.Errorf("Claim() error (-want,+got):\n%s", diff)
			}
			want := tc.want
			want.Token = got.Token
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Claim() (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(withToken(tc.wantSlices, got.Token), storedSlices(t, live), cmpSlices); diff != "" {
				t.Errorf("slices in the API server (-want,+got):\n%s", diff)
			}
			if got := countsOf(a).conflicts; got != tc.wantConflicts {
				t.Errorf("claim conflicts = %d, want %d", got, tc.wantConflicts)
			}
		})
	}
}

// TestClaimLiveReadsAreGets checks that a retry confirms the slice it writes with a Get: a consistent
// List is served by the API server's watch cache only once it has caught up with etcd, which takes
// up to 100 ms while other objects are written, whereas a Get reads etcd.
func TestClaimLiveReadsAreGets(t *testing.T) {
	cache := newClient(t, interceptor.Funcs{}, existingSlice(0, clusterUID).Claim(0, "a", "", "").Obj())
	live := newClient(t, interceptor.Funcs{}, existingSlice(0, clusterUID).Claim(0, "a", "", "").Obj())
	// Another replica claims ID 1 after the cache last saw the slice.
	updateStatus(t, live, existingSlice(0, clusterUID).Claim(0, "a", "", "").Claim(1, "b", "", "").Obj())
	var gets, lists atomic.Int32
	reader := interceptor.NewClient(live, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			gets.Add(1)
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*tpuv1alpha1.TPUSliceAssignmentList); ok {
				lists.Add(1)
			}
			return c.List(ctx, list, opts...)
		},
	})
	a := newAllocator(staleCache(live, cache), reader, timeout)
	got, err := a.Claim(t.Context(), request(4))
	if err != nil {
		t.Fatalf("Claim() error: %v", err)
	}
	if diff := cmp.Diff(Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 2, Token: got.Token}, got); diff != "" {
		t.Errorf("Claim() (-want,+got):\n%s", diff)
	}
	if got := countsOf(a).lostWrites; got != 1 {
		t.Errorf("lost writes = %d, want 1 (the write planned on the stale cache)", got)
	}
	if got := gets.Load(); got != 1 {
		t.Errorf("live Gets = %d, want 1 (the slice the retry writes)", got)
	}
	if got := lists.Load(); got != 0 {
		t.Errorf("live Lists of slices = %d, want 0", got)
	}
}

// restDecoding returns a client whose Gets decode the object's JSON into the caller's object without
// zeroing it first, as client-go's REST client does: fields the response omits keep their old values.
func restDecoding(c client.WithWatch) client.WithWatch {
	return interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			fresh := obj.DeepCopyObject().(client.Object)
			if err := c.Get(ctx, key, fresh, opts...); err != nil {
				return err
			}
			data, err := json.Marshal(fresh)
			if err != nil {
				return err
			}
			return json.Unmarshal(data, obj)
		},
	})
}

// TestClaimLiveReadIsNotMixedWithTheCache: a Pod name can be reused by a new Pod. When the cache
// still holds the old, terminating Pod of that name, the live read of the new Pod must not inherit
// the old one's deletionTimestamp, or the new Pod's ID would be given twice.
func TestClaimLiveReadIsNotMixedWithTheCache(t *testing.T) {
	slice := existingSlice(0, clusterUID).
		Claim(0, "t0", "w-0-0", "uid-w-0-0").
		Claim(1, "t1", "w-0-1", "uid-new").
		Claim(2, "t2", "w-0-2", "uid-w-0-2").
		Claim(3, "t3", "w-0-3", "uid-w-0-3").Obj()
	live := newClient(t, interceptor.Funcs{}, slice.DeepCopy(), livePod(0, 0).Obj(), livePod(0, 1).UID("uid-new").Obj(), livePod(0, 2).Obj(), livePod(0, 3).Obj())
	cache := newClient(t, interceptor.Funcs{}, slice.DeepCopy(), livePod(0, 0).Obj(), livePod(0, 2).Obj(), livePod(0, 3).Obj(),
		livePod(0, 1).UID("uid-old").Terminating().Finalizer("example.com/keep").Obj())
	a := newAllocator(staleCache(live, cache), restDecoding(live), timeout)
	_, err := a.Claim(t.Context(), request(4))
	var denied *DeniedError
	if !errors.As(err, &denied) || !denied.Transient {
		t.Errorf("Claim() error = %v, want a transient denial: every ID is held by a live Pod", err)
	}
	if diff := cmp.Diff([]tpuv1alpha1.TPUSliceAssignment{*slice}, storedSlices(t, live), cmpSlices); diff != "" {
		t.Errorf("slices in the API server (-want,+got):\n%s", diff)
	}
}

// writeCounter counts every write through a client.
func writeCounter(writes *atomic.Int32) interceptor.Funcs {
	return interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			writes.Add(1)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			writes.Add(1)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			writes.Add(1)
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			writes.Add(1)
			return c.Delete(ctx, obj, opts...)
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			writes.Add(1)
			return c.DeleteAllOf(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			writes.Add(1)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			writes.Add(1)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}
}

// TestPlan checks the dry run (docs/spec.md §5, I4): the slot Claim would hand out, and no write.
func TestPlan(t *testing.T) {
	cases := map[string]struct {
		objs    []client.Object
		req     Request
		desired int32
		want    Assignment
		wantErr error
	}{
		"a new group would go to ID 0 of replica 0": {
			req:     request(4),
			desired: 1,
			want:    Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 0},
		},
		"a partly claimed slice would give its lowest free ID": {
			objs:    []client.Object{existingSlice(0, clusterUID).Claim(0, "a", "", "").Claim(1, "b", "", "").Obj()},
			req:     request(4),
			desired: 1,
			want:    Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 2},
		},
		"a full slice would open the next replica": {
			objs:    objs([]client.Object{fullSlice(0).Obj()}, livePods(0)),
			req:     request(4),
			desired: 2,
			want:    Assignment{SliceName: sliceName(1), Replica: 1, WorkerID: 0},
		},
		"the slice of a deleted RayCluster would be replaced": {
			objs:    []client.Object{existingSlice(0, oldUID).Claim(0, "old", "", "").Obj()},
			req:     request(4),
			desired: 1,
			want:    Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 0},
		},
		"KubeRay's indexes would place the Pod exactly": {
			desired: 3,
			req:     indexed(request(4), 2, 3, "tpu-xk2p9"),
			want:    Assignment{SliceName: sliceName(2), Replica: 2, WorkerID: 3},
		},
		"every slice full is a transient denial": {
			objs:    objs([]client.Object{fullSlice(0).Obj()}, livePods(0)),
			req:     request(4),
			desired: 1,
			wantErr: &DeniedError{Transient: true, Message: "all 1 slices of 4 hosts the worker group asks for are fully claimed; a claim of a Pod that was just created or deleted may still be settling"},
		},
		"KubeRay's host index outside the slice is a permanent denial": {
			desired: 1,
			req:     indexed(request(4), 0, 7, "tpu-xk2p9"),
			wantErr: &DeniedError{Message: "KubeRay labels place the Pod at replica 0, host 7, outside a slice of 4 hosts"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var writes atomic.Int32
			c := newClient(t, writeCounter(&writes), append(tc.objs, rayCluster(tc.desired))...)
			before := storedSlices(t, c)
			a := newAllocator(c, c, timeout)
			got, err := a.Plan(t.Context(), tc.req)
			if diff := cmp.Diff(tc.wantErr, err); diff != "" {
				t.Errorf("Plan() error (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Plan() (-want,+got):\n%s", diff)
			}
			if n := writes.Load(); n != 0 {
				t.Errorf("Plan() made %d writes, want none", n)
			}
			if diff := cmp.Diff(before, storedSlices(t, c)); diff != "" {
				t.Errorf("Plan() changed the slices (-before,+after):\n%s", diff)
			}
		})
	}
}

// TestTheSliceKeepsTheAffinityKeyOfItsFirstClaim: the slice affinity key the first claim's
// admission chose is recorded in the slice that claim creates, and returned to every later claim
// and dry run of that slice, whatever key they chose (the Nodes may have changed since).
func TestTheSliceKeepsTheAffinityKeyOfItsFirstClaim(t *testing.T) {
	const subblock, nodePool = "cloud.google.com/gce-topology-subblock", "cloud.google.com/gke-nodepool"
	withKey := func(key string) Request {
		req := request(4)
		req.AffinityTopologyKey = key
		return req
	}
	c := newClient(t, interceptor.Funcs{})
	a := newAllocator(c, c, timeout)
	for i, req := range []Request{withKey(subblock), withKey(nodePool)} {
		got, err := a.Claim(t.Context(), req)
		if err != nil || got.AffinityTopologyKey != subblock {
			t.Errorf("claim %d with key %q: Claim() = %+v, %v; want key %q", i, req.AffinityTopologyKey, got, err, subblock)
		}
	}
	if got, err := a.Plan(t.Context(), withKey(nodePool)); err != nil || got.AffinityTopologyKey != subblock {
		t.Errorf("Plan() = %+v, %v; want key %q", got, err, subblock)
	}
	if s := storedSlices(t, c); len(s) != 1 || s[0].Spec.AffinityTopologyKey != subblock {
		t.Errorf("stored slices %+v, want one recording key %q", s, subblock)
	}
	t.Run("a slice that records no key returns none", func(t *testing.T) {
		c := newClient(t, interceptor.Funcs{}, existingSlice(0, clusterUID).Claim(0, "t0", "", "").Obj())
		got, err := newAllocator(c, c, timeout).Claim(t.Context(), withKey(nodePool))
		if err != nil || got.AffinityTopologyKey != "" {
			t.Errorf("Claim() = %+v, %v; want no key", got, err)
		}
	})
}

// TestClaimConcurrent checks docs/spec.md §3.3 and I5: concurrent claims through one or several allocators
// (webhook replicas) sharing one API server never give one ID twice.
func TestClaimConcurrent(t *testing.T) {
	cases := map[string]struct {
		allocators, callers int
		hosts, replicas     int32
	}{
		"64 callers of one allocator fill one 64-host slice": {
			allocators: 1, callers: 64, hosts: 64, replicas: 1,
		},
		"two allocators with 32 callers each fill one 64-host slice": {
			allocators: 2, callers: 64, hosts: 64, replicas: 1,
		},
		"three allocators fill four 16-host slices": {
			allocators: 3, callers: 64, hosts: 16, replicas: 4,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, interceptor.Funcs{}, rayClusterOf(tc.hosts, tc.replicas))
			allocators := make([]*Allocator, tc.allocators)
			for i := range allocators {
				allocators[i] = newAllocator(c, c, timeout)
			}
			type slot struct{ replica, id int32 }
			results := make([]Assignment, tc.callers)
			errs := make([]error, tc.callers)
			var wg sync.WaitGroup
			for i := range tc.callers {
				wg.Go(func() {
					results[i], errs[i] = allocators[i%tc.allocators].Claim(t.Context(), request(tc.hosts))
				})
			}
			wg.Wait()

			wantTokens := map[slot]string{}
			for i, r := range results {
				if errs[i] != nil {
					t.Errorf("caller %d: %v", i, errs[i])
					continue
				}
				p := slot{r.Replica, r.WorkerID}
				if other, dup := wantTokens[p]; dup {
					t.Errorf("replica %d ID %d given twice (tokens %s and %s)", p.replica, p.id, other, r.Token)
				}
				wantTokens[p] = r.Token
				if r.SliceName != sliceName(r.Replica) {
					t.Errorf("caller %d got slice %q for replica %d", i, r.SliceName, r.Replica)
				}
			}
			gotTokens := map[slot]string{}
			for _, s := range storedSlices(t, c) {
				if int(s.Status.Claimed) != len(s.Status.Claims) {
					t.Errorf("slice %s: claimed = %d with %d claims", s.Name, s.Status.Claimed, len(s.Status.Claims))
				}
				for _, cl := range s.Status.Claims {
					p := slot{s.Spec.ReplicaIndex, cl.WorkerID}
					if _, dup := gotTokens[p]; dup {
						t.Errorf("slice %s holds two claims on ID %d", s.Name, cl.WorkerID)
					}
					gotTokens[p] = cl.Token
				}
			}
			if diff := cmp.Diff(wantTokens, gotTokens, cmp.AllowUnexported(slot{})); diff != "" {
				t.Errorf("stored claims differ from the assignments (-assigned,+stored):\n%s", diff)
			}
			for r := range tc.replicas {
				for id := range tc.hosts {
					if _, ok := gotTokens[slot{r, id}]; !ok {
						t.Errorf("replica %d ID %d not claimed", r, id)
					}
				}
			}
			var claimsMade int64
			for _, a := range allocators {
				claimsMade += countsOf(a).committed
			}
			if claimsMade != int64(tc.callers) {
				t.Errorf("claims committed sum = %d, want %d", claimsMade, tc.callers)
			}
		})
	}
}

// TestClaimTimeout checks docs/spec.md §5: an API server that never lets a claim through gets a retryable
// denial well inside the webhook timeout, never a hang.
func TestClaimTimeout(t *testing.T) {
	const claimTimeout = 200 * time.Millisecond
	cases := map[string]struct {
		funcs interceptor.Funcs
	}{
		"status updates that always conflict": {
			funcs: interceptor.Funcs{SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
				return apierrors.NewConflict(sliceGVR, sliceName(0), errors.New("the object has been modified"))
			}},
		},
		"an API server that always fails listing": {
			funcs: interceptor.Funcs{List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
				return apierrors.NewInternalError(errors.New("etcd unavailable"))
			}},
		},
		"an API server that hangs until the request's deadline": {
			funcs: interceptor.Funcs{List: func(ctx context.Context, _ client.WithWatch, _ client.ObjectList, _ ...client.ListOption) error {
				<-ctx.Done()
				return ctx.Err()
			}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, tc.funcs)
			a := newAllocator(c, c, claimTimeout)
			start := time.Now()
			_, err := a.Claim(t.Context(), request(4))
			elapsed := time.Since(start)
			want := &DeniedError{Transient: true, Message: "timed out after 200ms claiming a worker ID (API server slow or heavily contended)"}
			if diff := cmp.Diff(want, err); diff != "" {
				t.Errorf("Claim() error (-want,+got):\n%s", diff)
			}
			if elapsed > time.Second {
				t.Errorf("Claim() took %s, want about %s", elapsed, claimTimeout)
			}
			// The group's queue stops once its last call is given up: no goroutine is left behind.
			// (An idle queue may stay a moment to remember the group's recent contention.)
			deadline := time.Now().Add(time.Second)
			for {
				a.mu.Lock()
				n := 0
				for _, q := range a.queues {
					if q.running || len(q.pending) > 0 {
						n++
					}
				}
				a.mu.Unlock()
				if n == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d group queues still running a second after the timeout", n)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

func TestPodHolds(t *testing.T) {
	bound := &tpuv1alpha1.WorkerClaim{WorkerID: 0, Token: "t", PodName: "p", PodUID: "uid-p"}
	cases := map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"the live Pod of the claim holds it": {
			pod: testutil.MakePod("p", testNS).UID("uid-p").Phase(corev1.PodRunning).Obj(), want: true,
		},
		"another Pod of the same name does not": {
			pod: testutil.MakePod("p", testNS).UID("uid-q").Phase(corev1.PodRunning).Obj(),
		},
		"the Pod of the claim no longer does once terminating": {
			pod: testutil.MakePod("p", testNS).UID("uid-p").Terminating().Obj(),
		},
		"the Pod of the claim no longer does once finished": {
			pod: testutil.MakePod("p", testNS).UID("uid-p").Phase(corev1.PodSucceeded).Obj(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := PodHolds(tc.pod, bound); got != tc.want {
				t.Errorf("PodHolds() = %t, want %t", got, tc.want)
			}
		})
	}
}

func TestDeniedError(t *testing.T) {
	cases := map[string]struct {
		err  *DeniedError
		want string
	}{
		"a permanent denial is its message":           {err: &DeniedError{Message: "fix it"}, want: "fix it"},
		"a transient denial says the creator retries": {err: &DeniedError{Transient: true, Message: "busy"}, want: "busy; transient, the Pod's creator retries"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("Error() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNewToken(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		tok := NewToken()
		if len(tok) != 16 {
			t.Errorf("NewToken() = %q, want 16 hex characters", tok)
		}
		if seen[tok] {
			t.Errorf("NewToken() repeated %q", tok)
		}
		seen[tok] = true
	}
}

func TestClaimDeniesAtOnceWhenTheAPIServerRefusesTheWrite(t *testing.T) {
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: tpuv1alpha1.GroupVersion.Group, Kind: "TPUSliceAssignment"}, sliceName(0), nil)
	c := newClient(t, interceptor.Funcs{
		SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
			return invalid
		},
	})
	start := time.Now()
	_, err := newAllocator(c, c, timeout).Claim(context.Background(), request(4))
	var denied *DeniedError
	if !errors.As(err, &denied) {
		t.Fatalf("Claim() error = %v, want a *DeniedError", err)
	}
	if denied.Transient {
		t.Errorf("Claim() denial is transient, want permanent: %s", denied.Message)
	}
	if !strings.Contains(denied.Message, "the API server refused the TPUSliceAssignment write") {
		t.Errorf("Claim() denial message = %q", denied.Message)
	}
	if elapsed := time.Since(start); elapsed > timeout/10 {
		t.Errorf("Claim() took %s: a refused write must not be retried until the deadline", elapsed)
	}
}

func TestClaimReplacesASliceOfAnotherHostCount(t *testing.T) {
	// The group now has 8 hosts per slice; the stored slice was made for 4.
	c := newClient(t, interceptor.Funcs{}, fullSlice(0).Obj(), rayClusterOf(8, 1))
	got, err := newAllocator(c, c, timeout).Claim(context.Background(), request(8))
	if err != nil {
		t.Fatalf("Claim() error = %v", err)
	}
	if got.Replica != 0 || got.WorkerID != 0 {
		t.Errorf("Claim() = replica %d ID %d, want replica 0 ID 0", got.Replica, got.WorkerID)
	}
	stored := storedSlices(t, c)
	if len(stored) != 1 || stored[0].Spec.Hosts != 8 || len(stored[0].Status.Claims) != 1 || stored[0].Status.Claims[0].Token != got.Token {
		t.Errorf("stored slices = %+v, want one 8-host slice holding only the new claim", stored)
	}
}

// TestClaimWithTheCallersToken: a claim carries the token its caller chose, and a claim whose
// token another replica already committed (a forward whose answer was lost, claimed again
// locally on a stale cache) gets that claim back instead of a second ID.
func TestClaimWithTheCallersToken(t *testing.T) {
	cases := []struct {
		name      string
		committed bool // the live slice already holds token "t" at ID 1
		want      Assignment
		wantHeld  []tpuv1alpha1.WorkerClaim
	}{
		{
			name:     "a new claim takes the caller's token",
			want:     Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 1, Token: "t"},
			wantHeld: []tpuv1alpha1.WorkerClaim{claim(0, "a"), claim(1, "t")},
		},
		{
			name:      "a token already committed elsewhere gets its claim back",
			committed: true,
			want:      Assignment{SliceName: sliceName(0), Replica: 0, WorkerID: 1, Token: "t"},
			wantHeld:  []tpuv1alpha1.WorkerClaim{claim(0, "a"), claim(1, "t")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cache := newClient(t, interceptor.Funcs{}, existingSlice(0, clusterUID).Claim(0, "a", "", "").Obj())
			live := newClient(t, interceptor.Funcs{}, existingSlice(0, clusterUID).Claim(0, "a", "", "").Obj())
			if tc.committed {
				updateStatus(t, live, existingSlice(0, clusterUID).Claim(0, "a", "", "").Claim(1, "t", "", "").Obj())
			}
			a := newAllocator(staleCache(live, cache), live, timeout)
			req := request(4)
			req.Claim.Token = "t"
			got, err := a.Claim(t.Context(), req)
			if err != nil {
				t.Fatalf("Claim() error: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Claim() (-want,+got):\n%s", diff)
			}
			stored := storedSlices(t, live)
			if len(stored) != 1 {
				t.Fatalf("stored slices = %d, want 1", len(stored))
			}
			if diff := cmp.Diff(tc.wantHeld, []tpuv1alpha1.WorkerClaim(stored[0].Status.Claims)); diff != "" {
				t.Errorf("claims held (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestClaimPlansOnItsOwnWrites: claims that follow one another in one process plan on what the
// process itself last wrote while the cache has not seen it yet, instead of losing a conflict to
// their own write. A cache that never catches up makes every later claim depend on it.
func TestClaimPlansOnItsOwnWrites(t *testing.T) {
	cases := []struct {
		name     string
		existing []client.Object
		// seesCreates: the cache sees the slice's create, not the status updates.
		seesCreates bool
	}{
		{name: "the first claim creates the slice"},
		{name: "the cache sees the create but not the first claim", seesCreates: true},
		{name: "the slice exists", existing: []client.Object{existingSlice(0, clusterUID).Obj()}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cache := newClient(t, interceptor.Funcs{}, tc.existing...)
			live := newClient(t, interceptor.Funcs{}, tc.existing...)
			c := staleCache(live, cache)
			if tc.seesCreates {
				// The cache lists the slice as its create left it, resourceVersion included.
				var created *tpuv1alpha1.TPUSliceAssignment
				c = interceptor.NewClient(live, interceptor.Funcs{
					Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
						if err := c.Create(ctx, obj, opts...); err != nil {
							return err
						}
						created = obj.(*tpuv1alpha1.TPUSliceAssignment).DeepCopy()
						return nil
					},
					List: func(_ context.Context, _ client.WithWatch, list client.ObjectList, _ ...client.ListOption) error {
						l := list.(*tpuv1alpha1.TPUSliceAssignmentList)
						l.Items = nil
						if created != nil {
							l.Items = append(l.Items, *created.DeepCopy())
						}
						return nil
					},
				})
			}
			a := newAllocator(c, live, timeout)
			ids := make([]int32, 0, 4)
			for range 4 {
				got, err := a.Claim(t.Context(), request(4))
				if err != nil {
					t.Fatalf("Claim() error: %v", err)
				}
				ids = append(ids, got.WorkerID)
			}
			if diff := cmp.Diff([]int32{0, 1, 2, 3}, ids); diff != "" {
				t.Errorf("worker IDs (-want,+got):\n%s", diff)
			}
			if got := countsOf(a).lostWrites; got != 0 {
				t.Errorf("lost writes = %d, want 0: a claim lost a conflict to this process's own write", got)
			}
			if got := countsOf(a).attempts; got != 4 {
				t.Errorf("claim attempts = %d, want 4 (one per claim)", got)
			}
		})
	}
}

// TestClaimOwnWritesAreNotTrusted: when another writer changed the slice after this process's
// write, the overlay is wrong, the write loses its resourceVersion check, and the claim is planned
// again on a live read: no ID is handed out twice.
func TestClaimOwnWritesAreNotTrusted(t *testing.T) {
	cache := newClient(t, interceptor.Funcs{})
	live := newClient(t, interceptor.Funcs{})
	a := newAllocator(staleCache(live, cache), live, timeout)
	first, err := a.Claim(t.Context(), request(4))
	if err != nil {
		t.Fatalf("Claim() error: %v", err)
	}
	// Another replica claims ID 1 on top of this process's write.
	var slice tpuv1alpha1.TPUSliceAssignment
	if err := live.Get(t.Context(), client.ObjectKey{Namespace: testNS, Name: sliceName(0)}, &slice); err != nil {
		t.Fatal(err)
	}
	slice.Status.Claims = append(slice.Status.Claims, claim(1, "other"))
	if err := live.Status().Update(t.Context(), &slice); err != nil {
		t.Fatal(err)
	}
	second, err := a.Claim(t.Context(), request(4))
	if err != nil {
		t.Fatalf("Claim() error: %v", err)
	}
	if first.WorkerID != 0 || second.WorkerID != 2 {
		t.Errorf("worker IDs = %d, %d; want 0, 2 (1 is the other replica's)", first.WorkerID, second.WorkerID)
	}
	if got := countsOf(a).lostWrites; got != 1 {
		t.Errorf("lost writes = %d, want 1 (the write planned on the overlay)", got)
	}
}

// TestClaimKeepsHealth: the allocator's resourceVersion-checked writes of the whole status change
// the claims and the count only; the hosts and conditions the reconciler wrote (docs/spec.md §11)
// are carried over as stored, whether the claim takes a free ID or one whose Pod is gone.
func TestClaimKeepsHealth(t *testing.T) {
	hosts := tpuv1alpha1.HostList{{WorkerID: 0, Node: "n0", Domain: "pool-a", Ready: true}, {WorkerID: 1, Node: "n1", Domain: "pool-b"}}
	conds := []metav1.Condition{
		{Type: tpuv1alpha1.ConditionPlaced, Status: metav1.ConditionFalse, Reason: tpuv1alpha1.ReasonSplitDomains, Message: "hosts 0 on pool-a, 1 on pool-b", LastTransitionTime: metav1.NewTime(earlier)},
		{Type: tpuv1alpha1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: tpuv1alpha1.ReasonNodeNotReady, Message: "node not Ready: host 1 (n1)", LastTransitionTime: metav1.NewTime(earlier)},
	}
	cases := map[string]struct {
		slice  *testutil.SliceWrapper
		pods   []client.Object
		wantID int32
	}{
		"a free ID":                 {slice: existingSlice(0, clusterUID).Claim(0, "t-w-0-0", "w-0-0", "uid-w-0-0").Claim(1, "t-w-0-1", "w-0-1", "uid-w-0-1"), pods: livePods(0), wantID: 2},
		"the ID of a Pod that went": {slice: fullSlice(0), pods: livePods(0, 3), wantID: 3},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := tc.slice.Obj()
			s.Status.Hosts, s.Status.Conditions = hosts, conds
			c := newClient(t, interceptor.Funcs{}, append(tc.pods, s)...)
			asg, err := newAllocator(c, c, timeout).Claim(t.Context(), request(4))
			if err != nil {
				t.Fatal(err)
			}
			if asg.WorkerID != tc.wantID {
				t.Errorf("claimed worker ID %d, want %d", asg.WorkerID, tc.wantID)
			}
			stored := storedSlices(t, c)[0]
			if diff := cmp.Diff(hosts.String(), stored.Status.Hosts.String()); diff != "" {
				t.Errorf("status.hosts after the claim (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(conds, stored.Status.Conditions, cmpopts.EquateApproxTime(time.Second)); diff != "" {
				t.Errorf("conditions after the claim (-want,+got):\n%s", diff)
			}
		})
	}
}
