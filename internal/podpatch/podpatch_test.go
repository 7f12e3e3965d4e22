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

package podpatch_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/podpatch"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// worker is a Pod as the API server sends it to the webhook: labels, one TPU container with an
// env of its own and a sidecar.
func worker() *testutil.PodWrapper {
	return testutil.MakeWorkerPod("ns", "rc", "uid-1", "tpu").GenerateName("rc-tpu-worker-").
		Topology("tpu-v6e-slice", "4x4").TPU(4).Env(0, "JAX_PLATFORMS", "tpu").
		Container("log-shipper", 0).Env(1, "LOG_LEVEL", "info")
}

func userAffinity() *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "cloud.google.com/gke-spot", Operator: corev1.NodeSelectorOpDoesNotExist}},
		}}},
	}}
}

// multiHost are the values of worker 3 of a 4-host slice (a v6e 4x4 of 4-chip hosts).
func multiHost(placement tpuv1alpha1.SlicePlacement, inConfigMap bool) tpuenv.Values {
	return tpuenv.Values{GroupName: "tpu", ReplicaIndex: 1, WorkerID: 3, Hosts: 4, Subdomain: "rc-headless",
		SliceName: "rc-tpu-1", ClaimToken: "tok-3", Topology: []int32{4, 4}, ChipsPerHost: 4,
		Placement: placement, HostListsInConfigMap: inConfigMap}
}

