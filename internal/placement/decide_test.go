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

package placement

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
)

// podWrapper builds the Pods Decide reads.
type podWrapper struct{ corev1.Pod }

func makePod() *podWrapper {
	return &podWrapper{corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{
		constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4",
	}}}}
}

func (p *podWrapper) annotation(k, v string) *podWrapper {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[k] = v
	return p
}

// requiredAffinity appends a required pod affinity term of selector with key.
func (p *podWrapper) requiredAffinity(key string, selector *metav1.LabelSelector) *podWrapper {
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{}}
	}
	a := p.Spec.Affinity.PodAffinity
	a.RequiredDuringSchedulingIgnoredDuringExecution = append(a.RequiredDuringSchedulingIgnoredDuringExecution,
		corev1.PodAffinityTerm{LabelSelector: selector, TopologyKey: key})
	return p
}

func (p *podWrapper) obj() *corev1.Pod { return &p.Pod }

var cacheSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cache"}}

// nodesOf returns a Nodes function listing nodes.
func nodesOf(nodes ...Node) func() ([]Node, error) {
	return func() ([]Node, error) { return nodes, nil }
}

// mustNotList is a Nodes function that fails the test when called.
func mustNotList(t *testing.T) func() ([]Node, error) {
	return func() ([]Node, error) {
		t.Error("Decide listed the Nodes although no rule needed them")
		return nil, nil
	}
}

