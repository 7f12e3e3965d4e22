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

// The Pod webhook's tests cover the adapter: which Pods it handles, the claim request it reads
// from a Pod, the identity it hands to tpuenv, and how it answers. Where IDs go is tested in
// internal/claims and internal/allocator, the values tpuenv writes in internal/tpuenv, and the
// whole path against an API server in test/integration.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

const (
	testNS      = "team-a"
	clusterName = "rc"
	clusterUID  = types.UID("rc-uid-2")
	group       = "tpu"
	v6e         = "tpu-v6e-slice"
	v7x         = "tpu7x"
	// headless is the subdomain of cluster "rc": KubeRay's headless worker Service.
	headless = "rc-headless"
	nodePool = constants.NodePoolTopologyKey
	subblock = constants.GCETopologySubblockKey
)

var (
	// longCluster is the longest RayCluster name whose "<name>-headless" subdomain (63 chars) is a
	// valid DNS label; tooLongCluster is one longer.
	longCluster    = strings.Repeat("c", 54)
	tooLongCluster = strings.Repeat("c", 55)

	slice0 = naming.SliceName(clusterName, group, 0)
	slice2 = naming.SliceName(clusterName, group, 2)
	// claimed is the claim the stub commits unless a test says otherwise: worker 1 of replica 2.
	claimed = allocator.Assignment{SliceName: slice2, Replica: 2, WorkerID: 1, Token: "token-2"}

	// results are the admission metric's result labels.
	results = []string{
		metrics.ResultAssigned, metrics.ResultDryRun, metrics.ResultDeniedTransient, metrics.ResultDeniedPermanent,
		metrics.ResultAlreadyAssigned, metrics.ResultNotTPUWorker, metrics.ResultNotCreate,
	}
)

// cluster returns RayCluster "rc" of UID clusterUID, without worker groups.
func cluster() *testutil.RayClusterWrapper {
	return testutil.MakeRayCluster(clusterName, testNS).UID(clusterUID)
}

// tpuWorkerPod returns a Pod of group "tpu" of RayCluster "rc" as KubeRay creates it, for a slice of
// accelerator and topology, its container requesting chips TPUs.
func tpuWorkerPod(accelerator, topology string, chips int64) *testutil.PodWrapper {
	return testutil.MakeWorkerPod(testNS, clusterName, clusterUID, group).Topology(accelerator, topology).TPU(chips)
}

// singleHostPod is a Pod of a v6e 2x2 slice of one host.
func singleHostPod() *testutil.PodWrapper { return tpuWorkerPod(v6e, "2x2", 4) }

// multiHostPod is a Pod of a v6e 4x4 slice of 4 hosts.
func multiHostPod() *testutil.PodWrapper { return tpuWorkerPod(v6e, "4x4", 4) }

// subslicePod is a Pod of a 2x4 subslice (2 hosts) of a v6e 4x4 node pool.
func subslicePod() *testutil.PodWrapper {
	return multiHostPod().Annotation(constants.SliceTopologyAnnotation, "2x4")
}

// v7xPod is a Pod of a v7x 2x2x2 slice of 2 hosts, with two TPU containers of 2 chips.
func v7xPod() *testutil.PodWrapper { return tpuWorkerPod(v7x, "2x2x2", 2).Container("ray-worker-1", 2) }

// multiHostRequest is the claim request of multiHostPod: kept on its node pool, by the default rule.
func multiHostRequest() allocator.Request {
	return allocator.Request{Namespace: testNS, ClusterName: clusterName, ClusterUID: clusterUID, GroupName: group,
		Hosts: 4, Topology: "4x4", Accelerator: v6e, AffinityTopologyKey: nodePool,
		Placement: allocator.PlacementRequest{Source: placement.SourceDefault, NodeSelector: tpuSelector(v6e, "4x4")}}
}

// tpuSelector is the nodeSelector of a TPU worker Pod of accelerator and topology.
func tpuSelector(accelerator, topology string) map[string]string {
	return map[string]string{constants.AcceleratorNodeSelectorKey: accelerator, constants.TopologyNodeSelectorKey: topology}
}

// multiHostIdentity is the identity the webhook hands tpuenv for assignment a of multiHostPod.
func multiHostIdentity(a allocator.Assignment) tpuenv.Values {
	return tpuenv.Values{GroupName: group, ReplicaIndex: a.Replica, WorkerID: a.WorkerID, Hosts: 4, Subdomain: headless,
		SliceName: a.SliceName, ClaimToken: a.Token, Topology: []int32{4, 4}, ChipsPerHost: 4, AffinityTopologyKey: nodePool}
}

