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

package provisioning

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
)

var t0 = time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)

func cond(typ string, status metav1.ConditionStatus, at time.Time) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: typ, Message: "m-" + typ, LastTransitionTime: metav1.NewTime(at)}
}

func TestStateOf(t *testing.T) {
	created := metav1.NewTime(t0)
	cases := map[string]struct {
		conds []metav1.Condition
		want  State
	}{
		"no condition: pending since creation": {want: State{Phase: Pending, Since: t0}},
		"accepted only: pending": {conds: []metav1.Condition{cond(ConditionAccepted, metav1.ConditionTrue, t0.Add(time.Second))},
			want: State{Phase: Pending, Since: t0}},
		"provisioned": {conds: []metav1.Condition{cond(ConditionProvisioned, metav1.ConditionTrue, t0.Add(time.Minute))},
			want: State{Phase: Provisioned, Reason: ConditionProvisioned, Message: "m-Provisioned", Since: t0.Add(time.Minute)}},
		"provisioned False: pending": {conds: []metav1.Condition{cond(ConditionProvisioned, metav1.ConditionFalse, t0.Add(time.Minute))},
			want: State{Phase: Pending, Since: t0}},
		"failed": {conds: []metav1.Condition{cond(ConditionFailed, metav1.ConditionTrue, t0.Add(2*time.Minute))},
			want: State{Phase: Ended, Reason: ConditionFailed, Message: "m-Failed", Since: t0.Add(2 * time.Minute)}},
		"provisioned, then the booking expired: ended": {conds: []metav1.Condition{
			cond(ConditionProvisioned, metav1.ConditionTrue, t0.Add(time.Minute)), cond(ConditionBookingExpired, metav1.ConditionTrue, t0.Add(11*time.Minute))},
			want: State{Phase: Ended, Reason: ConditionBookingExpired, Message: "m-BookingExpired", Since: t0.Add(11 * time.Minute)}},
		"provisioned, then the capacity revoked: ended": {conds: []metav1.Condition{
			cond(ConditionProvisioned, metav1.ConditionTrue, t0.Add(time.Minute)), cond(ConditionCapacityRevoked, metav1.ConditionTrue, t0.Add(3*time.Minute))},
			want: State{Phase: Ended, Reason: ConditionCapacityRevoked, Message: "m-CapacityRevoked", Since: t0.Add(3 * time.Minute)}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pr := &ProvisioningRequest{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: created}, Status: ProvisioningRequestStatus{Conditions: tc.conds}}
			if diff := cmp.Diff(tc.want, StateOf(pr)); diff != "" {
				t.Errorf("StateOf (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	want := map[int]time.Duration{0: time.Minute, 1: time.Minute, 2: 2 * time.Minute, 3: 4 * time.Minute, 5: 16 * time.Minute, 6: 30 * time.Minute, 100: 30 * time.Minute}
	for n, d := range want {
		if got := Backoff(n); got != d {
			t.Errorf("Backoff(%d) = %v, want %v", n, got, d)
		}
	}
}

// gatedPod is a gated TPU worker Pod with a large environment, an init container and its own
// zone affinity.
func gatedPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "w-0", Namespace: "ml"},
		Spec: corev1.PodSpec{
			NodeSelector:    map[string]string{"cloud.google.com/gke-tpu-topology": "4x4", "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"},
			SchedulingGates: []corev1.PodSchedulingGate{{Name: tpuv1alpha1.PlacementSchedulingGate}},
			Tolerations:     []corev1.Toleration{{Key: "google.com/tpu", Operator: corev1.TolerationOpExists}},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{
					{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}},
					{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}},
				}}}},
			PriorityClassName: "high",
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20")}}}},
			Containers: []corev1.Container{{Name: "ray-worker", Image: "ray", Command: []string{"ray", "start"},
				Env: []corev1.EnvVar{{Name: "TPU_WORKER_HOSTNAMES", Value: "a,b,c,d"}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{"google.com/tpu": resource.MustParse("4"), corev1.ResourceCPU: resource.MustParse("8")},
					Limits:   corev1.ResourceList{"google.com/tpu": resource.MustParse("4")}}}},
		},
	}
}

