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

package tpuenv_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

func TestHostListsInConfigMap(t *testing.T) {
	cases := map[string]struct {
		hosts, above int32
		want         bool
	}{
		"a v6e-256 (64 hosts) under the default keeps its lists inline": {hosts: 64, above: 0},
		"65 hosts under the default use the ConfigMap":                  {hosts: 65, above: 0, want: true},
		"2,240 hosts under the default":                                 {hosts: 2240, above: 0, want: true},
		"a single host never, whatever the flag":                        {hosts: 1, above: 1},
		"two hosts above 1":                                             {hosts: 2, above: 1, want: true},
		"at the flag's value, inline":                                   {hosts: 16, above: 16},
		"-1 is never":                                                   {hosts: 2304, above: -1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tpuenv.HostListsInConfigMap(tc.hosts, tc.above); got != tc.want {
				t.Errorf("HostListsInConfigMap(%d, %d) = %t, want %t", tc.hosts, tc.above, got, tc.want)
			}
		})
	}
}

// hostListsCase is a Pod and the identity Apply writes into it, with host lists inline and from the
// slice's ConfigMap.
type hostListsCase struct {
	pod  *corev1.Pod
	vals tpuenv.Values
}

func hostListsCases() map[string]hostListsCase {
	v5p := func(hosts int32, dims ...int32) tpuenv.Values {
		v := multiHost(hosts - 1)
		v.Hosts, v.Topology, v.ChipsPerHost = hosts, dims, 4
		return v
	}
	v7xSlice := v7x(1, 1, 2)
	v7xSlice.Topology, v7xSlice.ChipsPerHost = []int32{2, 2, 2}, 2
	return map[string]hostListsCase{
		"v5p 4x4x4 (16 hosts) with TorchTPU": {
			pod:  workerPod(testGroup, rayWorker().Obj()).Obj(),
			vals: v5p(16, 4, 4, 4),
		},
		"v5p 16x20x28 (2,240 hosts): TorchTPU addresses do not fit, hostnames do": {
			pod:  workerPod(testGroup, rayWorker().Obj()).Obj(),
			vals: v5p(2240, 16, 20, 28),
		},
		"a user's TPU_WORKER_HOSTNAMES and TORCH_TPU_TOPOLOGY": {
			pod: workerPod(testGroup, rayWorker().Env(constants.EnvWorkerHostnames, "mine").
				Env(constants.EnvTorchTopology, "1,1,1").Obj()).Obj(),
			vals: v5p(16, 4, 4, 4),
		},
		"v7x with two TPU containers, a sidecar and multislice": {
			pod: workerPod(testGroup,
				testutil.MakeContainer("tpu-0").TPU(2).Env(constants.EnvMegascaleNumSlices, "2").Obj(),
				testutil.MakeContainer("sidecar").Obj(),
				testutil.MakeContainer("tpu-1").TPU(2).Env(constants.EnvMegascaleNumSlices, "2").Obj(),
			).Obj(),
			vals: v7xSlice,
		},
		"v7x with the user's TPU_PROCESS_ADDRESSES": {
			pod: workerPod(testGroup,
				testutil.MakeContainer("tpu-0").TPU(2).Env(constants.EnvProcessAddresses, "a:1,b:2").Obj(),
				testutil.MakeContainer("tpu-1").TPU(2).Obj(),
			).Obj(),
			vals: v7xSlice,
		},
		"a single host keeps its values inline": {
			pod:  workerPod(testGroup, testutil.MakeContainer("tpu-0").TPU(2).Obj(), testutil.MakeContainer("tpu-1").TPU(2).Obj()).Obj(),
			vals: v7x(0, 0, 1),
		},
	}
}

