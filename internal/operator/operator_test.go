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

package operator

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/gate"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/nodes"
	"github.com/ray-tpu/tpu-slice-operator/internal/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// recordingCache records the objects informers are requested for, without any API server.
type recordingCache struct {
	cache.Cache
	synced    bool
	informers []string
	indexes   []string
}

func (c *recordingCache) GetInformer(_ context.Context, obj client.Object, _ ...cache.InformerGetOption) (cache.Informer, error) {
	c.informers = append(c.informers, fmt.Sprintf("%T", obj))
	return recordingInformer{}, nil
}

func (c *recordingCache) IndexField(_ context.Context, obj client.Object, field string, _ client.IndexerFunc) error {
	c.indexes = append(c.indexes, fmt.Sprintf("%T %s", obj, field))
	return nil
}

// recordingInformer accepts event handlers and does nothing else.
type recordingInformer struct{ cache.Informer }

func (recordingInformer) AddEventHandler(toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return nil, nil
}

func (c *recordingCache) WaitForCacheSync(context.Context) bool { return c.synced }

func TestCachesSynced(t *testing.T) {
	for _, synced := range []bool{true, false} {
		t.Run(fmt.Sprint("synced=", synced), func(t *testing.T) {
			err := CachesSynced(&recordingCache{synced: synced})(httptest.NewRequest(http.MethodGet, "/readyz", nil))
			if got := err == nil; got != synced {
				t.Errorf("CachesSynced() error = %v, want ready %v", err, synced)
			}
		})
	}
}

// TestSetupStartsWebhookInformers checks that the informers the Pod webhook reads through are
// registered at setup, so that they start with the manager on every replica and the first
// admission does not wait for a full list.
func TestSetupStartsWebhookInformers(t *testing.T) {
	rec := &recordingCache{}
	mgr, err := manager.New(&rest.Config{Host: "https://127.0.0.1:1"}, manager.Options{
		Scheme:                 Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		NewCache: func(*rest.Config, cache.Options) (cache.Cache, error) {
			return rec, nil
		},
	})
	if err != nil {
		t.Fatalf("manager.New() error: %v", err)
	}
	if _, err := Setup(mgr, Options{DisableControllers: true}); err != nil {
		t.Fatalf("Setup() error: %v", err)
	}
	slices.Sort(rec.informers)
	want := []string{"*v1.Node", "*v1.Pod", "*v1.Pod", "*v1.RayCluster", "*v1alpha1.TPUSliceAssignment"}
	if diff := cmp.Diff(want, rec.informers); diff != "" {
		t.Errorf("informers registered at setup (-want,+got):\n%s", diff)
	}
	// The Pod cache is indexed by spec identity and claim token, for webhooks and reconciler alike.
	slices.Sort(rec.indexes)
	wantIndexes := []string{"*v1.Pod " + identity.TokenIndex, "*v1.Pod " + identity.SliceIndex}
	slices.Sort(wantIndexes)
	if diff := cmp.Diff(wantIndexes, rec.indexes); diff != "" {
		t.Errorf("indexes registered at setup (-want,+got):\n%s", diff)
	}
}

// TestTestSchemeIsTheOperatorScheme: testutil.Scheme, which cannot import this package, registers
// the types of Scheme, so that unit tests decode what the operator does.
func TestTestSchemeIsTheOperatorScheme(t *testing.T) {
	kinds := func(s *runtime.Scheme) []string {
		out := make([]string, 0, len(s.AllKnownTypes()))
		for gvk := range s.AllKnownTypes() {
			out = append(out, gvk.String())
		}
		slices.Sort(out)
		return out
	}
	if diff := cmp.Diff(kinds(Scheme), kinds(testutil.Scheme())); diff != "" {
		t.Errorf("testutil.Scheme() kinds (-operator.Scheme,+testutil.Scheme()):\n%s", diff)
	}
}