func TestDecide(t *testing.T) {
	subslice := topology.Slice{Topology: topology.Topology{Dims: []int32{2, 4}}, Annotated: true, ChipsPerPod: 4, Hosts: 2}
	whole := topology.Slice{Topology: topology.Topology{Dims: []int32{4, 4}}, ChipsPerPod: 4, Hosts: 4}
	kueue := Signal{Kind: "RayCluster", Label: true, Key: constants.KueueQueueNameLabel, Value: "lq"}
	pool := v6ePool("pool-a", "b1")
	errList := errors.New("cache not started")
	cases := map[string]struct {
		pod        *corev1.Pod
		slice      topology.Slice
		managed    Signal
		nodes      func(t *testing.T) func() ([]Node, error)
		want       KeyChoice
		wantErr    error
		wantErrMsg string
	}{
		"a single-host slice gets no affinity": {
			pod:   makePod().obj(),
			slice: topology.Slice{Topology: topology.Topology{Dims: []int32{2, 2}}, Annotated: true, ChipsPerPod: 4, Hosts: 1},
			nodes: mustNotList,
			want:  KeyChoice{Source: SourceSingleHost, Reason: "single-host slice: no slice affinity"},
		},
		"a whole slice keeps its node pool without listing Nodes": {
			pod:   makePod().obj(),
			slice: whole,
			nodes: mustNotList,
			want:  KeyChoice{Key: constants.NodePoolTopologyKey, Source: SourceDefault, Reason: "a TPU node pool is one slice"},
		},
		"the user's required cloud.google.com/ pod affinity key comes first": {
			pod: makePod().requiredAffinity("topology.kubernetes.io/zone", cacheSelector).
				requiredAffinity(constants.GCETopologyBlockKey, cacheSelector).
				annotation(constants.AffinityTopologyKeyAnnotation, constants.GCETopologySubblockKey).obj(),
			slice:   subslice,
			managed: kueue,
			nodes:   mustNotList,
			want: KeyChoice{Key: constants.GCETopologyBlockKey, Source: SourceUserAffinity,
				Reason: "the Pod's own required pod affinity uses topologyKey cloud.google.com/gce-topology-block"},
		},
		"this operator's own slice terms are not the user's": {
			pod: makePod().requiredAffinity(constants.NodePoolTopologyKey,
				&metav1.LabelSelector{MatchLabels: map[string]string{tpuv1alpha1.SliceLabel: "s"}}).
				requiredAffinity(constants.NodePoolTopologyKey, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: tpuv1alpha1.SliceLabel, Operator: metav1.LabelSelectorOpExists},
				}}).obj(),
			slice: subslice,
			nodes: func(*testing.T) func() ([]Node, error) { return nodesOf(pool...) },
			want: KeyChoice{Key: constants.GCETopologySubblockKey, Source: SourceNodes,
				Reason: "a cloud.google.com/gce-topology-subblock domain holds exactly 2 of the 4 Nodes matching the nodeSelector",
				Nodes:  &Fit{Key: constants.GCETopologySubblockKey, Matching: 4, Labeled: 4}},
		},
		"a user term without a label selector is the user's": {
			pod:   makePod().requiredAffinity(constants.GCETopologyHostKey, nil).obj(),
			slice: whole,
			nodes: mustNotList,
			want: KeyChoice{Key: constants.GCETopologyHostKey, Source: SourceUserAffinity,
				Reason: "the Pod's own required pod affinity uses topologyKey cloud.google.com/gce-topology-host"},
		},
		"the annotation, trimmed, comes before Kueue and the Nodes": {
			pod:     makePod().annotation(constants.AffinityTopologyKeyAnnotation, "  cloud.google.com/gke-tpu-slice\n").obj(),
			slice:   subslice,
			managed: kueue,
			nodes:   mustNotList,
			want:    KeyChoice{Key: "cloud.google.com/gke-tpu-slice", Source: SourceAnnotation, Reason: "annotation ray.io/tpu-affinity-topology-key"},
		},
		"the annotation also applies to a whole slice": {
			pod:   makePod().annotation(constants.AffinityTopologyKeyAnnotation, constants.GCETopologyBlockKey).obj(),
			slice: whole,
			nodes: mustNotList,
			want:  KeyChoice{Key: constants.GCETopologyBlockKey, Source: SourceAnnotation, Reason: "annotation ray.io/tpu-affinity-topology-key"},
		},
		"a blank annotation is ignored": {
			pod:   makePod().annotation(constants.AffinityTopologyKeyAnnotation, "   ").obj(),
			slice: whole,
			nodes: mustNotList,
			want:  KeyChoice{Key: constants.NodePoolTopologyKey, Source: SourceDefault, Reason: "a TPU node pool is one slice"},
		},
		"an annotation that is not a label key is an error": {
			pod:        makePod().annotation(constants.AffinityTopologyKeyAnnotation, "gce topology block").obj(),
			slice:      whole,
			nodes:      mustNotList,
			wantErr:    ErrInvalidTopologyKey,
			wantErrMsg: `invalid affinity topology key: annotation ray.io/tpu-affinity-topology-key is "gce topology block", which is not a label key: `,
		},
		"Kueue or dynamic slicing: no affinity, and the Nodes are not listed": {
			pod:     makePod().obj(),
			slice:   subslice,
			managed: kueue,
			nodes:   mustNotList,
			want: KeyChoice{Source: SourceKueue,
				Reason: "Kueue or GKE dynamic slicing places the slice (label kueue.x-k8s.io/queue-name=lq on the RayCluster): no slice affinity"},
		},
		"Kueue's required topology is reported, not used as the key": {
			pod:     makePod().obj(),
			slice:   whole,
			managed: Signal{Kind: "Pod", Key: constants.KueuePodSetRequiredTopologyAnnotation, Value: constants.GCETopologyBlockKey},
			nodes:   mustNotList,
			want: KeyChoice{Source: SourceKueue,
				Reason: "Kueue or GKE dynamic slicing places the slice (annotation kueue.x-k8s.io/podset-required-topology=" +
					"cloud.google.com/gce-topology-block on the Pod): no slice affinity"},
		},
		"the guide's subslice: two 2x4 halves of a 4x4 pool get subblock affinity": {
			pod:   makePod().annotation(constants.SliceTopologyAnnotation, "2x4").obj(),
			slice: subslice,
			nodes: func(*testing.T) func() ([]Node, error) { return nodesOf(pool...) },
			want: KeyChoice{Key: constants.GCETopologySubblockKey, Source: SourceNodes,
				Reason: "a cloud.google.com/gce-topology-subblock domain holds exactly 2 of the 4 Nodes matching the nodeSelector",
				Nodes:  &Fit{Key: constants.GCETopologySubblockKey, Matching: 4, Labeled: 4}},
		},
		"a subslice whose Nodes do not exist yet keeps its node pool": {
			pod:   makePod().obj(),
			slice: subslice,
			nodes: func(*testing.T) func() ([]Node, error) { return nodesOf() },
			want: KeyChoice{Key: constants.NodePoolTopologyKey, Source: SourceDefault,
				Reason: "no Node matches the nodeSelector yet, so the subslice is kept on one node pool", Nodes: &Fit{}},
		},
		"a subslice on Nodes of another selector keeps its node pool": {
			pod:   makePod().obj(),
			slice: subslice,
			nodes: func(*testing.T) func() ([]Node, error) {
				return nodesOf(tpuNode("a", v5e, "2x4", "q", "b1", "sb1", "h1"), tpuNode("b", v5e, "2x4", "q", "b1", "sb1", "h2"))
			},
			want: KeyChoice{Key: constants.NodePoolTopologyKey, Source: SourceDefault,
				Reason: "no Node matches the nodeSelector yet, so the subslice is kept on one node pool", Nodes: &Fit{}},
		},
		"a subslice on Nodes without GCE topology labels keeps its node pool": {
			pod:   makePod().obj(),
			slice: subslice,
			nodes: func(*testing.T) func() ([]Node, error) {
				return nodesOf(tpuNode("a", v6e, "4x4", "p", "", "", ""), tpuNode("b", v6e, "4x4", "p", "", "", ""))
			},
			want: KeyChoice{Key: constants.NodePoolTopologyKey, Source: SourceDefault,
				Reason: "none of the 2 Nodes matching the nodeSelector has a GCE topology label, so the subslice is kept on one node pool",
				Nodes:  &Fit{Matching: 2}},
		},
		"a subslice that no level fits keeps its node pool and is admitted": {
			pod:   makePod().obj(),
			slice: topology.Slice{Topology: topology.Topology{Dims: []int32{2, 6}}, Annotated: true, ChipsPerPod: 4, Hosts: 3},
			nodes: func(*testing.T) func() ([]Node, error) { return nodesOf(pool...) },
			want: KeyChoice{Key: constants.NodePoolTopologyKey, Source: SourceDefault,
				Reason: "no GCE topology domain holds exactly 3 of the 4 Nodes matching the nodeSelector, so the subslice is kept on one node pool",
				Nodes:  &Fit{Matching: 4, Labeled: 4}},
		},
		"a subslice without a Node source keeps its node pool": {
			pod:   makePod().obj(),
			slice: subslice,
			want:  KeyChoice{Key: constants.NodePoolTopologyKey, Source: SourceDefault, Reason: "a TPU node pool is one slice"},
		},
		"a Node list error is returned, so the Pod is not admitted with a key that may be wrong": {
			pod:   makePod().obj(),
			slice: subslice,
			nodes: func(*testing.T) func() ([]Node, error) {
				return func() ([]Node, error) { return nil, errList }
			},
			wantErr:    errList,
			wantErrMsg: "listing the TPU Nodes for the subslice's affinity: cache not started",
		},
		"a nil Pod of a whole slice keeps its node pool": {
			slice: whole,
			want:  KeyChoice{Key: constants.NodePoolTopologyKey, Source: SourceDefault, Reason: "a TPU node pool is one slice"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := Input{Pod: tc.pod, Slice: tc.slice, Managed: tc.managed}
			if tc.nodes != nil {
				in.Nodes = tc.nodes(t)
			}
			got, err := Decide(in)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Decide() error = %v, want one wrapping %v", err, tc.wantErr)
				}
				if msg := err.Error(); len(msg) < len(tc.wantErrMsg) || msg[:len(tc.wantErrMsg)] != tc.wantErrMsg {
					t.Errorf("Decide() error = %q, want it to start with %q", msg, tc.wantErrMsg)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decide() error = %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Decide() (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestSourceString(t *testing.T) {
	got := make([]string, 0, SourceDefault+2)
	for s := range SourceDefault + 2 {
		got = append(got, s.String())
	}
	want := []string{"unknown", "single-host", "user-affinity", "annotation", "kueue", "nodes", "default", "unknown"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Source.String() (-want,+got):\n%s", diff)
	}
}