// TestHostListsFromConfigMapResolveAsInline checks that a container sees the same environment
// whether the host lists are inline or come from the slice's ConfigMap: each container's env is
// resolved as the kubelet does (docs/spec.md §4).
func TestHostListsFromConfigMapResolveAsInline(t *testing.T) {
	for name, tc := range hostListsCases() {
		t.Run(name, func(t *testing.T) {
			tpuContainers := topology.TPUContainers(&tc.pod.Spec)
			inline := tc.pod.DeepCopy()
			tpuenv.Apply(inline, tc.vals, tpuContainers)
			fromConfigMap := tc.pod.DeepCopy()
			vals := tc.vals
			vals.HostListsInConfigMap = true
			tpuenv.Apply(fromConfigMap, vals, tpuContainers)
			cm := tpuenv.HostListsConfigMap(testNamespace, vals, len(tpuContainers))

			for i := range inline.Spec.Containers {
				want, err := resolveEnv(inline.Spec.Containers[i].Env, nil)
				if err != nil {
					t.Fatalf("resolving the inline env of container %d: %v", i, err)
				}
				got, err := resolveEnv(fromConfigMap.Spec.Containers[i].Env, cm)
				if err != nil {
					t.Fatalf("resolving the env of container %d with the ConfigMap: %v", i, err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("container %d's resolved environment (-inline +from the ConfigMap):\n%s", i, diff)
				}
			}
			if diff := cmp.Diff(inline, fromConfigMap, cmpopts.IgnoreFields(corev1.Container{}, "Env")); diff != "" {
				t.Errorf("the Pods differ besides their env (-inline +from the ConfigMap):\n%s", diff)
			}
			if vals.Hosts < 2 {
				// A single host's lists are short: inline, whatever vals ask.
				if refs := tpuenv.ReferencedHostListsConfigMaps(fromConfigMap, tpuContainers); len(refs) > 0 {
					t.Errorf("a single-host Pod references ConfigMaps %v", refs)
				}
				return
			}
			for _, i := range tpuContainers {
				for _, e := range fromConfigMap.Spec.Containers[i].Env {
					if len(e.Value) > 64 {
						t.Errorf("container %d has %s inline (%d bytes); Pods of a slice in a ConfigMap carry no host list", i, e.Name, len(e.Value))
					}
				}
			}
		})
	}
}

// TestPodSizeDoesNotGrowWithTheSlice checks the point of the ConfigMap: a Pod of a 2,240-host slice
// is as large as one of a 16-host slice.
func TestPodSizeDoesNotGrowWithTheSlice(t *testing.T) {
	size := func(hosts int32, dims []int32, inConfigMap bool) int {
		pod := workerPod(testGroup, rayWorker().Obj()).Obj()
		v := multiHost(hosts - 1)
		v.Hosts, v.Topology, v.ChipsPerHost, v.HostListsInConfigMap = hosts, dims, 4, inConfigMap
		tpuenv.Apply(pod, v, []int{0})
		data, err := json.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		return len(data)
	}
	small, big := size(16, []int32{4, 4, 4}, true), size(2240, []int32{16, 20, 28}, true)
	if big-small > 16 {
		t.Errorf("a Pod of 2,240 hosts takes %d bytes, of 16 hosts %d: with the ConfigMap its size must not grow with the slice", big, small)
	}
	if inline := size(2240, []int32{16, 20, 28}, false); inline < 20*big {
		t.Errorf("inline, a Pod of 2,240 hosts takes %d bytes, only %d times one with the ConfigMap (%d bytes)", inline, inline/big, big)
	}
}

func TestHostListsConfigMap(t *testing.T) {
	vals := multiHost(3)
	vals.Topology, vals.ChipsPerHost, vals.HostListsInConfigMap = []int32{2, 2, 4}, 4, true
	got := tpuenv.HostListsConfigMap(testNamespace, vals, 1)
	wantName := tpuenv.HostListsConfigMapName(vals, 1)
	if got.Name != wantName || got.Namespace != testNamespace || got.Labels[tpuv1alpha1.SliceLabel] != vals.SliceName ||
		got.Immutable == nil || !*got.Immutable {
		t.Errorf("HostListsConfigMap() = %s/%s labels %v immutable %v, want %s/%s labeled %s=%s, immutable",
			got.Namespace, got.Name, got.Labels, got.Immutable, testNamespace, wantName, tpuv1alpha1.SliceLabel, vals.SliceName)
	}
	wantData := map[string]string{
		constants.EnvWorkerHostnames:            hostnames4,
		constants.EnvTorchSlicebuilderAddresses: tpuenv.TorchSlicebuilderAddresses(vals),
	}
	if diff := cmp.Diff(wantData, got.Data); diff != "" {
		t.Errorf("HostListsConfigMap().Data (-want +got):\n%s", diff)
	}
}

// TestHostListsConfigMapName checks that the name is a valid ConfigMap name that changes with
// everything the lists are built from, and only with that.
func TestHostListsConfigMapName(t *testing.T) {
	base := v7x(3, 0, 64)
	base.SliceName = "a-cluster-name-that-is-quite-long-tpu-group-0123abcd-3" // 53 characters
	base.Topology, base.ChipsPerHost = []int32{4, 4, 16}, 4
	changes := map[string]func(*tpuenv.Values, *int){
		"group":          func(v *tpuenv.Values, _ *int) { v.GroupName = "other" },
		"replica":        func(v *tpuenv.Values, _ *int) { v.ReplicaIndex = 4 },
		"hosts":          func(v *tpuenv.Values, _ *int) { v.Hosts = 65 },
		"subdomain":      func(v *tpuenv.Values, _ *int) { v.Subdomain = "other-headless" },
		"accelerator":    func(v *tpuenv.Values, _ *int) { v.V7x = false },
		"topology":       func(v *tpuenv.Values, _ *int) { v.Topology = []int32{4, 16, 4} },
		"chips per host": func(v *tpuenv.Values, _ *int) { v.ChipsPerHost = 2 },
		"TPU containers": func(_ *tpuenv.Values, n *int) { *n = 2 },
	}
	baseName := tpuenv.HostListsConfigMapName(base, 1)
	if problems := validation.IsDNS1123Subdomain(baseName); len(problems) > 0 {
		t.Errorf("HostListsConfigMapName() = %q, not a valid ConfigMap name: %v", baseName, problems)
	}
	same := base
	same.WorkerID, same.ClaimToken, same.Placement = 7, "other", tpuv1alpha1.PlacementChosenDomain
	if got := tpuenv.HostListsConfigMapName(same, 1); got != baseName {
		t.Errorf("the name changed with the worker ID, token or placement: %q, want %q", got, baseName)
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			v, n := base, 1
			v.Topology = append([]int32(nil), base.Topology...)
			change(&v, &n)
			if got := tpuenv.HostListsConfigMapName(v, n); got == baseName {
				t.Errorf("HostListsConfigMapName() is %q whether or not the %s changes", got, name)
			}
		})
	}
}