// TestTrimPodKeepsTheIdentity: the cached Pod carries exactly what its TPU identity is read from,
// so the reconciler and the webhook see the same identity in the cache as in the API server.
func TestTrimPodKeepsTheIdentity(t *testing.T) {
	pod := testutil.MakeWorkerPod("ml", "rc", "uid-rc", "tpu").Named("w").UID("uid-w").
		Topology("tpu7x", "2x2x2").TPU(2).Container("second", 2).Container("sidecar", 0).
		TPUIdentity("tpu", 1, 2).Env(0, "BIG", strings.Repeat("x", 4096)).Env(1, constants.EnvWorkerID, "3").Env(1, constants.EnvName, "tpu-1").
		Annotation(tpuv1alpha1.ClaimTokenAnnotation, "t").Annotation("other", "dropped").Phase(corev1.PodRunning).Obj()
	pod.Spec.Hostname, pod.Spec.Subdomain = "tpu-1-1", "rc-headless"
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue}}
	trimmed, err := TrimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	tp := trimmed.(*corev1.Pod)
	want, _ := identity.FromPod(pod)
	got, ok := identity.FromPod(tp)
	if !ok {
		t.Fatal("the trimmed Pod carries no identity")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("identity of the trimmed Pod (-want,+got):\n%s", diff)
	}
	if len(tp.Spec.Containers) != 3 || len(tp.Spec.Containers[0].Env) != 2 || len(tp.Spec.Containers[1].Env) != 2 ||
		tp.Spec.Containers[2].Name != "sidecar" || len(tp.Spec.Containers[2].Env) != 0 {
		t.Errorf("trimmed containers %+v, want the two TPU containers with their two identity variables, and the sidecar without", tp.Spec.Containers)
	}
	if diff := cmp.Diff(map[string]string{tpuv1alpha1.ClaimTokenAnnotation: "t"}, tp.Annotations); diff != "" {
		t.Errorf("trimmed annotations (-want,+got):\n%s", diff)
	}
	if len(tp.Status.Conditions) != 0 || tp.Spec.NodeName != "" {
		t.Errorf("trimmed unscheduled Pod: conditions %+v, node %q; want no Ready condition and no node", tp.Status.Conditions, tp.Spec.NodeName)
	}
}

// TestTrimPodKeepsWhatHealthReads: the cached Pod keeps the node it is bound to, its Ready
// condition (and no other), and the Kueue topology annotations a placement key is read from.
func TestTrimPodKeepsWhatHealthReads(t *testing.T) {
	pod := testutil.MakeWorkerPod("ml", "rc", "uid-rc", "tpu").Named("w").UID("uid-w").Topology("tpu-v6e-slice", "4x4").TPU(4).
		Annotation(constants.KueuePodSetSliceRequiredTopologyAnnotation, constants.GCETopologySubblockKey).
		Annotation(constants.KueuePodSetRequiredTopologyAnnotation, constants.GCETopologyBlockKey).
		Annotation(constants.KueuePodSetPreferredTopologyAnnotation, "dropped").
		NodeName("gke-tpu-1").Ready(true).Obj()
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
	trimmed, err := TrimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	tp := trimmed.(*corev1.Pod)
	if diff := cmp.Diff("gke-tpu-1", tp.Spec.NodeName); diff != "" {
		t.Errorf("trimmed spec.nodeName (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff([]corev1.PodCondition{pod.Status.Conditions[0]}, tp.Status.Conditions); diff != "" {
		t.Errorf("trimmed conditions (-want,+got):\n%s", diff)
	}
	wantAnnotations := map[string]string{
		constants.KueuePodSetSliceRequiredTopologyAnnotation: constants.GCETopologySubblockKey,
		constants.KueuePodSetRequiredTopologyAnnotation:      constants.GCETopologyBlockKey,
	}
	if diff := cmp.Diff(wantAnnotations, tp.Annotations); diff != "" {
		t.Errorf("trimmed annotations (-want,+got):\n%s", diff)
	}
}

// TestTrimPodKeepsTheHostListsReferences: the reconciler re-creates a missing host lists
// ConfigMap from the cached Pod, so the cache keeps the references (and no inline list).
func TestTrimPodKeepsTheHostListsReferences(t *testing.T) {
	ref := func(name, cm string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Key: name}}}
	}
	pod := testutil.MakeWorkerPod("ml", "rc", "uid-rc", "tpu").Named("w").Topology("tpu7x", "2x2x2").TPU(2).Container("second", 2).
		TPUIdentity("tpu", 1, 2).Obj()
	pod.Spec.Containers[0].Env = append(pod.Spec.Containers[0].Env, ref(constants.EnvWorkerHostnames, "s-hosts-1"),
		corev1.EnvVar{Name: constants.EnvProcessAddresses, Value: strings.Repeat("x", 4096)}, ref(constants.EnvTorchSlicebuilderAddresses, "s-hosts-1"))
	pod.Spec.Containers[1].Env = append(pod.Spec.Containers[1].Env, ref(constants.EnvProcessAddresses, "s-hosts-2"))
	trimmed, err := TrimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	tp := trimmed.(*corev1.Pod)
	if diff := cmp.Diff([]string{"s-hosts-1", "s-hosts-2"}, tpuenv.ReferencedHostListsConfigMaps(tp, []int{0, 1})); diff != "" {
		t.Errorf("host lists ConfigMaps the trimmed Pod references (-want,+got):\n%s", diff)
	}
	for _, e := range tp.Spec.Containers[0].Env {
		if e.Name == constants.EnvProcessAddresses {
			t.Errorf("the trimmed Pod keeps the inline %s", e.Name)
		}
	}
}

