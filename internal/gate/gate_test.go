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

package gate

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

const (
	poolKey = constants.NodePoolTopologyKey
	v6e     = "tpu-v6e-slice"
)

var t0 = time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)

// worker returns a gated worker Pod of slice tpu-0 of cluster rc holding workerID, created at.
func worker(workerID int32, at time.Time) *testutil.PodWrapper {
	return testutil.MakeWorkerPod("ml", "rc", "uid-rc", "tpu").Named("w-"+strconv.Itoa(int(workerID))).
		UID(types.UID("uid-w-"+strconv.Itoa(int(workerID)))).Topology(v6e, "4x4").TPU(4).TPUIdentity("tpu", 0, workerID).
		SchedulingGate(tpuv1alpha1.PlacementSchedulingGate).Created(at)
}

func pods(ws ...*testutil.PodWrapper) []corev1.Pod {
	out := make([]corev1.Pod, 0, len(ws))
	for _, w := range ws {
		out = append(out, *w.Obj())
	}
	return out
}

func TestAssemble(t *testing.T) {
	const timeout = 2 * time.Minute
	cases := map[string]struct {
		pods        []corev1.Pod
		now         time.Time
		wantReady   bool
		wantTimeout bool
		wantMissing []int32
		wantGated   int
		wantWait    time.Duration
	}{
		"every worker ID held by a gated Pod: choose now": {
			pods:      pods(worker(0, t0), worker(1, t0), worker(2, t0), worker(3, t0)),
			now:       t0,
			wantReady: true, wantGated: 4,
		},
		"a worker ID missing: wait for the rest of the timeout, counted from the oldest gated Pod": {
			pods:        pods(worker(0, t0.Add(10*time.Second)), worker(1, t0), worker(3, t0.Add(20*time.Second))),
			now:         t0.Add(30 * time.Second),
			wantMissing: []int32{2}, wantGated: 3, wantWait: 90 * time.Second,
		},
		"a worker ID missing after the timeout: choose for the whole slice anyway": {
			pods:      pods(worker(0, t0), worker(1, t0)),
			now:       t0.Add(timeout),
			wantReady: true, wantTimeout: true, wantMissing: []int32{2, 3}, wantGated: 2,
		},
		"released Pods hold their IDs; the one gated Pod makes the slice complete": {
			pods:      pods(ungated(worker(0, t0)).NodeName("n-1"), worker(1, t0), worker(2, t0), worker(3, t0.Add(time.Hour))),
			now:       t0.Add(time.Hour),
			wantReady: true, wantGated: 3,
		},
		"a terminating Pod holds no ID and waits for nothing": {
			pods:        pods(worker(0, t0), worker(1, t0), worker(2, t0), worker(3, t0).Terminating()),
			now:         t0.Add(time.Second),
			wantMissing: []int32{3}, wantGated: 3, wantWait: timeout - time.Second,
		},
		"no gated Pod: nothing to release": {
			pods:        pods(ungated(worker(0, t0)), ungated(worker(1, t0))),
			now:         t0.Add(time.Hour),
			wantMissing: []int32{2, 3},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Assemble(4, tc.pods, tc.now, timeout)
			if got.Ready != tc.wantReady || got.TimedOut != tc.wantTimeout || got.Wait != tc.wantWait || len(got.Gated) != tc.wantGated {
				t.Errorf("Assemble = ready %v timedOut %v wait %v gated %d, want %v %v %v %d",
					got.Ready, got.TimedOut, got.Wait, len(got.Gated), tc.wantReady, tc.wantTimeout, tc.wantWait, tc.wantGated)
			}
			if !got.Ready && tc.wantGated > 0 && got.Deadline != tc.now.Add(got.Wait) {
				t.Errorf("deadline %v, want now + wait = %v", got.Deadline, tc.now.Add(got.Wait))
			}
			if diff := cmp.Diff(tc.wantMissing, got.Missing); diff != "" {
				t.Errorf("missing (-want,+got):\n%s", diff)
			}
		})
	}
}

func ungated(w *testutil.PodWrapper) *testutil.PodWrapper {
	w.Spec.SchedulingGates = nil
	return w
}