func TestReferencedHostListsConfigMaps(t *testing.T) {
	vals := v7x(1, 1, 2)
	vals.HostListsInConfigMap = true
	pod := workerPod(testGroup, testutil.MakeContainer("tpu-0").TPU(2).Obj(), testutil.MakeContainer("sidecar").Obj(),
		testutil.MakeContainer("tpu-1").TPU(2).Obj()).Obj()
	tpuenv.Apply(pod, vals, []int{0, 2})
	// A reference of another key, and one of the sidecar, are not the operator's.
	pod.Spec.Containers[0].Env = append(pod.Spec.Containers[0].Env, configMapEnv(constants.EnvWorkerHostnames+"_COPY", "mine", constants.EnvWorkerHostnames))
	pod.Spec.Containers[1].Env = append(pod.Spec.Containers[1].Env, configMapEnv(constants.EnvWorkerHostnames, "sidecars", constants.EnvWorkerHostnames))
	want := []string{tpuenv.HostListsConfigMapName(vals, 2)}
	if diff := cmp.Diff(want, tpuenv.ReferencedHostListsConfigMaps(pod, []int{0, 2})); diff != "" {
		t.Errorf("ReferencedHostListsConfigMaps() (-want +got):\n%s", diff)
	}
}

// varRef is a $(VAR) reference, which the kubelet expands in a literal value with the variables
// defined before it ($$ escapes a $).
var varRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// resolveEnv returns the environment a container with env gets from the kubelet, with the
// ConfigMap cm (nil for none) and a Pod whose status.hostIP is 10.0.0.7: literal values with $(VAR)
// expanded, fieldRef and configMapKeyRef values read. A reference to a ConfigMap or key that does
// not exist is an error, as it is to the kubelet (CreateContainerConfigError), unless optional.
func resolveEnv(env []corev1.EnvVar, cm *corev1.ConfigMap) (map[string]string, error) {
	out := make(map[string]string, len(env))
	for _, e := range env {
		switch {
		case e.ValueFrom == nil:
			out[e.Name] = varRef.ReplaceAllStringFunc(e.Value, func(ref string) string {
				if ref == "$$" {
					return "$"
				}
				if v, ok := out[ref[2:len(ref)-1]]; ok {
					return v
				}
				return ref
			})
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.hostIP":
			out[e.Name] = "10.0.0.7"
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			if cm == nil || cm.Name != ref.Name {
				return nil, fmt.Errorf("%s: ConfigMap %q not found", e.Name, ref.Name)
			}
			v, ok := cm.Data[ref.Key]
			if !ok {
				return nil, fmt.Errorf("%s: key %q not found in ConfigMap %q", e.Name, ref.Key, ref.Name)
			}
			out[e.Name] = v
		default:
			return nil, fmt.Errorf("%s: a source this test does not resolve: %+v", e.Name, e.ValueFrom)
		}
	}
	return out, nil
}
