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
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	dto "github.com/prometheus/client_model/go"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	podidentity "github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

const (
	testNS      = "team-a"
	clusterName = "rc"
	clusterUID  = types.UID("rc-uid-2")
	// oldUID is the UID of a deleted RayCluster of the same name.
	oldUID = types.UID("rc-uid-1")
	group  = "tpu"
	v6e    = "tpu-v6e-slice"
	v7x    = "tpu7x"
	// headless is the subdomain of cluster "rc": KubeRay's headless worker Service.
	headless = "rc-headless"
	// claimTimeout bounds one claim; no test expects to reach it.
	claimTimeout = 2 * time.Second
)

var (
	// longCluster is the longest RayCluster name whose "<name>-headless" subdomain (63 chars) is a
	// valid DNS label; tooLongCluster is one longer.
	longCluster    = strings.Repeat("c", 54)
	tooLongCluster = strings.Repeat("c", 55)
	// longGroup is a 60-character group name: "<group>-<replica>-<host>" exceeds 63 characters.
	longGroup = "v6e-training-workers-for-the-long-running-pretraining-job-x1"
	// longGroupHost is the shortened hostname prefix of longGroup: its first 30 characters and the
	// first 8 hex digits of SHA-256(longGroup) (docs/spec.md §4: shortened deterministically).
	longGroupHost = "v6e-training-workers-for-the-l-73348722"

	// results are the admission metric's result labels.
	results = []string{
		metrics.ResultAssigned, metrics.ResultDryRun, metrics.ResultDeniedTransient,
		metrics.ResultDeniedPermanent, metrics.ResultAlreadyAssigned, metrics.ResultNotTPUWorker,
	}

	// cmpStoredSlices compares stored slices, ignoring what the fake API server sets.
	cmpStoredSlices = cmp.Options{
		cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ResourceVersion", "CreationTimestamp", "ManagedFields"),
		cmpopts.IgnoreTypes(metav1.TypeMeta{}),
		cmpopts.EquateEmpty(),
		cmpopts.SortSlices(func(a, b tpuv1alpha1.TPUSliceAssignment) bool { return a.Name < b.Name }),
	}
)

// apiCalls counts the requests the webhook sends to the fake API server.
type apiCalls struct {
	all, writes atomic.Int64
}

func (c *apiCalls) read()  { c.all.Add(1) }
func (c *apiCalls) write() { c.all.Add(1); c.writes.Add(1) }

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, rayv1.AddToScheme, tpuv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// newClient returns a fake API server holding objs whose every request is counted in calls.
// get, when set, serves Gets instead of the fake client.
func newClient(t *testing.T, calls *apiCalls, get func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error,
	objs ...client.Object) client.Client {
	t.Helper()
	if get == nil {
		get = func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			return c.Get(ctx, key, obj, opts...)
		}
	}
	return fake.NewClientBuilder().
		WithScheme(newScheme(t)).
		WithStatusSubresource(&tpuv1alpha1.TPUSliceAssignment{}).
		WithIndex(&corev1.Pod{}, podidentity.TokenIndex, podidentity.TokenIndexValue).
		WithObjects(objs...).
		WithInterceptorFuncs(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				calls.read()
				return get(ctx, c, key, obj, opts...)
			},
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				calls.read()
				return c.List(ctx, list, opts...)
			},
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				calls.write()
				return c.Create(ctx, obj, opts...)
			},
			Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				calls.write()
				return c.Delete(ctx, obj, opts...)
			},
			DeleteAllOf: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
				calls.write()
				return c.DeleteAllOf(ctx, obj, opts...)
			},
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				calls.write()
				return c.Update(ctx, obj, opts...)
			},
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				calls.write()
				return c.Patch(ctx, obj, patch, opts...)
			},
			Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
				calls.write()
				return c.Apply(ctx, obj, opts...)
			},
			SubResourceGet: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceGetOption) error {
				calls.read()
				return c.SubResource(sub).Get(ctx, obj, subObj, opts...)
			},
			SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
				calls.write()
				return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
			},
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				calls.write()
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				calls.write()
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
			SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
				calls.write()
				return c.SubResource(sub).Apply(ctx, obj, opts...)
			},
		}).
		Build()
}

// newPodWebhook returns the Pod webhook reading from and writing to c, as cache and API server.
func newPodWebhook(c client.Client) *podWebhook {
	alloc := allocator.New(c, c, allocator.Options{Timeout: claimTimeout})
	return &podWebhook{planner: alloc, claimer: alloc}
}

// admissionContext returns the context of a Pod admission request in testNS.
func admissionContext(t *testing.T, op admissionv1.Operation, dryRun bool) context.Context {
	t.Helper()
	ctx := logf.IntoContext(t.Context(), testr.NewWithOptions(t, testr.Options{Verbosity: 1}))
	return admission.NewContextWithRequest(ctx, admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: op, Namespace: testNS, DryRun: ptr.To(dryRun),
	}})
}

// admitWorkers admits, one after the other, a worker Pod of each group of rc in groups (KubeRay
// shape, without index labels), as Pods created before the Pod under test.
func admitWorkers(t *testing.T, w *podWebhook, rc *rayv1.RayCluster, groups []string) {
	t.Helper()
	for i, g := range groups {
		if err := w.Default(admissionContext(t, admissionv1.Create, false), testutil.WorkerPodFor(rc, g).Obj()); err != nil {
			t.Fatalf("Admitting earlier Pod %d of group %s: %v", i, g, err)
		}
	}
}

// cluster returns RayCluster "rc" of the current generation, without worker groups.
func cluster() *testutil.RayClusterWrapper {
	return testutil.MakeRayCluster(clusterName, testNS).UID(clusterUID)
}

// storedSlice returns a TPUSliceAssignment as the webhook stores it for replica of group "tpu" of
// cluster "rc" (findable by its labels), of a slice of 4 hosts.
func storedSlice(replica int32) *testutil.SliceWrapper {
	return testutil.MakeSlice(naming.SliceName(clusterName, group, replica), testNS, clusterName, clusterUID, group, replica, 4).
		SelectorLabels()
}

// fullSlice is a slice of 4 hosts of group "tpu" whose IDs all hold pending claims.
func fullSlice(replica int32) *tpuv1alpha1.TPUSliceAssignment {
	s := storedSlice(replica)
	for id := range int32(4) {
		s.Claim(id, fmt.Sprintf("pending-%d-%d", replica, id), "", "")
	}
	return s.Obj()
}