func TestOptionsBindFlags(t *testing.T) {
	cases := map[string]struct {
		args []string
		want time.Duration
	}{
		"the claim timeout defaults to 6s, inside the webhook's 10s timeout": {want: allocator.DefaultTimeout},
		"--claim-timeout sets it": {args: []string{"--claim-timeout=3s"}, want: 3 * time.Second},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var opts Options
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			opts.BindFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if opts.ClaimTimeout != tc.want {
				t.Errorf("ClaimTimeout = %s, want %s", opts.ClaimTimeout, tc.want)
			}
		})
	}
	if allocator.DefaultTimeout >= 10*time.Second {
		t.Errorf("allocator.DefaultTimeout = %s, want it below the webhook timeout of 10s", allocator.DefaultTimeout)
	}
}

// TestTrimPodKeepsWhatPlacementReads: the cached Pod keeps its scheduling gates, tolerations and
// TPU requests (the placement step's gated Pods, their tolerations and chips), nothing more of
// the spec.
func TestTrimPodKeepsWhatPlacementReads(t *testing.T) {
	toleration := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "ml", Effect: corev1.TaintEffectNoSchedule}
	pod := testutil.MakeWorkerPod("ml", "rc", "uid-rc", "tpu").Named("w").UID("uid-w").Topology("tpu-v6e-slice", "4x4").TPU(4).
		SchedulingGate(tpuv1alpha1.PlacementSchedulingGate).SchedulingGate("example.com/other").Toleration(toleration).Obj()
	pod.Spec.PriorityClassName = "dropped"
	trimmed, err := TrimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	tp := trimmed.(*corev1.Pod)
	if diff := cmp.Diff(pod.Spec.SchedulingGates, tp.Spec.SchedulingGates); diff != "" {
		t.Errorf("trimmed scheduling gates (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff([]corev1.Toleration{toleration}, tp.Spec.Tolerations); diff != "" {
		t.Errorf("trimmed tolerations (-want,+got):\n%s", diff)
	}
	if got := gate.PodChips(tp); got != 4 {
		t.Errorf("trimmed Pod requests %d TPU chips, want 4", got)
	}
	if tp.Spec.PriorityClassName != "" {
		t.Errorf("trimmed Pod kept priorityClassName %q", tp.Spec.PriorityClassName)
	}
}

