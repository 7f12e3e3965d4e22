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

package health

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

const (
	ns       = "ns"
	poolKey  = constants.NodePoolTopologyKey
	blockKey = constants.GCETopologyBlockKey
)

// slice is a 4-host slice of RayCluster rc group tpu, replica 0.
func slice() *testutil.SliceWrapper {
	return testutil.MakeSlice("s", ns, "rc", "rc-uid", "tpu", 0, 4)
}

// pod is the Pod holding worker ID id in testutil.Bound(n, "w").
func pod(id int) *testutil.PodWrapper {
	name := fmt.Sprintf("w-%d", id)
	return testutil.MakePod(name, ns).UID(testutilUID(name)).Phase(corev1.PodPending)
}

func testutilUID(name string) types.UID { return types.UID("uid-" + name) }

// node is a Ready v6e host of pool in block b1, sub-block sb-<pool>.
func node(name, pool string) *testutil.NodeWrapper {
	return testutil.MakeNode(name).TPU("tpu-v6e-slice", "4x4", pool).GCE("b1", "sb-"+pool).Ready(true)
}

// onNodes returns 4 Pods w-0..w-3 on n0..n3, Ready or not.
func onNodes(ready bool) []corev1.Pod {
	out := make([]corev1.Pod, 0, 4)
	for i := range 4 {
		out = append(out, *pod(i).NodeName(fmt.Sprintf("n%d", i)).Ready(ready).Obj())
	}
	return out
}

// nodes is a lookup over the given Nodes.
func nodes(list ...*testutil.NodeWrapper) func(string) (*corev1.Node, bool) {
	m := map[string]*corev1.Node{}
	for _, n := range list {
		m[n.Name] = n.Obj()
	}
	return func(name string) (*corev1.Node, bool) { n, ok := m[name]; return n, ok }
}

// poolA is n0..n3 in pool-a.
func poolA() []*testutil.NodeWrapper {
	return []*testutil.NodeWrapper{node("n0", "pool-a"), node("n1", "pool-a"), node("n2", "pool-a"), node("n3", "pool-a")}
}

func replace(list []*testutil.NodeWrapper, n *testutil.NodeWrapper) []*testutil.NodeWrapper {
	out := make([]*testutil.NodeWrapper, 0, len(list))
	for _, m := range list {
		if m.Name == n.Name {
			m = n
		}
		out = append(out, m)
	}
	return out
}

func without(list []*testutil.NodeWrapper, name string) []*testutil.NodeWrapper {
	out := make([]*testutil.NodeWrapper, 0, len(list))
	for _, m := range list {
		if m.Name != name {
			out = append(out, m)
		}
	}
	return out
}

// hostsOn is hosts 0.. on n0.., Ready, in the given domains.
func hostsOn(domains ...string) tpuv1alpha1.HostList {
	out := make(tpuv1alpha1.HostList, 0, len(domains))
	for i, d := range domains {
		out = append(out, tpuv1alpha1.HostFact{WorkerID: int32(i), Node: fmt.Sprintf("n%d", i), Domain: d, Ready: true}) //nolint:gosec // test data.
	}
	return out
}

func cond(t string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg}
}