func TestDiff(t *testing.T) {
	singleHost := tpuenv.Values{GroupName: "tpu", Hosts: 1, SliceName: "rc-tpu-0", ClaimToken: "tok-0"}
	cases := map[string]struct {
		pod    *corev1.Pod
		mutate func(*corev1.Pod)
		// wantOps are the operations, as "op path", when set.
		wantOps []string
		// wantNotOK: a change outside the fields Diff patches.
		wantNotOK bool
	}{
		"nothing changed: no operation": {
			pod:     worker().Obj(),
			mutate:  func(*corev1.Pod) {},
			wantOps: []string{},
		},
		"labels and annotations added where the Pod has none": {
			pod: testutil.MakePod("p", "ns").TPU(4).Obj(),
			mutate: func(p *corev1.Pod) {
				p.Labels = map[string]string{tpuv1alpha1.SliceLabel: "s"}
				p.Annotations = map[string]string{tpuv1alpha1.ClaimTokenAnnotation: "t"}
			},
			wantOps: []string{"add /metadata/labels", "add /metadata/annotations"},
		},
		"a label changed among others: the whole map is set": {
			pod:     worker().Label(tpuv1alpha1.WorkerIDLabel, "1").Obj(),
			mutate:  func(p *corev1.Pod) { p.Labels[tpuv1alpha1.WorkerIDLabel] = "2" },
			wantOps: []string{"add /metadata/labels"},
		},
		"the last label removed: the member is removed": {
			pod:     testutil.MakePod("p", "ns").Label("a", "b").Obj(),
			mutate:  func(p *corev1.Pod) { delete(p.Labels, "a") },
			wantOps: []string{"remove /metadata/labels"},
		},
		"labels emptied where there were none: nothing to do": {
			pod:     testutil.MakePod("p", "ns").Obj(),
			mutate:  func(p *corev1.Pod) { p.Labels = map[string]string{} },
			wantOps: []string{},
		},
		"hostname and subdomain set": {
			pod:     worker().Obj(),
			mutate:  func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "tpu-1-3", "rc-headless" },
			wantOps: []string{"add /spec/hostname", "add /spec/subdomain"},
		},
		"hostname cleared and subdomain changed": {
			pod:     worker().Hostname("tpu-1-3", "old-headless").Obj(),
			mutate:  func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "", "rc-headless" },
			wantOps: []string{"remove /spec/hostname", "add /spec/subdomain"},
		},
		"affinity added to a Pod without one": {
			pod:     worker().Obj(),
			mutate:  func(p *corev1.Pod) { p.Spec.Affinity = userAffinity() },
			wantOps: []string{"add /spec/affinity"},
		},
		"an empty affinity is a member of the Pod's JSON": {
			pod:     worker().Obj(),
			mutate:  func(p *corev1.Pod) { p.Spec.Affinity = &corev1.Affinity{} },
			wantOps: []string{"add /spec/affinity"},
		},
		"affinity removed": {
			pod:     worker().Affinity(userAffinity()).Obj(),
			mutate:  func(p *corev1.Pod) { p.Spec.Affinity = nil },
			wantOps: []string{"remove /spec/affinity"},
		},
		"a term added inside the Pod's own affinity": {
			pod: worker().Affinity(userAffinity()).Obj(),
			mutate: func(p *corev1.Pod) {
				p.Spec.Affinity.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: "k"}}}
			},
			wantOps: []string{"add /spec/affinity"},
		},
		"a scheduling gate added next to the Pod's own": {
			pod: worker().SchedulingGate("example.com/quota").Obj(),
			mutate: func(p *corev1.Pod) {
				p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: "g"})
			},
			wantOps: []string{"add /spec/schedulingGates"},
		},
		"the only scheduling gate removed, to an empty list": {
			pod:     worker().SchedulingGate(tpuv1alpha1.PlacementSchedulingGate).Obj(),
			mutate:  func(p *corev1.Pod) { p.Spec.SchedulingGates = []corev1.PodSchedulingGate{} },
			wantOps: []string{"remove /spec/schedulingGates"},
		},
		"the second container's env set, the first's untouched": {
			pod: worker().Obj(),
			mutate: func(p *corev1.Pod) {
				p.Spec.Containers[1].Env = append(p.Spec.Containers[1].Env, corev1.EnvVar{Name: "X", Value: "1"})
			},
			wantOps: []string{"add /spec/containers/1/env"},
		},
		"an env emptied": {
			pod:     worker().Obj(),
			mutate:  func(p *corev1.Pod) { p.Spec.Containers[0].Env = nil },
			wantOps: []string{"remove /spec/containers/0/env"},
		},
		"an env entry from a ConfigMap": {
			pod: worker().Obj(),
			mutate: func(p *corev1.Pod) {
				p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "H", ValueFrom: &corev1.EnvVarSource{
					ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Key: "H"},
				}})
			},
			wantOps: []string{"add /spec/containers/0/env"},
		},
		"a nodeSelector is outside the patched fields": {
			pod:       worker().Obj(),
			mutate:    func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"a": "b"} },
			wantNotOK: true,
		},
		"a container's image is outside them": {
			pod:       worker().Obj(),
			mutate:    func(p *corev1.Pod) { p.Spec.Containers[0].Image = "other" },
			wantNotOK: true,
		},
		"a container's resources are outside them": {
			pod: worker().Obj(),
			mutate: func(p *corev1.Pod) {
				p.Spec.Containers[1].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
			},
			wantNotOK: true,
		},
		"an init container's env is outside them": {
			pod: worker().Obj(),
			mutate: func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "init", Env: []corev1.EnvVar{{Name: "A", Value: "1"}}}}
			},
			wantNotOK: true,
		},
		"a container added is outside them": {
			pod:       worker().Obj(),
			mutate:    func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "c"}) },
			wantNotOK: true,
		},
		"the generateName is outside them": {
			pod:       worker().Obj(),
			mutate:    func(p *corev1.Pod) { p.GenerateName = "x-" },
			wantNotOK: true,
		},
		"Apply, single-host": {
			pod:     worker().Obj(),
			mutate:  func(p *corev1.Pod) { tpuenv.Apply(p, singleHost, []int{0}) },
			wantOps: []string{"add /metadata/labels", "add /metadata/annotations", "add /spec/containers/0/env"},
		},
		"Apply, multi-host with the slice affinity merged into the Pod's": {
			pod: worker().Affinity(userAffinity()).Obj(),
			mutate: func(p *corev1.Pod) {
				tpuenv.Apply(p, multiHost(tpuv1alpha1.PlacementInterPodAffinity, false), []int{0})
			},
			wantOps: []string{"add /metadata/labels", "add /metadata/annotations", "add /spec/hostname", "add /spec/subdomain",
				"add /spec/affinity", "add /spec/containers/0/env"},
		},
		"Apply, multi-host gated, host lists from the ConfigMap": {
			pod:    worker().Obj(),
			mutate: func(p *corev1.Pod) { tpuenv.Apply(p, multiHost(tpuv1alpha1.PlacementChosenDomain, true), []int{0}) },
			wantOps: []string{"add /metadata/labels", "add /metadata/annotations", "add /spec/hostname", "add /spec/subdomain",
				"add /spec/schedulingGates", "add /spec/containers/0/env"},
		},
		"Apply over a copied identity's gate, ungated": {
			pod: worker().SchedulingGate(tpuv1alpha1.PlacementSchedulingGate).Obj(),
			mutate: func(p *corev1.Pod) {
				tpuenv.Apply(p, multiHost(tpuv1alpha1.PlacementInterPodAffinity, false), []int{0})
			},
			wantOps: []string{"add /metadata/labels", "add /metadata/annotations", "add /spec/hostname", "add /spec/subdomain",
				"add /spec/affinity", "remove /spec/schedulingGates", "add /spec/containers/0/env"},
		},
		"Strip of a copied multi-host identity": {
			pod: func() *corev1.Pod {
				p := worker().Obj()
				tpuenv.Apply(p, multiHost(tpuv1alpha1.PlacementInterPodAffinity, false), []int{0})
				return p
			}(),
			mutate: func(p *corev1.Pod) {
				tpuenv.Strip(p, multiHost(tpuv1alpha1.PlacementInterPodAffinity, false), []int{0})
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			mutated := tc.pod.DeepCopy()
			tc.mutate(mutated)
			ops, ok := podpatch.Diff(tc.pod, mutated)
			if ok == tc.wantNotOK {
				t.Fatalf("Diff() ok = %t, want %t", ok, !tc.wantNotOK)
			}
			if !ok {
				return
			}
			if tc.wantOps != nil {
				got := []string{}
				for _, op := range ops {
					got = append(got, op.Operation+" "+op.Path)
				}
				if diff := cmp.Diff(tc.wantOps, got); diff != "" {
					t.Errorf("Diff() operations (-want +got):\n%s", diff)
				}
			}
			if diff := cmp.Diff(mutated, applied(t, tc.pod, ops), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("the patch applied to the Pod as received (-mutated +patched):\n%s", diff)
			}
		})
	}
}

