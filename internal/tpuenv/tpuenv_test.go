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
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

const (
	testNamespace = "ml"
	testGroup     = "tpu-group"
	testSubdomain = "rc-headless"
	testToken     = "c0ffee"

	// group60 is a 60-character group name: "<group60>-<r>-<h>" is longer than a DNS label.
	group60 = "tpu-worker-group-with-a-rather-long-descriptive-name-v6e-256"
)

// workerPod returns a KubeRay worker Pod of group with containers, as it reaches the webhook.
func workerPod(group string, containers ...corev1.Container) *testutil.PodWrapper {
	return testutil.MakeWorkerPod(testNamespace, "rc", "rc-uid", group).Containers(containers...)
}

// rayWorker returns the TPU container of a KubeRay worker Pod with one variable of its own.
func rayWorker() *testutil.ContainerWrapper {
	return testutil.MakeContainer("ray-worker").TPU(4).Env("RAY_memory_monitor_refresh_ms", "0")
}

// devicePluginEnv returns the TPU_DEVICE_PLUGIN_* entries Apply adds when the user set neither.
func devicePluginEnv() []corev1.EnvVar {
	return []corev1.EnvVar{
		fieldRefEnv("TPU_DEVICE_PLUGIN_HOST_IP", "status.hostIP"),
		{Name: "TPU_DEVICE_PLUGIN_ADDR", Value: "$(TPU_DEVICE_PLUGIN_HOST_IP):2112"},
	}
}

// sliceAffinityTerm is the required pod affinity term Apply adds for slice.
func sliceAffinityTerm(slice string) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tpu.ray.io/slice": slice}},
		TopologyKey:   "cloud.google.com/gke-nodepool",
	}
}

// otherSlicesTerm is the required pod anti-affinity term Apply adds for slice against the other
// slices of its own namespace (it names no namespace).
func otherSlicesTerm(slice string) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "tpu.ray.io/slice", Operator: metav1.LabelSelectorOpExists},
			{Key: "tpu.ray.io/slice", Operator: metav1.LabelSelectorOpNotIn, Values: []string{slice}},
		}},
		TopologyKey: "cloud.google.com/gke-nodepool",
	}
}

// otherNamespacesTerm is the required pod anti-affinity term Apply adds for a Pod of namespace
// against every slice of every other namespace.
func otherNamespacesTerm(namespace string) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "tpu.ray.io/slice", Operator: metav1.LabelSelectorOpExists},
		}},
		TopologyKey: "cloud.google.com/gke-nodepool",
		NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{namespace}},
		}},
	}
}

// legacyOtherSlicesTerm is the single anti-affinity term versions before issue 44 added for
// slice: every other slice name, in every namespace.
func legacyOtherSlicesTerm(slice string) corev1.PodAffinityTerm {
	t := otherSlicesTerm(slice)
	t.NamespaceSelector = &metav1.LabelSelector{}
	return t
}

// sliceAffinity is the affinity of a multi-host Pod of slice, in testNamespace, that had none.
func sliceAffinity(slice string) *corev1.Affinity {
	return &corev1.Affinity{
		PodAffinity: &corev1.PodAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{sliceAffinityTerm(slice)},
		},
		PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{otherSlicesTerm(slice), otherNamespacesTerm(testNamespace)},
		},
	}
}

// singleHost is replica 2 of a group of one-host slices.
var singleHost = tpuenv.Values{
	GroupName:    testGroup,
	ReplicaIndex: 2,
	WorkerID:     0,
	Hosts:        1,
	Subdomain:    testSubdomain,
	SliceName:    "rc-tpu-group-2",
	ClaimToken:   testToken,
}

// multiHost is host worker of replica 1 of a group of four-host slices.
func multiHost(worker int32) tpuenv.Values {
	return tpuenv.Values{
		GroupName:    testGroup,
		ReplicaIndex: 1,
		WorkerID:     worker,
		Hosts:        4,
		Subdomain:    testSubdomain,
		SliceName:    "rc-tpu-group-1",
		ClaimToken:   testToken,
	}
}

// hostnames4 is TPU_WORKER_HOSTNAMES of multiHost.
const hostnames4 = "tpu-group-1-0.rc-headless,tpu-group-1-1.rc-headless,tpu-group-1-2.rc-headless,tpu-group-1-3.rc-headless"

// v7x is host worker of replica of a group of Ironwood slices of the given number of hosts.
func v7x(replica, worker, hosts int32) tpuenv.Values {
	return tpuenv.Values{
		GroupName:    testGroup,
		ReplicaIndex: replica,
		WorkerID:     worker,
		Hosts:        hosts,
		Subdomain:    testSubdomain,
		V7x:          true,
		SliceName:    "rc-tpu-group-" + strconv.Itoa(int(replica)),
		ClaimToken:   testToken,
	}
}