// subsliceIdentity is the identity the webhook hands tpuenv for assignment a of subslicePod.
func subsliceIdentity(a allocator.Assignment) tpuenv.Values {
	return tpuenv.Values{GroupName: group, ReplicaIndex: a.Replica, WorkerID: a.WorkerID, Hosts: 2, Subdomain: headless,
		SliceName: a.SliceName, ClaimToken: a.Token, Topology: []int32{2, 4}, ChipsPerHost: 4, AffinityTopologyKey: nodePool}
}

// withKey returns a with the slice affinity key the slice records.
func withKey(a allocator.Assignment, key string) allocator.Assignment {
	a.AffinityTopologyKey = key
	return a
}

// applied returns a copy of pod with id applied by tpuenv to the containers at tpuContainers: what
// the webhook must return for id (tpuenv's values are tested in internal/tpuenv).
func applied(pod *corev1.Pod, id tpuenv.Values, tpuContainers ...int) *corev1.Pod {
	out := pod.DeepCopy()
	tpuenv.Apply(out, id, tpuContainers)
	return out
}

// admit runs the webhook on a copy of pod, admitted by a request of operation op in testNS, and
// returns the Pod as the webhook left it.
func admit(t *testing.T, w *podWebhook, pod *corev1.Pod, op admissionv1.Operation, dryRun bool) (*corev1.Pod, error) {
	t.Helper()
	ctx := logf.IntoContext(t.Context(), testr.NewWithOptions(t, testr.Options{Verbosity: 1}))
	ctx = admission.NewContextWithRequest(ctx, admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: op, Namespace: testNS, DryRun: ptr.To(dryRun),
	}})
	got := pod.DeepCopy()
	return got, w.Default(ctx, got)
}

// create admits pod as a create that is no dry run.
func create(t *testing.T, w *podWebhook, pod *corev1.Pod) (*corev1.Pod, error) {
	t.Helper()
	return admit(t, w, pod, admissionv1.Create, false)
}

// createRequest returns the request of a create of pod in testNS as the webhook server decodes it
// from an AdmissionReview, the Pod in its raw JSON.
func createRequest(t *testing.T, pod *corev1.Pod, dryRun bool) admission.Request {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "review", Operation: admissionv1.Create, Namespace: testNS, DryRun: ptr.To(dryRun),
		Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Object: runtime.RawExtension{Raw: raw},
	}}
}

// quietContext returns the test's context with a logger that discards: for admissions whose logs
// would only cost time and allocations.
func quietContext(t *testing.T) context.Context {
	return logf.IntoContext(t.Context(), logr.Discard())
}