// TestDiffCoversEveryMutation runs the mutations the webhook makes, over Pods that already carry
// what they write (env entries of the operator's names, an identity, a gate, an affinity), and
// checks that Diff covers each: a field tpuenv starts to write that Diff does not patch fails here,
// instead of sending every admission down the slow path.
func TestDiffCoversEveryMutation(t *testing.T) {
	pods := map[string]*corev1.Pod{
		"bare":        worker().Obj(),
		"no env":      testutil.MakeWorkerPod("ns", "rc", "uid-1", "tpu").Topology("tpu-v6e-slice", "4x4").TPU(4).Obj(),
		"own TPU env": worker().Env(0, "TPU_WORKER_ID", "7").Env(0, "TPU_WORKER_HOSTNAMES", "a,b").Obj(),
		"affinity":    worker().Affinity(userAffinity()).Obj(),
		"gated":       worker().SchedulingGate(tpuv1alpha1.PlacementSchedulingGate).SchedulingGate("example.com/quota").Obj(),
		"identity": worker().Hostname("tpu-0-0", "rc-headless").
			Claim("tpu-0", "rc-tpu-0", "0", "old").Obj(),
	}
	values := make([]tpuenv.Values, 0, 19)
	for _, placement := range []tpuv1alpha1.SlicePlacement{"", tpuv1alpha1.PlacementInterPodAffinity, tpuv1alpha1.PlacementChosenDomain} {
		for _, inConfigMap := range []bool{false, true} {
			v := multiHost(placement, inConfigMap)
			values = append(values, v)
			v.NoAffinity = true
			values = append(values, v)
			v.V7x = true
			values = append(values, v)
		}
	}
	values = append(values, tpuenv.Values{GroupName: "tpu", Hosts: 1, SliceName: "rc-tpu-0", ClaimToken: "tok-0"})
	for name, pod := range pods {
		for i, vals := range values {
			for _, mutation := range []string{"Apply", "Strip", "Apply then Strip"} {
				t.Run(fmt.Sprintf("%s/%d/%s", name, i, mutation), func(t *testing.T) {
					mutated := pod.DeepCopy()
					if mutation != "Strip" {
						tpuenv.Apply(mutated, vals, []int{0})
					}
					if mutation != "Apply" {
						tpuenv.Strip(mutated, vals, []int{0})
					}
					ops, ok := podpatch.Diff(pod, mutated)
					if !ok {
						t.Fatalf("Diff() ok = false: %s changed a field Diff does not patch", mutation)
					}
					if diff := cmp.Diff(mutated, applied(t, pod, ops), cmpopts.EquateEmpty()); diff != "" {
						t.Errorf("the patch applied to the Pod as received (-mutated +patched):\n%s", diff)
					}
				})
			}
		}
	}
}

// applied is pod's JSON with ops applied as the API server applies a webhook's patch, decoded.
func applied(t *testing.T, pod *corev1.Pod, ops any) *corev1.Pod {
	t.Helper()
	doc, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return testutil.PatchedPod(t, doc, ops)
}

// BenchmarkPatch compares the patch of one admission of a 64-host Pod (host lists inline, as in
// make bench S1) built by Diff with the one controller-runtime's defaulter builds: encode the
// mutated Pod, diff the two JSON documents.
func BenchmarkPatch(b *testing.B) {
	orig := worker().Obj()
	vals := multiHost(tpuv1alpha1.PlacementInterPodAffinity, false)
	vals.Hosts, vals.Topology = 64, []int32{16, 16}
	mutated := orig.DeepCopy()
	tpuenv.Apply(mutated, vals, []int{0})
	raw, err := json.Marshal(orig)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Diff", func(b *testing.B) {
		for b.Loop() {
			if _, ok := podpatch.Diff(orig, mutated); !ok {
				b.Fatal("not ok")
			}
		}
	})
	b.Run("CreatePatch", func(b *testing.B) {
		for b.Loop() {
			encoded, err := json.Marshal(mutated)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := jsonpatch.CreatePatch(raw, encoded); err != nil {
				b.Fatal(err)
			}
		}
	})
}