func listSlices(t *testing.T, c client.Client) []tpuv1alpha1.TPUSliceAssignment {
	t.Helper()
	var list tpuv1alpha1.TPUSliceAssignmentList
	if err := c.List(t.Context(), &list, client.InNamespace(testNS)); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func objects(rc *rayv1.RayCluster, slices []*tpuv1alpha1.TPUSliceAssignment, pods []*corev1.Pod) []client.Object {
	var objs []client.Object
	if rc != nil {
		objs = append(objs, rc.DeepCopy())
	}
	for _, s := range slices {
		objs = append(objs, s.DeepCopy())
	}
	for _, p := range pods {
		objs = append(objs, p.DeepCopy())
	}
	return objs
}

// admissionCounts returns the admission metric by result. (It reads the counters with Write:
// prometheus/testutil.ToFloat64 would need github.com/kylelemons/godebug added to go.mod.)
func admissionCounts(t *testing.T) map[string]float64 {
	t.Helper()
	out := make(map[string]float64, len(results))
	for _, r := range results {
		var m dto.Metric
		if err := metrics.Admissions.WithLabelValues(r).Write(&m); err != nil {
			t.Fatal(err)
		}
		out[r] = m.GetCounter().GetValue()
	}
	return out
}

// checkAdmissionCounted checks that exactly one admission, with result want, was counted since before.
func checkAdmissionCounted(t *testing.T, before map[string]float64, want string) {
	t.Helper()
	after := admissionCounts(t)
	for _, r := range results {
		wantDelta := 0.0
		if r == want {
			wantDelta = 1
		}
		if d := after[r] - before[r]; d != wantDelta {
			t.Errorf("Admissions{result=%q} grew by %v, want %v", r, d, wantDelta)
		}
	}
}

// identity is what a test expects the webhook to give a Pod (docs/spec.md §4).
type identity struct {
	// replica and workerID are the claimed slice and host ID.
	replica, workerID int32
	// slice is the TPUSliceAssignment name, the value of the slice label.
	slice string
	// replicaIndex is the value of the replicaIndex label read by the Ray autoscaler.
	replicaIndex string
	// env is the whole wanted env of containers, by index; other containers keep theirs.
	env map[int][]corev1.EnvVar
	// hostname, subdomain and affinity are set on multi-host Pods only.
	hostname, subdomain string
	affinity            *corev1.Affinity
}

// wantPod returns in with the identity applied as docs/spec.md §4 says, claim token token.
func wantPod(in *corev1.Pod, id identity, token string) *corev1.Pod {
	out := in.DeepCopy()
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	out.Labels["replicaIndex"] = id.replicaIndex
	out.Labels[tpuv1alpha1.SliceLabel] = id.slice
	out.Labels[tpuv1alpha1.WorkerIDLabel] = strconv.Itoa(int(id.workerID))
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[tpuv1alpha1.ClaimTokenAnnotation] = token
	for i, env := range id.env {
		out.Spec.Containers[i].Env = env
	}
	out.Spec.Hostname = id.hostname
	out.Spec.Subdomain = id.subdomain
	if id.affinity != nil {
		out.Spec.Affinity = id.affinity
	}
	return out
}

func env(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }

// ignoreTorchEnv leaves the TorchTPU variables out of whole-Pod diffs: their values are tpuenv's
// (internal/tpuenv/torch_test.go); TestPodWebhookHandsTheSliceToTpuenv checks what the webhook
// hands it.
var ignoreTorchEnv = cmpopts.IgnoreSliceElements(func(e corev1.EnvVar) bool { return strings.HasPrefix(e.Name, "TORCH_TPU_") })

// withDevicePlugin returns vars followed by the TPU device plugin variables the webhook appends
// last to every TPU container whose user did not set them.
func withDevicePlugin(vars ...corev1.EnvVar) []corev1.EnvVar {
	return append(vars,
		corev1.EnvVar{Name: "TPU_DEVICE_PLUGIN_HOST_IP", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.hostIP"},
		}},
		env("TPU_DEVICE_PLUGIN_ADDR", "$(TPU_DEVICE_PLUGIN_HOST_IP):2112"))
}

// hostnames returns the plain TPU_WORKER_HOSTNAMES of a replica of 4 hosts whose hostnames need no
// shortening.
func hostnames(group string, replica int, subdomain string) string {
	names := make([]string, 0, 4)
	for h := range 4 {
		names = append(names, fmt.Sprintf("%s-%d-%d.%s", group, replica, h, subdomain))
	}
	return strings.Join(names, ",")
}

// sliceAffinity returns user's affinity (or none) with the required terms of docs/spec.md §4 appended: with
// the Pods of the slice on one node pool, and away from node pools of any other slice.
func sliceAffinity(slice string, user *corev1.Affinity) *corev1.Affinity {
	a := &corev1.Affinity{}
	if user != nil {
		a = user.DeepCopy()
	}
	if a.PodAffinity == nil {
		a.PodAffinity = &corev1.PodAffinity{}
	}
	a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution,
		corev1.PodAffinityTerm{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tpu.ray.io/slice": slice}},
			TopologyKey:   "cloud.google.com/gke-nodepool",
		})
	if a.PodAntiAffinity == nil {
		a.PodAntiAffinity = &corev1.PodAntiAffinity{}
	}
	a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution,
		corev1.PodAffinityTerm{
			LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "tpu.ray.io/slice", Operator: metav1.LabelSelectorOpExists},
				{Key: "tpu.ray.io/slice", Operator: metav1.LabelSelectorOpNotIn, Values: []string{slice}},
			}},
			TopologyKey:       "cloud.google.com/gke-nodepool",
			NamespaceSelector: &metav1.LabelSelector{},
		})
	return a
}

// userAffinity is a user's affinity: a node affinity, a required pod affinity and a preferred
// anti-affinity, all of which the webhook must keep.
var userAffinity = &corev1.Affinity{
	NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "cloud.google.com/gke-spot", Operator: corev1.NodeSelectorOpDoesNotExist},
		}}},
	}},
	PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "dataset-cache"}},
		TopologyKey:   "topology.kubernetes.io/zone",
	}}},
	PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
		Weight: 10,
		PodAffinityTerm: corev1.PodAffinityTerm{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "noisy"}},
			TopologyKey:   "kubernetes.io/hostname",
		},
	}}},
}

// checkClaimed checks that the stored slice of id holds exactly one claim with token, on id's
// worker ID, that no ID of that slice is claimed twice, and that the slice is of the current generation.
func checkClaimed(t *testing.T, c client.Client, id identity, token string) {
	t.Helper()
	var slice tpuv1alpha1.TPUSliceAssignment
	if err := c.Get(t.Context(), types.NamespacedName{Namespace: testNS, Name: id.slice}, &slice); err != nil {
		t.Fatalf("Reading the claimed slice: %v", err)
	}
	if slice.Spec.ReplicaIndex != id.replica || slice.Spec.RayClusterUID != clusterUID {
		t.Errorf("Slice %s has replica %d of cluster UID %s, want replica %d of %s",
			slice.Name, slice.Spec.ReplicaIndex, slice.Spec.RayClusterUID, id.replica, clusterUID)
	}
	var withToken []int32
	seen := map[int32]bool{}
	for _, cl := range slice.Status.Claims {
		if cl.Token == token {
			withToken = append(withToken, cl.WorkerID)
		}
		if seen[cl.WorkerID] {
			t.Errorf("Slice %s claims worker ID %d twice: %+v", slice.Name, cl.WorkerID, slice.Status.Claims)
		}
		seen[cl.WorkerID] = true
	}
	if diff := cmp.Diff([]int32{id.workerID}, withToken); diff != "" {
		t.Errorf("Worker IDs claimed with the Pod's token in slice %s (-want +got):\n%s", slice.Name, diff)
	}
}