// admissionCounts returns the admission metric by result. (It reads the counters with Write:
// prometheus/testutil.ToFloat64 would need github.com/kylelemons/godebug added to go.mod.)
func admissionCounts(t *testing.T) map[string]float64 {
	t.Helper()
	out := make(map[string]float64, len(results))
	for _, r := range results {
		var m dto.Metric
		if err := metrics.Default.Admissions.WithLabelValues(r).Write(&m); err != nil {
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

// TestPodWebhookPassesThrough: the Pods the webhook does not handle are admitted unchanged, and
// neither claimed nor planned.
func TestPodWebhookPassesThrough(t *testing.T) {
	cases := map[string]struct {
		pod        *corev1.Pod
		op         admissionv1.Operation
		wantResult string
	}{
		"an UPDATE of a TPU worker Pod": {
			pod: multiHostPod().Obj(), op: admissionv1.Update, wantResult: metrics.ResultNotCreate,
		},
		"a head Pod requesting TPUs": {
			pod: multiHostPod().Label(rayutils.RayNodeTypeLabelKey, string(rayv1.HeadNode)).Obj(),
			op:  admissionv1.Create, wantResult: metrics.ResultNotTPUWorker,
		},
		"a TPU Pod without the ray.io/node-type label": {
			pod: multiHostPod().WithoutLabel(rayutils.RayNodeTypeLabelKey).Obj(),
			op:  admissionv1.Create, wantResult: metrics.ResultNotTPUWorker,
		},
		"a TPU Pod without the ray.io/cluster label": {
			pod: multiHostPod().WithoutLabel(rayutils.RayClusterLabelKey).Obj(),
			op:  admissionv1.Create, wantResult: metrics.ResultNotTPUWorker,
		},
		"a TPU Pod without the ray.io/group label": {
			pod: multiHostPod().WithoutLabel(rayutils.RayNodeGroupLabelKey).Obj(),
			op:  admissionv1.Create, wantResult: metrics.ResultNotTPUWorker,
		},
		"a worker Pod without TPUs, and without topology": {
			pod: testutil.MakeWorkerPod(testNS, clusterName, clusterUID, group).Obj(),
			op:  admissionv1.Create, wantResult: metrics.ResultNotTPUWorker,
		},
		"a worker Pod asking for zero TPUs": {
			pod: tpuWorkerPod(v6e, "4x4", 0).Obj(), op: admissionv1.Create, wantResult: metrics.ResultNotTPUWorker,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			stub := &stubClaimer{assignment: claimed}
			before := admissionCounts(t)

			got, err := admit(t, newPodWebhook(stub), tc.pod, tc.op, false)

			if err != nil {
				t.Fatalf("Default() = %v, want the Pod admitted", err)
			}
			checkAdmissionCounted(t, before, tc.wantResult)
			if diff := cmp.Diff(tc.pod, got); diff != "" {
				t.Errorf("Pod was changed (-want +got):\n%s", diff)
			}
			if n := stub.calls(); n != 0 {
				t.Errorf("The webhook called the claimer %d times, want never", n)
			}
		})
	}
}

// TestPodWebhookNeedsAnAdmissionRequest: a call outside an admission is an error, not a claim.
func TestPodWebhookNeedsAnAdmissionRequest(t *testing.T) {
	stub := &stubClaimer{assignment: claimed}
	if err := newPodWebhook(stub).Default(t.Context(), multiHostPod().Obj()); err == nil {
		t.Error("Default() without an admission request = nil, want an error")
	}
	if n := stub.calls(); n != 0 {
		t.Errorf("The webhook called the claimer %d times, want never", n)
	}
}

// TestPodWebhookRequest checks the claim request the webhook reads from a TPU worker Pod.
func TestPodWebhookRequest(t *testing.T) {
	notController := multiHostPod().Obj()
	notController.OwnerReferences[0].Controller = ptr.To(false)
	noNamespace := singleHostPod().Obj()
	noNamespace.Namespace = ""
	single := allocator.Request{Namespace: testNS, ClusterName: clusterName, ClusterUID: clusterUID, GroupName: group,
		Hosts: 1, Topology: "2x2", Accelerator: v6e,
		Placement: allocator.PlacementRequest{Source: placement.SourceSingleHost, NodeSelector: tpuSelector(v6e, "2x2")}}
	with := func(req allocator.Request, edit func(*allocator.Request)) allocator.Request {
		edit(&req)
		return req
	}
	cases := map[string]struct {
		pod  *corev1.Pod
		want allocator.Request
	}{
		"single-host: one host, no affinity key": {pod: singleHostPod().Obj(), want: single},
		"multi-host: the hosts of the topology, kept on the node pool": {
			pod: multiHostPod().Obj(), want: multiHostRequest(),
		},
		"a subslice: its own topology and hosts, not its node pool's": {
			pod:  subslicePod().Obj(),
			want: with(multiHostRequest(), func(r *allocator.Request) { r.Hosts, r.Topology = 2, "2x4" }),
		},
		"v7x: the chips of both TPU containers make one host": {
			pod: v7xPod().Obj(),
			want: with(multiHostRequest(), func(r *allocator.Request) {
				r.Hosts, r.Topology, r.Accelerator = 2, "2x2x2", v7x
				r.Placement.NodeSelector = tpuSelector(v7x, "2x2x2")
			}),
		},
		"KubeRay's index labels: replica, host and replica name": {
			pod: multiHostPod().KubeRayIndexes(1, "tpu-x7k2p", 2).Obj(),
			want: with(multiHostRequest(), func(r *allocator.Request) {
				r.Claim = claims.Request{ReplicaIndex: ptr.To[int32](1), HostIndex: ptr.To[int32](2), ReplicaName: "tpu-x7k2p"}
			}),
		},
		"KubeRay's replica index alone, on a single-host Pod": {
			pod:  singleHostPod().KubeRayIndexes(2, "", -1).Obj(),
			want: with(single, func(r *allocator.Request) { r.Claim = claims.Request{ReplicaIndex: ptr.To[int32](2)} }),
		},
		"a host index without a replica index is ignored": {
			pod:  multiHostPod().Label(rayutils.RayHostIndexKey, "2").Label(rayutils.RayWorkerReplicaNameKey, "tpu-x7k2p").Obj(),
			want: multiHostRequest(),
		},
		"an ownerReference that is not the controller names no RayCluster UID": {
			pod: notController, want: with(multiHostRequest(), func(r *allocator.Request) { r.ClusterUID = "" }),
		},
		"the namespace is the admission request's": {pod: noNamespace, want: single},
		"a 54-character RayCluster name: its 63-character headless Service is a valid subdomain": {
			pod:  testutil.MakeWorkerPod(testNS, longCluster, clusterUID, group).Topology(v6e, "4x4").TPU(4).Obj(),
			want: with(multiHostRequest(), func(r *allocator.Request) { r.ClusterName = longCluster }),
		},
		"a single-host Pod needs no subdomain, so a longer RayCluster name is fine": {
			pod:  testutil.MakeWorkerPod(testNS, tooLongCluster, clusterUID, group).Topology(v6e, "2x2").TPU(4).Obj(),
			want: with(single, func(r *allocator.Request) { r.ClusterName = tooLongCluster }),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			stub := &stubClaimer{assignment: claimed}
			before := admissionCounts(t)

			if _, err := create(t, newPodWebhook(stub), tc.pod); err != nil {
				t.Fatalf("Default() = %v, want the Pod admitted", err)
			}

			checkAdmissionCounted(t, before, metrics.ResultAssigned)
			if diff := cmp.Diff([]allocator.Request{tc.want}, stub.claims); diff != "" {
				t.Errorf("Claim requests (-want +got):\n%s", diff)
			}
			if len(stub.plans) != 0 || len(stub.reinvocations) != 0 {
				t.Errorf("Plan requests %v, Reinvoked requests %v; want none", stub.plans, stub.reinvocations)
			}
		})
	}
}

// TestPodWebhookHandsTheIdentityToTpuenv checks the identity the webhook applies for the claim it
// made: the mutated Pod is the input with that identity applied by tpuenv.
func TestPodWebhookHandsTheIdentityToTpuenv(t *testing.T) {
	single := allocator.Assignment{SliceName: slice0, Replica: 0, WorkerID: 0, Token: "token-0"}
	cases := map[string]struct {
		pod           *corev1.Pod
		assignment    allocator.Assignment
		want          tpuenv.Values
		tpuContainers []int
	}{
		"single-host: no affinity": {
			pod: singleHostPod().Obj(), assignment: single, tpuContainers: []int{0},
			want: tpuenv.Values{GroupName: group, ReplicaIndex: 0, WorkerID: 0, Hosts: 1, Subdomain: headless,
				SliceName: slice0, ClaimToken: "token-0", Topology: []int32{2, 2}, ChipsPerHost: 4, NoAffinity: true},
		},
		"multi-host: the claimed slice and ID, kept on the node pool": {
			pod: multiHostPod().Obj(), assignment: claimed, tpuContainers: []int{0}, want: multiHostIdentity(claimed),
		},
		"a subslice: its own topology for TorchTPU": {
			pod: subslicePod().Obj(), assignment: claimed, tpuContainers: []int{0}, want: subsliceIdentity(claimed),
		},
		"v7x: both TPU containers, not the sidecar between them": {
			pod:        tpuWorkerPod(v7x, "2x2x2", 2).Container("log-shipper", 0).Container("ray-worker-1", 2).Obj(),
			assignment: claimed, tpuContainers: []int{0, 2},
			want: tpuenv.Values{GroupName: group, ReplicaIndex: 2, WorkerID: 1, Hosts: 2, Subdomain: headless, V7x: true,
				SliceName: slice2, ClaimToken: "token-2", Topology: []int32{2, 2, 2}, ChipsPerHost: 4, AffinityTopologyKey: nodePool},
		},
		"the slice's recorded affinity key wins over the Pod's placement": {
			pod: multiHostPod().Obj(), assignment: withKey(claimed, subblock), tpuContainers: []int{0},
			want: func() tpuenv.Values {
				id := multiHostIdentity(claimed)
				id.AffinityTopologyKey = subblock
				return id
			}(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := create(t, newPodWebhook(&stubClaimer{assignment: tc.assignment}), tc.pod)
			if err != nil {
				t.Fatalf("Default() = %v, want the Pod admitted", err)
			}
			if diff := cmp.Diff(applied(tc.pod, tc.want, tc.tpuContainers...), got); diff != "" {
				t.Errorf("Mutated Pod (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPodWebhookDryRun: a dry run is planned, never claimed, and its Pod carries the dry-run
// token, which no claim has.
func TestPodWebhookDryRun(t *testing.T) {
	stub := &stubClaimer{assignment: claimed}
	in := multiHostPod().Obj()
	before := admissionCounts(t)

	got, err := admit(t, newPodWebhook(stub), in, admissionv1.Create, true)

	if err != nil {
		t.Fatalf("Default() = %v, want the Pod admitted", err)
	}
	checkAdmissionCounted(t, before, metrics.ResultDryRun)
	id := multiHostIdentity(claimed)
	id.ClaimToken = "dry-run"
	if diff := cmp.Diff(applied(in, id, 0), got); diff != "" {
		t.Errorf("Mutated Pod (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]allocator.Request{multiHostRequest()}, stub.plans); diff != "" {
		t.Errorf("Plan requests (-want +got):\n%s", diff)
	}
	if len(stub.claims) != 0 {
		t.Errorf("A dry run made claims %v, want none", stub.claims)
	}

	t.Run("a dry run the planner denies is denied", func(t *testing.T) {
		stub := &stubClaimer{err: &allocator.DeniedError{Transient: true, Message: "all 1 slices are fully claimed"}}
		before := admissionCounts(t)
		got, err := admit(t, newPodWebhook(stub), in, admissionv1.Create, true)
		checkAdmissionCounted(t, before, metrics.ResultDeniedTransient)
		checkDenial(t, err, tooManyRequests("all 1 slices are fully claimed"))
		if diff := cmp.Diff(in, got); diff != "" {
			t.Errorf("Denied Pod was changed (-want +got):\n%s", diff)
		}
		if len(stub.claims) != 0 {
			t.Errorf("A dry run made claims %v, want none", stub.claims)
		}
	})
}

// forbidden is the status of a permanent denial: the Pod must be fixed.
func forbidden(message string) metav1.Status {
	return metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: message}
}

// tooManyRequests is the status of a transient denial of cause: the Pod's creator retries it as is.
func tooManyRequests(cause string) metav1.Status {
	return metav1.Status{Status: metav1.StatusFailure, Code: http.StatusTooManyRequests, Reason: metav1.StatusReasonTooManyRequests,
		Message: cause + "; " + allocator.TransientNote, Details: &metav1.StatusDetails{RetryAfterSeconds: 1}}
}

// checkDenial checks that err is an API status error of status want.
func checkDenial(t *testing.T, err error, want metav1.Status) {
	t.Helper()
	var status *apierrors.StatusError
	if !errors.As(err, &status) {
		t.Fatalf("Default() = %v, want a denial (*apierrors.StatusError)", err)
	}
	if diff := cmp.Diff(want, status.Status()); diff != "" {
		t.Errorf("Denial (-want +got):\n%s", diff)
	}
}

// denialCase is a Pod the webhook denies.
type denialCase struct {
	pod   *corev1.Pod
	stub  stubClaimer
	nodes placement.NodeLister
	// apiServer is what the webhook reads RayClusters from live (none when nil).
	apiServer client.Reader
	// claimed says the claimer was asked (and denied); else the webhook denies before it.
	claimed bool
	want    metav1.Status
}

// checkDenials admits each Pod of cases and checks its denial, counted as result, leaving the
// Pod unchanged.
func checkDenials(t *testing.T, cases map[string]denialCase, result string) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			stub := tc.stub
			w := newPodWebhook(&stub)
			w.nodes = tc.nodes
			if tc.apiServer != nil {
				w.live = tc.apiServer
			}
			before := admissionCounts(t)

			got, err := create(t, w, tc.pod)

			checkAdmissionCounted(t, before, result)
			checkDenial(t, err, tc.want)
			if diff := cmp.Diff(tc.pod, got); diff != "" {
				t.Errorf("Denied Pod was changed (-want +got):\n%s", diff)
			}
			if asked := len(stub.claims) > 0; asked != tc.claimed {
				t.Errorf("Claim requests %v, want claimed %t", stub.claims, tc.claimed)
			}
		})
	}
}

// TestPodWebhookDeniesPermanently: a Pod that cannot be admitted as it is gets 403 Forbidden.
func TestPodWebhookDeniesPermanently(t *testing.T) {
	const prefix = "TPU worker Pod of RayCluster rc group tpu: "
	badKey := map[string]string{constants.AffinityTopologyKeyAnnotation: "not a key!"}
	_, _, badKeyErr := placement.AnnotatedKey(badKey)
	checkDenials(t, map[string]denialCase{
		"a Pod without the topology nodeSelector": {
			pod: testutil.MakeWorkerPod(testNS, clusterName, clusterUID, group).TPU(4).Obj(),
			want: forbidden(prefix + "nodeSelector cloud.google.com/gke-tpu-topology (or, for GKE subslicing and dynamic slicing, " +
				"annotation cloud.google.com/gke-tpu-slice-topology) is required: set it to the TPU slice topology, such as 4x4 or 2x2x4"),
		},
		"a multi-host Pod of a RayCluster whose headless Service name is no DNS label": {
			pod: testutil.MakeWorkerPod(testNS, tooLongCluster, clusterUID, group).Topology(v6e, "4x4").TPU(4).Obj(),
			want: forbidden("multi-host TPU worker Pod of RayCluster " + tooLongCluster + ` needs the headless Service "` +
				tooLongCluster + `-headless" as its subdomain, which is not a valid DNS label (must be no more than 63 characters): ` +
				"shorten the RayCluster name"),
		},
		"a KubeRay replica-index label that is not a number": {
			pod:  multiHostPod().Label(rayutils.RayWorkerReplicaIndexKey, "one").Obj(),
			want: forbidden(prefix + `label ray.io/worker-group-replica-index="one" is not a non-negative integer`),
		},
		"a negative KubeRay host-index label": {
			pod:  multiHostPod().KubeRayIndexes(0, "tpu-x7k2p", 0).Label(rayutils.RayHostIndexKey, "-1").Obj(),
			want: forbidden(prefix + `label ray.io/replica-host-index="-1" is not a non-negative integer`),
		},
		"an affinity-key annotation that is not a label key": {
			pod:  multiHostPod().Annotation(constants.AffinityTopologyKeyAnnotation, badKey[constants.AffinityTopologyKeyAnnotation]).Obj(),
			want: forbidden(prefix + badKeyErr.Error()),
		},
		"a permanent denial of the claimer": {
			pod:     multiHostPod().Obj(),
			stub:    stubClaimer{err: &allocator.DeniedError{Message: "RayCluster team-a/rc of this TPU worker Pod does not exist"}},
			claimed: true,
			want:    forbidden("RayCluster team-a/rc of this TPU worker Pod does not exist"),
		},
	}, metrics.ResultDeniedPermanent)
}

// TestPodWebhookDeniesTransiently: a Pod that may be admitted later as it is gets 429 with a
// retry after 1 s, and a message saying so.
func TestPodWebhookDeniesTransiently(t *testing.T) {
	carrying := applied(multiHostPod().Obj(), multiHostIdentity(allocator.Assignment{SliceName: slice0, WorkerID: 2, Token: "token-0"}), 0)
	checkDenials(t, map[string]denialCase{
		"a transient denial of the claimer": {
			pod:     multiHostPod().Obj(),
			stub:    stubClaimer{err: &allocator.DeniedError{Transient: true, Message: "all 1 slices of 4 hosts are fully claimed"}},
			claimed: true,
			want:    tooManyRequests("all 1 slices of 4 hosts are fully claimed"),
		},
		"any other error of the claimer": {
			pod:     multiHostPod().Obj(),
			stub:    stubClaimer{err: errors.New("connection refused")},
			claimed: true,
			want:    tooManyRequests("connection refused"),
		},
		"Nodes that cannot be listed for a subslice's affinity": {
			pod:   subslicePod().Obj(),
			nodes: &fakeNodes{err: errors.New("cache not synced")},
			want:  tooManyRequests("TPU worker Pod of RayCluster rc group tpu: listing the TPU Nodes for the subslice's affinity: cache not synced"),
		},
		"a RayCluster the cache does not have and the API server cannot read": {
			pod: multiHostPod().Obj(),
			apiServer: testutil.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
				Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
					return errors.New("etcd timeout")
				},
			}).Build(),
			want: tooManyRequests("reading RayCluster team-a/rc: etcd timeout"),
		},
		"a failed check of the identity the Pod carries": {
			pod:  carrying,
			stub: stubClaimer{reinvokedErr: errors.New("etcd timeout")},
			want: tooManyRequests("checking the TPU identity the Pod already carries: etcd timeout"),
		},
	}, metrics.ResultDeniedTransient)
}