func TestNewRequest(t *testing.T) {
	slice := testutil.MakeSlice(naming.SliceName("rc", "tpu", 0), "ml", "rc", "uid-rc", "tpu", 0, 4).
		Placement(tpuv1alpha1.PlacementChosenDomain, poolKey).Obj()
	slice.UID = "uid-slice"
	node := testutil.MakeNode("n-1").TPU(v6e, "4x4", "pool-a").TPUCapacity(4).Ready(true).Obj()
	holds := []placement.Hold{{Domain: "pool-b", Slice: "ml/other", UID: "uid-other"}}
	toleration := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "ml", Effect: corev1.TaintEffectNoSchedule}
	used := corev1.ResourceList{constants.TPUResourceName: resource.MustParse("2")}
	oneHost := corev1.ResourceList{constants.TPUResourceName: resource.MustParse("4")}
	zone := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
		Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"us-east5-a"}}}}}}
	cases := map[string]struct {
		domain string
		pods   []corev1.Pod
		want   placement.Request
	}{
		"gated Pods: their chips, nodeSelector and tolerations; nothing bound": {
			pods: pods(worker(0, t0).NodeSelector(constants.AcceleratorNodeSelectorKey, v6e).Toleration(toleration), worker(1, t0)),
			want: placement.Request{
				UID: "uid-slice", Key: poolKey, Hosts: 4, ChipsPerHost: 4, Requests: oneHost,
				NodeSelector: map[string]string{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4"},
				Tolerations:  []corev1.Toleration{toleration},
				Nodes:        []placement.Candidate{{Name: "n-1", Labels: node.Labels, Ready: true, AllocatableChips: 4, RequestedChips: 2, Allocatable: node.Status.Allocatable, Requested: used, Pods: 1, ExcludedBy: "old/o-0"}},
				Holds:        holds,
			},
		},
		"a gated Pod that selects its pool itself: the candidates are that pool's": {
			pods: pods(worker(0, t0).NodeSelector(poolKey, "pool-a"), worker(1, t0).NodeSelector(poolKey, "pool-a")),
			want: placement.Request{
				UID: "uid-slice", Key: poolKey, Hosts: 4, ChipsPerHost: 4, Requests: oneHost, PodsBound: true,
				NodeSelector: map[string]string{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4", poolKey: "pool-a"},
				Nodes:        []placement.Candidate{{Name: "n-1", Labels: node.Labels, Ready: true, AllocatableChips: 4, RequestedChips: 2, Allocatable: node.Status.Allocatable, Requested: used, Pods: 1, ExcludedBy: "old/o-0"}},
				Holds:        holds,
			},
		},
		"a released Pod selecting the domain: Previous is committed (PodsBound)": {
			domain: "pool-a",
			pods:   pods(ungated(worker(0, t0)).NodeSelector(poolKey, "pool-a"), worker(1, t0)),
			want: placement.Request{
				UID: "uid-slice", Key: poolKey, Hosts: 4, ChipsPerHost: 4, Requests: oneHost, Previous: "pool-a", PodsBound: true,
				NodeSelector: map[string]string{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4"},
				Nodes:        []placement.Candidate{{Name: "n-1", Labels: node.Labels, Ready: true, AllocatableChips: 4, RequestedChips: 2, Allocatable: node.Status.Allocatable, Requested: used, Pods: 1, ExcludedBy: "old/o-0"}},
				Holds:        holds,
			},
		},
		"a Pod bound to a Node: PodsBound; a finished Pod's binding does not count": {
			domain: "pool-a",
			pods:   pods(ungated(worker(0, t0)).NodeName("n-1"), worker(1, t0), worker(2, t0).NodeName("n-2").Phase(corev1.PodFailed)),
			want: placement.Request{
				UID: "uid-slice", Key: poolKey, Hosts: 4, ChipsPerHost: 4, Requests: oneHost, Previous: "pool-a", PodsBound: true,
				NodeSelector: map[string]string{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4"},
				Nodes:        []placement.Candidate{{Name: "n-1", Labels: node.Labels, Ready: true, AllocatableChips: 4, RequestedChips: 2, Allocatable: node.Status.Allocatable, Requested: used, Pods: 1, ExcludedBy: "old/o-0"}},
				Holds:        holds,
			},
		},
		"no domain yet, an ungated Pod bound to a Node (it bypassed admission): Previous is its domain": {
			pods: pods(ungated(worker(0, t0)).NodeName("n-1"), worker(1, t0)),
			want: placement.Request{
				UID: "uid-slice", Key: poolKey, Hosts: 4, ChipsPerHost: 4, Requests: oneHost, Previous: "pool-a", PodsBound: true,
				NodeSelector: map[string]string{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4"},
				Nodes:        []placement.Candidate{{Name: "n-1", Labels: node.Labels, Ready: true, AllocatableChips: 4, RequestedChips: 2, Allocatable: node.Status.Allocatable, Requested: used, Pods: 1, ExcludedBy: "old/o-0"}},
				Holds:        holds,
			},
		},
		"a gated Pod's own required node affinity and every resource it requests, init containers and overhead included": {
			pods: pods(func() *testutil.PodWrapper {
				w := worker(0, t0)
				w.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: zone}}
				w.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("8")
				w.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Gi")}}}}
				w.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}
				return w
			}()),
			want: placement.Request{
				UID: "uid-slice", Key: poolKey, Hosts: 4, ChipsPerHost: 4, NodeAffinity: zone,
				Requests: corev1.ResourceList{constants.TPUResourceName: resource.MustParse("4"), corev1.ResourceCPU: resource.MustParse("8250m"),
					corev1.ResourceMemory: resource.MustParse("64Gi")},
				NodeSelector: map[string]string{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4"},
				Nodes:        []placement.Candidate{{Name: "n-1", Labels: node.Labels, Ready: true, AllocatableChips: 4, RequestedChips: 2, Allocatable: node.Status.Allocatable, Requested: used, Pods: 1, ExcludedBy: "old/o-0"}},
				Holds:        holds,
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := slice.DeepCopy()
			s.Status.Domain = tc.domain
			got := NewRequest(s, tc.pods, []corev1.Node{*node}, map[string]*Usage{"n-1": {Requests: used, Pods: 1}}, map[string]string{"n-1": "old/o-0"}, holds)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("NewRequest (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestBoundDomain(t *testing.T) {
	slice := testutil.MakeSlice(naming.SliceName("rc", "tpu", 0), "ml", "rc", "uid-rc", "tpu", 0, 4).
		Placement(tpuv1alpha1.PlacementChosenDomain, poolKey).Obj()
	nodes := []corev1.Node{
		*testutil.MakeNode("a-1").TPU(v6e, "4x4", "pool-a").Obj(),
		*testutil.MakeNode("a-2").TPU(v6e, "4x4", "pool-a").Obj(),
		*testutil.MakeNode("b-1").TPU(v6e, "4x4", "pool-b").Obj(),
		*testutil.MakeNode("bare").Obj(),
	}
	cases := map[string]struct {
		pods []corev1.Pod
		want string
	}{
		"nothing bound: none": {
			pods: pods(worker(0, t0), ungated(worker(1, t0))),
		},
		"gated Pods, bound or selecting, never anchor (a gated Pod's own selector narrows the choice instead)": {
			pods: pods(worker(0, t0).NodeSelector(poolKey, "pool-b"), worker(1, t0).NodeName("a-1")),
		},
		"a bound ungated Pod: its Node's domain": {
			pods: pods(worker(0, t0), ungated(worker(1, t0)).NodeName("b-1")),
			want: "pool-b",
		},
		"released Pods' selector counts before their Node, and the majority wins": {
			pods: pods(ungated(worker(0, t0)).NodeSelector(poolKey, "pool-b").NodeName("a-1"),
				ungated(worker(1, t0)).NodeSelector(poolKey, "pool-b"), ungated(worker(2, t0)).NodeName("a-2")),
			want: "pool-b",
		},
		"a tie: the smallest name": {
			pods: pods(ungated(worker(0, t0)).NodeName("b-1"), ungated(worker(1, t0)).NodeName("a-1")),
			want: "pool-a",
		},
		"finished and terminating Pods, unknown Nodes and Nodes without the key do not count": {
			pods: pods(ungated(worker(0, t0)).NodeName("a-1").Phase(corev1.PodSucceeded), ungated(worker(1, t0)).NodeName("a-2").Terminating(),
				ungated(worker(2, t0)).NodeName("gone"), ungated(worker(3, t0)).NodeName("bare")),
		},
		"Pods of another slice or another RayCluster generation do not count": {
			pods: pods(ungated(worker(0, t0)).NodeName("a-1").TPUIdentity("tpu", 1, 0),
				ungated(testutil.MakeWorkerPod("ml", "rc", "uid-older", "tpu").TPU(4).TPUIdentity("tpu", 0, 1)).NodeName("a-2")),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := BoundDomain(slice, tc.pods, nodes); got != tc.want {
				t.Errorf("BoundDomain = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNodeUsage(t *testing.T) {
	own := func(p *corev1.Pod) bool { return strings.HasPrefix(p.Name, "mine") }
	ps := pods(
		worker(0, t0).Named("a").NodeName("n-1"),
		worker(1, t0).Named("b").NodeName("n-1").Container("second", 2),
		worker(2, t0).Named("mine").NodeName("n-1"),
		worker(3, t0).Named("done").NodeName("n-2").Phase(corev1.PodSucceeded),
		worker(0, t0).Named("going").NodeName("n-2").Terminating(),
		worker(1, t0).Named("unbound"),
		worker(2, t0).Named("cpu").NodeName("n-3").TPU(0),
		// Released and pinned by another slice, not bound yet: the Node is promised to it.
		ungated(worker(3, t0)).Named("pinned").PinnedTo("n-4"),
		ungated(worker(0, t0)).Named("mine-pinned").PinnedTo("n-5"),
	)
	// Two caches may show one Pod: it counts once.
	ps = append(ps, ps[0])
	ps[1].UID = "uid-b"
	chips := func(n string) corev1.ResourceList {
		return corev1.ResourceList{constants.TPUResourceName: resource.MustParse(n)}
	}
	want := map[string]*Usage{
		"n-1": {Requests: chips("10"), Pods: 2},
		"n-3": {Requests: chips("0"), Pods: 1},
		"n-4": {Requests: chips("4"), Pods: 1},
	}
	if diff := cmp.Diff(want, NodeUsage(ps, own), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("NodeUsage (-want,+got):\n%s", diff)
	}
}

func TestReleasePatch(t *testing.T) {
	cases := map[string]struct {
		pod       *corev1.Pod
		node      string
		wantSpec  func(*corev1.PodSpec)
		wantError bool
	}{
		"our gate alone, a nodeSelector: the key added, the gates gone": {
			pod: worker(0, t0).NodeSelector(constants.AcceleratorNodeSelectorKey, v6e).Obj(),
			wantSpec: func(s *corev1.PodSpec) {
				s.NodeSelector[poolKey] = "pool-a"
				s.SchedulingGates = nil
			},
		},
		"another gate too: only ours removed": {
			pod: worker(0, t0).SchedulingGate("example.com/quota").Obj(),
			wantSpec: func(s *corev1.PodSpec) {
				s.NodeSelector[poolKey] = "pool-a"
				s.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/quota"}}
			},
		},
		"no nodeSelector: one made": {
			pod: func() *corev1.Pod {
				p := worker(0, t0).Obj()
				p.Spec.NodeSelector = nil
				return p
			}(),
			wantSpec: func(s *corev1.PodSpec) {
				s.NodeSelector = map[string]string{poolKey: "pool-a"}
				s.SchedulingGates = nil
			},
		},
		"pinned, no affinity: one made with the pin": {
			pod:  worker(0, t0).Obj(),
			node: "n-3",
			wantSpec: func(s *corev1.PodSpec) {
				s.NodeSelector[poolKey] = "pool-a"
				s.SchedulingGates = nil
				s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{PinTerm("n-3")}},
				}}
			},
		},
		"pinned, pod anti-affinity of the user's: kept, node affinity added": {
			pod:  worker(0, t0).Affinity(&corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: "kubernetes.io/hostname"}}}}).Obj(),
			node: "n-3",
			wantSpec: func(s *corev1.PodSpec) {
				s.NodeSelector[poolKey] = "pool-a"
				s.SchedulingGates = nil
				s.Affinity.NodeAffinity = &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{PinTerm("n-3")}},
				}
			},
		},
		"pinned, preferred node affinity of the user's: kept, the required term added": {
			pod: worker(0, t0).Affinity(&corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
				Weight: 1, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}},
			}}}}).Obj(),
			node: "n-3",
			wantSpec: func(s *corev1.PodSpec) {
				s.NodeSelector[poolKey] = "pool-a"
				s.SchedulingGates = nil
				s.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{PinTerm("n-3")}}
			},
		},
		"pinned, a required node selector with no term: the term set": {
			pod:  worker(0, t0).Affinity(&corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{}}}).Obj(),
			node: "n-3",
			wantSpec: func(s *corev1.PodSpec) {
				s.NodeSelector[poolKey] = "pool-a"
				s.SchedulingGates = nil
				s.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = []corev1.NodeSelectorTerm{PinTerm("n-3")}
			},
		},
		"a pin on a Pod with required node affinity terms of its own is refused": {
			pod: worker(0, t0).Affinity(&corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}},
			}}}).Obj(),
			node:      "n-3",
			wantError: true,
		},
		"a Pod without our gate is never patched": {
			pod:       ungated(worker(0, t0)).Obj(),
			wantError: true,
		},
		"a Pod without a UID is never patched": {
			pod:       worker(0, t0).UID("").Obj(),
			wantError: true,
		},
		"a Pod selecting another domain is never patched": {
			pod:       worker(0, t0).NodeSelector(poolKey, "pool-b").Obj(),
			wantError: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			patch, err := ReleasePatch(tc.pod, poolKey, "pool-a", tc.node)
			if tc.wantError {
				if err == nil {
					t.Fatalf("ReleasePatch = %s, want an error", patch)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := applyPatch(t, tc.pod, patch)
			want := tc.pod.DeepCopy()
			tc.wantSpec(&want.Spec)
			if tc.node != "" {
				// The pin is the operator's: the annotation says so (OperatorPin).
				metav1.SetMetaDataAnnotation(&want.ObjectMeta, tpuv1alpha1.PinnedNodeAnnotation, tc.node)
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("released Pod (-want,+got):\n%s", diff)
			}
			if tc.node != "" && OperatorPin(got) != tc.node {
				t.Errorf("OperatorPin of the released Pod = %q, want %q", OperatorPin(got), tc.node)
			}

			// The same patch on the released Pod, as a second replica or a retry would apply it,
			// fails its test: a Pod is released once.
			if _, err := jsonpatch.DecodePatch(patch); err != nil {
				t.Fatal(err)
			}
			if again, err := tryPatch(got, patch); err == nil {
				t.Errorf("the patch applied twice, giving %+v; want its test to fail", again.Spec)
			}
			// Nor does it release another Pod of the same name and gates (deleted and created
			// again since it was read).
			other := tc.pod.DeepCopy()
			other.UID = "uid-another-pod"
			if released, err := tryPatch(other, patch); err == nil {
				t.Errorf("the patch released another Pod of the same name, giving %+v; want its test to fail", released.Spec)
			}
		})
	}
}

