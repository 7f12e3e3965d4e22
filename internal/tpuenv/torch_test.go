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
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// addresses returns "<host>:<8471+p>" for every host, then p = 0..perHost-1, comma-joined.
func addresses(perHost int, hosts ...string) string {
	out := make([]string, 0, perHost*len(hosts))
	for _, h := range hosts {
		for p := range perHost {
			out = append(out, h+":"+strconv.Itoa(8471+p))
		}
	}
	return strings.Join(out, ",")
}

// hostsOf returns the multi-host names of replica 0 of group "tpu": "tpu-0-<h>.rc-headless"
// for h = 0..n-1.
func hostsOf(n int) []string {
	out := make([]string, 0, n)
	for h := range n {
		out = append(out, "tpu-0-"+strconv.Itoa(h)+"."+testSubdomain)
	}
	return out
}

// sliceOf returns host 0 of replica 0 of group "tpu", a slice of topology dims made of the given
// number of hosts, each with the given number of chips.
func sliceOf(dims []int32, hosts int32, chips int64, v7x bool) tpuenv.Values {
	return tpuenv.Values{
		GroupName: "tpu", ReplicaIndex: 0, Hosts: hosts, Subdomain: testSubdomain, V7x: v7x,
		SliceName: "rc-tpu-0", ClaimToken: testToken, Topology: dims, ChipsPerHost: chips,
	}
}

// torchCases are the TorchTPU values of one Pod of each TPU generation, single- and multi-host.
var torchCases = map[string]struct {
	id            tpuenv.Values
	wantTopology  string
	wantAddresses string
}{
	"v4 2x2x1 single-host: 4 ports on localhost": {
		id:            sliceOf([]int32{2, 2, 1}, 1, 4, false),
		wantTopology:  "2,2,1",
		wantAddresses: "localhost:8471,localhost:8472,localhost:8473,localhost:8474",
	},
	"v4 2x2x4 multi-host: 4 ports on each of 4 hosts": {
		id:            sliceOf([]int32{2, 2, 4}, 4, 4, false),
		wantTopology:  "2,2,4",
		wantAddresses: addresses(4, hostsOf(4)...),
	},
	"v5e 2x4 single-host of 8 chips: a 2-D shape gets a trailing 1, 8 ports": {
		id:           sliceOf([]int32{2, 4}, 1, 8, false),
		wantTopology: "2,4,1",
		wantAddresses: "localhost:8471,localhost:8472,localhost:8473,localhost:8474," +
			"localhost:8475,localhost:8476,localhost:8477,localhost:8478",
	},
	"v5e 2x4 multi-host of 4-chip hosts": {
		id:           sliceOf([]int32{2, 4}, 2, 4, false),
		wantTopology: "2,4,1",
		wantAddresses: "tpu-0-0.rc-headless:8471,tpu-0-0.rc-headless:8472,tpu-0-0.rc-headless:8473,tpu-0-0.rc-headless:8474," +
			"tpu-0-1.rc-headless:8471,tpu-0-1.rc-headless:8472,tpu-0-1.rc-headless:8473,tpu-0-1.rc-headless:8474",
	},
	"v6e 2x2 single-host": {
		id:            sliceOf([]int32{2, 2}, 1, 4, false),
		wantTopology:  "2,2,1",
		wantAddresses: addresses(4, "localhost"),
	},
	"v6e 4x4 multi-host: 16 addresses": {
		id:            sliceOf([]int32{4, 4}, 4, 4, false),
		wantTopology:  "4,4,1",
		wantAddresses: addresses(4, hostsOf(4)...),
	},
	"v6e 2x4 subslice of a 4x4 parent: its own topology and its 2 hosts, not the parent's": {
		id:            sliceOf([]int32{2, 4}, 2, 4, false),
		wantTopology:  "2,4,1",
		wantAddresses: addresses(4, hostsOf(2)...),
	},
	"v5p 2x2x1 single-host": {
		id:            sliceOf([]int32{2, 2, 1}, 1, 4, false),
		wantTopology:  "2,2,1",
		wantAddresses: addresses(4, "localhost"),
	},
	"v5p 2x2x4 multi-host": {
		id:            sliceOf([]int32{2, 2, 4}, 4, 4, false),
		wantTopology:  "2,2,4",
		wantAddresses: addresses(4, hostsOf(4)...),
	},
	"tpu7x 2x2x1 single-host: a core dimension of 2 and two ports per chip": {
		id:            sliceOf([]int32{2, 2, 1}, 1, 4, true),
		wantTopology:  "2,2,1,2",
		wantAddresses: addresses(8, "localhost"),
	},
	"tpu7x 1x1x1 single-chip host: two ports": {
		id:            sliceOf([]int32{1, 1, 1}, 1, 1, true),
		wantTopology:  "1,1,1,2",
		wantAddresses: "localhost:8471,localhost:8472",
	},
	"tpu7x 2x2x2 multi-host of two 2-chip containers: 8 ports per 4-chip host": {
		id:            sliceOf([]int32{2, 2, 2}, 2, 4, true),
		wantTopology:  "2,2,2,2",
		wantAddresses: addresses(8, hostsOf(2)...),
	},
	"tpu7x 4x12x16 dynamic slice of 192 hosts": {
		id:            sliceOf([]int32{4, 12, 16}, 192, 4, true),
		wantTopology:  "4,12,16,2",
		wantAddresses: addresses(8, hostsOf(192)...),
	},
	"an unknown 1-D accelerator topology is padded to three dimensions": {
		id:            sliceOf([]int32{8}, 2, 4, false),
		wantTopology:  "8,1,1",
		wantAddresses: addresses(4, hostsOf(2)...),
	},
}

