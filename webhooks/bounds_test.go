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

// Bounds before work (docs/spec.md §10): whatever a Pod's topology says, an admission costs at
// most a few MiB and well under a second, because the host count is checked against
// --max-slice-hosts right after the topology is parsed, before anything that grows with the hosts.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

const (
	// maxRefusedBytes bounds what the webhook allocates to refuse a Pod of any topology, the
	// AdmissionReview's decoding included.
	maxRefusedBytes = 4 << 20
	// maxDefaultBytes bounds what the webhook's own work (Default: strip a copied identity, plan,
	// apply the new one) allocates for a Pod of the largest slices it allows (2,400 hosts).
	maxDefaultBytes = 4 << 20
	// maxAdmittedBytes bounds the whole AdmissionReview of such a Pod. A copy of a tpu7x worker of
	// 2,304 hosts with 4 TPU containers is a 1.4 MB Pod (each container's TPU_PROCESS_ADDRESSES
	// names 9,216 processes); controller-runtime's decoding, its two encodings and the JSON patch
	// between them allocate about 17 times that.
	maxAdmittedBytes = 32 << 20
	// maxAdmissionTime bounds one admission's time (on a loaded 2-core machine).
	maxAdmissionTime = time.Second
)

// copiedIdentity returns pod as copied from a running worker: it carries worker workerID of
// replica 0 with its claim token, as the environment, labels and annotation the webhook gave it.
func copiedIdentity(pod *corev1.Pod, hosts int32, v7x bool) *corev1.Pod {
	id := tpuenv.Values{GroupName: group, ReplicaIndex: 0, WorkerID: hosts - 1, Hosts: hosts, Subdomain: headless, V7x: v7x,
		SliceName: slice0, ClaimToken: "copied-token"}
	return applied(pod, id, topology.TPUContainers(&pod.Spec)...)
}

// absurdPod is a worker Pod whose topology gives far more hosts than any slice, carrying a copied
// identity that claims to be of such a slice: the environment Strip would rebuild is per host.
func absurdPod(accelerator, topology string, containers int) *corev1.Pod {
	p := tpuWorkerPod(accelerator, topology, 1)
	for i := 1; i < containers; i++ {
		p.Container(fmt.Sprintf("ray-worker-%d", i), 1)
	}
	for i := range containers {
		p.Env(i, constants.EnvWorkerID, "0").Env(i, constants.EnvName, group+"-0")
	}
	return p.Annotation(tpuv1alpha1.ClaimTokenAnnotation, "copied-token").Obj()
}

// handle runs the Pod webhook as the webhook server does (decoding the AdmissionReview's Pod,
// Default, the JSON patch) on a create of pod, and returns the response, the bytes allocated and
// the time it took.
func handle(t *testing.T, w *podWebhook, pod *corev1.Pod) (admission.Response, uint64, time.Duration) {
	t.Helper()
	h := &admission.Webhook{Handler: w}
	ctx := quietContext(t)
	req := createRequest(t, pod, false)
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	start := time.Now()
	resp := h.Handle(ctx, req)
	took := time.Since(start)
	goruntime.ReadMemStats(&after)
	return resp, after.TotalAlloc - before.TotalAlloc, took
}

// defaultCost returns the bytes Default allocates to admit a create of pod.
func defaultCost(t *testing.T, w *podWebhook, pod *corev1.Pod) uint64 {
	t.Helper()
	ctx := admission.NewContextWithRequest(quietContext(t), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: testNS,
	}})
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	if err := w.Default(ctx, pod); err != nil {
		t.Fatalf("Default() = %v, want the Pod admitted", err)
	}
	goruntime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestPodWebhookRefusesAbsurdTopologiesBeforeWork: a Pod whose topology gives more hosts than
