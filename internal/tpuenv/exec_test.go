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
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// The longest names a multi-host Pod can have: a RayCluster name whose headless Service,
// "<cluster>-headless", is a 63-character DNS label (the webhook denies a longer one), and a
// 63-character worker group name (a label value), whose hostnames naming.Hostname shortens.
var (
	longCluster = strings.Repeat("c", 63-len("-headless"))
	longGroup   = strings.Repeat("g", 63)
	// A group of 56 characters keeps its name in hostnames: "<group>-0-2399" is 63 characters,
	// the longest hostname there is.
	longestHostGroup = strings.Repeat("h", 56)
)

// execCase is one of the largest Pods of an accelerator: every chip of the host in one TPU
// container, or (v7x) in containers of one chip each.
type execCase struct {
	accelerator string
	dims        []int32
	chips       int64
	containers  int
	group       string
	hosts       int32
}

// execCases are the largest Pods each accelerator allows at --max-slice-hosts (2,400), with the
// longest names, and the two reports (docs/spec.md §4, "Every admitted Pod can start").
var execCases = map[string]execCase{
	"v4, 2,400 hosts of 4 chips, long names":  {accelerator: "tpu-v4-podslice", dims: []int32{16, 24, 25}, chips: 4, containers: 1, group: longGroup, hosts: 2400},
	"v5e, 2,400 hosts of 4 chips, long names": {accelerator: "tpu-v5-lite-podslice", dims: []int32{96, 100}, chips: 4, containers: 1, group: longGroup, hosts: 2400},
	"v5e, 2,400 hosts of 8 chips, long names": {accelerator: "tpu-v5-lite-podslice", dims: []int32{120, 160}, chips: 8, containers: 1, group: longGroup, hosts: 2400},
	"v5p, 2,400 hosts of 4 chips, long names": {accelerator: "tpu-v5p-slice", dims: []int32{16, 24, 25}, chips: 4, containers: 1, group: longGroup, hosts: 2400},
	"v5p, 2,240 hosts, 31-character group (the issue's 198 KB TPU_WORKER_HOSTNAMES)": {
		accelerator: "tpu-v5p-slice", dims: []int32{16, 20, 28}, chips: 4, containers: 1, group: strings.Repeat("w", 31), hosts: 2240,
	},
	"v6e, 2,400 hosts of 4 chips, long names":         {accelerator: "tpu-v6e-slice", dims: []int32{96, 100}, chips: 4, containers: 1, group: longGroup, hosts: 2400},
	"tpu7x, 2,400 hosts, 1 TPU container, long names": {accelerator: "tpu7x", dims: []int32{16, 24, 25}, chips: 4, containers: 1, group: longGroup, hosts: 2400},
	"tpu7x, 2,304 hosts, 4 TPU containers, short names (the issue's 373 KB TPU_PROCESS_ADDRESSES): denied": {
		accelerator: "tpu7x", dims: []int32{16, 24, 24}, chips: 4, containers: 4, group: "tpu", hosts: 2304,
	},
	"tpu7x, 2,400 hosts, 4 TPU containers, long names: denied": {accelerator: "tpu7x", dims: []int32{16, 24, 25}, chips: 4, containers: 4, group: longGroup, hosts: 2400},
	"v5p, 2,400 hosts, 56-character group (63-character hostnames): denied": {
		accelerator: "tpu-v5p-slice", dims: []int32{16, 24, 25}, chips: 4, containers: 1, group: longestHostGroup, hosts: 2400,
	},
}