// TestPodWebhookAssigns admits a TPU worker Pod and compares the whole mutated Pod.
func TestPodWebhookAssigns(t *testing.T) {
	hosts0 := hostnames(group, 0, headless)
	hosts1 := hostnames(group, 1, headless)
	slice0 := naming.SliceName(clusterName, group, 0)
	slice1 := naming.SliceName(clusterName, group, 1)
	singleHost := func(replicas int32) *rayv1.RayCluster {
		return cluster().TPUGroup(group, v6e, "2x2", 4, 1, replicas).Obj()
	}
	// multiHost has slices of 4 hosts: v6e 4x4, 4 chips per Pod.
	multiHost := func(replicas int32) *rayv1.RayCluster {
		return cluster().TPUGroup(group, v6e, "4x4", 4, 4, replicas).Obj()
	}
	// twoContainersV7x has slices of 2 hosts of two 2-chip containers: v7x 2x2x2.
	twoContainersV7x := func(replicas int32) *rayv1.RayCluster {
		return cluster().TPUGroup(group, v7x, "2x2x2", 2, 2, replicas).GroupContainer(0, "ray-worker-1", 2).Obj()
	}
	times := func(n int, g string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = g
		}
		return out
	}

	cases := map[string]struct {
		rc *rayv1.RayCluster
		// slices and pods are stored before the test.
		slices []*tpuv1alpha1.TPUSliceAssignment
		pods   []*corev1.Pod
		// admitted are the groups of the worker Pods admitted, in order, before pod.
		admitted []string
		// pod is the Pod under test; nil means a worker Pod of group "tpu" as KubeRay creates it.
		pod  func(rc *rayv1.RayCluster) *corev1.Pod
		want identity
	}{
		"single-host: the first Pod takes ID 0 of replica 0, without hostname or affinity": {
			rc: singleHost(2),
			want: identity{
				slice: slice0, replicaIndex: "tpu-0",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(env("TPU_WORKER_ID", "0"), env("TPU_NAME", "tpu-0"))},
			},
		},
		"single-host: each Pod is its own slice, so the second Pod takes replica 1": {
			rc:       singleHost(2),
			admitted: times(1, group),
			want: identity{
				replica: 1, slice: slice1, replicaIndex: "tpu-1",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(env("TPU_WORKER_ID", "0"), env("TPU_NAME", "tpu-1"))},
			},
		},
		"single-host: the third Pod of three replicas takes replica 2": {
			rc:       singleHost(3),
			admitted: times(2, group),
			want: identity{
				replica: 2, slice: naming.SliceName(clusterName, group, 2), replicaIndex: "tpu-2",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(env("TPU_WORKER_ID", "0"), env("TPU_NAME", "tpu-2"))},
			},
		},
		"multi-host: the first Pod of a slice takes ID 0 with hostname, subdomain, hostnames and slice affinity": {
			rc: multiHost(2),
			want: identity{
				slice: slice0, replicaIndex: "tpu-0",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(
					env("TPU_WORKER_ID", "0"), env("TPU_NAME", "tpu-0"), env("TPU_WORKER_HOSTNAMES", hosts0))},
				hostname: "tpu-0-0", subdomain: headless, affinity: sliceAffinity(slice0, nil),
			},
		},
		"multi-host: the second Pod of a slice takes ID 1": {
			rc:       multiHost(2),
			admitted: times(1, group),
			want: identity{
				workerID: 1, slice: slice0, replicaIndex: "tpu-0",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(
					env("TPU_WORKER_ID", "1"), env("TPU_NAME", "tpu-0"), env("TPU_WORKER_HOSTNAMES", hosts0))},
				hostname: "tpu-0-1", subdomain: headless, affinity: sliceAffinity(slice0, nil),
			},
		},
		"multi-host: the last Pod of a slice takes ID 3": {
			rc:       multiHost(2),
			admitted: times(3, group),
			want: identity{
				workerID: 3, slice: slice0, replicaIndex: "tpu-0",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(
					env("TPU_WORKER_ID", "3"), env("TPU_NAME", "tpu-0"), env("TPU_WORKER_HOSTNAMES", hosts0))},
				hostname: "tpu-0-3", subdomain: headless, affinity: sliceAffinity(slice0, nil),
			},
		},
		"multi-host: once slice 0 is full the next Pod takes ID 0 of replica 1": {
			rc:       multiHost(2),
			admitted: times(4, group),
			want: identity{
				replica: 1, slice: slice1, replicaIndex: "tpu-1",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(
					env("TPU_WORKER_ID", "0"), env("TPU_NAME", "tpu-1"), env("TPU_WORKER_HOSTNAMES", hosts1))},
				hostname: "tpu-1-0", subdomain: headless, affinity: sliceAffinity(slice1, nil),
			},
		},
		"multi-host: a hole is refilled: with IDs 0 and 2 claimed the next Pod takes ID 1": {
			rc: multiHost(1),
			slices: []*tpuv1alpha1.TPUSliceAssignment{storedSlice(0).
				Claim(0, "token-0", "", "").Claim(2, "token-2", "", "").Obj()},
			want: identity{
				workerID: 1, slice: slice0, replicaIndex: "tpu-0",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(
					env("TPU_WORKER_ID", "1"), env("TPU_NAME", "tpu-0"), env("TPU_WORKER_HOSTNAMES", hosts0))},
				hostname: "tpu-0-1", subdomain: headless, affinity: sliceAffinity(slice0, nil),
			},
		},
		"multi-host: a missing replica is refilled: with slices 0 and 2 of 3 full the next Pod takes replica 1": {
			rc:     multiHost(3),
			slices: []*tpuv1alpha1.TPUSliceAssignment{fullSlice(0), fullSlice(2)},
			want: identity{
				replica: 1, slice: slice1, replicaIndex: "tpu-1",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(
					env("TPU_WORKER_ID", "0"), env("TPU_NAME", "tpu-1"), env("TPU_WORKER_HOSTNAMES", hosts1))},
				hostname: "tpu-1-0", subdomain: headless, affinity: sliceAffinity(slice1, nil),
			},
		},
		"multi-host: in a full slice, the ID of a claim whose Pod is gone is taken over at once": {
			rc: multiHost(1),
			slices: []*tpuv1alpha1.TPUSliceAssignment{storedSlice(0).
				Claim(0, "token-0", "w-0", "uid-0").
				Claim(1, "token-1", "w-1", "uid-1").
				Claim(2, "token-2", "w-2", "uid-2").
				Claim(3, "token-3", "w-3", "uid-3").Obj()},
			// w-2 is gone: it is not stored.
			pods: []*corev1.Pod{
				testutil.MakePod("w-0", testNS).UID("uid-0").Obj(),
				testutil.MakePod("w-1", testNS).UID("uid-1").Obj(),
				testutil.MakePod("w-3", testNS).UID("uid-3").Obj(),
			},
			want: identity{
				workerID: 2, slice: slice0, replicaIndex: "tpu-0",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(
					env("TPU_WORKER_ID", "2"), env("TPU_NAME", "tpu-0"), env("TPU_WORKER_HOSTNAMES", hosts0))},
				hostname: "tpu-0-2", subdomain: headless, affinity: sliceAffinity(slice0, nil),
			},
		},
		"multi-host: a slice left by a deleted RayCluster of the same name is not honored": {
			rc: multiHost(1),
			slices: []*tpuv1alpha1.TPUSliceAssignment{testutil.MakeSlice(slice0, testNS, clusterName, oldUID, group, 0, 4).
				SelectorLabels().Claim(0, "old-0", "", "").Claim(1, "old-1", "", "").Obj()},
			want: identity{
				slice: slice0, replicaIndex: "tpu-0",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(
					env("TPU_WORKER_ID", "0"), env("TPU_NAME", "tpu-0"), env("TPU_WORKER_HOSTNAMES", hosts0))},
				hostname: "tpu-0-0", subdomain: headless, affinity: sliceAffinity(slice0, nil),
			},
		},
		"two worker groups of one cluster are numbered independently": {
			rc: cluster().TPUGroup("tpu-a", v6e, "4x4", 4, 4, 1).TPUGroup("tpu-b", v6e, "4x4", 4, 4, 1).Obj(),
			// tpu-a holds IDs 0 and 1, tpu-b holds ID 0.
			admitted: []string{"tpu-a", "tpu-b", "tpu-a"},
			pod: func(rc *rayv1.RayCluster) *corev1.Pod {
				return testutil.WorkerPodFor(rc, "tpu-b").Obj()
			},
			want: identity{
				workerID: 1, slice: naming.SliceName(clusterName, "tpu-b", 0), replicaIndex: "tpu-b-0",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(
					env("TPU_WORKER_ID", "1"), env("TPU_NAME", "tpu-b-0"),
					env("TPU_WORKER_HOSTNAMES", hostnames("tpu-b", 0, headless)))},
				hostname: "tpu-b-0-1", subdomain: headless,
				affinity: sliceAffinity(naming.SliceName(clusterName, "tpu-b", 0), nil),
			},
		},
		"v7x: the two TPU containers of host 1 get worker IDs 2 and 3, process ports 8471 and 8472": {
			rc:       twoContainersV7x(1),
			admitted: times(1, group),
			want: identity{
				workerID: 1, slice: slice0, replicaIndex: "tpu-0",
				env: map[int][]corev1.EnvVar{
					0: withDevicePlugin(
						env("TPU_WORKER_ID", "2"), env("TPU_NAME", "tpu-0"),
						env("TPU_WORKER_HOSTNAMES", "tpu-0-0.rc-headless,tpu-0-1.rc-headless"),
						env("TPU_PROCESS_ADDRESSES", "tpu-0-0.rc-headless:8471,tpu-0-0.rc-headless:8472,tpu-0-1.rc-headless:8471,tpu-0-1.rc-headless:8472"),
						env("TPU_PROCESS_PORT", "8471")),
					1: withDevicePlugin(
						env("TPU_WORKER_ID", "3"), env("TPU_NAME", "tpu-0"),
						env("TPU_WORKER_HOSTNAMES", "tpu-0-0.rc-headless,tpu-0-1.rc-headless"),
						env("TPU_PROCESS_ADDRESSES", "tpu-0-0.rc-headless:8471,tpu-0-0.rc-headless:8472,tpu-0-1.rc-headless:8471,tpu-0-1.rc-headless:8472"),
						env("TPU_PROCESS_PORT", "8472")),
				},
				hostname: "tpu-0-1", subdomain: headless, affinity: sliceAffinity(slice0, nil),
			},
		},
		"v7x: a sidecar without TPUs is left alone and does not count in the container numbering": {
			rc: cluster().TPUGroup(group, v7x, "2x2x2", 2, 2, 1).
				GroupContainer(0, "log-shipper", 0).GroupContainer(0, "ray-worker-1", 2).Obj(),
			want: identity{
				slice: slice0, replicaIndex: "tpu-0",
				env: map[int][]corev1.EnvVar{
					0: withDevicePlugin(
						env("TPU_WORKER_ID", "0"), env("TPU_NAME", "tpu-0"),
						env("TPU_WORKER_HOSTNAMES", "tpu-0-0.rc-headless,tpu-0-1.rc-headless"),
						env("TPU_PROCESS_ADDRESSES", "tpu-0-0.rc-headless:8471,tpu-0-0.rc-headless:8472,tpu-0-1.rc-headless:8471,tpu-0-1.rc-headless:8472"),
						env("TPU_PROCESS_PORT", "8471")),
					2: withDevicePlugin(
						env("TPU_WORKER_ID", "1"), env("TPU_NAME", "tpu-0"),
						env("TPU_WORKER_HOSTNAMES", "tpu-0-0.rc-headless,tpu-0-1.rc-headless"),
						env("TPU_PROCESS_ADDRESSES", "tpu-0-0.rc-headless:8471,tpu-0-0.rc-headless:8472,tpu-0-1.rc-headless:8471,tpu-0-1.rc-headless:8472"),
						env("TPU_PROCESS_PORT", "8472")),
				},
				hostname: "tpu-0-0", subdomain: headless, affinity: sliceAffinity(slice0, nil),
			},
		},
		"multislice: a container defining MEGASCALE_NUM_SLICES gets the slice ID, coordinator and port": {
			rc:       multiHost(2),
			admitted: times(4, group),
			pod: func(rc *rayv1.RayCluster) *corev1.Pod {
				return testutil.WorkerPodFor(rc, group).Env(0, "MEGASCALE_NUM_SLICES", "2").Obj()
			},
			want: identity{
				replica: 1, slice: slice1, replicaIndex: "tpu-1",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(
					env("MEGASCALE_NUM_SLICES", "2"),
					env("TPU_WORKER_ID", "0"), env("TPU_NAME", "tpu-1"), env("TPU_WORKER_HOSTNAMES", hosts1),
					env("MEGASCALE_SLICE_ID", "1"), env("MEGASCALE_COORDINATOR_ADDRESS", "tpu-0-0.rc-headless"),
					env("MEGASCALE_PORT", "8081"))},
				hostname: "tpu-1-0", subdomain: headless, affinity: sliceAffinity(slice1, nil),
			},
		},
		"multislice: MEGASCALE values the user set are kept, the missing one is added": {
			rc:       multiHost(2),
			admitted: times(4, group),
			pod: func(rc *rayv1.RayCluster) *corev1.Pod {
				return testutil.WorkerPodFor(rc, group).Env(0, "MEGASCALE_NUM_SLICES", "2").
					Env(0, "MEGASCALE_COORDINATOR_ADDRESS", "coordinator.example:1234").
					Env(0, "MEGASCALE_PORT", "9999").Obj()
			},
			want: identity{
				replica: 1, slice: slice1, replicaIndex: "tpu-1",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(
					env("MEGASCALE_NUM_SLICES", "2"),
					env("MEGASCALE_COORDINATOR_ADDRESS", "coordinator.example:1234"), env("MEGASCALE_PORT", "9999"),
					env("TPU_WORKER_ID", "0"), env("TPU_NAME", "tpu-1"), env("TPU_WORKER_HOSTNAMES", hosts1),
					env("MEGASCALE_SLICE_ID", "1"))},
				hostname: "tpu-1-0", subdomain: headless, affinity: sliceAffinity(slice1, nil),
			},
		},
		"multislice v7x: the coordinator carries port 8081 and each container its own MEGASCALE_PORT": {
			rc:       twoContainersV7x(2),
			admitted: times(2, group),
			pod: func(rc *rayv1.RayCluster) *corev1.Pod {
				return testutil.WorkerPodFor(rc, group).Env(0, "MEGASCALE_NUM_SLICES", "2").Env(1, "MEGASCALE_NUM_SLICES", "2").Obj()
			},
			want: identity{
				replica: 1, slice: slice1, replicaIndex: "tpu-1",
				env: map[int][]corev1.EnvVar{
					0: withDevicePlugin(
						env("MEGASCALE_NUM_SLICES", "2"),
						env("TPU_WORKER_ID", "0"), env("TPU_NAME", "tpu-1"),
						env("TPU_WORKER_HOSTNAMES", "tpu-1-0.rc-headless,tpu-1-1.rc-headless"),
						env("TPU_PROCESS_ADDRESSES", "tpu-1-0.rc-headless:8471,tpu-1-0.rc-headless:8472,tpu-1-1.rc-headless:8471,tpu-1-1.rc-headless:8472"),
						env("TPU_PROCESS_PORT", "8471"),
						env("MEGASCALE_SLICE_ID", "1"), env("MEGASCALE_COORDINATOR_ADDRESS", "tpu-0-0.rc-headless:8081"),
						env("MEGASCALE_PORT", "8081")),
					1: withDevicePlugin(
						env("MEGASCALE_NUM_SLICES", "2"),
						env("TPU_WORKER_ID", "1"), env("TPU_NAME", "tpu-1"),
						env("TPU_WORKER_HOSTNAMES", "tpu-1-0.rc-headless,tpu-1-1.rc-headless"),
						env("TPU_PROCESS_ADDRESSES", "tpu-1-0.rc-headless:8471,tpu-1-0.rc-headless:8472,tpu-1-1.rc-headless:8471,tpu-1-1.rc-headless:8472"),
						env("TPU_PROCESS_PORT", "8472"),
						env("MEGASCALE_SLICE_ID", "1"), env("MEGASCALE_COORDINATOR_ADDRESS", "tpu-0-0.rc-headless:8081"),
						env("MEGASCALE_PORT", "8082")),
				},
				hostname: "tpu-1-0", subdomain: headless, affinity: sliceAffinity(slice1, nil),
			},
		},
		"user-set TPU_WORKER_ID, TPU_NAME and TPU_WORKER_HOSTNAMES are replaced in place, duplicates removed": {
			rc:       multiHost(1),
			admitted: times(1, group),
			pod: func(rc *rayv1.RayCluster) *corev1.Pod {
				return testutil.WorkerPodFor(rc, group).
					Env(0, "FOO", "bar").
					Env(0, "TPU_WORKER_ID", "7").
					Env(0, "TPU_NAME", "my-slice").
					Env(0, "BAR", "baz").
					EnvFieldRef(0, "TPU_WORKER_ID", "metadata.name").
					Env(0, "TPU_WORKER_HOSTNAMES", "a,b,c,d").
					Env(0, "TPU_NAME", "again").Obj()
			},
			want: identity{
				workerID: 1, slice: slice0, replicaIndex: "tpu-0",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(
					env("FOO", "bar"),
					env("TPU_WORKER_ID", "1"),
					env("TPU_NAME", "tpu-0"),
					env("BAR", "baz"),
					env("TPU_WORKER_HOSTNAMES", hosts0))},
				hostname: "tpu-0-1", subdomain: headless, affinity: sliceAffinity(slice0, nil),
			},
		},
		"a user's TPU_WORKER_ID from valueFrom becomes our value in place": {
			rc: singleHost(1),
			pod: func(rc *rayv1.RayCluster) *corev1.Pod {
				return testutil.WorkerPodFor(rc, group).
					EnvFieldRef(0, "TPU_WORKER_ID", "metadata.labels['worker']").Env(0, "FOO", "bar").Obj()
			},
			want: identity{
				slice: slice0, replicaIndex: "tpu-0",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(
					env("TPU_WORKER_ID", "0"), env("FOO", "bar"), env("TPU_NAME", "tpu-0"))},
			},
		},
		"user-set device plugin variables are kept and the host IP goes before the address": {
			rc: singleHost(1),
			pod: func(rc *rayv1.RayCluster) *corev1.Pod {
				return testutil.WorkerPodFor(rc, group).Env(0, "TPU_DEVICE_PLUGIN_ADDR", "$(TPU_DEVICE_PLUGIN_HOST_IP):9999").Obj()
			},
			want: identity{
				slice: slice0, replicaIndex: "tpu-0",
				env: map[int][]corev1.EnvVar{0: {
					{Name: "TPU_DEVICE_PLUGIN_HOST_IP", ValueFrom: &corev1.EnvVarSource{
						FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.hostIP"},
					}},
					env("TPU_DEVICE_PLUGIN_ADDR", "$(TPU_DEVICE_PLUGIN_HOST_IP):9999"),
					env("TPU_WORKER_ID", "0"), env("TPU_NAME", "tpu-0"),
				}},
			},
		},
		"the user's affinity is kept and the slice terms are appended": {
			rc: multiHost(1),
			pod: func(rc *rayv1.RayCluster) *corev1.Pod {
				return testutil.WorkerPodFor(rc, group).Affinity(userAffinity).Obj()
			},
			want: identity{
				slice: slice0, replicaIndex: "tpu-0",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(
					env("TPU_WORKER_ID", "0"), env("TPU_NAME", "tpu-0"), env("TPU_WORKER_HOSTNAMES", hosts0))},
				hostname: "tpu-0-0", subdomain: headless, affinity: sliceAffinity(slice0, userAffinity),
			},
		},
		"a 54-character cluster name gives a 63-character subdomain, still valid": {
			rc: testutil.MakeRayCluster(longCluster, testNS).UID(clusterUID).TPUGroup(group, v6e, "4x4", 4, 4, 1).Obj(),
			want: identity{
				slice: naming.SliceName(longCluster, group, 0), replicaIndex: "tpu-0",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(
					env("TPU_WORKER_ID", "0"), env("TPU_NAME", "tpu-0"),
					env("TPU_WORKER_HOSTNAMES", hostnames(group, 0, longCluster+"-headless")))},
				hostname: "tpu-0-0", subdomain: longCluster + "-headless",
				affinity: sliceAffinity(naming.SliceName(longCluster, group, 0), nil),
			},
		},
		"a 60-character group name gets shortened hostnames, identical in TPU_WORKER_HOSTNAMES": {
			rc:       cluster().TPUGroup(longGroup, v6e, "4x4", 4, 4, 1).Obj(),
			admitted: times(1, longGroup),
			pod: func(rc *rayv1.RayCluster) *corev1.Pod {
				return testutil.WorkerPodFor(rc, longGroup).Obj()
			},
			want: identity{
				workerID: 1, slice: naming.SliceName(clusterName, longGroup, 0), replicaIndex: longGroup + "-0",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(
					env("TPU_WORKER_ID", "1"), env("TPU_NAME", longGroup+"-0"),
					env("TPU_WORKER_HOSTNAMES", hostnames(longGroupHost, 0, headless)))},
				hostname: longGroupHost + "-0-1", subdomain: headless,
				affinity: sliceAffinity(naming.SliceName(clusterName, longGroup, 0), nil),
			},
		},
		"KubeRay's labels place a multi-host Pod exactly at their replica and host": {
			rc: multiHost(2),
			pod: func(rc *rayv1.RayCluster) *corev1.Pod {
				return testutil.WorkerPodFor(rc, group).KubeRayIndexes(1, "tpu-x7k2p", 2).Obj()
			},
			want: identity{
				replica: 1, workerID: 2, slice: slice1, replicaIndex: "tpu-1",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(
					env("TPU_WORKER_ID", "2"), env("TPU_NAME", "tpu-1"), env("TPU_WORKER_HOSTNAMES", hosts1))},
				hostname: "tpu-1-2", subdomain: headless, affinity: sliceAffinity(slice1, nil),
			},
		},
		"KubeRay's replica-index label alone places a single-host Pod at ID 0 of that replica": {
			rc: singleHost(3),
			pod: func(rc *rayv1.RayCluster) *corev1.Pod {
				return testutil.WorkerPodFor(rc, group).KubeRayIndexes(2, "", -1).Obj()
			},
			want: identity{
				replica: 2, slice: naming.SliceName(clusterName, group, 2), replicaIndex: "tpu-2",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(env("TPU_WORKER_ID", "0"), env("TPU_NAME", "tpu-2"))},
			},
		},
		"KubeRay's labels replace the claims of a slice recorded under another replica name once its Pods are gone": {
			rc: multiHost(1),
			slices: []*tpuv1alpha1.TPUSliceAssignment{storedSlice(0).ReplicaName("tpu-old01").
				Claim(2, "old-2", "old-pod-2", "old-uid-2").Obj()},
			pod: func(rc *rayv1.RayCluster) *corev1.Pod {
				return testutil.WorkerPodFor(rc, group).KubeRayIndexes(0, "tpu-new02", 2).Obj()
			},
			want: identity{
				workerID: 2, slice: slice0, replicaIndex: "tpu-0",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(
					env("TPU_WORKER_ID", "2"), env("TPU_NAME", "tpu-0"), env("TPU_WORKER_HOSTNAMES", hosts0))},
				hostname: "tpu-0-2", subdomain: headless, affinity: sliceAffinity(slice0, nil),
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var calls apiCalls
			c := newClient(t, &calls, nil, objects(tc.rc, tc.slices, tc.pods)...)
			w := newPodWebhook(c)
			admitWorkers(t, w, tc.rc, tc.admitted)
			var in *corev1.Pod
			if tc.pod != nil {
				in = tc.pod(tc.rc)
			} else {
				in = testutil.WorkerPodFor(tc.rc, group).Obj()
			}
			got := in.DeepCopy()
			before := admissionCounts(t)

			if err := w.Default(admissionContext(t, admissionv1.Create, false), got); err != nil {
				t.Fatalf("Default() = %v, want the Pod admitted", err)
			}

			checkAdmissionCounted(t, before, metrics.ResultAssigned)
			token := got.Annotations[tpuv1alpha1.ClaimTokenAnnotation]
			if token == "" {
				t.Fatalf("The Pod has no claim token annotation %s", tpuv1alpha1.ClaimTokenAnnotation)
			}
			checkClaimed(t, c, tc.want, token)
			if diff := cmp.Diff(wantPod(in, tc.want, token), got, ignoreTorchEnv); diff != "" {
				t.Errorf("Mutated Pod (-want +got):\n%s", diff)
			}
			if got.Spec.Hostname != "" {
				if problems := validation.IsDNS1123Label(got.Spec.Hostname); len(problems) > 0 {
					t.Errorf("Hostname %q is not a DNS label: %v", got.Spec.Hostname, problems)
				}
			}
		})
	}
}