var (
	scheduled   = cond(tpuv1alpha1.ConditionScheduled, metav1.ConditionTrue, tpuv1alpha1.ReasonAllHostsScheduled, "all 4 hosts bound to a node")
	placedPoolA = cond(tpuv1alpha1.ConditionPlaced, metav1.ConditionTrue, tpuv1alpha1.ReasonOneDomain, "all 4 hosts on cloud.google.com/gke-nodepool=pool-a")
	ready       = cond(tpuv1alpha1.ConditionReady, metav1.ConditionTrue, tpuv1alpha1.ReasonAllHostsReady, "all 4 hosts Ready")
	healthy     = cond(tpuv1alpha1.ConditionDegraded, metav1.ConditionFalse, tpuv1alpha1.ReasonHostsHealthy, "no host's node is failing or going, and no host stopped being Ready")
	notReady    = func(msg string) metav1.Condition {
		return cond(tpuv1alpha1.ConditionReady, metav1.ConditionFalse, tpuv1alpha1.ReasonHostsNotReady, msg)
	}
	lost = func(msg string) metav1.Condition {
		return cond(tpuv1alpha1.ConditionReady, metav1.ConditionFalse, tpuv1alpha1.ReasonReadinessLost, msg)
	}
	degraded = func(reason, msg string) metav1.Condition {
		return cond(tpuv1alpha1.ConditionDegraded, metav1.ConditionTrue, reason, msg)
	}
	notPlaced = func(reason, msg string) metav1.Condition {
		return cond(tpuv1alpha1.ConditionPlaced, metav1.ConditionFalse, reason, msg)
	}
	wasReady     = slice().Condition(tpuv1alpha1.ConditionReady, metav1.ConditionTrue, tpuv1alpha1.ReasonAllHostsReady)
	wasLost      = slice().Condition(tpuv1alpha1.ConditionReady, metav1.ConditionFalse, tpuv1alpha1.ReasonReadinessLost)
	neverReady   = slice().Condition(tpuv1alpha1.ConditionReady, metav1.ConditionFalse, tpuv1alpha1.ReasonHostsNotReady)
	threeOfFourR = "3 of 4 hosts Ready; not Ready: host 2"
)

