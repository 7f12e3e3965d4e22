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

package autoscaler

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/provisioning"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

var (
	v6e4x4 = NodeGroup{Accelerator: "tpu-v6e-slice", Topology: "4x4"}
	v5p    = NodeGroup{Accelerator: "tpu-v5p-slice", Topology: "2x2x4"}
)

func templates(t *testing.T, groups ...NodeGroup) []template {
	t.Helper()
	out := make([]template, 0, len(groups))
	for _, g := range groups {
		tmpl, err := newTemplate(g)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tmpl)
	}
	return out
}

// tpuPod is a Pod of a v6e 4x4 slice asking for one 4-chip host, tolerating the TPU taint as the
// API server's ExtendedResourceToleration makes it.
func tpuPod(name string) *testutil.PodWrapper {
	p := testutil.MakePod(name, "ns").Topology("tpu-v6e-slice", "4x4").TPU(4).UID(types.UID(name))
	p.Spec.Tolerations = []corev1.Toleration{{Key: constants.TPUResourceName, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	return p
}

// capacityPods are the capacity Pods of a slice of 4 hosts, as the operator makes them.
func capacityPods(slice string, existing ...string) []*corev1.Pod {
	gated := tpuPod(slice).Obj()
	return provisioning.NewCapacityPods(provisioning.Slice{Namespace: "ns", Name: slice, Hosts: 4, Key: PoolKey, Pod: gated}, 1, existing, "pause")
}

func withUIDs(pods []*corev1.Pod) []*corev1.Pod {
	for _, p := range pods {
		p.UID = types.UID(p.Name)
	}
	return pods
}

func TestPerNode(t *testing.T) {
	node := templates(t, v6e4x4)[0].nodes[0]
	cases := map[string]struct {
		pod        *corev1.Pod
		wantN      int
		wantReason string
	}{
		"a 4-chip Pod of the topology takes a whole host": {pod: tpuPod("a").Obj(), wantN: 1},
		"a 1-chip Pod: four to a host":                    {pod: tpuPod("a").TPU(1).Obj(), wantN: 4},
		"another topology does not match": {
			pod: tpuPod("a").Topology("tpu-v6e-slice", "8x8").Obj(), wantReason: "node(s) didn't match Pod's node affinity/selector",
		},
		"node affinity NotIn the template's pool name matches: the pool is new": {
			pod: capacityPods("s", "pool-a", "pool-b")[0],
			// the capacity Pod requests what the slice's Pod requests: 4 chips
			wantN: 1,
		},
		"no toleration of the TPU taint": {
			pod:        func() *corev1.Pod { p := tpuPod("a").Obj(); p.Spec.Tolerations = nil; return p }(),
			wantReason: "node(s) had untolerated taint {google.com/tpu: present}",
		},
		"more chips than a host has": {pod: tpuPod("a").TPU(8).Obj(), wantReason: "Insufficient google.com/tpu"},
		"a resource the Node does not list": {
			pod: func() *corev1.Pod {
				p := tpuPod("a").Obj()
				p.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = resource.MustParse("1")
				return p
			}(),
			wantReason: "Insufficient nvidia.com/gpu",
		},
		"pinned to a Node by name": {
			pod: tpuPod("a").Affinity(&corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"pool-a-0"}}},
				}}},
			}}).Obj(),
			wantReason: "node(s) didn't match Pod's node affinity/selector",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n, reason := perNode(tc.pod, node)
			if diff := cmp.Diff([]any{tc.wantN, tc.wantReason}, []any{n, reason}); diff != "" {
				t.Errorf("perNode (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnschedulable(t *testing.T) {
	scheduled := func(status corev1.ConditionStatus, reason string) []corev1.PodCondition {
		return []corev1.PodCondition{{Type: corev1.PodScheduled, Status: status, Reason: reason}}
	}
	cases := map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"unschedulable": {pod: withConditions(tpuPod("a").Obj(), scheduled(corev1.ConditionFalse, corev1.PodReasonUnschedulable)), want: true},
		"gated (SchedulingGated)": {
			pod: withConditions(tpuPod("a").SchedulingGate(tpuv1alpha1.PlacementSchedulingGate).Obj(), scheduled(corev1.ConditionFalse, corev1.PodReasonSchedulingGated)),
		},
		"carries a gate, whatever the condition says": {
			pod: withConditions(tpuPod("a").SchedulingGate("x").Obj(), scheduled(corev1.ConditionFalse, corev1.PodReasonUnschedulable)),
		},
		"not tried yet":     {pod: tpuPod("a").Obj()},
		"bound":             {pod: withConditions(tpuPod("a").NodeName("n").Obj(), scheduled(corev1.ConditionFalse, corev1.PodReasonUnschedulable))},
		"being deleted":     {pod: withConditions(tpuPod("a").Terminating().Obj(), scheduled(corev1.ConditionFalse, corev1.PodReasonUnschedulable))},
		"scheduled":         {pod: withConditions(tpuPod("a").Obj(), scheduled(corev1.ConditionTrue, ""))},
		"another reason":    {pod: withConditions(tpuPod("a").Obj(), scheduled(corev1.ConditionFalse, "SchedulerError"))},
		"finished (Failed)": {pod: withConditions(tpuPod("a").Phase(corev1.PodFailed).Obj(), scheduled(corev1.ConditionFalse, corev1.PodReasonUnschedulable))},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Unschedulable(tc.pod); got != tc.want {
				t.Errorf("Unschedulable = %v, want %v", got, tc.want)
			}
		})
	}
}