// TestLargestPodsExec builds the environment of the largest Pod of every accelerator, as the
// kubelet hands it to the container (ConfigMap references resolved, fieldRefs filled, $(VAR)
// expanded) and execs a real process with it. A Pod the webhook would admit (HostListsFit and
// ExecFits say so) must start; one it would deny must be one Linux refuses. Where a case is
// denied, the largest host count of its shape that is admitted is exec'd as well, so every
// accelerator and container count has a Pod at its limit that really starts.
func TestLargestPodsExec(t *testing.T) {
	trueBinary, err := exec.LookPath("true")
	if err != nil {
		t.Skipf("no true binary to exec: %v", err)
	}
	for name, tc := range execCases {
		t.Run(name, func(t *testing.T) {
			vals := execValues(tc, tc.hosts)
			fitErr := tpuenv.HostListsFit(vals, tc.containers)
			for _, inConfigMap := range []bool{false, true} {
				pod, vals := buildExecPod(tc, vals, inConfigMap)
				admitted := fitErr == nil && tpuenv.ExecFits(pod, vals, tpuContainers(tc.containers)) == nil
				env := kubeletEnv(pod, vals, tc.containers)
				execErr := execWith(trueBinary, env)
				t.Logf("%d hosts, ConfigMap %t: admitted %t, longest entry %d bytes, environment %d bytes, exec: %v",
					tc.hosts, inConfigMap, admitted, longestEntry(env), envSize(env), execErr)
				if wantAdmitted := !strings.HasSuffix(name, ": denied"); admitted != wantAdmitted {
					t.Errorf("admitted %t, want %t (HostListsFit: %v)", admitted, wantAdmitted, fitErr)
				}
				if admitted && execErr != nil {
					t.Errorf("the webhook admits the Pod, but its container cannot start: %v", execErr)
				}
				if !admitted && execErr == nil {
					t.Errorf("the webhook denies the Pod (%v), but its container starts", fitErr)
				}
			}
			if fitErr == nil {
				return
			}
			largest := largestAdmitted(tc)
			if largest < 2 {
				t.Fatalf("no multi-host slice of this shape is admitted")
			}
			pod, vals := buildExecPod(tc, execValues(tc, largest), true)
			if err := execWith(trueBinary, kubeletEnv(pod, vals, tc.containers)); err != nil {
				t.Errorf("the largest admitted slice of this shape (%d hosts) cannot start: %v", largest, err)
			}
			t.Logf("largest admitted: %d hosts", largest)
		})
	}
}

// TestLargestPodsAdmitted pins which of execCases the webhook admits: every accelerator with one
// TPU container at --max-slice-hosts with the longest names; tpu7x with four containers and
// hostnames of 63 characters at 2,400 hosts are denied, since no form of their lists fits.
func TestLargestPodsAdmitted(t *testing.T) {
	for name, tc := range execCases {
		t.Run(name, func(t *testing.T) {
			err := tpuenv.HostListsFit(execValues(tc, tc.hosts), tc.containers)
			wantDenied := strings.HasSuffix(name, ": denied")
			if (err != nil) != wantDenied {
				t.Errorf("HostListsFit() = %v, want denied %t", err, wantDenied)
			}
		})
	}
}

// TestShortHostNames checks the two forms of the host lists and the Pod's search domain.
func TestShortHostNames(t *testing.T) {
	cases := map[string]struct {
		tc            execCase
		wantShort     bool
		wantFirstHost string
	}{
		"a 64-host slice keeps qualified names": {
			tc: execCase{accelerator: "tpu-v6e-slice", dims: []int32{16, 16}, chips: 4, containers: 1, group: "tpu", hosts: 64}, wantFirstHost: "tpu-0-0." + longCluster + "-headless",
		},
		"a 2,240-host slice with a long cluster name takes bare hostnames": {
			tc: execCase{accelerator: "tpu-v5p-slice", dims: []int32{16, 20, 28}, chips: 4, containers: 1, group: "tpu", hosts: 2240}, wantShort: true, wantFirstHost: "tpu-0-0",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			vals := execValues(tc.tc, tc.tc.hosts)
			if got := tpuenv.ShortHostNames(vals, tc.tc.containers); got != tc.wantShort {
				t.Errorf("ShortHostNames() = %t, want %t", got, tc.wantShort)
			}
			pod, vals := buildExecPod(tc.tc, vals, false)
			env := envMap(kubeletEnv(pod, vals, tc.tc.containers))
			if got, _, _ := strings.Cut(env[constants.EnvWorkerHostnames], ","); got != tc.wantFirstHost {
				t.Errorf("first TPU_WORKER_HOSTNAMES entry = %q, want %q", got, tc.wantFirstHost)
			}
			var wantSearches []string
			if tc.wantShort {
				wantSearches = []string{longCluster + "-headless.ns.svc.cluster.local"}
			}
			var gotSearches []string
			if pod.Spec.DNSConfig != nil {
				gotSearches = pod.Spec.DNSConfig.Searches
			}
			if diff := cmp.Diff(wantSearches, gotSearches); diff != "" {
				t.Errorf("dnsConfig.searches (-want,+got):\n%s", diff)
			}
			// Applying again adds nothing (Apply is idempotent).
			tpuenv.Apply(pod, vals, tpuContainers(tc.tc.containers))
			if pod.Spec.DNSConfig != nil && len(pod.Spec.DNSConfig.Searches) != len(wantSearches) {
				t.Errorf("Apply twice: searches %v", pod.Spec.DNSConfig.Searches)
			}
		})
	}
}