func TestApply(t *testing.T) {
	userAffinity := func() *corev1.Affinity {
		return &corev1.Affinity{
			NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchExpressions: []corev1.NodeSelectorRequirement{
							{Key: "cloud.google.com/gke-spot", Operator: corev1.NodeSelectorOpDoesNotExist},
						},
					}},
				},
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
					Weight: 10,
					Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
						{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"us-east5-a"}},
					}},
				}},
			},
			PodAffinity: &corev1.PodAffinity{
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
					Weight: 50,
					PodAffinityTerm: corev1.PodAffinityTerm{
						LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "dataset-cache"}},
						TopologyKey:   "topology.kubernetes.io/zone",
					},
				}},
			},
			PodAntiAffinity: &corev1.PodAntiAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "noisy-neighbor"}},
					TopologyKey:   "kubernetes.io/hostname",
				}},
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
					Weight: 1,
					PodAffinityTerm: corev1.PodAffinityTerm{
						LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "batch"}},
						TopologyKey:   "kubernetes.io/hostname",
					},
				}},
			},
		}
	}
	mergedAffinity := userAffinity()
	mergedAffinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = []corev1.PodAffinityTerm{
		sliceAffinityTerm("rc-tpu-group-1"),
	}
	mergedAffinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(
		mergedAffinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, otherSlicesTerm("rc-tpu-group-1"), otherNamespacesTerm(testNamespace))

	const (
		v7xHostnames = "tpu-group-0-0.rc-headless,tpu-group-0-1.rc-headless"
		v7xAddresses = "tpu-group-0-0.rc-headless:8471,tpu-group-0-0.rc-headless:8472," +
			"tpu-group-0-1.rc-headless:8471,tpu-group-0-1.rc-headless:8472"
		longHost0 = "tpu-worker-group-with-a-rather-b6f4094a-0-0"
		longHost1 = "tpu-worker-group-with-a-rather-b6f4094a-0-1"
	)
	sidecar := testutil.MakeContainer("log-shipper").Env("TPU_NAME", "not-a-tpu").Env("LOG_LEVEL", "info")

	cases := map[string]struct {
		pod           *corev1.Pod
		id            tpuenv.Values
		tpuContainers []int
		wantPod       *corev1.Pod
	}{
		"single-host Pod gets its ID, TPU_NAME and device plugin address but no hostname, subdomain or affinity": {
			pod:           workerPod(testGroup, rayWorker().Obj()).Obj(),
			id:            singleHost,
			tpuContainers: []int{0},
			wantPod: workerPod(testGroup,
				rayWorker().Env("TPU_WORKER_ID", "0").Env("TPU_NAME", "tpu-group-2").EnvVars(devicePluginEnv()...).Obj()).
				Claim("tpu-group-2", "rc-tpu-group-2", "0", testToken).
				Obj(),
		},
		"hand-made Pod without labels or annotations gets both maps": {
			pod: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "tpu-pod", Namespace: "default"},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{testutil.MakeContainer("tpu").TPU(4).Obj()}},
			},
			id: tpuenv.Values{
				GroupName: "hand-made", ReplicaIndex: 0, WorkerID: 0, Hosts: 1,
				SliceName: "rc-hand-made-0", ClaimToken: "a1b2c3",
			},
			tpuContainers: []int{0},
			wantPod: testutil.MakePod("tpu-pod", "default").
				Containers(testutil.MakeContainer("tpu").TPU(4).
					Env("TPU_WORKER_ID", "0").Env("TPU_NAME", "hand-made-0").EnvVars(devicePluginEnv()...).Obj()).
				Claim("hand-made-0", "rc-hand-made-0", "0", "a1b2c3").
				Obj(),
		},
		"first host of a multi-host slice gets hostname, subdomain, TPU_WORKER_HOSTNAMES and slice affinity": {
			pod:           workerPod(testGroup, rayWorker().Obj()).Obj(),
			id:            multiHost(0),
			tpuContainers: []int{0},
			wantPod: workerPod(testGroup,
				rayWorker().Env("TPU_WORKER_ID", "0").Env("TPU_NAME", "tpu-group-1").
					Env("TPU_WORKER_HOSTNAMES", hostnames4).EnvVars(devicePluginEnv()...).Obj()).
				Claim("tpu-group-1", "rc-tpu-group-1", "0", testToken).
				Hostname("tpu-group-1-0", testSubdomain).
				Affinity(sliceAffinity("rc-tpu-group-1")).
				Obj(),
		},
		"middle host of a multi-host slice replaces the hostname and subdomain of the template": {
			pod:           workerPod(testGroup, rayWorker().Obj()).Hostname("my-host", "my-service").Obj(),
			id:            multiHost(2),
			tpuContainers: []int{0},
			wantPod: workerPod(testGroup,
				rayWorker().Env("TPU_WORKER_ID", "2").Env("TPU_NAME", "tpu-group-1").
					Env("TPU_WORKER_HOSTNAMES", hostnames4).EnvVars(devicePluginEnv()...).Obj()).
				Claim("tpu-group-1", "rc-tpu-group-1", "2", testToken).
				Hostname("tpu-group-1-2", testSubdomain).
				Affinity(sliceAffinity("rc-tpu-group-1")).
				Obj(),
		},
		"last host of a multi-host slice": {
			pod:           workerPod(testGroup, rayWorker().Obj()).Obj(),
			id:            multiHost(3),
			tpuContainers: []int{0},
			wantPod: workerPod(testGroup,
				rayWorker().Env("TPU_WORKER_ID", "3").Env("TPU_NAME", "tpu-group-1").
					Env("TPU_WORKER_HOSTNAMES", hostnames4).EnvVars(devicePluginEnv()...).Obj()).
				Claim("tpu-group-1", "rc-tpu-group-1", "3", testToken).
				Hostname("tpu-group-1-3", testSubdomain).
				Affinity(sliceAffinity("rc-tpu-group-1")).
				Obj(),
		},
		"v7x multi-host Pod numbers its TPU containers host*2+c and skips the sidecar between them": {
			pod: workerPod(testGroup,
				testutil.MakeContainer("tpu-0").TPU(2).Obj(),
				sidecar.Obj(),
				testutil.MakeContainer("tpu-1").TPU(2).Obj(),
			).Obj(),
			id:            v7x(0, 1, 2),
			tpuContainers: []int{0, 2},
			wantPod: workerPod(testGroup,
				testutil.MakeContainer("tpu-0").TPU(2).
					Env("TPU_WORKER_ID", "2").
					Env("TPU_NAME", "tpu-group-0").
					Env("TPU_WORKER_HOSTNAMES", v7xHostnames).
					Env("TPU_PROCESS_ADDRESSES", v7xAddresses).
					Env("TPU_PROCESS_PORT", "8471").
					EnvVars(devicePluginEnv()...).Obj(),
				sidecar.Obj(),
				testutil.MakeContainer("tpu-1").TPU(2).
					Env("TPU_WORKER_ID", "3").
					Env("TPU_NAME", "tpu-group-0").
					Env("TPU_WORKER_HOSTNAMES", v7xHostnames).
					Env("TPU_PROCESS_ADDRESSES", v7xAddresses).
					Env("TPU_PROCESS_PORT", "8472").
					EnvVars(devicePluginEnv()...).Obj(),
			).
				Claim("tpu-group-0", "rc-tpu-group-0", "1", testToken).
				Hostname("tpu-group-0-1", testSubdomain).
				Affinity(sliceAffinity("rc-tpu-group-0")).
				Obj(),
		},
		"v7x multi-host Pod keeps the TPU_PROCESS_ADDRESSES and TPU_PROCESS_PORT the user set": {
			pod: workerPod(testGroup, testutil.MakeContainer("tpu").TPU(4).
				Env("TPU_PROCESS_PORT", "9000").
				Env("TPU_PROCESS_ADDRESSES", "a.example:9000,b.example:9000").Obj()).Obj(),
			id:            v7x(0, 0, 2),
			tpuContainers: []int{0},
			wantPod: workerPod(testGroup, testutil.MakeContainer("tpu").TPU(4).
				Env("TPU_PROCESS_PORT", "9000").
				Env("TPU_PROCESS_ADDRESSES", "a.example:9000,b.example:9000").
				Env("TPU_WORKER_ID", "0").
				Env("TPU_NAME", "tpu-group-0").
				Env("TPU_WORKER_HOSTNAMES", v7xHostnames).
				EnvVars(devicePluginEnv()...).Obj()).
				Claim("tpu-group-0", "rc-tpu-group-0", "0", testToken).
				Hostname("tpu-group-0-0", testSubdomain).
				Affinity(sliceAffinity("rc-tpu-group-0")).
				Obj(),
		},
		"v7x single-host Pod with two TPU containers gets per-container IDs and localhost process addresses": {
			pod: workerPod(testGroup,
				testutil.MakeContainer("tpu-0").TPU(2).Obj(),
				testutil.MakeContainer("tpu-1").TPU(2).Obj(),
			).Obj(),
			id:            v7x(3, 0, 1),
			tpuContainers: []int{0, 1},
			wantPod: workerPod(testGroup,
				testutil.MakeContainer("tpu-0").TPU(2).
					Env("TPU_WORKER_ID", "0").Env("TPU_NAME", "tpu-group-3").
					Env("TPU_PROCESS_ADDRESSES", "localhost:8471,localhost:8472").Env("TPU_PROCESS_PORT", "8471").
					EnvVars(devicePluginEnv()...).Obj(),
				testutil.MakeContainer("tpu-1").TPU(2).
					Env("TPU_WORKER_ID", "1").Env("TPU_NAME", "tpu-group-3").
					Env("TPU_PROCESS_ADDRESSES", "localhost:8471,localhost:8472").Env("TPU_PROCESS_PORT", "8472").
					EnvVars(devicePluginEnv()...).Obj(),
			).
				Claim("tpu-group-3", "rc-tpu-group-3", "0", testToken).
				Obj(),
		},
		"v7x single-host Pod with one TPU container gets no process addresses": {
			pod:           workerPod(testGroup, testutil.MakeContainer("tpu").TPU(4).Obj()).Obj(),
			id:            v7x(3, 0, 1),
			tpuContainers: []int{0},
			wantPod: workerPod(testGroup,
				testutil.MakeContainer("tpu").TPU(4).
					Env("TPU_WORKER_ID", "0").Env("TPU_NAME", "tpu-group-3").EnvVars(devicePluginEnv()...).Obj(),
			).
				Claim("tpu-group-3", "rc-tpu-group-3", "0", testToken).
				Obj(),
		},
		"v7x single-host process addresses the user set are kept": {
			pod: workerPod(testGroup,
				testutil.MakeContainer("tpu-0").TPU(2).Env("TPU_PROCESS_ADDRESSES", "127.0.0.1:9000,127.0.0.1:9001").Obj(),
				testutil.MakeContainer("tpu-1").TPU(2).Obj(),
			).Obj(),
			id:            v7x(3, 0, 1),
			tpuContainers: []int{0, 1},
			wantPod: workerPod(testGroup,
				testutil.MakeContainer("tpu-0").TPU(2).Env("TPU_PROCESS_ADDRESSES", "127.0.0.1:9000,127.0.0.1:9001").
					Env("TPU_WORKER_ID", "0").Env("TPU_NAME", "tpu-group-3").Env("TPU_PROCESS_PORT", "8471").
					EnvVars(devicePluginEnv()...).Obj(),
				testutil.MakeContainer("tpu-1").TPU(2).
					Env("TPU_WORKER_ID", "1").Env("TPU_NAME", "tpu-group-3").
					Env("TPU_PROCESS_ADDRESSES", "localhost:8471,localhost:8472").Env("TPU_PROCESS_PORT", "8472").
					EnvVars(devicePluginEnv()...).Obj(),
			).
				Claim("tpu-group-3", "rc-tpu-group-3", "0", testToken).
				Obj(),
		},
		"multislice container gets MEGASCALE_SLICE_ID, coordinator address and port": {
			pod:           workerPod(testGroup, rayWorker().Env("MEGASCALE_NUM_SLICES", "2").Obj()).Obj(),
			id:            multiHost(1),
			tpuContainers: []int{0},
			wantPod: workerPod(testGroup,
				rayWorker().Env("MEGASCALE_NUM_SLICES", "2").
					Env("TPU_WORKER_ID", "1").
					Env("TPU_NAME", "tpu-group-1").
					Env("TPU_WORKER_HOSTNAMES", hostnames4).
					Env("MEGASCALE_SLICE_ID", "1").
					Env("MEGASCALE_COORDINATOR_ADDRESS", "tpu-group-0-0.rc-headless").
					Env("MEGASCALE_PORT", "8081").
					EnvVars(devicePluginEnv()...).Obj()).
				Claim("tpu-group-1", "rc-tpu-group-1", "1", testToken).
				Hostname("tpu-group-1-1", testSubdomain).
				Affinity(sliceAffinity("rc-tpu-group-1")).
				Obj(),
		},
		"single-host multislice container gets its slice ID and port but no coordinator, which has no DNS name": {
			pod:           workerPod(testGroup, rayWorker().Env("MEGASCALE_NUM_SLICES", "4").Obj()).Obj(),
			id:            singleHost,
			tpuContainers: []int{0},
			wantPod: workerPod(testGroup,
				rayWorker().Env("MEGASCALE_NUM_SLICES", "4").
					Env("TPU_WORKER_ID", "0").
					Env("TPU_NAME", "tpu-group-2").
					Env("MEGASCALE_SLICE_ID", "2").
					Env("MEGASCALE_PORT", "8081").
					EnvVars(devicePluginEnv()...).Obj()).
				Claim("tpu-group-2", "rc-tpu-group-2", "0", testToken).
				Obj(),
		},
		"single-host multislice container keeps the coordinator the user set": {
			pod: workerPod(testGroup, rayWorker().Env("MEGASCALE_NUM_SLICES", "4").
				Env("MEGASCALE_COORDINATOR_ADDRESS", "10.0.0.7:8081").Obj()).Obj(),
			id:            singleHost,
			tpuContainers: []int{0},
			wantPod: workerPod(testGroup,
				rayWorker().Env("MEGASCALE_NUM_SLICES", "4").
					Env("MEGASCALE_COORDINATOR_ADDRESS", "10.0.0.7:8081").
					Env("TPU_WORKER_ID", "0").
					Env("TPU_NAME", "tpu-group-2").
					Env("MEGASCALE_SLICE_ID", "2").
					Env("MEGASCALE_PORT", "8081").
					EnvVars(devicePluginEnv()...).Obj()).
				Claim("tpu-group-2", "rc-tpu-group-2", "0", testToken).
				Obj(),
		},
		"single-host v7x multislice containers get per-container ports and no coordinator": {
			pod: workerPod(testGroup,
				testutil.MakeContainer("tpu-0").TPU(2).Env("MEGASCALE_NUM_SLICES", "2").Obj(),
				testutil.MakeContainer("tpu-1").TPU(2).Env("MEGASCALE_NUM_SLICES", "2").Obj(),
			).Obj(),
			id:            v7x(1, 0, 1),
			tpuContainers: []int{0, 1},
			wantPod: workerPod(testGroup,
				testutil.MakeContainer("tpu-0").TPU(2).Env("MEGASCALE_NUM_SLICES", "2").
					Env("TPU_WORKER_ID", "0").Env("TPU_NAME", "tpu-group-1").
					Env("TPU_PROCESS_ADDRESSES", "localhost:8471,localhost:8472").Env("TPU_PROCESS_PORT", "8471").
					Env("MEGASCALE_SLICE_ID", "1").Env("MEGASCALE_PORT", "8081").
					EnvVars(devicePluginEnv()...).Obj(),
				testutil.MakeContainer("tpu-1").TPU(2).Env("MEGASCALE_NUM_SLICES", "2").
					Env("TPU_WORKER_ID", "1").Env("TPU_NAME", "tpu-group-1").
					Env("TPU_PROCESS_ADDRESSES", "localhost:8471,localhost:8472").Env("TPU_PROCESS_PORT", "8472").
					Env("MEGASCALE_SLICE_ID", "1").Env("MEGASCALE_PORT", "8082").
					EnvVars(devicePluginEnv()...).Obj(),
			).
				Claim("tpu-group-1", "rc-tpu-group-1", "0", testToken).
				Obj(),
		},
		"v7x multislice Pod targets the coordinator's port and gives each container its own MEGASCALE_PORT": {
			pod: workerPod(testGroup,
				testutil.MakeContainer("tpu-0").TPU(2).Env("MEGASCALE_NUM_SLICES", "2").Obj(),
				testutil.MakeContainer("tpu-1").TPU(2).Env("MEGASCALE_NUM_SLICES", "2").Obj(),
			).Obj(),
			id:            v7x(1, 0, 2),
			tpuContainers: []int{0, 1},
			wantPod: workerPod(testGroup,
				testutil.MakeContainer("tpu-0").TPU(2).Env("MEGASCALE_NUM_SLICES", "2").
					Env("TPU_WORKER_ID", "0").
					Env("TPU_NAME", "tpu-group-1").
					Env("TPU_WORKER_HOSTNAMES", "tpu-group-1-0.rc-headless,tpu-group-1-1.rc-headless").
					Env("TPU_PROCESS_ADDRESSES", "tpu-group-1-0.rc-headless:8471,tpu-group-1-0.rc-headless:8472,"+
						"tpu-group-1-1.rc-headless:8471,tpu-group-1-1.rc-headless:8472").
					Env("TPU_PROCESS_PORT", "8471").
					Env("MEGASCALE_SLICE_ID", "1").
					Env("MEGASCALE_COORDINATOR_ADDRESS", "tpu-group-0-0.rc-headless:8081").
					Env("MEGASCALE_PORT", "8081").
					EnvVars(devicePluginEnv()...).Obj(),
				testutil.MakeContainer("tpu-1").TPU(2).Env("MEGASCALE_NUM_SLICES", "2").
					Env("TPU_WORKER_ID", "1").
					Env("TPU_NAME", "tpu-group-1").
					Env("TPU_WORKER_HOSTNAMES", "tpu-group-1-0.rc-headless,tpu-group-1-1.rc-headless").
					Env("TPU_PROCESS_ADDRESSES", "tpu-group-1-0.rc-headless:8471,tpu-group-1-0.rc-headless:8472,"+
						"tpu-group-1-1.rc-headless:8471,tpu-group-1-1.rc-headless:8472").
					Env("TPU_PROCESS_PORT", "8472").
					Env("MEGASCALE_SLICE_ID", "1").
					Env("MEGASCALE_COORDINATOR_ADDRESS", "tpu-group-0-0.rc-headless:8081").
					Env("MEGASCALE_PORT", "8082").
					EnvVars(devicePluginEnv()...).Obj(),
			).
				Claim("tpu-group-1", "rc-tpu-group-1", "0", testToken).
				Hostname("tpu-group-1-0", testSubdomain).
				Affinity(sliceAffinity("rc-tpu-group-1")).
				Obj(),
		},
		"multislice container keeps the MEGASCALE_* values the user set and gets only the missing one": {
			pod: workerPod(testGroup, rayWorker().
				Env("MEGASCALE_NUM_SLICES", "4").
				Env("MEGASCALE_COORDINATOR_ADDRESS", "coordinator.example:9999").
				EnvVars(configMapEnv("MEGASCALE_PORT", "megascale", "port")).Obj()).Obj(),
			id:            multiHost(0),
			tpuContainers: []int{0},
			wantPod: workerPod(testGroup, rayWorker().
				Env("MEGASCALE_NUM_SLICES", "4").
				Env("MEGASCALE_COORDINATOR_ADDRESS", "coordinator.example:9999").
				EnvVars(configMapEnv("MEGASCALE_PORT", "megascale", "port")).
				Env("TPU_WORKER_ID", "0").
				Env("TPU_NAME", "tpu-group-1").
				Env("TPU_WORKER_HOSTNAMES", hostnames4).
				Env("MEGASCALE_SLICE_ID", "1").
				EnvVars(devicePluginEnv()...).Obj()).
				Claim("tpu-group-1", "rc-tpu-group-1", "0", testToken).
				Hostname("tpu-group-1-0", testSubdomain).
				Affinity(sliceAffinity("rc-tpu-group-1")).
				Obj(),
		},
		"container without MEGASCALE_NUM_SLICES gets no MEGASCALE_* and keeps its own untouched": {
			pod: workerPod(testGroup, rayWorker().
				Env("MEGASCALE_COORDINATOR_ADDRESS", "coordinator.example:9999").Obj()).Obj(),
			id:            multiHost(1),
			tpuContainers: []int{0},
			wantPod: workerPod(testGroup, rayWorker().
				Env("MEGASCALE_COORDINATOR_ADDRESS", "coordinator.example:9999").
				Env("TPU_WORKER_ID", "1").
				Env("TPU_NAME", "tpu-group-1").
				Env("TPU_WORKER_HOSTNAMES", hostnames4).
				EnvVars(devicePluginEnv()...).Obj()).
				Claim("tpu-group-1", "rc-tpu-group-1", "1", testToken).
				Hostname("tpu-group-1-1", testSubdomain).
				Affinity(sliceAffinity("rc-tpu-group-1")).
				Obj(),
		},
		"TPU_WORKER_ID set by the user is overwritten in place so later references still expand": {
			pod: workerPod(testGroup, testutil.MakeContainer("tpu").TPU(4).
				Env("A", "1").
				Env("TPU_WORKER_ID", "7").
				Env("JAX_PROCESS_ID", "$(TPU_WORKER_ID)").Obj()).Obj(),
			id:            multiHost(2),
			tpuContainers: []int{0},
			wantPod: workerPod(testGroup, testutil.MakeContainer("tpu").TPU(4).
				Env("A", "1").
				Env("TPU_WORKER_ID", "2").
				Env("JAX_PROCESS_ID", "$(TPU_WORKER_ID)").
				Env("TPU_NAME", "tpu-group-1").
				Env("TPU_WORKER_HOSTNAMES", hostnames4).
				EnvVars(devicePluginEnv()...).Obj()).
				Claim("tpu-group-1", "rc-tpu-group-1", "2", testToken).
				Hostname("tpu-group-1-2", testSubdomain).
				Affinity(sliceAffinity("rc-tpu-group-1")).
				Obj(),
		},
		"TPU_WORKER_ID from valueFrom is replaced in place by a plain value": {
			pod: workerPod(testGroup, testutil.MakeContainer("tpu").TPU(4).
				EnvVars(fieldRefEnv("TPU_WORKER_ID", "metadata.labels['tpu.ray.io/worker-id']")).
				Env("A", "1").Obj()).Obj(),
			id:            singleHost,
			tpuContainers: []int{0},
			wantPod: workerPod(testGroup, testutil.MakeContainer("tpu").TPU(4).
				Env("TPU_WORKER_ID", "0").
				Env("A", "1").
				Env("TPU_NAME", "tpu-group-2").
				EnvVars(devicePluginEnv()...).Obj()).
				Claim("tpu-group-2", "rc-tpu-group-2", "0", testToken).
				Obj(),
		},
		"duplicated TPU_NAME and TPU_WORKER_HOSTNAMES collapse into one entry at the first position": {
			pod: workerPod(testGroup, testutil.MakeContainer("tpu").TPU(4).
				Env("TPU_NAME", "stale").
				Env("X", "1").
				Env("TPU_WORKER_HOSTNAMES", "localhost").
				EnvVars(configMapEnv("TPU_NAME", "tpu", "name")).
				Env("Y", "2").
				Env("TPU_WORKER_HOSTNAMES", "h0,h1").
				Env("TPU_NAME", "staler").Obj()).Obj(),
			id:            multiHost(3),
			tpuContainers: []int{0},
			wantPod: workerPod(testGroup, testutil.MakeContainer("tpu").TPU(4).
				Env("TPU_NAME", "tpu-group-1").
				Env("X", "1").
				Env("TPU_WORKER_HOSTNAMES", hostnames4).
				Env("Y", "2").
				Env("TPU_WORKER_ID", "3").
				EnvVars(devicePluginEnv()...).Obj()).
				Claim("tpu-group-1", "rc-tpu-group-1", "3", testToken).
				Hostname("tpu-group-1-3", testSubdomain).
				Affinity(sliceAffinity("rc-tpu-group-1")).
				Obj(),
		},
		"TPU_WORKER_HOSTNAMES set by the user on a single-host Pod is left alone": {
			pod: workerPod(testGroup, testutil.MakeContainer("tpu").TPU(4).
				Env("TPU_WORKER_HOSTNAMES", "localhost").Obj()).Obj(),
			id:            singleHost,
			tpuContainers: []int{0},
			wantPod: workerPod(testGroup, testutil.MakeContainer("tpu").TPU(4).
				Env("TPU_WORKER_HOSTNAMES", "localhost").
				Env("TPU_WORKER_ID", "0").
				Env("TPU_NAME", "tpu-group-2").
				EnvVars(devicePluginEnv()...).Obj()).
				Claim("tpu-group-2", "rc-tpu-group-2", "0", testToken).
				Obj(),
		},
		"TPU_DEVICE_PLUGIN_ADDR set by the user is kept and the host IP is inserted before it": {
			pod: workerPod(testGroup, testutil.MakeContainer("tpu").TPU(4).
				Env("A", "1").
				Env("TPU_DEVICE_PLUGIN_ADDR", "$(TPU_DEVICE_PLUGIN_HOST_IP):9999").Obj()).Obj(),
			id:            singleHost,
			tpuContainers: []int{0},
			wantPod: workerPod(testGroup, testutil.MakeContainer("tpu").TPU(4).
				Env("A", "1").
				EnvVars(fieldRefEnv("TPU_DEVICE_PLUGIN_HOST_IP", "status.hostIP")).
				Env("TPU_DEVICE_PLUGIN_ADDR", "$(TPU_DEVICE_PLUGIN_HOST_IP):9999").
				Env("TPU_WORKER_ID", "0").
				Env("TPU_NAME", "tpu-group-2").Obj()).
				Claim("tpu-group-2", "rc-tpu-group-2", "0", testToken).
				Obj(),
		},
		"TPU_DEVICE_PLUGIN_HOST_IP set by the user is kept": {
			pod: workerPod(testGroup, testutil.MakeContainer("tpu").TPU(4).
				Env("TPU_DEVICE_PLUGIN_HOST_IP", "10.0.0.7").Obj()).Obj(),
			id:            singleHost,
			tpuContainers: []int{0},
			wantPod: workerPod(testGroup, testutil.MakeContainer("tpu").TPU(4).
				Env("TPU_DEVICE_PLUGIN_HOST_IP", "10.0.0.7").
				Env("TPU_WORKER_ID", "0").
				Env("TPU_NAME", "tpu-group-2").
				Env("TPU_DEVICE_PLUGIN_ADDR", "$(TPU_DEVICE_PLUGIN_HOST_IP):2112").Obj()).
				Claim("tpu-group-2", "rc-tpu-group-2", "0", testToken).
				Obj(),
		},
		"user affinity is kept whole and the slice terms are appended": {
			pod:           workerPod(testGroup, rayWorker().Obj()).Affinity(userAffinity()).Obj(),
			id:            multiHost(0),
			tpuContainers: []int{0},
			wantPod: workerPod(testGroup,
				rayWorker().Env("TPU_WORKER_ID", "0").Env("TPU_NAME", "tpu-group-1").
					Env("TPU_WORKER_HOSTNAMES", hostnames4).EnvVars(devicePluginEnv()...).Obj()).
				Claim("tpu-group-1", "rc-tpu-group-1", "0", testToken).
				Hostname("tpu-group-1-0", testSubdomain).
				Affinity(mergedAffinity).
				Obj(),
		},
		"slice terms already in the template are not added twice": {
			pod: workerPod(testGroup, rayWorker().Obj()).
				Affinity(&corev1.Affinity{
					PodAffinity: &corev1.PodAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{sliceAffinityTerm("rc-tpu-group-1")},
					},
					PodAntiAffinity: &corev1.PodAntiAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
							otherSlicesTerm("rc-tpu-group-1"),
							otherNamespacesTerm(testNamespace),
							otherSlicesTerm("rc-tpu-group-9"),
						},
					},
				}).Obj(),
			id:            multiHost(0),
			tpuContainers: []int{0},
			wantPod: workerPod(testGroup,
				rayWorker().Env("TPU_WORKER_ID", "0").Env("TPU_NAME", "tpu-group-1").
					Env("TPU_WORKER_HOSTNAMES", hostnames4).EnvVars(devicePluginEnv()...).Obj()).
				Claim("tpu-group-1", "rc-tpu-group-1", "0", testToken).
				Hostname("tpu-group-1-0", testSubdomain).
				Affinity(&corev1.Affinity{
					PodAffinity: &corev1.PodAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{sliceAffinityTerm("rc-tpu-group-1")},
					},
					PodAntiAffinity: &corev1.PodAntiAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
							otherSlicesTerm("rc-tpu-group-1"),
							otherNamespacesTerm(testNamespace),
							otherSlicesTerm("rc-tpu-group-9"),
						},
					},
				}).
				Obj(),
		},
		"sidecar without TPUs is untouched even when it sets TPU_NAME": {
			pod:           workerPod(testGroup, sidecar.Obj(), rayWorker().Obj()).Obj(),
			id:            multiHost(1),
			tpuContainers: []int{1},
			wantPod: workerPod(testGroup,
				sidecar.Obj(),
				rayWorker().Env("TPU_WORKER_ID", "1").Env("TPU_NAME", "tpu-group-1").
					Env("TPU_WORKER_HOSTNAMES", hostnames4).EnvVars(devicePluginEnv()...).Obj()).
				Claim("tpu-group-1", "rc-tpu-group-1", "1", testToken).
				Hostname("tpu-group-1-1", testSubdomain).
				Affinity(sliceAffinity("rc-tpu-group-1")).
				Obj(),
		},
		"60-character group gets the same shortened hostname in spec.hostname and TPU_WORKER_HOSTNAMES": {
			pod: workerPod(group60, rayWorker().Obj()).Obj(),
			id: tpuenv.Values{
				GroupName: group60, ReplicaIndex: 0, WorkerID: 1, Hosts: 2,
				Subdomain: testSubdomain, SliceName: "rc-long-0", ClaimToken: testToken,
			},
			tpuContainers: []int{0},
			wantPod: workerPod(group60,
				rayWorker().Env("TPU_WORKER_ID", "1").
					Env("TPU_NAME", group60+"-0").
					Env("TPU_WORKER_HOSTNAMES", longHost0+".rc-headless,"+longHost1+".rc-headless").
					EnvVars(devicePluginEnv()...).Obj()).
				Claim(group60+"-0", "rc-long-0", "1", testToken).
				Hostname(longHost1, testSubdomain).
				Affinity(sliceAffinity("rc-long-0")).
				Obj(),
		},
		"group with uppercase and underscore gets a sanitized hostname but keeps its name in TPU_NAME and replicaIndex": {
			pod: workerPod("TPU_Group", rayWorker().Obj()).Obj(),
			id: tpuenv.Values{
				GroupName: "TPU_Group", ReplicaIndex: 0, WorkerID: 0, Hosts: 2,
				Subdomain: testSubdomain, SliceName: "rc-tpu-group-0", ClaimToken: testToken,
			},
			tpuContainers: []int{0},
			wantPod: workerPod("TPU_Group",
				rayWorker().Env("TPU_WORKER_ID", "0").
					Env("TPU_NAME", "TPU_Group-0").
					Env("TPU_WORKER_HOSTNAMES", "tpu-group-2f2aa042-0-0.rc-headless,tpu-group-2f2aa042-0-1.rc-headless").
					EnvVars(devicePluginEnv()...).Obj()).
				Claim("TPU_Group-0", "rc-tpu-group-0", "0", testToken).
				Hostname("tpu-group-2f2aa042-0-0", testSubdomain).
				Affinity(sliceAffinity("rc-tpu-group-0")).
				Obj(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := tc.pod.DeepCopy()
			tpuenv.Apply(pod, tc.id, tc.tpuContainers)
			if diff := cmp.Diff(tc.wantPod, pod); diff != "" {
				t.Errorf("Apply() mismatch (-want +got):\n%s", diff)
			}
			tpuenv.Apply(pod, tc.id, tc.tpuContainers)
			if diff := cmp.Diff(tc.wantPod, pod); diff != "" {
				t.Errorf("second Apply() changed the Pod (-want +got):\n%s", diff)
			}
		})
	}
}