// --max-slice-hosts is denied permanently, naming the limit, before its copied identity is
// stripped, placed or claimed, for at most maxRefusedBytes and well under a second. (Before the
// bound came first, a 1024x1024 Pod cost 69 MiB and a tpu7x 128x128x64 one with 16 one-chip
// containers 1 GiB and 28 s.)
func TestPodWebhookRefusesAbsurdTopologiesBeforeWork(t *testing.T) {
	cases := map[string]struct {
		pod       *corev1.Pod
		wantHosts string
	}{
		"v6e 1024x1024 of 1-chip Pods (1,048,576 hosts) with a copied identity": {
			pod:       absurdPod(v6e, "1024x1024", 1),
			wantHosts: "gives a slice of 1048576 hosts",
		},
		"tpu7x 128x128x64 with 16 one-chip containers (65,536 hosts) with a copied identity": {
			pod:       absurdPod(v7x, "128x128x64", 16),
			wantHosts: "gives a slice of 65536 hosts",
		},
		"an unknown accelerator 1024x1024 with 16 one-chip containers": {
			pod:       absurdPod("tpu-v99", "1024x1024", 16),
			wantHosts: "gives a slice of 65536 hosts",
		},
		"v5p 20x20x100 of 1-chip Pods (40,000 hosts)": {
			pod:       absurdPod("tpu-v5p-slice", "20x20x100", 1),
			wantHosts: "gives a slice of 40000 hosts",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			stub := &stubClaimer{assignment: claimed}
			w := newPodWebhook(stub)
			w.maxHosts = 2400

			resp, bytes, took := handle(t, w, tc.pod)

			if resp.Allowed || resp.Result == nil || resp.Result.Code != 403 {
				t.Fatalf("Handle() = %+v, want a permanent denial", resp.Result)
			}
			for _, want := range []string{tc.wantHosts, "--max-slice-hosts=2400"} {
				if !strings.Contains(resp.Result.Message, want) {
					t.Errorf("Denial %q does not say %q", resp.Result.Message, want)
				}
			}
			if stub.calls() != 0 {
				t.Errorf("The webhook made %d calls to the allocator, want none before the bound", stub.calls())
			}
			t.Logf("Refused in %s, %d KiB allocated", took, bytes>>10)
			if bytes > maxRefusedBytes {
				t.Errorf("Refusing allocated %d KiB, want at most %d KiB", bytes>>10, maxRefusedBytes>>10)
			}
			if took > maxAdmissionTime {
				t.Errorf("Refusing took %s, want at most %s", took, maxAdmissionTime)
			}
		})
	}
}

// TestPodWebhookTopologyParsingIsNotPerChip: a topology of 2^30 chips is refused by the parser
// itself, without allocating per chip.
func TestPodWebhookTopologyParsingIsNotPerChip(t *testing.T) {
	stub := &stubClaimer{assignment: claimed}
	w := newPodWebhook(stub)

	resp, bytes, took := handle(t, w, absurdPod("tpu-v5p-slice", "1024x1024x1024", 1))

	if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, "more than the maximum of 1048576") {
		t.Fatalf("Handle() = %+v, want a denial naming the chip limit", resp.Result)
	}
	t.Logf("Refused in %s, %d KiB allocated", took, bytes>>10)
	if bytes > maxRefusedBytes || took > maxAdmissionTime {
		t.Errorf("Refusing cost %d KiB and %s, want at most %d KiB and %s", bytes>>10, took, maxRefusedBytes>>10, maxAdmissionTime)
	}
}

// TestPodWebhookLargestLegalSliceCost: admitting a copy of a worker of the largest slices the
// operator allows (its identity stripped, a new one applied) stays within maxDefaultBytes for the
// webhook's own work and maxAdmittedBytes for the whole AdmissionReview.
func TestPodWebhookLargestLegalSliceCost(t *testing.T) {
	cases := map[string]struct {
		pod   *corev1.Pod
		hosts int32
		v7x   bool
	}{
		"tpu7x 16x24x24 with 2 two-chip containers (2,304 hosts)": {
			pod:   tpuWorkerPod(v7x, "16x24x24", 2).Container("ray-worker-1", 2).Obj(),
			hosts: 2304, v7x: true,
		},
		"v5p 20x20x24 of 4-chip Pods (2,400 hosts, the limit), multislice": {
			pod:   tpuWorkerPod("tpu-v5p-slice", "20x20x24", 4).Env(0, constants.EnvMegascaleNumSlices, "2").Obj(),
			hosts: 2400,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			stub := &stubClaimer{assignment: allocator.Assignment{SliceName: naming.SliceName(clusterName, group, 1), Replica: 1, WorkerID: 7, Token: "new"}}
			w := newPodWebhook(stub)

			resp, bytes, took := handle(t, w, copiedIdentity(tc.pod, tc.hosts, tc.v7x))

			if !resp.Allowed || len(resp.Patches) == 0 {
				t.Fatalf("Handle() = %+v, want the copy admitted with its new identity", resp.Result)
			}
			if len(stub.claims) != 1 || stub.claims[0].Hosts != tc.hosts {
				t.Errorf("Claims %+v, want one of %d hosts", stub.claims, tc.hosts)
			}
			t.Logf("Admitted in %s, %d KiB allocated", took, bytes>>10)
			own := defaultCost(t, w, copiedIdentity(tc.pod, tc.hosts, tc.v7x))
			t.Logf("Default alone allocated %d KiB", own>>10)
			if own > maxDefaultBytes {
				t.Errorf("Default allocated %d KiB, want at most %d KiB", own>>10, maxDefaultBytes>>10)
			}
			if bytes > maxAdmittedBytes {
				t.Errorf("Admitting allocated %d KiB, want at most %d KiB", bytes>>10, maxAdmittedBytes>>10)
			}
			if took > maxAdmissionTime {
				t.Errorf("Admitting took %s, want at most %s", took, maxAdmissionTime)
			}
		})
	}
}

