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
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

func requiredTerms(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
	}}
}

func TestPinnedNode(t *testing.T) {
	zone := corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}
	withZone := func(term corev1.NodeSelectorTerm) corev1.NodeSelectorTerm {
		term.MatchExpressions = append(term.MatchExpressions, zone)
		return term
	}
	twoValues := PinTerm("n-1")
	twoValues.MatchFields[0].Values = []string{"n-1", "n-2"}
	notIn := PinTerm("n-1")
	notIn.MatchFields[0].Operator = corev1.NodeSelectorOpNotIn
	otherField := PinTerm("n-1")
	otherField.MatchFields[0].Key = "metadata.namespace"
	cases := map[string]struct {
		affinity *corev1.Affinity
		want     string
	}{
		"no affinity":                                 {},
		"pod affinity only":                           {affinity: &corev1.Affinity{PodAffinity: &corev1.PodAffinity{}}},
		"no required node affinity":                   {affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}}},
		"the operator's pin":                          {affinity: requiredTerms(PinTerm("n-1")), want: "n-1"},
		"a pin next to other requirements":            {affinity: requiredTerms(withZone(PinTerm("n-1"))), want: "n-1"},
		"every term pins the same Node":               {affinity: requiredTerms(PinTerm("n-1"), withZone(PinTerm("n-1"))), want: "n-1"},
		"terms pinning two Nodes: either fits":        {affinity: requiredTerms(PinTerm("n-1"), PinTerm("n-2"))},
		"one term without a pin: any Node of it fits": {affinity: requiredTerms(PinTerm("n-1"), corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{zone}})},
		"a name In two values":                        {affinity: requiredTerms(twoValues)},
		"a name NotIn":                                {affinity: requiredTerms(notIn)},
		"another field":                               {affinity: requiredTerms(otherField)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := worker(0, t0).Obj()
			pod.Spec.Affinity = tc.affinity
			if got := PinnedNode(pod); got != tc.want {
				t.Errorf("PinnedNode = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPinnable(t *testing.T) {
	cases := map[string]struct {
		affinity *corev1.Affinity
		want     bool
	}{
		"no affinity":                       {want: true},
		"pod anti-affinity only":            {affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{}}, want: true},
		"preferred node affinity only":      {affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}}, want: true},
		"a required node selector, no term": {affinity: requiredTerms(), want: true},
		"a required term of the user's":     {affinity: requiredTerms(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpExists}}})},
		"already pinned (a released Pod's)": {affinity: requiredTerms(PinTerm("n-1"))},
		"an empty term (matches no Node)":   {affinity: requiredTerms(corev1.NodeSelectorTerm{})},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := worker(0, t0).Obj()
			pod.Spec.Affinity = tc.affinity
			if got := Pinnable(pod); got != tc.want {
				t.Errorf("Pinnable = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestAssignNodes(t *testing.T) {
	usable := []string{"n-0", "n-1", "n-2", "n-3", "n-4"}
	userTerm := requiredTerms(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpExists}}})
	cases := map[string]struct {
		pods   []*testutil.PodWrapper
		usable []string
		want   map[types.UID]string
	}{
		"every Pod gated: worker IDs take the Nodes in name order": {
			pods:   []*testutil.PodWrapper{worker(2, t0), worker(0, t0), worker(3, t0), worker(1, t0)},
			usable: usable,
			want:   map[types.UID]string{"uid-w-0": "n-0", "uid-w-1": "n-1", "uid-w-2": "n-2", "uid-w-3": "n-3"},
		},
		"a late Pod: the Nodes of the bound and pinned Pods are not free": {
			pods: []*testutil.PodWrapper{
				ungated(worker(0, t0)).BoundTo("n-0"), ungated(worker(1, t0)).PinnedTo("n-2"),
				ungated(worker(2, t0)).BoundTo("n-1"), worker(3, t0),
			},
			usable: usable,
			want:   map[types.UID]string{"uid-w-3": "n-3"},
		},
		"a gone Pod's Node is free again": {
			pods: []*testutil.PodWrapper{
				ungated(worker(0, t0)).BoundTo("n-0").Terminating(), ungated(worker(1, t0)).PinnedTo("n-1").Phase(corev1.PodFailed),
				worker(2, t0),
			},
			usable: []string{"n-0", "n-1"},
			want:   map[types.UID]string{"uid-w-2": "n-0"},
		},
		"fewer free Nodes than gated Pods: the lowest worker IDs are pinned, the rest not": {
			pods:   []*testutil.PodWrapper{worker(3, t0), worker(1, t0), worker(2, t0), ungated(worker(0, t0)).BoundTo("n-1")},
			usable: []string{"n-1", "n-7"},
			want:   map[types.UID]string{"uid-w-1": "n-7"},
		},
		"a Pod with required node affinity terms of its own is not pinned and takes no Node": {
			pods:   []*testutil.PodWrapper{worker(0, t0).Affinity(userTerm), worker(1, t0)},
			usable: usable,
			want:   map[types.UID]string{"uid-w-1": "n-0"},
		},
		"no usable Node: nothing pinned": {
			pods: []*testutil.PodWrapper{worker(0, t0), worker(1, t0)},
			want: map[types.UID]string{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			all := pods(tc.pods...)
			var gated []*corev1.Pod
			for i := range all {
				if len(all[i].Spec.SchedulingGates) > 0 {
					gated = append(gated, &all[i])
				}
			}
			got := AssignNodes(gated, all, tc.usable)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("AssignNodes (-want,+got):\n%s", diff)
			}
			seen := map[string]bool{}
			for _, n := range got {
				if seen[n] {
					t.Errorf("Node %s pinned twice", n)
				}
				seen[n] = true
			}
		})
	}
}