// TestPodWebhookDenies checks the denials: their code, their message, and that they leave no claim.
func TestPodWebhookDenies(t *testing.T) {
	tpuCluster := func() *testutil.RayClusterWrapper {
		return cluster().TPUGroup(group, v6e, "4x4", 4, 4, 1)
	}
	cases := map[string]struct {
		// rc is stored unless nil; pod is built from podRC when set, else from rc.
		rc     *rayv1.RayCluster
		podRC  *rayv1.RayCluster
		slices []*tpuv1alpha1.TPUSliceAssignment
		// pod edits the worker Pod of group "tpu" KubeRay would create.
		pod         func(p *testutil.PodWrapper) *testutil.PodWrapper
		wantCode    int32
		wantMessage string
		wantResult  string
	}{
		"a TPU worker Pod without the topology nodeSelector is denied naming the key": {
			rc:       tpuCluster().WithoutNodeSelector(0, constants.TopologyNodeSelectorKey).Obj(),
			wantCode: http.StatusForbidden,
			wantMessage: "TPU worker Pod of RayCluster rc group tpu: nodeSelector cloud.google.com/gke-tpu-topology (or, for GKE subslicing " +
				"and dynamic slicing, annotation cloud.google.com/gke-tpu-slice-topology) is required: set it to the TPU slice topology, such as 4x4 or 2x2x4",
			wantResult: metrics.ResultDeniedPermanent,
		},
		"an unparseable topology is denied": {
			rc:       tpuCluster().NodeSelector(0, constants.TopologyNodeSelectorKey, "4xfour").Obj(),
			wantCode: http.StatusForbidden,
			wantMessage: `TPU worker Pod of RayCluster rc group tpu: invalid topology "4xfour": dimension 2 "four" is not a positive decimal integer; ` +
				`want 1 to 3 positive integers separated by a lowercase "x", such as 4x4 or 2x2x4`,
			wantResult: metrics.ResultDeniedPermanent,
		},
		"a topology of the wrong dimensionality for a known accelerator is denied": {
			rc:       tpuCluster().NodeSelector(0, constants.TopologyNodeSelectorKey, "2x2x4").Obj(),
			wantCode: http.StatusForbidden,
			wantMessage: "TPU worker Pod of RayCluster rc group tpu: accelerator tpu-v6e-slice needs a 2-D topology such as 4x4, " +
				"got 2x2x4",
			wantResult: metrics.ResultDeniedPermanent,
		},
		"chips per Pod that do not divide the topology are denied with both numbers": {
			rc:          cluster().TPUGroup(group, v6e, "4x4", 3, 4, 1).Obj(),
			wantCode:    http.StatusForbidden,
			wantMessage: "TPU worker Pod of RayCluster rc group tpu: topology 4x4 has 16 chips, which is not a multiple of 3 chips per Pod",
			wantResult:  metrics.ResultDeniedPermanent,
		},
		"a multi-host cluster whose headless Service name is no DNS label is denied naming the Service": {
			rc:       testutil.MakeRayCluster(tooLongCluster, testNS).UID(clusterUID).TPUGroup(group, v6e, "4x4", 4, 4, 1).Obj(),
			wantCode: http.StatusForbidden,
			wantMessage: fmt.Sprintf("multi-host TPU worker Pod of RayCluster %s needs the headless Service %q as its subdomain, "+
				"which is not a valid DNS label (must be no more than 63 characters): shorten the RayCluster name",
				tooLongCluster, tooLongCluster+"-headless"),
			wantResult: metrics.ResultDeniedPermanent,
		},
		"a Pod whose RayCluster does not exist is denied": {
			podRC:       tpuCluster().Obj(),
			wantCode:    http.StatusForbidden,
			wantMessage: "RayCluster team-a/rc of this TPU worker Pod does not exist",
			wantResult:  metrics.ResultDeniedPermanent,
		},
		"a Pod of a worker group the RayCluster does not have is denied": {
			rc:          tpuCluster().GroupName(0, "other").Obj(),
			podRC:       tpuCluster().Obj(),
			wantCode:    http.StatusForbidden,
			wantMessage: `RayCluster rc has no worker group "tpu"`,
			wantResult:  metrics.ResultDeniedPermanent,
		},
		"a Pod owned by a deleted RayCluster of the same name is denied": {
			rc:       tpuCluster().Obj(),
			podRC:    tpuCluster().UID(oldUID).Obj(),
			wantCode: http.StatusForbidden,
			wantMessage: "the Pod's owner, RayCluster team-a/rc with UID rc-uid-1, has been deleted " +
				"(the cluster now has UID rc-uid-2): a create of the deleted generation is refused",
			wantResult: metrics.ResultDeniedPermanent,
		},
		"a KubeRay replica-index label that is not a number is denied": {
			rc: tpuCluster().Obj(),
			pod: func(p *testutil.PodWrapper) *testutil.PodWrapper {
				return p.Label(rayutils.RayWorkerReplicaIndexKey, "one")
			},
			wantCode:    http.StatusForbidden,
			wantMessage: `TPU worker Pod of RayCluster rc group tpu: label ray.io/worker-group-replica-index="one" is not a non-negative integer`,
			wantResult:  metrics.ResultDeniedPermanent,
		},
		"a KubeRay host index outside the slice is denied": {
			rc: tpuCluster().Obj(),
			pod: func(p *testutil.PodWrapper) *testutil.PodWrapper {
				return p.KubeRayIndexes(0, "tpu-x7k2p", 4)
			},
			wantCode:    http.StatusForbidden,
			wantMessage: "KubeRay labels place the Pod at replica 0, host 4, outside a slice of 4 hosts",
			wantResult:  metrics.ResultDeniedPermanent,
		},
		"every slice the group asks for full of pending claims is a transient denial": {
			rc:       tpuCluster().Obj(),
			slices:   []*tpuv1alpha1.TPUSliceAssignment{fullSlice(0)},
			wantCode: http.StatusTooManyRequests,
			wantMessage: "all 1 slices of 4 hosts the worker group asks for are fully claimed; a claim of a Pod that was just " +
				"created or deleted may still be settling; transient, the Pod's creator retries",
			wantResult: metrics.ResultDeniedTransient,
		},
		"a KubeRay-labeled ID held by a pending claim is a transient denial": {
			rc: tpuCluster().Obj(),
			slices: []*tpuv1alpha1.TPUSliceAssignment{storedSlice(0).ReplicaName("tpu-x7k2p").
				Claim(2, "token-2", "", "").Obj()},
			pod: func(p *testutil.PodWrapper) *testutil.PodWrapper {
				return p.KubeRayIndexes(0, "tpu-x7k2p", 2)
			},
			wantCode: http.StatusTooManyRequests,
			wantMessage: "worker ID 2 of replica 0 is held by another Pod (a claim whose Pod has not been seen yet); " +
				"it is released once that Pod is gone; transient, the Pod's creator retries",
			wantResult: metrics.ResultDeniedTransient,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var calls apiCalls
			c := newClient(t, &calls, nil, objects(tc.rc, tc.slices, nil)...)
			w := newPodWebhook(c)
			podRC := tc.podRC
			if podRC == nil {
				podRC = tc.rc
			}
			p := testutil.WorkerPodFor(podRC, group)
			if tc.pod != nil {
				p = tc.pod(p)
			}
			in := p.Obj()
			got := in.DeepCopy()
			slicesBefore := listSlices(t, c)
			before := admissionCounts(t)

			err := w.Default(admissionContext(t, admissionv1.Create, false), got)

			checkAdmissionCounted(t, before, tc.wantResult)
			var status *apierrors.StatusError
			if !errors.As(err, &status) {
				t.Fatalf("Default() = %v, want a denial (*apierrors.StatusError)", err)
			}
			if code := status.Status().Code; code != tc.wantCode {
				t.Errorf("Denial code = %d, want %d", code, tc.wantCode)
			}
			if diff := cmp.Diff(tc.wantMessage, status.Status().Message); diff != "" {
				t.Errorf("Denial message (-want +got):\n%s", diff)
			}
			if tc.wantCode == http.StatusTooManyRequests {
				if !strings.Contains(status.Status().Message, "transient") {
					t.Errorf("Transient denial message %q does not say it is transient", status.Status().Message)
				}
				if !apierrors.IsTooManyRequests(err) || status.Status().Details == nil || status.Status().Details.RetryAfterSeconds != 1 {
					t.Errorf("Transient denial %+v, want reason TooManyRequests and retry after 1 s", status.Status())
				}
			} else if !apierrors.IsForbidden(err) {
				t.Errorf("Permanent denial reason = %q, want Forbidden", status.Status().Reason)
			}
			if diff := cmp.Diff(in, got); diff != "" {
				t.Errorf("Denied Pod was changed (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(slicesBefore, listSlices(t, c), cmpStoredSlices); diff != "" {
				t.Errorf("Slices after the denial (-before +after):\n%s", diff)
			}
		})
	}
}