// TestTrimPodKeepsThePin: the cached Pod keeps its required node affinity, what gate.PinnedNode
// (a released Pod's Node, for the strand check and the pins left free) and gate.Pinnable read,
// and its required pod anti-affinity, what gate.Excluded reads, and no other affinity.
func TestTrimPodKeepsThePin(t *testing.T) {
	pinned := testutil.MakeWorkerPod("ml", "rc", "uid-rc", "tpu").Named("w").UID("uid-w").PinnedTo("n-7").Obj()
	pinned.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: "kubernetes.io/hostname"}}}
	pinned.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.WeightedPodAffinityTerm{{Weight: 1}}
	pinned.Spec.Affinity.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: "zone"}}}
	pinned.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.PreferredSchedulingTerm{{Weight: 1}}
	trimmed, err := TrimPod(pinned)
	if err != nil {
		t.Fatal(err)
	}
	tp := trimmed.(*corev1.Pod)
	if got := gate.PinnedNode(tp); got != "n-7" {
		t.Errorf("trimmed Pod is pinned to %q, want n-7", got)
	}
	want := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: pinned.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution,
	}, PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: "kubernetes.io/hostname"}},
	}}
	if diff := cmp.Diff(want, tp.Spec.Affinity); diff != "" {
		t.Errorf("trimmed affinity (-want,+got):\n%s", diff)
	}
	bare := testutil.MakeWorkerPod("ml", "rc", "uid-rc", "tpu").Named("w").UID("uid-w").Obj()
	bare.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{}}
	if trimmed, err = TrimPod(bare); err != nil || trimmed.(*corev1.Pod).Spec.Affinity != nil {
		t.Errorf("trimmed Pod without node affinity keeps %+v (err %v), want no affinity", trimmed.(*corev1.Pod).Spec.Affinity, err)
	}
}

// TestTrimNodeKeepsAllocatable: the TPU Node cache keeps what the placement step reads of a Node,
// its allocatable resources included (the chooser checks every resource a Pod requests).
func TestTrimNodeKeepsAllocatable(t *testing.T) {
	node := testutil.MakeNode("n").TPU("tpu-v6e-slice", "4x4", "pool-a").TPUCapacity(4).Ready(true).Obj()
	trimmed, err := nodes.Trim(node)
	if err != nil {
		t.Fatal(err)
	}
	got := placement.CandidateFromNode(trimmed.(*corev1.Node), nil, 0)
	want := placement.CandidateFromNode(node, nil, 0)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("candidate of the trimmed Node (-want,+got):\n%s", diff)
	}
}

func TestHostListsConfigMapAboveFlag(t *testing.T) {
	cases := map[string]struct {
		args    []string
		want    int32
		wantErr bool
	}{
		"64 hosts by default":        {want: 64},
		"a positive number of hosts": {args: []string{"--host-lists-configmap-above=1024"}, want: 1024},
		"-1: never":                  {args: []string{"--host-lists-configmap-above=-1"}, want: -1},
		"0 is refused":               {args: []string{"--host-lists-configmap-above=0"}, wantErr: true},
		"below -1 is refused":        {args: []string{"--host-lists-configmap-above=-2"}, wantErr: true},
		"not a number":               {args: []string{"--host-lists-configmap-above=many"}, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			opts, err := parseFlags(tc.args)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Parse(%v) = %v, want error %t", tc.args, err, tc.wantErr)
			}
			if !tc.wantErr && opts.Webhooks.HostListsConfigMapAbove != tc.want {
				t.Errorf("HostListsConfigMapAbove = %d, want %d", opts.Webhooks.HostListsConfigMapAbove, tc.want)
			}
		})
	}
}