func TestTorchTopologyAndAddresses(t *testing.T) {
	for name, tc := range torchCases {
		t.Run(name, func(t *testing.T) {
			if got := tpuenv.TorchTopology(tc.id.Topology, tc.id.V7x); got != tc.wantTopology {
				t.Errorf("TorchTopology(%v, v7x=%t) = %q, want %q", tc.id.Topology, tc.id.V7x, got, tc.wantTopology)
			}
			if diff := cmp.Diff(tc.wantAddresses, tpuenv.TorchSlicebuilderAddresses(tc.id)); diff != "" {
				t.Errorf("TorchSlicebuilderAddresses() (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestTorchAddressesMatchTopology checks what torch_tpu checks at start: the product of
// TORCH_TPU_TOPOLOGY is the number of slice-builder processes, one per address. The reference's
// subslice values (the parent's 4,4,1 with the subslice's 2 hosts) fail it.
func TestTorchAddressesMatchTopology(t *testing.T) {
	for name, tc := range torchCases {
		t.Run(name, func(t *testing.T) {
			product := 1
			for d := range strings.SplitSeq(tpuenv.TorchTopology(tc.id.Topology, tc.id.V7x), ",") {
				n, err := strconv.Atoi(d)
				if err != nil {
					t.Fatalf("TORCH_TPU_TOPOLOGY dimension %q: %v", d, err)
				}
				product *= n
			}
			if got := len(strings.Split(tpuenv.TorchSlicebuilderAddresses(tc.id), ",")); got != product {
				t.Errorf("%d slice-builder addresses for a TORCH_TPU_TOPOLOGY of %d processes", got, product)
			}
		})
	}
}

func TestTorchEdgeCases(t *testing.T) {
	long := sliceOf([]int32{4, 4}, 4, 4, false)
	long.GroupName = group60
	cases := map[string]struct {
		id            tpuenv.Values
		wantTopology  string
		wantAddresses string
	}{
		"without a topology there is no topology value (and Apply writes neither)": {
			id:            sliceOf(nil, 4, 4, false),
			wantAddresses: addresses(4, hostsOf(4)...),
		},
		"without chips per host there are no addresses": {
			id:           sliceOf([]int32{4, 4}, 4, 0, false),
			wantTopology: "4,4,1",
		},
		"without hosts there are no addresses": {
			id:           sliceOf([]int32{4, 4}, 0, 4, false),
			wantTopology: "4,4,1",
		},
		"long group names are shortened exactly as in TPU_WORKER_HOSTNAMES": {
			id:            long,
			wantTopology:  "4,4,1",
			wantAddresses: addresses(4, strings.Split(tpuenv.WorkerHostnames(group60, 0, 4, testSubdomain), ",")...),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tpuenv.TorchTopology(tc.id.Topology, tc.id.V7x); got != tc.wantTopology {
				t.Errorf("TorchTopology() = %q, want %q", got, tc.wantTopology)
			}
			if diff := cmp.Diff(tc.wantAddresses, tpuenv.TorchSlicebuilderAddresses(tc.id)); diff != "" {
				t.Errorf("TorchSlicebuilderAddresses() (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestApplyTorchEnv(t *testing.T) {
	v6e := sliceOf([]int32{2, 4}, 2, 4, false)
	v6e.WorkerID = 1
	v6eAddresses := addresses(4, hostsOf(2)...)
	owned := func(c *testutil.ContainerWrapper) *testutil.ContainerWrapper {
		return c.Env("TPU_WORKER_ID", "1").Env("TPU_NAME", "tpu-0").
			Env("TPU_WORKER_HOSTNAMES", "tpu-0-0.rc-headless,tpu-0-1.rc-headless")
	}
	cases := map[string]struct {
		id             tpuenv.Values
		containers     []corev1.Container
		tpuContainers  []int
		wantContainers []corev1.Container
	}{
		"a multi-host TPU container gets both after the hostnames": {
			id:            v6e,
			containers:    []corev1.Container{rayWorker().Obj()},
			tpuContainers: []int{0},
			wantContainers: []corev1.Container{owned(rayWorker()).
				Env("TORCH_TPU_TOPOLOGY", "2,4,1").Env("TORCH_TPU_SLICEBUILDER_ADDRESSES", v6eAddresses).
				EnvVars(devicePluginEnv()...).Obj()},
		},
		"a TORCH_TPU_TOPOLOGY the user set skips both": {
			id:             v6e,
			containers:     []corev1.Container{rayWorker().Env("TORCH_TPU_TOPOLOGY", "4,4,1").Obj()},
			tpuContainers:  []int{0},
			wantContainers: []corev1.Container{owned(rayWorker().Env("TORCH_TPU_TOPOLOGY", "4,4,1")).EnvVars(devicePluginEnv()...).Obj()},
		},
		"a TORCH_TPU_TOPOLOGY read from a ConfigMap skips both": {
			id:            v6e,
			containers:    []corev1.Container{rayWorker().EnvVars(configMapEnv("TORCH_TPU_TOPOLOGY", "torch", "topology")).Obj()},
			tpuContainers: []int{0},
			wantContainers: []corev1.Container{owned(rayWorker().EnvVars(configMapEnv("TORCH_TPU_TOPOLOGY", "torch", "topology"))).
				EnvVars(devicePluginEnv()...).Obj()},
		},
		"the user's addresses without a topology are kept and the topology is added": {
			id:            v6e,
			containers:    []corev1.Container{rayWorker().Env("TORCH_TPU_SLICEBUILDER_ADDRESSES", "a:1,b:1").Obj()},
			tpuContainers: []int{0},
			wantContainers: []corev1.Container{owned(rayWorker().Env("TORCH_TPU_SLICEBUILDER_ADDRESSES", "a:1,b:1")).
				Env("TORCH_TPU_TOPOLOGY", "2,4,1").EnvVars(devicePluginEnv()...).Obj()},
		},
		"an identity without the slice's shape writes neither": {
			id: func() tpuenv.Values {
				id := v6e
				id.Topology, id.ChipsPerHost = nil, 0
				return id
			}(),
			containers:     []corev1.Container{rayWorker().Obj()},
			tpuContainers:  []int{0},
			wantContainers: []corev1.Container{owned(rayWorker()).EnvVars(devicePluginEnv()...).Obj()},
		},
		"a single-host container gets localhost addresses": {
			id:            sliceOf([]int32{2, 2}, 1, 4, false),
			containers:    []corev1.Container{rayWorker().Obj()},
			tpuContainers: []int{0},
			wantContainers: []corev1.Container{rayWorker().Env("TPU_WORKER_ID", "0").Env("TPU_NAME", "tpu-0").
				Env("TORCH_TPU_TOPOLOGY", "2,2,1").Env("TORCH_TPU_SLICEBUILDER_ADDRESSES", addresses(4, "localhost")).
				EnvVars(devicePluginEnv()...).Obj()},
		},
		"every TPU container of a v7x Pod gets the same values, a CPU sidecar none": {
			id:            sliceOf([]int32{2, 2, 2}, 2, 4, true),
			containers:    []corev1.Container{testutil.MakeContainer("tpu-0").TPU(2).Obj(), testutil.MakeContainer("sidecar").Obj(), testutil.MakeContainer("tpu-1").TPU(2).Obj()},
			tpuContainers: []int{0, 2},
			wantContainers: func() []corev1.Container {
				hosts := strings.Join(hostsOf(2), ",")
				v7x := func(name string, c int) corev1.Container {
					return testutil.MakeContainer(name).TPU(2).Env("TPU_WORKER_ID", strconv.Itoa(c)).Env("TPU_NAME", "tpu-0").
						Env("TPU_WORKER_HOSTNAMES", hosts).
						Env("TPU_PROCESS_ADDRESSES", addresses(2, hostsOf(2)...)).
						Env("TPU_PROCESS_PORT", strconv.Itoa(8471+c)).
						Env("TORCH_TPU_TOPOLOGY", "2,2,2,2").
						Env("TORCH_TPU_SLICEBUILDER_ADDRESSES", addresses(8, hostsOf(2)...)).
						EnvVars(devicePluginEnv()...).Obj()
				}
				return []corev1.Container{v7x("tpu-0", 0), testutil.MakeContainer("sidecar").Obj(), v7x("tpu-1", 1)}
			}(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := workerPod("tpu", tc.containers...).Obj()
			tpuenv.Apply(pod, tc.id, tc.tpuContainers)
			if diff := cmp.Diff(tc.wantContainers, pod.Spec.Containers); diff != "" {
				t.Errorf("Containers after Apply (-want,+got):\n%s", diff)
			}
			again := pod.DeepCopy()
			tpuenv.Apply(again, tc.id, tc.tpuContainers)
			if diff := cmp.Diff(pod, again); diff != "" {
				t.Errorf("A second Apply changed the Pod (-first,+second):\n%s", diff)
			}
		})
	}
}

// TestTorchEnvOnlyWhenItFitsAnEnvEntry: a slice whose slice-builder addresses are longer than one
// environment entry may be (Linux MAX_ARG_STRLEN, 128 KiB) gets neither TorchTPU variable: its
// containers could not be started.
func TestTorchEnvOnlyWhenItFitsAnEnvEntry(t *testing.T) {
	id := func(hosts int32) tpuenv.Values {
		return tpuenv.Values{GroupName: "tpu", Hosts: hosts, Subdomain: "rc-headless", Topology: []int32{16, 16, 16}, ChipsPerHost: 4}
	}
	for hosts, want := range map[int32]bool{64: true, 1024: true, 2240: false} {
		var env []corev1.EnvVar
		pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "w"}}}}
		tpuenv.Apply(pod, id(hosts), []int{0})
		env = pod.Spec.Containers[0].Env
		got := false
		for _, e := range env {
			if e.Name == "TORCH_TPU_SLICEBUILDER_ADDRESSES" {
				got = true
				if n := len(e.Name) + 1 + len(e.Value) + 1; n > 32*4096 {
					t.Errorf("%d hosts: the addresses take %d bytes, more than an env entry may", hosts, n)
				}
			}
		}
		if got != want {
			t.Errorf("%d hosts: TORCH_TPU_SLICEBUILDER_ADDRESSES set = %t, want %t", hosts, got, want)
		}
		if full := len(tpuenv.TorchSlicebuilderAddresses(id(hosts))) + len("TORCH_TPU_SLICEBUILDER_ADDRESSES") + 2; (full <= 32*4096) != want {
			t.Errorf("%d hosts: the full value takes %d bytes; set = %t disagrees", hosts, full, want)
		}
	}
}