func TestEvaluate(t *testing.T) {
	cases := map[string]struct {
		slice  *testutil.SliceWrapper
		claims []tpuv1alpha1.WorkerClaim
		pods   []corev1.Pod
		nodes  []*testutil.NodeWrapper
		want   Result
	}{
		"claims bound, no Pod scheduled yet": {
			slice: slice(), claims: testutil.Bound(4, "w"),
			pods:  []corev1.Pod{*pod(0).Obj(), *pod(1).Obj(), *pod(2).Obj(), *pod(3).Obj()},
			nodes: poolA(),
			want: Result{Key: poolKey,
				Scheduled: cond(tpuv1alpha1.ConditionScheduled, metav1.ConditionFalse, tpuv1alpha1.ReasonHostsUnscheduled, "0 of 4 hosts bound to a node; not yet: hosts 0-3"),
				Placed:    cond(tpuv1alpha1.ConditionPlaced, metav1.ConditionUnknown, tpuv1alpha1.ReasonNoHostScheduled, "no host is bound to a node yet (placement key cloud.google.com/gke-nodepool)"),
				Ready:     notReady("0 of 4 hosts Ready; not Ready: hosts 0-3"), Degraded: healthy},
		},
		"two hosts scheduled, one claim pending, one Pod not seen": {
			slice: slice(), claims: append(testutil.Bound(3, "w"), tpuv1alpha1.WorkerClaim{WorkerID: 3, Token: "t3"}),
			pods:  []corev1.Pod{*pod(0).NodeName("n0").Obj(), *pod(1).NodeName("n1").Ready(true).Obj()},
			nodes: poolA(),
			want: Result{Key: poolKey, Hosts: tpuv1alpha1.HostList{{WorkerID: 0, Node: "n0", Domain: "pool-a"}, {WorkerID: 1, Node: "n1", Domain: "pool-a", Ready: true}},
				Scheduled: cond(tpuv1alpha1.ConditionScheduled, metav1.ConditionFalse, tpuv1alpha1.ReasonHostsUnscheduled, "2 of 4 hosts bound to a node; not yet: hosts 2-3"),
				Placed:    cond(tpuv1alpha1.ConditionPlaced, metav1.ConditionTrue, tpuv1alpha1.ReasonOneDomain, "the 2 scheduled hosts of 4 on cloud.google.com/gke-nodepool=pool-a"),
				Ready:     notReady("1 of 4 hosts Ready; not Ready: hosts 0, 2-3"), Degraded: healthy},
		},
		"every host Ready in one pool": {
			slice: slice(), claims: testutil.Bound(4, "w"), pods: onNodes(true), nodes: poolA(),
			want: Result{Key: poolKey, Hosts: hostsOn("pool-a", "pool-a", "pool-a", "pool-a"),
				Scheduled: scheduled, Placed: placedPoolA, Ready: ready, Degraded: healthy},
		},
		"one host in another pool": {
			slice: slice(), claims: testutil.Bound(4, "w"), pods: onNodes(true), nodes: replace(poolA(), node("n3", "pool-b")),
			want: Result{Key: poolKey, Hosts: hostsOn("pool-a", "pool-a", "pool-a", "pool-b"),
				Scheduled: scheduled, Ready: ready, Degraded: healthy,
				Placed: notPlaced(tpuv1alpha1.ReasonSplitDomains, "hosts 0-2 on pool-a, 3 on pool-b (placement key cloud.google.com/gke-nodepool)")},
		},
		"a host's node without the placement key's label": {
			slice: slice().AffinityTopologyKey(constants.GCETopologySubblockKey), claims: testutil.Bound(4, "w"), pods: onNodes(true),
			nodes: replace(poolA(), testutil.MakeNode("n1").TPU("tpu-v6e-slice", "4x4", "pool-a").Ready(true)),
			want: Result{Key: constants.GCETopologySubblockKey, Hosts: hostsOn("sb-pool-a", tpuv1alpha1.NoDomain, "sb-pool-a", "sb-pool-a"),
				Scheduled: scheduled, Ready: ready, Degraded: healthy,
				Placed: notPlaced(tpuv1alpha1.ReasonDomainUnknown, "hosts 0, 2-3 on sb-pool-a, 1 on nodes without cloud.google.com/gce-topology-subblock (placement key cloud.google.com/gce-topology-subblock)")},
		},
		"the affinity's key decides: two pools of one sub-block are one domain": {
			slice: slice().AffinityTopologyKey(blockKey), claims: testutil.Bound(4, "w"), pods: onNodes(true),
			nodes: replace(poolA(), node("n3", "pool-b")),
			want: Result{Key: blockKey, Hosts: hostsOn("b1", "b1", "b1", "b1"), Scheduled: scheduled, Ready: ready, Degraded: healthy,
				Placed: cond(tpuv1alpha1.ConditionPlaced, metav1.ConditionTrue, tpuv1alpha1.ReasonOneDomain, "all 4 hosts on cloud.google.com/gce-topology-block=b1")},
		},
		"a node NotReady, the slice not Ready before": {
			slice: neverReady, claims: testutil.Bound(4, "w"), pods: onNodes(true), nodes: replace(poolA(), node("n2", "pool-a").Ready(false)),
			want: Result{Key: poolKey, Hosts: hostsOn("pool-a", "pool-a", "pool-a", "pool-a"), Scheduled: scheduled, Placed: placedPoolA,
				Ready: notReady(threeOfFourR), Degraded: degraded(tpuv1alpha1.ReasonNodeNotReady, "node not Ready: host 2 (n2)")},
		},
		"a node NotReady after the slice was Ready": {
			slice: wasReady, claims: testutil.Bound(4, "w"), pods: onNodes(true), nodes: replace(poolA(), node("n2", "pool-a").Ready(false)),
			want: Result{Key: poolKey, Hosts: hostsOn("pool-a", "pool-a", "pool-a", "pool-a"), Scheduled: scheduled, Placed: placedPoolA,
				Ready: lost(threeOfFourR), Degraded: degraded(tpuv1alpha1.ReasonNodeNotReady, "node not Ready: host 2 (n2)")},
		},
		"a node that never reported Ready": {
			slice: slice(), claims: testutil.Bound(4, "w"), pods: onNodes(true),
			nodes: replace(poolA(), testutil.MakeNode("n2").TPU("tpu-v6e-slice", "4x4", "pool-a")),
			want: Result{Key: poolKey, Hosts: hostsOn("pool-a", "pool-a", "pool-a", "pool-a"), Scheduled: scheduled, Placed: placedPoolA,
				Ready: notReady(threeOfFourR), Degraded: degraded(tpuv1alpha1.ReasonNodeNotReady, "node not Ready: host 2 (n2)")},
		},
		"the node lifecycle controller's unreachable taint on a node still said Ready": {
			slice: wasReady, claims: testutil.Bound(4, "w"), pods: onNodes(true), nodes: replace(poolA(), node("n1", "pool-a").Taint(corev1.TaintNodeUnreachable)),
			want: Result{Key: poolKey, Hosts: hostsOn("pool-a", "pool-a", "pool-a", "pool-a"), Scheduled: scheduled, Placed: placedPoolA, Ready: ready,
				Degraded: degraded(tpuv1alpha1.ReasonNodeNotReady, "node tainted node.kubernetes.io/unreachable: host 1 (n1)")},
		},
		"GKE's impending termination taint (maintenance, preemption): Degraded, still Ready": {
			slice: wasReady, claims: testutil.Bound(4, "w"), pods: onNodes(true),
			nodes: replace(replace(poolA(), node("n0", "pool-a").Taint(TaintImpendingNodeTermination)), node("n1", "pool-a").Taint(TaintImpendingNodeTermination)),
			want: Result{Key: poolKey, Hosts: hostsOn("pool-a", "pool-a", "pool-a", "pool-a"), Scheduled: scheduled, Placed: placedPoolA, Ready: ready,
				Degraded: degraded(tpuv1alpha1.ReasonNodeTainted, "node tainted cloud.google.com/impending-node-termination: hosts 0-1 (n0, n1)")},
		},
		"a taint that says nothing about the node's health": {
			slice: wasReady, claims: testutil.Bound(4, "w"), pods: onNodes(true), nodes: replace(poolA(), node("n0", "pool-a").Taint("google.com/tpu")),
			want: Result{Key: poolKey, Hosts: hostsOn("pool-a", "pool-a", "pool-a", "pool-a"), Scheduled: scheduled, Placed: placedPoolA, Ready: ready, Degraded: healthy},
		},
		"a cordoned node": {
			slice: wasReady, claims: testutil.Bound(4, "w"), pods: onNodes(true), nodes: replace(poolA(), node("n3", "pool-a").Unschedulable()),
			want: Result{Key: poolKey, Hosts: hostsOn("pool-a", "pool-a", "pool-a", "pool-a"), Scheduled: scheduled, Placed: placedPoolA, Ready: ready,
				Degraded: degraded(tpuv1alpha1.ReasonNodeUnschedulable, "node unschedulable: host 3 (n3)")},
		},
		"the cluster autoscaler about to remove a node": {
			slice: wasReady, claims: testutil.Bound(4, "w"), pods: onNodes(true), nodes: replace(poolA(), node("n3", "pool-a").Taint(TaintToBeDeletedByClusterAutoscaler)),
			want: Result{Key: poolKey, Hosts: hostsOn("pool-a", "pool-a", "pool-a", "pool-a"), Scheduled: scheduled, Placed: placedPoolA, Ready: ready,
				Degraded: degraded(tpuv1alpha1.ReasonNodeTainted, "node tainted ToBeDeletedByClusterAutoscaler: host 3 (n3)")},
		},
		"a node being deleted": {
			slice: wasReady, claims: testutil.Bound(4, "w"), pods: onNodes(true), nodes: replace(poolA(), node("n0", "pool-a").Deleting()),
			want: Result{Key: poolKey, Hosts: hostsOn("pool-a", "pool-a", "pool-a", "pool-a"), Scheduled: scheduled, Placed: placedPoolA, Ready: ready,
				Degraded: degraded(tpuv1alpha1.ReasonNodeDeleting, "node being deleted: host 0 (n0)")},
		},
		"a node that is gone": {
			slice: wasReady, claims: testutil.Bound(4, "w"), pods: onNodes(true), nodes: without(poolA(), "n1"),
			want: Result{Key: poolKey, Hosts: hostsOn("pool-a", tpuv1alpha1.NoDomain, "pool-a", "pool-a"), Scheduled: scheduled,
				Placed:   notPlaced(tpuv1alpha1.ReasonDomainUnknown, "hosts 0, 2-3 on pool-a, 1 on nodes without cloud.google.com/gke-nodepool (placement key cloud.google.com/gke-nodepool)"),
				Ready:    lost("3 of 4 hosts Ready; not Ready: host 1"),
				Degraded: degraded(tpuv1alpha1.ReasonNodeMissing, "node not found: host 1 (n1)")},
		},
		"several problems: the reason is the first of the list, the message names each": {
			slice: wasReady, claims: testutil.Bound(4, "w"), pods: onNodes(true),
			nodes: replace(replace(poolA(), node("n0", "pool-a").Unschedulable()), node("n2", "pool-a").Ready(false)),
			want: Result{Key: poolKey, Hosts: hostsOn("pool-a", "pool-a", "pool-a", "pool-a"), Scheduled: scheduled, Placed: placedPoolA, Ready: lost(threeOfFourR),
				Degraded: degraded(tpuv1alpha1.ReasonNodeNotReady, "node unschedulable: host 0 (n0); node not Ready: host 2 (n2)")},
		},
		"a Pod not Ready yet, the slice never Ready: not Degraded": {
			slice: neverReady, claims: testutil.Bound(4, "w"),
			pods:  []corev1.Pod{onNodes(true)[0], onNodes(true)[1], onNodes(false)[2], onNodes(true)[3]},
			nodes: poolA(),
			want: Result{Key: poolKey, Hosts: tpuv1alpha1.HostList{hostsOn("pool-a")[0], {WorkerID: 1, Node: "n1", Domain: "pool-a", Ready: true},
				{WorkerID: 2, Node: "n2", Domain: "pool-a"}, {WorkerID: 3, Node: "n3", Domain: "pool-a", Ready: true}},
				Scheduled: scheduled, Placed: placedPoolA, Ready: notReady(threeOfFourR), Degraded: healthy},
		},
		"a Pod stopped being Ready after the slice was Ready": {
			slice: wasReady, claims: testutil.Bound(4, "w"),
			pods:  []corev1.Pod{onNodes(true)[0], onNodes(true)[1], onNodes(false)[2], onNodes(true)[3]},
			nodes: poolA(),
			want: Result{Key: poolKey, Hosts: tpuv1alpha1.HostList{hostsOn("pool-a")[0], {WorkerID: 1, Node: "n1", Domain: "pool-a", Ready: true},
				{WorkerID: 2, Node: "n2", Domain: "pool-a"}, {WorkerID: 3, Node: "n3", Domain: "pool-a", Ready: true}},
				Scheduled: scheduled, Placed: placedPoolA, Ready: lost(threeOfFourR),
				Degraded: degraded(tpuv1alpha1.ReasonPodNotReady, "not Ready since the slice was Ready: host 2")},
		},
		"readiness lost stays lost until every host is Ready: its Pod replaced, the new one not Ready": {
			slice: wasLost, claims: testutil.Bound(4, "w"),
			pods:  []corev1.Pod{onNodes(true)[0], onNodes(true)[1], *pod(2).Obj(), onNodes(true)[3]},
			nodes: poolA(),
			want: Result{Key: poolKey, Hosts: tpuv1alpha1.HostList{hostsOn("pool-a")[0], {WorkerID: 1, Node: "n1", Domain: "pool-a", Ready: true},
				{WorkerID: 3, Node: "n3", Domain: "pool-a", Ready: true}},
				Scheduled: cond(tpuv1alpha1.ConditionScheduled, metav1.ConditionFalse, tpuv1alpha1.ReasonHostsUnscheduled, "3 of 4 hosts bound to a node; not yet: host 2"),
				Placed:    cond(tpuv1alpha1.ConditionPlaced, metav1.ConditionTrue, tpuv1alpha1.ReasonOneDomain, "the 3 scheduled hosts of 4 on cloud.google.com/gke-nodepool=pool-a"),
				Ready:     lost(threeOfFourR), Degraded: degraded(tpuv1alpha1.ReasonPodNotReady, "not Ready since the slice was Ready: host 2")},
		},
		"recovered: every host Ready again": {
			slice: wasLost, claims: testutil.Bound(4, "w"), pods: onNodes(true), nodes: poolA(),
			want: Result{Key: poolKey, Hosts: hostsOn("pool-a", "pool-a", "pool-a", "pool-a"), Scheduled: scheduled, Placed: placedPoolA, Ready: ready, Degraded: healthy},
		},
		"a Pod that is terminating is not Ready": {
			slice: slice(), claims: testutil.Bound(4, "w"),
			pods:  []corev1.Pod{onNodes(true)[0], onNodes(true)[1], *pod(2).NodeName("n2").Ready(true).Terminating().Obj(), onNodes(true)[3]},
			nodes: poolA(),
			want: Result{Key: poolKey, Hosts: tpuv1alpha1.HostList{hostsOn("pool-a")[0], {WorkerID: 1, Node: "n1", Domain: "pool-a", Ready: true},
				{WorkerID: 2, Node: "n2", Domain: "pool-a"}, {WorkerID: 3, Node: "n3", Domain: "pool-a", Ready: true}},
				Scheduled: scheduled, Placed: placedPoolA, Ready: notReady(threeOfFourR), Degraded: healthy},
		},
		"a claim naming a Pod the reconciler does not see counts as no Pod": {
			slice: slice(), claims: testutil.Bound(4, "w"), pods: onNodes(true)[:3], nodes: poolA(),
			want: Result{Key: poolKey, Hosts: hostsOn("pool-a", "pool-a", "pool-a"),
				Scheduled: cond(tpuv1alpha1.ConditionScheduled, metav1.ConditionFalse, tpuv1alpha1.ReasonHostsUnscheduled, "3 of 4 hosts bound to a node; not yet: host 3"),
				Placed:    cond(tpuv1alpha1.ConditionPlaced, metav1.ConditionTrue, tpuv1alpha1.ReasonOneDomain, "the 3 scheduled hosts of 4 on cloud.google.com/gke-nodepool=pool-a"),
				Ready:     notReady("3 of 4 hosts Ready; not Ready: host 3"), Degraded: healthy},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Evaluate(Input{Slice: tc.slice.Obj(), Claims: tc.claims, Pods: tc.pods, Node: nodes(tc.nodes...)})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Evaluate() (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestPlacementKey(t *testing.T) {
	kueue := func(annotation, v string) *corev1.Pod {
		return pod(0).Annotation(annotation, v).Obj()
	}
	dynamic := pod(0).Annotation(constants.SliceTopologyAnnotation, "4x12x16").Obj()
	dynamic.Spec.NodeSelector = map[string]string{constants.AcceleratorNodeSelectorKey: "tpu7x"}
	staticSubslice := pod(0).Annotation(constants.SliceTopologyAnnotation, "2x4").Obj()
	staticSubslice.Spec.NodeSelector = map[string]string{constants.TopologyNodeSelectorKey: "4x4"}
	cases := map[string]struct {
		slice *testutil.SliceWrapper
		pods  []*corev1.Pod
		want  string
	}{
		"the affinity's key":                 {slice: slice().AffinityTopologyKey(constants.GCETopologySubblockKey), pods: []*corev1.Pod{dynamic}, want: constants.GCETopologySubblockKey},
		"no affinity, no Pod: the node pool": {slice: slice(), pods: []*corev1.Pod{nil, nil}, want: poolKey},
		"Kueue's slice level first": {slice: slice(), want: "cloud.google.com/gce-topology-subblock",
			pods: []*corev1.Pod{nil, kueue(constants.KueuePodSetRequiredTopologyAnnotation, blockKey), kueue(constants.KueuePodSetSliceRequiredTopologyAnnotation, " cloud.google.com/gce-topology-subblock ")}},
		"Kueue's pod-set level":                   {slice: slice(), pods: []*corev1.Pod{kueue(constants.KueuePodSetRequiredTopologyAnnotation, blockKey)}, want: blockKey},
		"a preferred level is no promise":         {slice: slice(), pods: []*corev1.Pod{kueue(constants.KueuePodSetPreferredTopologyAnnotation, blockKey)}, want: poolKey},
		"GKE dynamic slicing: the block":          {slice: slice(), pods: []*corev1.Pod{nil, dynamic}, want: blockKey},
		"a subslice of a static pool without key": {slice: slice(), pods: []*corev1.Pod{staticSubslice}, want: poolKey},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, PlacementKey(tc.slice.Obj(), tc.pods)); diff != "" {
				t.Errorf("PlacementKey() (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestRanges(t *testing.T) {
	cases := map[string]struct {
		ids  []int32
		want string
	}{
		"none":                      {want: "none"},
		"one":                       {ids: []int32{7}, want: "7"},
		"runs, unsorted, repeated":  {ids: []int32{5, 0, 1, 2, 9, 3, 5, 10}, want: "0-3, 5, 9-10"},
		"more ranges than it names": {ids: []int32{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 19}, want: "0, 2, 4, 6, 8, 10, 12, 14 and 3 more"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Ranges(tc.ids)); diff != "" {
				t.Errorf("Ranges() (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestEvaluateSplitNamesRanges: a 64-host slice half in each of two pools is named by ranges.
func TestEvaluateSplitNamesRanges(t *testing.T) {
	s := testutil.MakeSlice("s", ns, "rc", "rc-uid", "tpu", 0, 64).Obj()
	pods := make([]corev1.Pod, 0, 64)
	list := make([]*testutil.NodeWrapper, 0, 64)
	for i := range 64 {
		pool := "pool-a"
		if i >= 32 {
			pool = "pool-b"
		}
		name := fmt.Sprintf("n%d", i)
		pods = append(pods, *pod(i).NodeName(name).Ready(true).Obj())
		list = append(list, node(name, pool))
	}
	got := Evaluate(Input{Slice: s, Claims: testutil.Bound(64, "w"), Pods: pods, Node: nodes(list...)})
	want := notPlaced(tpuv1alpha1.ReasonSplitDomains, "hosts 0-31 on pool-a, 32-63 on pool-b (placement key cloud.google.com/gke-nodepool)")
	if diff := cmp.Diff(want, got.Placed); diff != "" {
		t.Errorf("Placed (-want,+got):\n%s", diff)
	}
	if got.Ready.Status != metav1.ConditionTrue || got.Scheduled.Status != metav1.ConditionTrue {
		t.Errorf("Ready %s, Scheduled %s: want both True (a split is reported by Placed alone)", got.Ready.Status, got.Scheduled.Status)
	}
}

// TestScheduledWhileGated: a ChosenDomain slice whose Pods wait behind the operator's scheduling
// gate is Scheduled=False with the placement step's reason (docs/spec.md §11, §12); other slices
// and released Pods keep HostsUnscheduled.
func TestScheduledWhileGated(t *testing.T) {
	// The Pods carry the TPU identity of replica 0 (the slice), or of replica 1: another slice of
	// the worker group, whose gated Pods the slice's condition does not count.
	ofReplica := func(replica int32, gated bool) []corev1.Pod {
		out := make([]corev1.Pod, 0, 4)
		for i := range int32(4) {
			p := testutil.MakeWorkerPod(ns, "rc", "rc-uid", "tpu").Named(fmt.Sprintf("w-%d-%d", replica, i)).
				TPU(4).Topology("tpu-v6e-slice", "4x4").TPUIdentity("tpu", replica, i).Phase(corev1.PodPending)
			if gated {
				p.SchedulingGate(tpuv1alpha1.PlacementSchedulingGate)
			}
			out = append(out, *p.Obj())
		}
		return out
	}
	gated, released := func() []corev1.Pod { return ofReplica(0, true) }, func() []corev1.Pod { return ofReplica(0, false) }
	chosen := func(status metav1.ConditionStatus, reason, msg string) *testutil.SliceWrapper {
		s := testutil.MakeSlice(naming.SliceName("rc", "tpu", 0), ns, "rc", "rc-uid", "tpu", 0, 4).Placement(tpuv1alpha1.PlacementChosenDomain, poolKey)
		s.Status.Conditions = append(s.Status.Conditions, metav1.Condition{Type: tpuv1alpha1.ConditionDomainChosen, Status: status, Reason: reason, Message: msg})
		return s
	}
	cases := map[string]struct {
		slice       *testutil.SliceWrapper
		pods        []corev1.Pod
		wantReason  string
		wantMessage string
	}{
		"gated, waiting for Pods": {
			slice: chosen(metav1.ConditionFalse, tpuv1alpha1.ReasonWaitingForPods, "waiting for host 3"), pods: gated(),
			wantReason:  tpuv1alpha1.ReasonSchedulingGated,
			wantMessage: "0 of 4 hosts bound to a node; not yet: hosts 0-3; 4 Pods wait behind the scheduling gate tpu.ray.io/slice-placement: waiting for host 3",
		},
		"gated, no domain fits": {
			slice: chosen(metav1.ConditionFalse, tpuv1alpha1.ReasonNoDomainFits, "pool-a: held"), pods: gated(),
			wantReason:  tpuv1alpha1.ReasonNoDomainFits,
			wantMessage: "0 of 4 hosts bound to a node; not yet: hosts 0-3; 4 Pods wait behind the scheduling gate tpu.ray.io/slice-placement: pool-a: held",
		},
		"domain chosen, Pods not yet released": {
			slice: chosen(metav1.ConditionTrue, tpuv1alpha1.ReasonDomainFits, "fits"), pods: gated(),
			wantReason:  tpuv1alpha1.ReasonSchedulingGated,
			wantMessage: "0 of 4 hosts bound to a node; not yet: hosts 0-3; 4 Pods wait behind the scheduling gate tpu.ray.io/slice-placement",
		},
		"another slice of the group gated, this one released: its gated Pods are not counted": {
			slice: chosen(metav1.ConditionTrue, tpuv1alpha1.ReasonDomainFits, "fits"), pods: append(released(), ofReplica(1, true)...),
			wantReason:  tpuv1alpha1.ReasonHostsUnscheduled,
			wantMessage: "0 of 4 hosts bound to a node; not yet: hosts 0-3",
		},
		"released, waiting for the scheduler": {
			slice: chosen(metav1.ConditionTrue, tpuv1alpha1.ReasonDomainFits, "fits"), pods: released(),
			wantReason:  tpuv1alpha1.ReasonHostsUnscheduled,
			wantMessage: "0 of 4 hosts bound to a node; not yet: hosts 0-3",
		},
		"an InterPodAffinity slice's gate is not ours to report": {
			slice: slice().Placement(tpuv1alpha1.PlacementInterPodAffinity, poolKey), pods: gated(),
			wantReason:  tpuv1alpha1.ReasonHostsUnscheduled,
			wantMessage: "0 of 4 hosts bound to a node; not yet: hosts 0-3",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Evaluate(Input{Slice: tc.slice.Obj(), Claims: testutil.Bound(4, "w"), Pods: tc.pods, Node: nodes()}).Scheduled
			want := metav1.Condition{Type: tpuv1alpha1.ConditionScheduled, Status: metav1.ConditionFalse, Reason: tc.wantReason, Message: tc.wantMessage}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Scheduled (-want,+got):\n%s", diff)
			}
		})
	}
}