// TestPodWebhookPassesThrough checks the Pods the webhook leaves alone without an API call.
func TestPodWebhookPassesThrough(t *testing.T) {
	rc := cluster().TPUGroup(group, v6e, "4x4", 4, 4, 1).CPUGroup("cpu", 1).Obj()
	tpuWorker := func() *testutil.PodWrapper { return testutil.WorkerPodFor(rc, group) }
	cases := map[string]struct {
		pod        *corev1.Pod
		op         admissionv1.Operation
		wantResult string
	}{
		"a worker Pod without TPUs": {
			pod:        testutil.WorkerPodFor(rc, "cpu").Obj(),
			op:         admissionv1.Create,
			wantResult: metrics.ResultNotTPUWorker,
		},
		"a head Pod requesting TPUs": {
			pod:        tpuWorker().Label(rayutils.RayNodeTypeLabelKey, string(rayv1.HeadNode)).Obj(),
			op:         admissionv1.Create,
			wantResult: metrics.ResultNotTPUWorker,
		},
		"a TPU Pod without the ray.io/group label": {
			pod:        tpuWorker().WithoutLabel(rayutils.RayNodeGroupLabelKey).Obj(),
			op:         admissionv1.Create,
			wantResult: metrics.ResultNotTPUWorker,
		},
		"a TPU Pod without the ray.io/cluster label": {
			pod:        tpuWorker().WithoutLabel(rayutils.RayClusterLabelKey).Obj(),
			op:         admissionv1.Create,
			wantResult: metrics.ResultNotTPUWorker,
		},
		"a TPU Pod without the ray.io/node-type label": {
			pod:        tpuWorker().WithoutLabel(rayutils.RayNodeTypeLabelKey).Obj(),
			op:         admissionv1.Create,
			wantResult: metrics.ResultNotTPUWorker,
		},
		"a TPU worker Pod without TPU containers and without topology": {
			pod: testutil.MakeWorkerPod(testNS, clusterName, clusterUID, group).Obj(),
			op:  admissionv1.Create,
			// Not a TPU worker by docs/spec.md §1: the missing topology is not reported.
			wantResult: metrics.ResultNotTPUWorker,
		},
		"an UPDATE of a TPU worker Pod": {
			pod:        tpuWorker().Obj(),
			op:         admissionv1.Update,
			wantResult: metrics.ResultNotCreate,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var calls apiCalls
			c := newClient(t, &calls, nil, rc.DeepCopy())
			w := newPodWebhook(c)
			got := tc.pod.DeepCopy()
			before := admissionCounts(t)

			if err := w.Default(admissionContext(t, tc.op, false), got); err != nil {
				t.Fatalf("Default() = %v, want the Pod admitted", err)
			}

			checkAdmissionCounted(t, before, tc.wantResult)
			if diff := cmp.Diff(tc.pod, got); diff != "" {
				t.Errorf("Pod was changed (-want +got):\n%s", diff)
			}
			if n := calls.all.Load(); n != 0 {
				t.Errorf("The webhook made %d API calls, want none", n)
			}
		})
	}
}