// TestExecFits checks the whole-environment rules on the user's own entries.
func TestExecFits(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	cases := map[string]struct {
		env     []corev1.EnvVar
		args    []string
		wantErr string
	}{
		"a small environment fits": {env: []corev1.EnvVar{{Name: "A", Value: "b"}}},
		"one entry of 128 KiB does not": {
			env: []corev1.EnvVar{{Name: "A", Value: strings.Repeat("x", 128<<10)}}, wantErr: "environment variable A would be",
		},
		"a $(VAR) reference counts as what it expands to": {
			env:     []corev1.EnvVar{{Name: "A", Value: big}, {Name: "B", Value: "$(A)$(A)"}},
			wantErr: "environment variable B would be",
		},
		"$$ is a literal dollar": {env: []corev1.EnvVar{{Name: "A", Value: big}, {Name: "B", Value: "$$(A)$$(A)"}}},
		"arguments and environment beyond the budget do not fit": {
			env: []corev1.EnvVar{{Name: "A", Value: big}}, args: slicesOf(big, 20), wantErr: "command, arguments and environment would take",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ec := execCase{accelerator: "tpu-v6e-slice", dims: []int32{4, 4}, chips: 4, containers: 1, group: "tpu", hosts: 4}
			pod, vals := buildExecPod(ec, execValues(ec, 4), false)
			pod.Spec.Containers[0].Env = append(tc.env, pod.Spec.Containers[0].Env...)
			pod.Spec.Containers[0].Args = tc.args
			err := tpuenv.ExecFits(pod, vals, []int{0})
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("ExecFits() = %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}

func slicesOf(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func execValues(tc execCase, hosts int32) tpuenv.Values {
	subdomain := naming.HeadlessServiceName(longCluster)
	return tpuenv.Values{
		GroupName: tc.group, ReplicaIndex: 0, WorkerID: 0, Hosts: hosts, Subdomain: subdomain,
		V7x: topology.IsV7x(tc.accelerator), SliceName: naming.SliceName(longCluster, tc.group, 0), ClaimToken: "t",
		Topology: tc.dims, ChipsPerHost: tc.chips, AffinityTopologyKey: "cloud.google.com/gke-nodepool",
		DNSSearch: tpuenv.DNSSearchDomain(subdomain, "ns", tpuenv.DefaultClusterDomain),
	}
}

// largestAdmitted is the largest host count of tc's shape whose host lists fit.
func largestAdmitted(tc execCase) int32 {
	lo, hi := int32(1), tc.hosts
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if tpuenv.HostListsFit(execValues(tc, mid), tc.containers) == nil {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

func tpuContainers(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// buildExecPod is the Pod the webhook would make of a KubeRay worker of tc (a few variables of
// the user's, as a Ray image sets them), with its host lists inline or in the slice's ConfigMap.
func buildExecPod(tc execCase, vals tpuenv.Values, inConfigMap bool) (*corev1.Pod, tpuenv.Values) {
	vals.HostListsInConfigMap = inConfigMap
	pod := &corev1.Pod{}
	perContainer := tc.chips / int64(tc.containers)
	for c := range tc.containers {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
			Name: "tpu-" + string(rune('a'+c)),
			Env: []corev1.EnvVar{
				{Name: "RAY_ADDRESS", Value: longCluster + "-head-svc.ns.svc.cluster.local:6379"},
				{Name: "JAX_PLATFORMS", Value: "tpu,cpu"},
			},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				constants.TPUResourceName: *resource.NewQuantity(perContainer, resource.DecimalSI),
			}},
		})
	}
	tpuenv.Apply(pod, vals, tpuContainers(tc.containers))
	return pod, vals
}

// kubeletEnv is the environment of container 0 of pod as the kubelet passes it to execve.
func kubeletEnv(pod *corev1.Pod, vals tpuenv.Values, n int) []string {
	cm := tpuenv.HostListsConfigMap("ns", vals, n)
	values := map[string]string{}
	env := make([]string, 0, len(pod.Spec.Containers[0].Env))
	for _, e := range pod.Spec.Containers[0].Env {
		v := e.Value
		switch {
		case e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil:
			v = cm.Data[e.ValueFrom.ConfigMapKeyRef.Key]
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			v = "10.128.15.254"
		default:
			v = expand(v, values)
		}
		values[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	return env
}

var reference = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

func expand(s string, values map[string]string) string {
	return reference.ReplaceAllStringFunc(s, func(ref string) string {
		if v, ok := values[ref[2:len(ref)-1]]; ok {
			return v
		}
		return ref
	})
}

// execWith runs binary with exactly env, as a container's process starts.
func execWith(binary string, env []string) error {
	cmd := exec.Command(binary)
	cmd.Env = env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

func longestEntry(env []string) int {
	longest := 0
	for _, e := range env {
		longest = max(longest, len(e)+1)
	}
	return longest
}

func envSize(env []string) int {
	size := 0
	for _, e := range env {
		size += len(e) + 1
	}
	return size
}

func envMap(env []string) map[string]string {
	out := map[string]string{}
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		out[k] = v
	}
	return out
}