// TestApplyAfterRoundTrip checks that a second Apply is a no-op on a Pod that went through the
// API server's JSON encoding (empty fields dropped, maps and slices re-allocated).
func TestApplyAfterRoundTrip(t *testing.T) {
	cases := map[string]struct {
		pod           *corev1.Pod
		id            tpuenv.Values
		tpuContainers []int
	}{
		"single-host": {
			pod:           workerPod(testGroup, rayWorker().Obj()).Obj(),
			id:            singleHost,
			tpuContainers: []int{0},
		},
		"multi-host with user affinity and user env": {
			pod: workerPod(testGroup, testutil.MakeContainer("tpu").TPU(4).
				Env("TPU_NAME", "stale").Env("TPU_NAME", "staler").
				Env("TPU_DEVICE_PLUGIN_ADDR", "$(TPU_DEVICE_PLUGIN_HOST_IP):2112").Obj()).
				Affinity(&corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
						LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "other"}},
						TopologyKey:   "kubernetes.io/hostname",
					}},
				}}).Obj(),
			id:            multiHost(2),
			tpuContainers: []int{0},
		},
		"v7x multislice with a sidecar": {
			pod: workerPod(testGroup,
				testutil.MakeContainer("tpu-0").TPU(2).Env("MEGASCALE_NUM_SLICES", "2").Obj(),
				testutil.MakeContainer("sidecar").Obj(),
				testutil.MakeContainer("tpu-1").TPU(2).Env("MEGASCALE_NUM_SLICES", "2").Obj(),
			).Obj(),
			id:            v7x(1, 1, 2),
			tpuContainers: []int{0, 2},
		},
		"v7x with its host lists in the slice's ConfigMap, and a user's TPU_WORKER_HOSTNAMES": {
			pod: workerPod(testGroup,
				testutil.MakeContainer("tpu-0").TPU(2).Env(constants.EnvWorkerHostnames, "mine").Obj(),
				testutil.MakeContainer("tpu-1").TPU(2).Obj(),
			).Obj(),
			id: func() tpuenv.Values {
				v := v7x(1, 1, 2)
				v.Topology, v.ChipsPerHost, v.HostListsInConfigMap = []int32{2, 2, 2}, 2, true
				return v
			}(),
			tpuContainers: []int{0, 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := tc.pod.DeepCopy()
			tpuenv.Apply(pod, tc.id, tc.tpuContainers)
			stored := roundTrip(t, pod)
			got := stored.DeepCopy()
			tpuenv.Apply(got, tc.id, tc.tpuContainers)
			if diff := cmp.Diff(stored, got); diff != "" {
				t.Errorf("Apply() on the stored Pod changed it (-stored +got):\n%s", diff)
			}
		})
	}
}

// fieldRefEnv returns an env entry read from a Pod field, as the API server stores it.
func fieldRefEnv(name, fieldPath string) corev1.EnvVar {
	return corev1.EnvVar{
		Name: name,
		ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: fieldPath},
		},
	}
}

// configMapEnv returns an env entry read from a ConfigMap key.
func configMapEnv(name, configMap, key string) corev1.EnvVar {
	return corev1.EnvVar{
		Name: name,
		ValueFrom: &corev1.EnvVarSource{
			ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: configMap},
				Key:                  key,
			},
		},
	}
}

func roundTrip(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	data, err := json.Marshal(pod)
	if err != nil {
		t.Fatalf("Marshaling Pod: %v", err)
	}
	out := &corev1.Pod{}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("Unmarshaling Pod: %v", err)
	}
	return out
}