func TestStranded(t *testing.T) {
	gone := map[string]bool{"n-gone": true}
	other := testutil.MakeWorkerPod("ml", "other", "uid-other", "tpu").Named("o-0").UID("uid-o-0").TPU(4).TPUIdentity("tpu", 0, 0)
	cases := map[string]struct {
		pods []*testutil.PodWrapper
		// others are Pods of no slice of this one, bound where they say.
		others []*testutil.PodWrapper
		// chips is every present Node's allocatable google.com/tpu (4 when 0).
		chips int64
		// labels are Nodes' labels (not known when not named).
		labels map[string]map[string]string
		want   []string // "pod node: why"
	}{
		"pinned to a gone Node, unbound: stranded": {
			pods: []*testutil.PodWrapper{ungated(worker(0, t0)).PinnedTo("n-gone"), ungated(worker(1, t0)).PinnedTo("n-1")},
			want: []string{"w-0 n-gone: Node n-gone is gone"},
		},
		"a user's own term naming a gone Node, or a taken one, is not the operator's pin: not stranded (docs/spec.md §12)": {
			pods:   []*testutil.PodWrapper{ungated(worker(0, t0)).OwnNodeTerm("n-gone"), ungated(worker(1, t0)).OwnNodeTerm("n-1")},
			others: []*testutil.PodWrapper{other.Clone().BoundTo("n-1")},
		},
		"the operator's annotation on a term naming another Node: not the operator's pin": {
			pods: []*testutil.PodWrapper{ungated(worker(0, t0)).OwnNodeTerm("n-gone").Annotation(tpuv1alpha1.PinnedNodeAnnotation, "n-1")},
		},
		"pinned to a Node relabelled out of the slice's domain: stranded": {
			pods: []*testutil.PodWrapper{ungated(worker(0, t0)).NodeSelector(poolKey, "pool-a").PinnedTo("n-1"), ungated(worker(1, t0)).NodeSelector(poolKey, "pool-a").PinnedTo("n-2")},
			labels: map[string]map[string]string{"n-1": {poolKey: "pool-b"}, "n-2": {poolKey: "pool-a",
				constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4"}},
			want: []string{"w-0 n-1: Node n-1 no longer has the label " + poolKey + "=pool-a the Pod selects"},
		},
		"pinned to a Node another Pod of the slice is bound to: stranded": {
			pods: []*testutil.PodWrapper{ungated(worker(0, t0)).PinnedTo("n-1"), ungated(worker(1, t0)).PinnedTo("n-1").BoundTo("n-1")},
			want: []string{"w-0 n-1: Node n-1 has 0 of its 4 TPU chips free, 4 needed: Pods ml/w-1 are bound to it"},
		},
		"pinned to a Node a Pod of another slice took (one that bypassed admission): stranded": {
			pods:   []*testutil.PodWrapper{ungated(worker(0, t0)).PinnedTo("n-1")},
			others: []*testutil.PodWrapper{other.Clone().BoundTo("n-1")},
			want:   []string{"w-0 n-1: Node n-1 has 0 of its 4 TPU chips free, 4 needed: Pods ml/o-0 are bound to it"},
		},
		"a Node with room for both: not stranded": {
			pods:   []*testutil.PodWrapper{ungated(worker(0, t0)).PinnedTo("n-1")},
			others: []*testutil.PodWrapper{other.Clone().BoundTo("n-1")},
			chips:  8,
		},
		"a Node that reports no chips yet and holds no Pod (created again): it may still take the Pod": {
			pods:  []*testutil.PodWrapper{ungated(worker(0, t0)).PinnedTo("n-1")},
			chips: -1,
		},
		"bound Pods are never stranded, even on a gone Node": {
			pods: []*testutil.PodWrapper{ungated(worker(0, t0)).PinnedTo("n-gone").BoundTo("n-gone")},
		},
		"gated Pods are not released yet": {
			pods: []*testutil.PodWrapper{worker(0, t0).PinnedTo("n-gone")},
		},
		"a Pod that stopped living is not": {
			pods: []*testutil.PodWrapper{ungated(worker(0, t0)).PinnedTo("n-gone").Terminating()},
		},
		"a holder that stopped living holds nothing": {
			pods: []*testutil.PodWrapper{ungated(worker(0, t0)).PinnedTo("n-1"), ungated(worker(1, t0)).BoundTo("n-1").Phase(corev1.PodFailed)},
		},
		"released without a pin: the scheduler picks its Node": {
			pods: []*testutil.PodWrapper{ungated(worker(0, t0)), ungated(worker(1, t0)).BoundTo("n-1")},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			slicePods := pods(tc.pods...)
			all := append(slicePods, pods(tc.others...)...)
			chips := tc.chips
			switch chips {
			case 0:
				chips = 4
			case -1:
				chips = 0
			}
			v := NodeView{
				Gone:             func(n string) bool { return gone[n] },
				AllocatableChips: func(string) int64 { return chips },
				BoundTo:          BoundByNode(all),
				Labels: func(n string) (map[string]string, bool) {
					l, ok := tc.labels[n]
					return l, ok
				},
			}
			stranded := Stranded(slicePods, v)
			var got []string
			if len(stranded) > 0 {
				got = make([]string, 0, len(stranded))
			}
			for _, s := range stranded {
				got = append(got, s.Pod.Name+" "+s.Node+": "+s.Why)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Stranded (-want,+got):\n%s", diff)
			}
		})
	}
}