func TestShape(t *testing.T) {
	pod := gatedPod()
	got := Shape(pod)
	want := corev1.PodSpec{
		NodeSelector:      pod.Spec.NodeSelector,
		Tolerations:       pod.Spec.Tolerations,
		Affinity:          pod.Spec.Affinity,
		PriorityClassName: "high",
		InitContainers:    []corev1.Container{{Name: "init", Image: "busybox", Resources: pod.Spec.InitContainers[0].Resources}},
		Containers:        []corev1.Container{{Name: "ray-worker", Image: "ray", Resources: pod.Spec.Containers[0].Resources}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Shape (-want +got):\n%s", diff)
	}
	got.NodeSelector["x"] = "y"
	if _, ok := pod.Spec.NodeSelector["x"]; ok {
		t.Error("Shape shares the Pod's nodeSelector map")
	}
}

func TestNewCapacityPods(t *testing.T) {
	s := Slice{Namespace: "ml", Name: "rc-tpu-0", UID: "uid-s", Hosts: 4, Key: "cloud.google.com/gke-nodepool", Pod: gatedPod()}
	pods := NewCapacityPods(s, 2, []string{"pool-b", "pool-a"}, "pause")
	if len(pods) != 4 {
		t.Fatalf("%d Pods, want 4", len(pods))
	}
	notIn := corev1.NodeSelectorRequirement{Key: s.Key, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"pool-a", "pool-b"}}
	wantTerms := []corev1.NodeSelectorTerm{
		{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}, notIn}},
		{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}, notIn}},
	}
	for i, p := range pods {
		if p.Name != "rc-tpu-0-capacity-2-"+strconv.Itoa(i) || AttemptOf(p) != 2 || p.Labels[tpuv1alpha1.CapacityForLabel] != s.Name || metav1.GetControllerOf(p).UID != s.UID {
			t.Errorf("Pod %d: name %s, labels %v, owner %+v", i, p.Name, p.Labels, metav1.GetControllerOf(p))
		}
		if diff := cmp.Diff(wantTerms, p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms); diff != "" {
			t.Errorf("Pod %d node affinity: every term must also exclude the existing domains (-want +got):\n%s", i, diff)
		}
		// Effective requests: the init container's 20 CPUs exceed the worker's 8.
		wantRequests := corev1.ResourceList{"google.com/tpu": resource.MustParse("4"), corev1.ResourceCPU: resource.MustParse("20")}
		if diff := cmp.Diff(wantRequests, p.Spec.Containers[0].Resources.Requests); diff != "" {
			t.Errorf("Pod %d requests (-want +got):\n%s", i, diff)
		}
		if diff := cmp.Diff(corev1.ResourceList{"google.com/tpu": resource.MustParse("4")}, p.Spec.Containers[0].Resources.Limits); diff != "" {
			t.Errorf("Pod %d limits (-want +got):\n%s", i, diff)
		}
		if len(p.Spec.SchedulingGates) != 0 || p.Spec.PriorityClassName != "high" || len(p.Spec.Tolerations) != 1 {
			t.Errorf("Pod %d: gates %v, priority class %q, tolerations %v", i, p.Spec.SchedulingGates, p.Spec.PriorityClassName, p.Spec.Tolerations)
		}
		aff := p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		anti := p.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		if len(aff) != 1 || aff[0].TopologyKey != s.Key || aff[0].LabelSelector.MatchLabels[tpuv1alpha1.CapacityForLabel] != s.Name {
			t.Errorf("Pod %d pod affinity %+v", i, aff)
		}
		if len(anti) != 1 || anti[0].TopologyKey != s.Key || anti[0].NamespaceSelector == nil {
			t.Errorf("Pod %d anti-affinity %+v", i, anti)
		}
	}
	if gatedPod().Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Values[0] != "a" ||
		len(s.Pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions) != 1 {
		t.Error("NewCapacityPods changed the slice's Pod")
	}
	// No existing domain: no node affinity is added.
	plain := gatedPod()
	plain.Spec.Affinity = nil
	if a := NewCapacityPods(Slice{Name: "s", Hosts: 1, Key: s.Key, Pod: plain}, 1, nil, "pause")[0].Spec.Affinity; a.NodeAffinity != nil {
		t.Errorf("node affinity %+v with no existing domain", a.NodeAffinity)
	}
}