// TestPodWebhookDeniesPodsThatCannotStart: a Pod whose host lists no form fits in one
// environment entry (Linux's MAX_ARG_STRLEN) could never start its container: it is denied
// permanently before its claim, naming the variable (docs/spec.md §4, "Every admitted Pod can
// start"). Before issue 44 the first case was admitted with a TPU_PROCESS_ADDRESSES of 373 KB.
func TestPodWebhookDeniesPodsThatCannotStart(t *testing.T) {
	cases := map[string]struct {
		pod         *corev1.Pod
		wantMessage string
	}{
		"tpu7x 16x24x24 with 4 one-chip containers (2,304 hosts, 9,216 libtpu processes)": {
			pod:         tpuWorkerPod(v7x, "16x24x24", 1).Container("ray-worker-1", 1).Container("ray-worker-2", 1).Container("ray-worker-3", 1).Obj(),
			wantMessage: "TPU_PROCESS_ADDRESSES of a slice of 2304 hosts with 4 TPU container(s) per Pod would be",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			stub := &stubClaimer{assignment: allocator.Assignment{SliceName: slice0, Replica: 0, WorkerID: 0, Token: "new"}}
			w := newPodWebhook(stub)
			resp, _, _ := handle(t, w, tc.pod)
			if resp.Allowed {
				t.Fatalf("Handle() allowed the Pod, want it denied")
			}
			if !strings.Contains(resp.Result.Message, tc.wantMessage) {
				t.Errorf("denial %q, want it to say %q", resp.Result.Message, tc.wantMessage)
			}
			if len(stub.claims) != 0 {
				t.Errorf("Claims %+v, want none: the Pod is denied before its claim", stub.claims)
			}
		})
	}
}

// slowAllocator answers nothing until its context ends (an API server too slow for any read or
// write), or gives up after giveUp so that a missing deadline fails the test instead of hanging it.
type slowAllocator struct{ giveUp time.Duration }

var errGaveUp = errors.New("no deadline: gave up waiting")

func (s slowAllocator) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return fmt.Errorf("reading from the API server: %w", ctx.Err())
	case <-time.After(s.giveUp):
		return errGaveUp
	}
}

func (s slowAllocator) Claim(ctx context.Context, _ allocator.Request) (allocator.Assignment, error) {
	return allocator.Assignment{}, s.wait(ctx)
}

func (s slowAllocator) Plan(ctx context.Context, _ allocator.Request) (allocator.Assignment, error) {
	return allocator.Assignment{}, s.wait(ctx)
}

func (s slowAllocator) Reinvoked(ctx context.Context, _, _, _ string, _ int32) (bool, error) {
	return false, s.wait(ctx)
}

// TestPodWebhookDeadline: one deadline bounds the whole admission, whichever API call a slow API
// server holds up, and the user gets the transient denial of docs/spec.md §5 when it passes.
func TestPodWebhookDeadline(t *testing.T) {
	const timeout = 300 * time.Millisecond
	cases := map[string]struct {
		pod    *corev1.Pod
		dryRun bool
		// slowRayCluster makes the live read of the RayCluster, which the cache does not have, slow.
		slowRayCluster bool
	}{
		"a RayCluster the cache does not have (its live read)": {
			pod: multiHostPod().Obj(), slowRayCluster: true,
		},
		"a dry run (the plan's reads)": {
			pod: multiHostPod().Obj(), dryRun: true,
		},
		"a re-invocation or a copy (the check of the token it carries)": {
			pod: applied(multiHostPod().Obj(), multiHostIdentity(claimed), 0),
		},
		"a create (the claim)": {
			pod: multiHostPod().Obj(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			slow := slowAllocator{giveUp: 3 * time.Second}
			w := &podWebhook{planner: slow, claimer: slow, metrics: metrics.Default, clusters: noRayClusters, live: noRayClusters, timeout: timeout}
			if tc.slowRayCluster {
				w.live = testutil.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
					Get: func(ctx context.Context, _ client.WithWatch, _ client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
						return slow.wait(ctx)
					},
				}).Build()
			}
			before := admissionCounts(t)
			start := time.Now()

			_, err := admit(t, w, tc.pod, admissionv1.Create, tc.dryRun)

			took := time.Since(start)
			want := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusTooManyRequests,
				Reason: metav1.StatusReasonTooManyRequests, Details: &metav1.StatusDetails{RetryAfterSeconds: 1},
				Message: "timed out after 300ms admitting the TPU worker Pod (API server slow or heavily contended); " + allocator.TransientNote}}
			if diff := cmp.Diff(error(want), err); diff != "" {
				t.Errorf("Default() error (-want,+got):\n%s", diff)
			}
			if took > timeout+500*time.Millisecond {
				t.Errorf("Denied after %s, want within the %s deadline", took, timeout)
			}
			checkAdmissionCounted(t, before, metrics.ResultDeniedTransient)
		})
	}
}