func applyPatch(t *testing.T, pod *corev1.Pod, patch []byte) *corev1.Pod {
	t.Helper()
	out, err := tryPatch(pod, patch)
	if err != nil {
		t.Fatalf("applying %s: %v", patch, err)
	}
	return out
}

func tryPatch(pod *corev1.Pod, patch []byte) (*corev1.Pod, error) {
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return nil, err
	}
	doc, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	patched, err := p.Apply(doc)
	if err != nil {
		return nil, err
	}
	out := &corev1.Pod{}
	return out, json.Unmarshal(patched, out)
}

func TestLease(t *testing.T) {
	holder := Holder{Namespace: "ml", Name: "rc-tpu-0", UID: "uid-slice"}
	cases := map[string]struct {
		key, domain string
		wantName    string
	}{
		"a node pool": {key: poolKey, domain: "tpu-pool-a", wantName: "tpu-domain-tpu-pool-a-"},
		"a label value a name cannot hold as it is":           {key: constants.GCETopologySubblockKey, domain: "Sub_Block.7", wantName: "tpu-domain-sub-block-7-"},
		"dots and underscores in a row (a valid label value)": {key: poolKey, domain: "a._.b", wantName: "tpu-domain-a---b-"},
		"the longest label value":                             {key: poolKey, domain: strings.Repeat("x", 63), wantName: "tpu-domain-" + strings.Repeat("x", 63) + "-"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if problems := validation.IsValidLabelValue(tc.domain); len(problems) > 0 {
				t.Fatalf("domain %q is no label value: %v", tc.domain, problems)
			}
			lease := NewLease("tpu-system", tc.key, tc.domain, holder)
			if problems := validation.IsDNS1123Subdomain(lease.Name); len(problems) > 0 {
				t.Errorf("Lease name %q is invalid: %v", lease.Name, problems)
			}
			if got := lease.Name; len(got) != len(tc.wantName)+16 || got[:len(tc.wantName)] != tc.wantName {
				t.Errorf("Lease name %q, want %q and a 16-digit hash", got, tc.wantName)
			}
			got, ok := LockOf(lease)
			if !ok {
				t.Fatal("LockOf refused the Lease NewLease made")
			}
			if diff := cmp.Diff(Lock{Key: tc.key, Domain: tc.domain, Holder: holder}, got); diff != "" {
				t.Errorf("LockOf (-want,+got):\n%s", diff)
			}
			wantHolds := []placement.Hold{{Domain: tc.domain, Slice: "ml/rc-tpu-0", UID: "uid-slice"}}
			if diff := cmp.Diff(wantHolds, Holds([]coordinationv1.Lease{*lease}, tc.key)); diff != "" {
				t.Errorf("Holds (-want,+got):\n%s", diff)
			}
			if got := Holds([]coordinationv1.Lease{*lease}, "other-key"); len(got) != 0 {
				t.Errorf("Holds of another key = %v, want none", got)
			}
		})
	}
	if LeaseName(poolKey, "a") == LeaseName(constants.GCETopologyBlockKey, "a") {
		t.Error("one domain name under two keys shares a Lease")
	}
}
