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

package boundpods

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	resourcehelper "k8s.io/component-helpers/resource"
)

func jobPod(name, node string, cpu, chips string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "batch", UID: types.UID("uid-" + name), Labels: map[string]string{"job": "x"},
			Annotations: map[string]string{"big": "dropped"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "img", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)},
		}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if chips != "" {
		p.Spec.Containers[0].Resources.Requests["google.com/tpu"] = resource.MustParse(chips)
	}
	return p
}

// TestTrimKeepsTheEffectiveRequests: the trimmed Pod requests what the Pod does as kube-scheduler
// counts it (init containers, sidecars and overhead included), and keeps its Node, phase and
// required anti-affinity; nothing else.
func TestTrimKeepsTheEffectiveRequests(t *testing.T) {
	pod := jobPod("a", "n-1", "2", "4")
	always := corev1.ContainerRestartPolicyAlways
	pod.Spec.InitContainers = []corev1.Container{
		{Name: "init", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("6")}}},
		{Name: "sidecar", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}},
	}
	pod.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	anti := []corev1.PodAffinityTerm{{TopologyKey: "pool", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}}}}
	pod.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: anti}}
	got, err := Trim(pod)
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "batch", UID: "uid-a"},
		Spec: corev1.PodSpec{NodeName: "n-1", Overhead: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("6100m"),
			corev1.ResourceMemory: resource.MustParse("1Gi"), "google.com/tpu": resource.MustParse("4")}, Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: anti}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Trim (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}),
		resourcehelper.PodRequests(got.(*corev1.Pod), resourcehelper.PodResourcesOptions{})); diff != "" {
		t.Errorf("PodRequests of the trimmed Pod (-original,+trimmed):\n%s", diff)
	}
}

// TestTracker: the sums per Node follow adds, moves, finishing, deletions (also as a final
// state unknown) and a second add of one Pod.
func TestTracker(t *testing.T) {
	cpu := resource.MustParse
	type step struct {
		do  func(h toolscache.ResourceEventHandler)
		n1  *Usage // nil: no Pod on n-1
		n2  *Usage
		len int
	}
	a, b := jobPod("a", "n-1", "2", "4"), jobPod("b", "n-1", "1", "")
	aOnN2 := a.DeepCopy()
	aOnN2.Spec.NodeName = "n-2"
	bDone := b.DeepCopy()
	bDone.Status.Phase = corev1.PodSucceeded
	steps := []step{
		{do: func(h toolscache.ResourceEventHandler) { h.OnAdd(a, false); h.OnAdd(b, false); h.OnAdd(a, false) },
			n1: &Usage{Requests: corev1.ResourceList{corev1.ResourceCPU: cpu("3"), "google.com/tpu": cpu("4")}, Pods: 2}, len: 2},
		{do: func(h toolscache.ResourceEventHandler) { h.OnUpdate(a, aOnN2) },
			n1: &Usage{Requests: corev1.ResourceList{corev1.ResourceCPU: cpu("1")}, Pods: 1},
			n2: &Usage{Requests: corev1.ResourceList{corev1.ResourceCPU: cpu("2"), "google.com/tpu": cpu("4")}, Pods: 1}, len: 2},
		{do: func(h toolscache.ResourceEventHandler) { h.OnUpdate(b, bDone) },
			n2: &Usage{Requests: corev1.ResourceList{corev1.ResourceCPU: cpu("2"), "google.com/tpu": cpu("4")}, Pods: 1}, len: 1},
		{do: func(h toolscache.ResourceEventHandler) {
			h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "batch/a", Obj: aOnN2})
		}},
	}
	tr := NewTracker()
	for i, s := range steps {
		s.do(tr.Handler())
		for node, want := range map[string]*Usage{"n-1": s.n1, "n-2": s.n2} {
			got, ok := tr.Usage(node)
			if want == nil {
				if ok {
					t.Errorf("step %d: Usage(%s) = %+v, want none", i, node, got)
				}
				continue
			}
			if diff := cmp.Diff(*want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("step %d: Usage(%s) (-want,+got):\n%s", i, node, diff)
			}
		}
		if tr.Len() != s.len {
			t.Errorf("step %d: %d Pods tracked, want %d", i, tr.Len(), s.len)
		}
	}
}

// BenchmarkRetained reports the heap a cluster of 5,000 Nodes with 20 bound Pods each (a DaemonSet
// Pod of three containers, a TPU worker) keeps in the bound Pods' cache (the trimmed Pods, as the
// informer's store holds them) and its Tracker: retained-B/pod and retained-MiB.
func BenchmarkRetained(b *testing.B) {
	const nodes, perNode = 5000, 20
	full := jobPod("p", "n", "100m", "4")
	full.Spec.Containers = append(full.Spec.Containers, full.Spec.Containers[0], full.Spec.Containers[0])
	full.Spec.Containers[1].Name, full.Spec.Containers[2].Name = "b", "c"
	full.Labels = map[string]string{"app": "x", "pod-template-hash": "abcdef1234", "controller-revision-hash": "12345"}
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		store := make([]any, 0, nodes*perNode)
		tr := NewTracker()
		h := tr.Handler()
		for n := range nodes {
			for i := range perNode {
				p := full.DeepCopy()
				p.Name = "p-" + strconv.Itoa(n) + "-" + strconv.Itoa(i)
				p.UID = types.UID(p.Name)
				p.Spec.NodeName = "gke-tpu-node-" + strconv.Itoa(n)
				trimmed, err := Trim(p)
				if err != nil {
					b.Fatal(err)
				}
				store = append(store, trimmed)
				h.OnAdd(trimmed, true)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		retained := float64(after.HeapAlloc - before.HeapAlloc)
		b.ReportMetric(retained/float64(len(store)), "retained-B/pod")
		b.ReportMetric(retained/(1<<20), "retained-MiB")
		runtime.KeepAlive(store)
		runtime.KeepAlive(tr)
	}
}