func withConditions(p *corev1.Pod, conds []corev1.PodCondition) *corev1.Pod {
	p.Status.Conditions = conds
	return p
}

func TestPlan(t *testing.T) {
	gangA := withUIDs(capacityPods("slice-a", "pool-a"))
	gangB := withUIDs(capacityPods("slice-b", "pool-a"))
	gangKey := func(pods []*corev1.Pod) string { g, _ := gangOf(pods[0]); return g }
	uids := func(pods []*corev1.Pod) []types.UID {
		out := make([]types.UID, 0, len(pods))
		for _, p := range pods {
			out = append(out, p.UID)
		}
		return out
	}
	free := func(n int) []*corev1.Pod {
		out := make([]*corev1.Pod, 0, n)
		for i := range n {
			out = append(out, tpuPod(fmt.Sprintf("free-%d", i)).Obj())
		}
		return out
	}
	groupName := v6e4x4.name()
	cases := map[string]struct {
		groups       []NodeGroup
		pending      []*corev1.Pod
		flying       []inFlight
		bound        []*corev1.Pod
		want         []scaleUp
		wantRejected []rejection
	}{
		"a slice's 4 capacity Pods get one pool": {
			groups: []NodeGroup{v6e4x4}, pending: gangA,
			want: []scaleUp{{Group: groupName, Gang: gangKey(gangA), Pods: uids(gangA)}},
		},
		"two slices' capacity Pods get a pool each": {
			groups: []NodeGroup{v6e4x4}, pending: append(append([]*corev1.Pod{}, gangA...), gangB...),
			want: []scaleUp{
				{Group: groupName, Gang: gangKey(gangA), Pods: uids(gangA)},
				{Group: groupName, Gang: gangKey(gangB), Pods: uids(gangB)},
			},
		},
		"a slice whose pool is in flight gets none": {
			groups: []NodeGroup{v6e4x4}, pending: gangA,
			flying: []inFlight{{Group: groupName, Gang: gangKey(gangA), Pods: uids(gangA)}},
		},
		"the first group that fits is preferred; one that does not is skipped": {
			groups: []NodeGroup{v5p, v6e4x4}, pending: gangA,
			want: []scaleUp{{Group: groupName, Gang: gangKey(gangA), Pods: uids(gangA)}},
		},
		"5 Pods that must share a pool of 4 hosts get none": {
			groups:  []NodeGroup{v6e4x4},
			pending: withUIDs(provisioning.NewCapacityPods(provisioning.Slice{Namespace: "ns", Name: "big", Hosts: 5, Key: PoolKey, Pod: tpuPod("big").Obj()}, 1, nil, "pause")),
			wantRejected: func() []rejection {
				out := make([]rejection, 0, 5)
				for i := range 5 {
					out = append(out, rejection{Pod: types.UID(provisioning.PodName("big", 1, i)), Reason: "node group nap-tpu-v6e-slice-4x4: 5 Pods that must share one pool, a pool holds 4"})
				}
				return out
			}(),
		},
		"9 Pods without pod affinity: ceil(9/4) pools": {
			groups: []NodeGroup{v6e4x4}, pending: free(9),
			want: []scaleUp{
				{Group: groupName, Pods: uids(free(9)[:4])},
				{Group: groupName, Pods: uids(free(9)[4:8])},
				{Group: groupName, Pods: uids(free(9)[8:])},
			},
		},
		"9 Pods, 2 pools in flight for some of them: one more": {
			groups: []NodeGroup{v6e4x4}, pending: free(9),
			flying: []inFlight{{Group: groupName, Pods: uids(free(9)[:4])}, {Group: groupName, Pods: uids(free(9)[4:8])}},
			want:   []scaleUp{{Group: groupName, Pods: uids(free(9)[8:])}},
		},
		"5 Pods, 2 pools in flight for 5 earlier ones and 1 of these: none": {
			groups: []NodeGroup{v6e4x4}, pending: free(5),
			flying: []inFlight{{Group: groupName, Pods: uids(free(4))}, {Group: groupName, Pods: []types.UID{"free-4"}}},
		},
		"no group fits": {
			groups: []NodeGroup{v5p}, pending: free(1),
			wantRejected: []rejection{{Pod: "free-0", Reason: "node group nap-tpu-v5p-slice-2x2x4: node(s) didn't match Pod's node affinity/selector"}},
		},
		"a capacity Pod whose slice already has a bound capacity Pod follows it": {
			groups: []NodeGroup{v6e4x4}, pending: gangA[1:], bound: gangA[:1],
			wantRejected: func() []rejection {
				out := make([]rejection, 0, len(gangA)-1)
				for _, p := range gangA[1:] {
					out = append(out, rejection{Pod: p.UID, Reason: "required pod affinity to Pods a new pool would not hold"})
				}
				return out
			}(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, rejected := plan(tc.pending, templates(t, tc.groups...), tc.flying, tc.bound)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRejected, rejected, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("rejected (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecideRequest(t *testing.T) {
	slice := provisioning.Slice{Namespace: "ns", Name: "slice", Hosts: 4, Key: PoolKey, Pod: tpuPod("w").Obj()}
	pt := provisioning.NewPodTemplate(slice, 1)
	request := func(class string, count int32) *provisioning.ProvisioningRequest {
		pr := provisioning.NewRequest(slice, 1, class)
		pr.Spec.PodSets[0].Count = count
		return pr
	}
	provisioned := request(provisioning.ClassBestEffortAtomicScaleUp, 4)
	provisioned.Status.Conditions = []metav1.Condition{{Type: provisioning.ConditionProvisioned, Status: metav1.ConditionTrue}}
	failed := request(provisioning.ClassBestEffortAtomicScaleUp, 4)
	failed.Status.Conditions = []metav1.Condition{{Type: provisioning.ConditionFailed, Status: metav1.ConditionTrue}}
	pending := request(provisioning.ClassBestEffortAtomicScaleUp, 4)
	pending.Status.Conditions = []metav1.Condition{{Type: provisioning.ConditionProvisioned, Status: metav1.ConditionFalse}}
	otherShape := provisioning.NewPodTemplate(provisioning.Slice{Namespace: "ns", Name: "slice", Pod: tpuPod("w").Topology("tpu-v6e-slice", "8x8").Obj()}, 1)
	found := map[string]*corev1.PodTemplate{pt.Name: pt}
	group := v6e4x4.name()
	cases := map[string]struct {
		pr            *provisioning.ProvisioningRequest
		podTemplates  map[string]*corev1.PodTemplate
		refused       map[string]bool
		ignoreUnknown bool
		want          requestDecision
	}{
		"a 4x4 slice's request: one pool": {
			pr: request(provisioning.ClassBestEffortAtomicScaleUp, 4), podTemplates: found,
			want: requestDecision{Action: provisionRequest, Pools: []string{group}},
		},
		"queued provisioning: one pool": {
			pr: request(provisioning.ClassQueuedProvisioning, 4), podTemplates: found,
			want: requestDecision{Action: provisionRequest, Pools: []string{group}},
		},
		"two slices' worth: two pools": {
			pr: request(provisioning.ClassBestEffortAtomicScaleUp, 8), podTemplates: found,
			want: requestDecision{Action: provisionRequest, Pools: []string{group, group}},
		},
		"Provisioned False is not terminal": {
			pr: pending, podTemplates: found,
			want: requestDecision{Action: provisionRequest, Pools: []string{group}},
		},
		"provisioned: left alone": {pr: provisioned, podTemplates: found, want: requestDecision{Action: skipRequest}},
		"failed: left alone":      {pr: failed, podTemplates: found, want: requestDecision{Action: skipRequest}},
		"refused class": {
			pr: request(provisioning.ClassBestEffortAtomicScaleUp, 4), podTemplates: found,
			refused: map[string]bool{provisioning.ClassBestEffortAtomicScaleUp: true},
			want: requestDecision{Action: failRequest, Reason: ReasonClassRefused,
				Message: "provisioning class best-effort-atomic-scale-up.autoscaling.x-k8s.io is refused in this cluster"},
		},
		"unknown class": {
			pr: request("example.com", 4), podTemplates: found,
			want: requestDecision{Action: failRequest, Reason: ReasonClassRefused, Message: "provisioning class example.com is not supported"},
		},
		"unknown class, left to others": {
			pr: request("example.com", 4), podTemplates: found, ignoreUnknown: true,
			want: requestDecision{Action: skipRequest},
		},
		"no PodTemplate": {
			pr: request(provisioning.ClassBestEffortAtomicScaleUp, 4),
			want: requestDecision{Action: failRequest, Reason: ReasonFailedToCreatePods,
				Message: "pod set 0: PodTemplate ns/slice-capacity-1 not found"},
		},
		"a template no group fits": {
			pr: request(provisioning.ClassBestEffortAtomicScaleUp, 4), podTemplates: map[string]*corev1.PodTemplate{pt.Name: otherShape},
			want: requestDecision{Action: failRequest, Reason: ReasonFailedToCreatePods,
				Message: "pod set 0 (PodTemplate slice-capacity-1, 4 Pods) fits no node group: node group nap-tpu-v6e-slice-4x4: node(s) didn't match Pod's node affinity/selector"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := decideRequest(tc.pr, tc.podTemplates, templates(t, v6e4x4), tc.refused, tc.ignoreUnknown)
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(requestDecision{}, "Pods")); diff != "" {
				t.Errorf("decideRequest (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCapacityFor(t *testing.T) {
	nodes := templates(t, v6e4x4)[0].nodes
	pods := func(n int) []*corev1.Pod {
		out := make([]*corev1.Pod, 0, n)
		for i := range n {
			out = append(out, tpuPod(strconv.Itoa(i)).Obj())
		}
		return out
	}
	busy := freeNode(nodes[0], pods(1))
	cases := map[string]struct {
		pods  []*corev1.Pod
		nodes []*corev1.Node
		want  bool
	}{
		"4 hosts hold 4 Pods":             {pods: pods(4), nodes: nodes, want: true},
		"4 hosts do not hold 5":           {pods: pods(5), nodes: nodes},
		"a host already used holds none":  {pods: pods(4), nodes: append([]*corev1.Node{busy}, nodes[1:]...)},
		"the other 3 hosts hold 3":        {pods: pods(3), nodes: append([]*corev1.Node{busy}, nodes[1:]...), want: true},
		"no Node":                         {pods: pods(1)},
		"a pod set of none needs nothing": {want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := capacityFor(tc.pods, tc.nodes); got != tc.want {
				t.Errorf("capacityFor = %v, want %v", got, tc.want)
			}
		})
	}
}