// TestReservationWindow: --claim-reservation-window sets the window (0 turns reservations off), and
// the window is at most a quarter of the pending TTL and at most what the TTL leaves after the
// create cut-off and the commit slack (docs/spec.md §3.5).
func TestReservationWindow(t *testing.T) {
	cases := map[string]struct {
		args    []string
		want    time.Duration
		wantErr bool
	}{
		"2s by default": {want: allocator.DefaultReservationWindow},
		"inside the TTL's room after the cut-off":     {args: []string{"--claim-reservation-window=6s", "--pending-claim-ttl=40s"}, want: 4 * time.Second},
		"the default TTL leaves the default window":   {args: []string{"--claim-reservation-window=6s"}, want: 2 * time.Second},
		"a TTL with no room after the cut-off: off":   {args: []string{"--pending-claim-ttl=36s"}, want: -1},
		"a TTL inside the cut-off's slack: off":       {args: []string{"--pending-claim-ttl=35s"}, want: -1},
		"a shorter window":                            {args: []string{"--claim-reservation-window=500ms"}, want: 500 * time.Millisecond},
		"0: off":                                      {args: []string{"--claim-reservation-window=0"}, want: -1},
		"at most a quarter of the TTL":                {args: []string{"--pending-claim-ttl=8s"}, want: 2 * time.Second},
		"at most a quarter of the TTL, off stays off": {args: []string{"--pending-claim-ttl=8s", "--claim-reservation-window=0"}, want: -1},
		"negative is refused":                         {args: []string{"--claim-reservation-window=-1s"}, wantErr: true},
		"not a duration":                              {args: []string{"--claim-reservation-window=soon"}, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			opts, err := parseFlags(tc.args)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Parse(%v) = %v, want error %t", tc.args, err, tc.wantErr)
			}
			if got := reservationWindow(opts); !tc.wantErr && got != tc.want {
				t.Errorf("reservation window = %s, want %s", got, tc.want)
			}
		})
	}
	if got := reservationWindow(Options{}); got != allocator.DefaultReservationWindow {
		t.Errorf("reservation window of zero Options = %s, want the default %s", got, allocator.DefaultReservationWindow)
	}
}

// parseFlags binds Options' flags and parses args, as the manager does.
func parseFlags(args []string) (Options, error) {
	var opts Options
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	opts.BindFlags(fs)
	return opts, fs.Parse(args)
}

func TestRESTConfig(t *testing.T) {
	tests := []struct {
		name      string
		opts      Options
		wantQPS   float32
		wantBurst int
	}{
		{name: "defaults", wantQPS: DefaultKubeAPIQPS, wantBurst: DefaultKubeAPIBurst},
		{name: "set in Options", opts: Options{KubeAPIQPS: 20, KubeAPIBurst: 40}, wantQPS: 20, wantBurst: 40},
		{name: "the flag wins", opts: Options{KubeAPIQPS: 20, qps: 30}, wantQPS: 30, wantBurst: DefaultKubeAPIBurst},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := &rest.Config{Host: "https://example.invalid", QPS: 1, Burst: 2}
			got := RESTConfig(in, tc.opts)
			if got.QPS != tc.wantQPS || got.Burst != tc.wantBurst {
				t.Errorf("RESTConfig: QPS %v burst %d, want %v and %d", got.QPS, got.Burst, tc.wantQPS, tc.wantBurst)
			}
			if in.QPS != 1 || in.Burst != 2 || in.DisableCompression {
				t.Errorf("RESTConfig changed its argument: %+v", in)
			}
		})
	}
}

// The operator's client asks for no compressed responses, as kube-scheduler's and
// kube-controller-manager's do: the request reaches the API server with no Accept-Encoding.
func TestRESTConfigAsksForNoCompression(t *testing.T) {
	encodings := make(chan string, 1)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		encodings <- r.Header.Get("Accept-Encoding")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Success"}`)
	}))
	defer srv.Close()
	// TLS, as every API server is reached: client-go gives a plain HTTP config Go's default
	// transport, which ignores DisableCompression.
	cfg := RESTConfig(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, Options{})
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(srv.URL + "/api/v1/namespaces/default/pods")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if got := <-encodings; got != "" {
		t.Errorf("the operator's request carries Accept-Encoding %q, want none", got)
	}
}