// TestPodWebhookDryRun checks that a dry run mutates the Pod as a real admission would but writes nothing.
func TestPodWebhookDryRun(t *testing.T) {
	slice0 := naming.SliceName(clusterName, group, 0)
	hosts0 := hostnames(group, 0, headless)
	rc := cluster().TPUGroup(group, v6e, "4x4", 4, 4, 1).Obj()
	cases := map[string]struct {
		slices      []*tpuv1alpha1.TPUSliceAssignment
		want        *identity
		wantMessage string
		wantResult  string
	}{
		"the first Pod is planned at ID 0 and no slice is created": {
			want: &identity{
				slice: slice0, replicaIndex: "tpu-0",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(
					env("TPU_WORKER_ID", "0"), env("TPU_NAME", "tpu-0"), env("TPU_WORKER_HOSTNAMES", hosts0))},
				hostname: "tpu-0-0", subdomain: headless, affinity: sliceAffinity(slice0, nil),
			},
			wantResult: metrics.ResultDryRun,
		},
		"a Pod beside claims on IDs 0 and 1 is planned at ID 2 and the claims are untouched": {
			slices: []*tpuv1alpha1.TPUSliceAssignment{storedSlice(0).
				Claim(0, "token-0", "", "").Claim(1, "token-1", "", "").Obj()},
			want: &identity{
				workerID: 2, slice: slice0, replicaIndex: "tpu-0",
				env: map[int][]corev1.EnvVar{0: withDevicePlugin(
					env("TPU_WORKER_ID", "2"), env("TPU_NAME", "tpu-0"), env("TPU_WORKER_HOSTNAMES", hosts0))},
				hostname: "tpu-0-2", subdomain: headless, affinity: sliceAffinity(slice0, nil),
			},
			wantResult: metrics.ResultDryRun,
		},
		"a Pod of a full group is denied as transient": {
			slices: []*tpuv1alpha1.TPUSliceAssignment{fullSlice(0)},
			wantMessage: "all 1 slices of 4 hosts the worker group asks for are fully claimed; a claim of a Pod that was just " +
				"created or deleted may still be settling; transient, the Pod's creator retries",
			wantResult: metrics.ResultDeniedTransient,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var calls apiCalls
			c := newClient(t, &calls, nil, objects(rc, tc.slices, nil)...)
			w := newPodWebhook(c)
			in := testutil.WorkerPodFor(rc, group).Obj()
			got := in.DeepCopy()
			slicesBefore := listSlices(t, c)
			before := admissionCounts(t)

			err := w.Default(admissionContext(t, admissionv1.Create, true), got)

			checkAdmissionCounted(t, before, tc.wantResult)
			if n := calls.writes.Load(); n != 0 {
				t.Errorf("A dry run made %d API writes, want none", n)
			}
			if diff := cmp.Diff(slicesBefore, listSlices(t, c), cmpStoredSlices); diff != "" {
				t.Errorf("Slices after the dry run (-before +after):\n%s", diff)
			}
			if tc.want == nil {
				var status *apierrors.StatusError
				if !errors.As(err, &status) || status.Status().Code != http.StatusTooManyRequests {
					t.Fatalf("Default() = %v, want a transient denial", err)
				}
				if diff := cmp.Diff(tc.wantMessage, status.Status().Message); diff != "" {
					t.Errorf("Denial message (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("Default() = %v, want the Pod admitted", err)
			}
			if diff := cmp.Diff(wantPod(in, *tc.want, dryRunToken), got, ignoreTorchEnv); diff != "" {
				t.Errorf("Mutated Pod (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPodWebhookReadsLiveRayClusterIntoAFreshObject covers a RayCluster re-created under the same name
// while the cache still holds the deleted generation: the webhook must judge the Pod by the live
// object alone. The live reader decodes like client-go's REST client, into the object it is given
// without zeroing it first, so fields the new generation omits would otherwise keep the old values.
func TestPodWebhookReadsLiveRayClusterIntoAFreshObject(t *testing.T) {
	oldRC := testutil.MakeRayCluster(clusterName, testNS).UID(oldUID).TPUGroup(group, v6e, "4x4", 4, 4, 1).Obj()
	oldRC.Spec.Suspend = ptr.To(true)
	newRC := cluster().TPUGroup(group, v6e, "4x4", 4, 4, 1).Obj()

	var cacheCalls, liveCalls apiCalls
	cache := newClient(t, &cacheCalls, nil, oldRC)
	decodeInPlace := func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		live, ok := obj.DeepCopyObject().(client.Object)
		if !ok {
			return fmt.Errorf("%T is not a client.Object", obj)
		}
		if err := c.Get(ctx, key, live, opts...); err != nil {
			return err
		}
		data, err := json.Marshal(live)
		if err != nil {
			return err
		}
		return json.Unmarshal(data, obj)
	}
	live := newClient(t, &liveCalls, decodeInPlace, newRC)
	alloc := allocator.New(cache, live, allocator.Options{Timeout: claimTimeout})
	w := &podWebhook{planner: alloc, claimer: alloc}
	got := testutil.WorkerPodFor(newRC, group).Obj()

	if err := w.Default(admissionContext(t, admissionv1.Create, false), got); err != nil {
		t.Fatalf("Default() = %v, want the Pod of the new generation admitted", err)
	}
	if n := liveCalls.all.Load(); n != 2 {
		t.Errorf("The webhook made %d live reads, want 2 (the RayCluster, and the group's Pods once for adoption)", n)
	}
	if id := got.Labels[tpuv1alpha1.WorkerIDLabel]; id != "0" {
		t.Errorf("Worker ID label = %q, want 0", id)
	}
}
