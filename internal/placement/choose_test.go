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
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

const (
	poolKey     = constants.NodePoolTopologyKey
	subblockKey = constants.GCETopologySubblockKey
	selfUID     = types.UID("self-uid")
)

// candidates returns n Ready, schedulable v6e 4x4 hosts of the node pool named pool, with 4 free
// chips each, named <pool>-0 ... <pool>-<n-1>, tainted google.com/tpu as GKE taints every TPU node.
// The Nodes share their labels and taints: edits replace them rather than write to them.
func candidates(pool string, n int) []Candidate {
	labels := map[string]string{
		constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4",
		constants.NodePoolTopologyKey: pool,
	}
	taints := []corev1.Taint{{Key: string(constants.TPUResourceName), Value: "present", Effect: corev1.TaintEffectNoSchedule}}
	out := make([]Candidate, 0, n)
	for i := range n {
		out = append(out, Candidate{Name: pool + "-" + strconv.Itoa(i), Labels: labels, Ready: true, Taints: taints, AllocatableChips: 4})
	}
	return out
}

// nodeSet joins groups of candidates and applies edits to the Nodes they name.
func nodeSet(groups [][]Candidate, edits map[string]func(*Candidate)) []Candidate {
	out := slices.Concat(groups...)
	for i := range out {
		if edit, ok := edits[out[i].Name]; ok {
			edit(&out[i])
		}
	}
	return out
}

// label sets a label of the Node, deleting it when value is "-".
func label(key, value string) func(*Candidate) {
	return func(c *Candidate) {
		c.Labels = maps.Clone(c.Labels)
		if value == "-" {
			delete(c.Labels, key)
			return
		}
		c.Labels[key] = value
	}
}

func notReady(c *Candidate)   { c.Ready = false }
func cordoned(c *Candidate)   { c.Unschedulable = true }
func deleting(c *Candidate)   { c.Deleting = true }
func chipsTaken(c *Candidate) { c.RequestedChips = c.AllocatableChips }

func taint(key string, effect corev1.TaintEffect) func(*Candidate) {
	return func(c *Candidate) {
		c.Taints = append(slices.Clone(c.Taints), corev1.Taint{Key: key, Effect: effect})
	}
}

func both(a, b func(*Candidate)) func(*Candidate) {
	return func(c *Candidate) { a(c); b(c) }
}

// request is a 4-host v6e 4x4 slice of 4-chip Pods on the node pool key, over nodes.
func request(nodes []Candidate) Request {
	return Request{UID: selfUID, Key: poolKey, Hosts: 4, ChipsPerHost: 4, NodeSelector: v6e4x4, Nodes: nodes}
}

func TestChoose(t *testing.T) {
	threePools := [][]Candidate{candidates("pool-a", 4), candidates("pool-b", 4), candidates("pool-c", 4)}
	cases := map[string]struct {
		req  Request
		want Choice
	}{
		"three free pools of exactly the slice's hosts: the smallest name": {
			req: request(nodeSet(threePools, nil)),
			want: Choice{Outcome: OutcomeChosen, Key: poolKey, Domain: "pool-a",
				Reason: "cloud.google.com/gke-nodepool=pool-a has 4 usable Nodes for the slice's 4 hosts, the fewest spare of 3 fitting domains"},
		},
		"best fit: the pool with the fewest spare Nodes, though its name comes later": {
			req: request(nodeSet([][]Candidate{candidates("pool-a", 6), candidates("pool-b", 5)}, nil)),
			want: Choice{Outcome: OutcomeChosen, Key: poolKey, Domain: "pool-b",
				Reason: "cloud.google.com/gke-nodepool=pool-b has 5 usable Nodes for the slice's 4 hosts, the fewest spare of 2 fitting domains"},
		},
		"spare counts usable Nodes: a 6-Node pool with 2 not Ready fits tighter than a 5-Node one": {
			req: request(nodeSet([][]Candidate{candidates("pool-a", 5), candidates("pool-b", 6)},
				map[string]func(*Candidate){"pool-b-0": notReady, "pool-b-1": notReady})),
			want: Choice{Outcome: OutcomeChosen, Key: poolKey, Domain: "pool-b",
				Reason: "cloud.google.com/gke-nodepool=pool-b has 4 usable Nodes for the slice's 4 hosts, the fewest spare of 2 fitting domains"},
		},
		"a pool another slice holds is passed over and named": {
			req: func() Request {
				r := request(nodeSet(threePools, nil))
				r.Holds = []Hold{{Domain: "pool-a", Slice: "ns/x", UID: "x-uid"}}
				return r
			}(),
			want: Choice{Outcome: OutcomeChosen, Key: poolKey, Domain: "pool-b",
				Reason:   "cloud.google.com/gke-nodepool=pool-b has 4 usable Nodes for the slice's 4 hosts, the fewest spare of 2 fitting domains",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackHeld, Usable: 4, Reason: "held by slice ns/x"}}},
		},
		"a pool two slices hold names the smallest holder, whatever their order": {
			req: func() Request {
				r := request(nodeSet(threePools[:1], nil))
				r.Holds = []Hold{{Domain: "pool-a", Slice: "ns/z", UID: "z-uid"}, {Domain: "pool-a", Slice: "ns/y", UID: "y-uid"}}
				return r
			}(),
			want: Choice{Outcome: OutcomeNoFit, Key: poolKey,
				Reason:   "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: pool-a: held by slice ns/y",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackHeld, Usable: 4, Reason: "held by slice ns/y"}}},
		},
		"the slice's own hold is not another slice's": {
			req: func() Request {
				r := request(nodeSet(threePools[1:2], nil))
				r.Holds = []Hold{{Domain: "pool-b", Slice: "ns/self", UID: selfUID}}
				return r
			}(),
			want: Choice{Outcome: OutcomeChosen, Key: poolKey, Domain: "pool-b",
				Reason: "cloud.google.com/gke-nodepool=pool-b has 4 usable Nodes for the slice's 4 hosts, the fewest spare of 1 fitting domains"},
		},
		"a hold on a domain no Node has changes nothing": {
			req: func() Request {
				r := request(nodeSet(threePools[1:2], nil))
				r.Holds = []Hold{{Domain: "pool-z", Slice: "ns/x", UID: "x-uid"}}
				return r
			}(),
			want: Choice{Outcome: OutcomeChosen, Key: poolKey, Domain: "pool-b",
				Reason: "cloud.google.com/gke-nodepool=pool-b has 4 usable Nodes for the slice's 4 hosts, the fewest spare of 1 fitting domains"},
		},
		"a pool with a Node not Ready lacks it": {
			req: request(nodeSet(threePools[:2], map[string]func(*Candidate){"pool-a-2": notReady})),
			want: Choice{Outcome: OutcomeChosen, Key: poolKey, Domain: "pool-b",
				Reason:   "cloud.google.com/gke-nodepool=pool-b has 4 usable Nodes for the slice's 4 hosts, the fewest spare of 1 fitting domains",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackUsable, Usable: 3, Reason: "3 of 4 needed Nodes usable (pool-a-2 is not Ready)"}}},
		},
		"a cordoned Node is not usable": {
			req: request(nodeSet(threePools[:1], map[string]func(*Candidate){"pool-a-1": cordoned})),
			want: Choice{Outcome: OutcomeNoFit, Key: poolKey,
				Reason:   "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: pool-a: 3 of 4 needed Nodes usable (pool-a-1 is cordoned)",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackUsable, Usable: 3, Reason: "3 of 4 needed Nodes usable (pool-a-1 is cordoned)"}}},
		},
		"a Node being deleted is not usable, and that is said before it being not Ready": {
			req: request(nodeSet(threePools[:1], map[string]func(*Candidate){"pool-a-3": both(deleting, notReady)})),
			want: Choice{Outcome: OutcomeNoFit, Key: poolKey,
				Reason:   "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: pool-a: 3 of 4 needed Nodes usable (pool-a-3 is being deleted)",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackUsable, Usable: 3, Reason: "3 of 4 needed Nodes usable (pool-a-3 is being deleted)"}}},
		},
		"a NoSchedule taint other than google.com/tpu makes a Node unusable": {
			req: request(nodeSet(threePools[:1], map[string]func(*Candidate){"pool-a-0": taint("cloud.google.com/impending-node-termination", corev1.TaintEffectNoSchedule)})),
			want: Choice{Outcome: OutcomeNoFit, Key: poolKey,
				Reason:   "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: pool-a: 3 of 4 needed Nodes usable (pool-a-0 is tainted cloud.google.com/impending-node-termination:NoSchedule)",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackUsable, Usable: 3, Reason: "3 of 4 needed Nodes usable (pool-a-0 is tainted cloud.google.com/impending-node-termination:NoSchedule)"}}},
		},
		"a NoExecute taint makes a Node unusable": {
			req: request(nodeSet(threePools[:1], map[string]func(*Candidate){"pool-a-0": taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)})),
			want: Choice{Outcome: OutcomeNoFit, Key: poolKey,
				Reason:   "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: pool-a: 3 of 4 needed Nodes usable (pool-a-0 is tainted node.kubernetes.io/unreachable:NoExecute)",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackUsable, Usable: 3, Reason: "3 of 4 needed Nodes usable (pool-a-0 is tainted node.kubernetes.io/unreachable:NoExecute)"}}},
		},
		"a Node in the domain of a bound Pod whose required anti-affinity excludes the slice is not usable": {
			req: request(nodeSet(threePools[:2], map[string]func(*Candidate){
				"pool-a-0": func(c *Candidate) { c.ExcludedBy = "old/o-0" }, "pool-a-1": func(c *Candidate) { c.ExcludedBy = "old/o-0" },
			})),
			want: Choice{Outcome: OutcomeChosen, Key: poolKey, Domain: "pool-b",
				Reason: "cloud.google.com/gke-nodepool=pool-b has 4 usable Nodes for the slice's 4 hosts, the fewest spare of 1 fitting domains",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackUsable, Usable: 2,
					Reason: "2 of 4 needed Nodes usable (pool-a-0 is in the domain of Pod old/o-0, whose required pod anti-affinity excludes the slice's Pods, 1 more unusable)"}}},
		},
		"a PreferNoSchedule taint does not keep the slice off": {
			req: request(nodeSet(threePools[:1], map[string]func(*Candidate){"pool-a-0": taint("example.com/soon", corev1.TaintEffectPreferNoSchedule)})),
			want: Choice{Outcome: OutcomeChosen, Key: poolKey, Domain: "pool-a",
				Reason: "cloud.google.com/gke-nodepool=pool-a has 4 usable Nodes for the slice's 4 hosts, the fewest spare of 1 fitting domains"},
		},
		"a taint the Pods tolerate does not keep the slice off": {
			req: func() Request {
				r := request(nodeSet(threePools[:1], map[string]func(*Candidate){"pool-a-0": taint("example.com/team", corev1.TaintEffectNoSchedule)}))
				r.Tolerations = []corev1.Toleration{{Key: "example.com/team", Operator: corev1.TolerationOpExists}}
				return r
			}(),
			want: Choice{Outcome: OutcomeChosen, Key: poolKey, Domain: "pool-a",
				Reason: "cloud.google.com/gke-nodepool=pool-a has 4 usable Nodes for the slice's 4 hosts, the fewest spare of 1 fitting domains"},
		},
		"a Node whose chips another Pod requests is not usable": {
			req: request(nodeSet(threePools[:1], map[string]func(*Candidate){"pool-a-2": chipsTaken})),
			want: Choice{Outcome: OutcomeNoFit, Key: poolKey,
				Reason:   "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: pool-a: 3 of 4 needed Nodes usable (pool-a-2 has 0 of 4 TPU chips free, 4 needed)",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackUsable, Usable: 3, Reason: "3 of 4 needed Nodes usable (pool-a-2 has 0 of 4 TPU chips free, 4 needed)"}}},
		},
		"a Node with some chips free but fewer than a host needs is not usable": {
			req: request(nodeSet(threePools[:1], map[string]func(*Candidate){"pool-a-2": func(c *Candidate) { c.AllocatableChips, c.RequestedChips = 8, 5 }})),
			want: Choice{Outcome: OutcomeNoFit, Key: poolKey,
				Reason:   "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: pool-a: 3 of 4 needed Nodes usable (pool-a-2 has 3 of 8 TPU chips free, 4 needed)",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackUsable, Usable: 3, Reason: "3 of 4 needed Nodes usable (pool-a-2 has 3 of 8 TPU chips free, 4 needed)"}}},
		},
		"a Node without allocatable chips (device plugin not up) is not usable": {
			req: request(nodeSet(threePools[:1], map[string]func(*Candidate){"pool-a-1": func(c *Candidate) { c.AllocatableChips = 0 }})),
			want: Choice{Outcome: OutcomeNoFit, Key: poolKey,
				Reason:   "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: pool-a: 3 of 4 needed Nodes usable (pool-a-1 has no allocatable TPU chips)",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackUsable, Usable: 3, Reason: "3 of 4 needed Nodes usable (pool-a-1 has no allocatable TPU chips)"}}},
		},
		"several unusable Nodes: the smallest name is named, whatever the order, and the rest counted": {
			req: request(nodeSet([][]Candidate{candidates("pool-a", 4)[3:], candidates("pool-a", 4)[:3]},
				map[string]func(*Candidate){"pool-a-3": notReady, "pool-a-1": chipsTaken, "pool-a-2": cordoned})),
			want: Choice{Outcome: OutcomeNoFit, Key: poolKey,
				Reason:   "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: pool-a: 1 of 4 needed Nodes usable (pool-a-1 has 0 of 4 TPU chips free, 4 needed, 2 more unusable)",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackUsable, Usable: 1, Reason: "1 of 4 needed Nodes usable (pool-a-1 has 0 of 4 TPU chips free, 4 needed, 2 more unusable)"}}},
		},
		"a pool smaller than the slice lacks Nodes": {
			req: request(nodeSet([][]Candidate{candidates("pool-a", 3), candidates("pool-b", 1)}, nil)),
			want: Choice{Outcome: OutcomeNoFit, Key: poolKey,
				Reason: "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: pool-a: 3 Nodes matching the nodeSelector, 4 needed; pool-b: 1 Node matching the nodeSelector, 4 needed",
				Rejected: []Rejection{
					{Domain: "pool-a", Lack: LackNodes, Usable: 3, Reason: "3 Nodes matching the nodeSelector, 4 needed"},
					{Domain: "pool-b", Lack: LackNodes, Usable: 1, Reason: "1 Node matching the nodeSelector, 4 needed"},
				}},
		},
		"a held pool is said to be held before what else it lacks": {
			req: func() Request {
				r := request(nodeSet(threePools[:1], map[string]func(*Candidate){"pool-a-0": notReady}))
				r.Holds = []Hold{{Domain: "pool-a", Slice: "ns/x", UID: "x-uid"}}
				return r
			}(),
			want: Choice{Outcome: OutcomeNoFit, Key: poolKey,
				Reason:   "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: pool-a: held by slice ns/x",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackHeld, Usable: 3, Reason: "held by slice ns/x"}}},
		},
		"a held pool smaller than the slice is said to be held": {
			req: func() Request {
				r := request(nodeSet([][]Candidate{candidates("pool-a", 2)}, nil))
				r.Holds = []Hold{{Domain: "pool-a", Slice: "ns/x", UID: "x-uid"}}
				return r
			}(),
			want: Choice{Outcome: OutcomeNoFit, Key: poolKey,
				Reason:   "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: pool-a: held by slice ns/x",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackHeld, Usable: 2, Reason: "held by slice ns/x"}}},
		},
		"Nodes that do not match the nodeSelector make no candidate domain": {
			req: request(nodeSet([][]Candidate{candidates("pool-a", 4), candidates("pool-v5e", 8)},
				map[string]func(*Candidate){
					"pool-a-0": notReady, "pool-v5e-0": label(constants.AcceleratorNodeSelectorKey, v5e), "pool-v5e-1": label(constants.AcceleratorNodeSelectorKey, v5e),
					"pool-v5e-2": label(constants.AcceleratorNodeSelectorKey, v5e), "pool-v5e-3": label(constants.AcceleratorNodeSelectorKey, v5e),
					"pool-v5e-4": label(constants.AcceleratorNodeSelectorKey, v5e), "pool-v5e-5": label(constants.AcceleratorNodeSelectorKey, v5e),
					"pool-v5e-6": label(constants.TopologyNodeSelectorKey, "2x4"), "pool-v5e-7": label(constants.TopologyNodeSelectorKey, "2x4"),
				})),
			want: Choice{Outcome: OutcomeNoFit, Key: poolKey,
				Reason:   "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: pool-a: 3 of 4 needed Nodes usable (pool-a-0 is not Ready)",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackUsable, Usable: 3, Reason: "3 of 4 needed Nodes usable (pool-a-0 is not Ready)"}}},
		},
		"no Node matches the nodeSelector: fall back to the inter-pod terms": {
			req: func() Request {
				r := request(nodeSet([][]Candidate{candidates("pool-a", 4)}, nil))
				r.NodeSelector = map[string]string{constants.AcceleratorNodeSelectorKey: v5e}
				return r
			}(),
			want: Choice{Outcome: OutcomeFallback, Key: poolKey,
				Reason: "no TPU Node matches the nodeSelector (cloud.google.com/gke-tpu-accelerator=tpu-v5-lite-podslice) yet: the slice is kept together with inter-pod affinity, so that the Pods are not gated while a node pool scales up"},
		},
		"no Node at all: fall back": {
			req: request(nil),
			want: Choice{Outcome: OutcomeFallback, Key: poolKey,
				Reason: "no TPU Node matches the nodeSelector (cloud.google.com/gke-tpu-accelerator=tpu-v6e-slice, cloud.google.com/gke-tpu-topology=4x4) yet: the slice is kept together with inter-pod affinity, so that the Pods are not gated while a node pool scales up"},
		},
		"matching Nodes without the key's label: fall back to the inter-pod terms": {
			req: func() Request {
				r := request(nodeSet(threePools, nil))
				r.Key, r.Hosts = subblockKey, 2
				return r
			}(),
			want: Choice{Outcome: OutcomeFallback, Key: subblockKey,
				Reason: "none of the 12 TPU Nodes matching the nodeSelector has label cloud.google.com/gce-topology-subblock: the slice is kept together with inter-pod affinity"},
		},
		"a subslice takes the sub-block that fits best, among Nodes of which some lack the label": {
			req: func() Request {
				r := request(nodeSet([][]Candidate{candidates("pool-a", 8)}, map[string]func(*Candidate){
					"pool-a-0": label(subblockKey, "sb-1"), "pool-a-1": label(subblockKey, "sb-1"), "pool-a-2": label(subblockKey, "sb-1"),
					"pool-a-3": label(subblockKey, "sb-2"), "pool-a-4": label(subblockKey, "sb-2"), "pool-a-5": label(subblockKey, ""),
				}))
				r.Key, r.Hosts = subblockKey, 2
				return r
			}(),
			want: Choice{Outcome: OutcomeChosen, Key: subblockKey, Domain: "sb-2",
				Reason: "cloud.google.com/gce-topology-subblock=sb-2 has 2 usable Nodes for the slice's 2 hosts, the fewest spare of 2 fitting domains"},
		},
		"the previous choice still fits: kept, though another fits better": {
			req: func() Request {
				r := request(nodeSet([][]Candidate{candidates("pool-a", 4), candidates("pool-b", 5)}, nil))
				r.Previous = "pool-b"
				return r
			}(),
			want: Choice{Outcome: OutcomeChosen, Key: poolKey, Domain: "pool-b", Kept: true,
				Reason: "cloud.google.com/gke-nodepool=pool-b still fits the slice's 4 hosts"},
		},
		"the previous choice still fits once the slice's own hold on it is skipped": {
			req: func() Request {
				r := request(nodeSet(threePools, nil))
				r.Previous, r.PodsBound = "pool-c", true
				r.Holds = []Hold{{Domain: "pool-c", Slice: "ns/self", UID: selfUID}}
				return r
			}(),
			want: Choice{Outcome: OutcomeChosen, Key: poolKey, Domain: "pool-c", Kept: true,
				Reason: "cloud.google.com/gke-nodepool=pool-c still fits the slice's 4 hosts"},
		},
		"the previous choice lost a Node before the Pods bound: chosen again": {
			req: func() Request {
				r := request(nodeSet(threePools[:2], map[string]func(*Candidate){"pool-a-1": notReady}))
				r.Previous = "pool-a"
				return r
			}(),
			want: Choice{Outcome: OutcomeChosen, Key: poolKey, Domain: "pool-b",
				Reason:   "cloud.google.com/gke-nodepool=pool-b has 4 usable Nodes for the slice's 4 hosts, the fewest spare of 1 fitting domains",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackUsable, Usable: 3, Reason: "3 of 4 needed Nodes usable (pool-a-1 is not Ready)"}}},
		},
		"the previous choice lost a Node after the Pods bound: kept, saying what it lacks": {
			req: func() Request {
				r := request(nodeSet(threePools[:2], map[string]func(*Candidate){"pool-a-1": notReady}))
				r.Previous, r.PodsBound = "pool-a", true
				return r
			}(),
			want: Choice{Outcome: OutcomeBound, Key: poolKey, Domain: "pool-a", Kept: true,
				Reason:   "the slice's Pods are bound to cloud.google.com/gke-nodepool=pool-a, which no longer fits: 3 of 4 needed Nodes usable (pool-a-1 is not Ready)",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackUsable, Usable: 3, Reason: "3 of 4 needed Nodes usable (pool-a-1 is not Ready)"}}},
		},
		"the previous choice is held by another slice before the Pods bound: chosen again": {
			req: func() Request {
				r := request(nodeSet(threePools[:2], nil))
				r.Previous = "pool-a"
				r.Holds = []Hold{{Domain: "pool-a", Slice: "ns/x", UID: "x-uid"}}
				return r
			}(),
			want: Choice{Outcome: OutcomeChosen, Key: poolKey, Domain: "pool-b",
				Reason:   "cloud.google.com/gke-nodepool=pool-b has 4 usable Nodes for the slice's 4 hosts, the fewest spare of 1 fitting domains",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackHeld, Usable: 4, Reason: "held by slice ns/x"}}},
		},
		"the previous choice has no Node left before the Pods bound: chosen again, and said why": {
			req: func() Request {
				r := request(nodeSet(threePools[1:], nil))
				r.Previous = "pool-a"
				return r
			}(),
			want: Choice{Outcome: OutcomeChosen, Key: poolKey, Domain: "pool-b",
				Reason:   "cloud.google.com/gke-nodepool=pool-b has 4 usable Nodes for the slice's 4 hosts, the fewest spare of 2 fitting domains",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackNodes, Reason: "no Node matching the nodeSelector left, 4 needed"}}},
		},
		"the previous choice has no Node left after the Pods bound: kept": {
			req: func() Request {
				r := request(nil)
				r.Previous, r.PodsBound = "pool-a", true
				return r
			}(),
			want: Choice{Outcome: OutcomeBound, Key: poolKey, Domain: "pool-a", Kept: true,
				Reason:   "the slice's Pods are bound to cloud.google.com/gke-nodepool=pool-a, which no longer fits: no Node matching the nodeSelector left, 4 needed",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackNodes, Reason: "no Node matching the nodeSelector left, 4 needed"}}},
		},
		"the previous choice lost a Node and nothing else fits: no fit, the previous named in order": {
			req: func() Request {
				r := request(nodeSet([][]Candidate{candidates("pool-a", 4), candidates("pool-c", 4)}, map[string]func(*Candidate){"pool-c-0": notReady}))
				r.Previous = "pool-b"
				r.Holds = []Hold{{Domain: "pool-a", Slice: "ns/x", UID: "x-uid"}}
				return r
			}(),
			want: Choice{Outcome: OutcomeNoFit, Key: poolKey,
				Reason: "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: pool-c: 3 of 4 needed Nodes usable (pool-c-0 is not Ready); pool-b: no Node matching the nodeSelector left, 4 needed; pool-a: held by slice ns/x",
				Rejected: []Rejection{
					{Domain: "pool-a", Lack: LackHeld, Usable: 4, Reason: "held by slice ns/x"},
					{Domain: "pool-b", Lack: LackNodes, Reason: "no Node matching the nodeSelector left, 4 needed"},
					{Domain: "pool-c", Lack: LackUsable, Usable: 3, Reason: "3 of 4 needed Nodes usable (pool-c-0 is not Ready)"},
				}},
		},
		"Pods bound to a domain another slice holds: no fit, the gated Pods neither join nor leave": {
			req: func() Request {
				r := request(nodeSet(threePools, nil))
				r.Previous, r.PodsBound = "pool-a", true
				r.Holds = []Hold{{Domain: "pool-a", Slice: "ns/x", UID: "x-uid"}}
				return r
			}(),
			want: Choice{Outcome: OutcomeNoFit, Key: poolKey,
				Reason:   "the slice's Pods are bound to cloud.google.com/gke-nodepool=pool-a, which slice ns/x holds: its gated Pods wait for the domain",
				Rejected: []Rejection{{Domain: "pool-a", Lack: LackHeld, Usable: 4, Reason: "held by slice ns/x"}}},
		},
		"Pods bound without a previous choice: chosen as usual": {
			req: func() Request {
				r := request(nodeSet(threePools[2:], nil))
				r.PodsBound = true
				return r
			}(),
			want: Choice{Outcome: OutcomeChosen, Key: poolKey, Domain: "pool-c",
				Reason: "cloud.google.com/gke-nodepool=pool-c has 4 usable Nodes for the slice's 4 hosts, the fewest spare of 1 fitting domains"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Choose(tc.req)
			if err != nil {
				t.Fatalf("Choose: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Choose (-want +got):\n%s", diff)
			}
		})
	}
}

func TestChooseInvalidRequest(t *testing.T) {
	cases := map[string]struct {
		edit    func(*Request)
		wantErr string
	}{
		"no key":           {edit: func(r *Request) { r.Key = "" }, wantErr: "invalid domain request: no key"},
		"no host":          {edit: func(r *Request) { r.Hosts = 0 }, wantErr: "invalid domain request: 0 hosts"},
		"no chip per host": {edit: func(r *Request) { r.ChipsPerHost = 0 }, wantErr: "invalid domain request: 0 chips per host"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := request(candidates("pool-a", 4))
			tc.edit(&req)
			_, err := Choose(req)
			if !errors.Is(err, ErrInvalidRequest) || err.Error() != tc.wantErr {
				t.Errorf("Choose error = %v, want %q wrapping ErrInvalidRequest", err, tc.wantErr)
			}
		})
	}
}

func TestNoFitMessage(t *testing.T) {
	rejected := []Rejection{
		{Domain: "pool-a", Lack: LackHeld, Usable: 4, Reason: "held by slice ns/x"},
		{Domain: "pool-b", Lack: LackUsable, Usable: 2, Reason: "2 of 4 needed Nodes usable (pool-b-0 is not Ready, 1 more unusable)"},
		{Domain: "pool-c", Lack: LackUsable, Usable: 3, Reason: "3 of 4 needed Nodes usable (pool-c-0 is cordoned)"},
		{Domain: "pool-d", Lack: LackNodes, Usable: 3, Reason: "3 Nodes matching the nodeSelector, 4 needed"},
	}
	cases := map[string]struct {
		rejected []Rejection
		limit    int
		want     string
	}{
		"closest first: most usable Nodes, then by name, held last": {
			rejected: rejected, limit: 10,
			want: "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: pool-c: 3 of 4 needed Nodes usable (pool-c-0 is cordoned); pool-d: 3 Nodes matching the nodeSelector, 4 needed; pool-b: 2 of 4 needed Nodes usable (pool-b-0 is not Ready, 1 more unusable); pool-a: held by slice ns/x",
		},
		"past the limit the rest is counted": {
			rejected: rejected, limit: 2,
			want: "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: pool-c: 3 of 4 needed Nodes usable (pool-c-0 is cordoned); pool-d: 3 Nodes matching the nodeSelector, 4 needed; and 2 more",
		},
		"a limit below one is the default": {
			rejected: rejected, limit: 0,
			want: "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: pool-c: 3 of 4 needed Nodes usable (pool-c-0 is cordoned); pool-d: 3 Nodes matching the nodeSelector, 4 needed; pool-b: 2 of 4 needed Nodes usable (pool-b-0 is not Ready, 1 more unusable); pool-a: held by slice ns/x",
		},
		"exactly the limit: nothing more to count": {
			rejected: rejected, limit: 4,
			want: "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: pool-c: 3 of 4 needed Nodes usable (pool-c-0 is cordoned); pool-d: 3 Nodes matching the nodeSelector, 4 needed; pool-b: 2 of 4 needed Nodes usable (pool-b-0 is not Ready, 1 more unusable); pool-a: held by slice ns/x",
		},
		"no domain": {
			want: "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: no domain",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := NoFitMessage(Choice{Outcome: OutcomeNoFit, Key: poolKey, Rejected: tc.rejected}, 4, tc.limit)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("NoFitMessage (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNoFitMessageBounded: over a hundred pools of a 2,240-host slice, each lacking a Node with a
// name as long as Kubernetes allows, still give a short message.
func TestNoFitMessageBounded(t *testing.T) {
	const pools, hosts = 120, 2240
	nodes := make([]Candidate, 0, pools*hosts)
	edits := map[string]func(*Candidate){}
	for p := range pools {
		pool := fmt.Sprintf("gke-tpu-%s-%03d", strings.Repeat("p", 40), p)
		group := candidates(pool, hosts)
		group[0].Name = pool + "-" + strings.Repeat("n", 253-len(pool)-1)
		edits[group[0].Name] = notReady
		nodes = append(nodes, group...)
	}
	req := request(nodes)
	for i := range nodes {
		if edit, ok := edits[nodes[i].Name]; ok {
			edit(&nodes[i])
		}
	}
	req.Hosts = hosts
	req.Holds = []Hold{{Domain: fmt.Sprintf("gke-tpu-%s-%03d", strings.Repeat("p", 40), 7),
		Slice: strings.Repeat("s", 63) + "/" + strings.Repeat("x", 253), UID: "x-uid"}}
	got, err := Choose(req)
	if err != nil {
		t.Fatalf("Choose: %v", err)
	}
	if got.Outcome != OutcomeNoFit || len(got.Rejected) != pools {
		t.Fatalf("Choose = %v with %d rejected, want no-fit with %d", got.Outcome, len(got.Rejected), pools)
	}
	t.Logf("Scheduled=False message of %d bytes for %d pools", len(got.Reason), pools)
	if !strings.HasSuffix(got.Reason, fmt.Sprintf("; and %d more", pools-MaxDomainsNamed)) || len(got.Reason) > 2048 {
		t.Errorf("message of %d bytes, want at most 2048 ending in %q: %s", len(got.Reason), "; and 115 more", got.Reason)
	}
}

func TestCandidateFromNode(t *testing.T) {
	cases := map[string]struct {
		node      *corev1.Node
		requested corev1.ResourceList
		pods      int64
		want      Candidate
	}{
		"a Ready TPU Node with its chips, and what other Pods take of it": {
			node:      testutil.MakeNode("n").TPU(v6e, "4x4", "pool-a").TPUCapacity(4).TPUTaint().Ready(true).Obj(),
			requested: corev1.ResourceList{constants.TPUResourceName: resource.MustParse("4"), corev1.ResourceCPU: resource.MustParse("2")},
			pods:      2,
			want: Candidate{Name: "n", Ready: true, AllocatableChips: 4, RequestedChips: 4,
				Requested: corev1.ResourceList{constants.TPUResourceName: resource.MustParse("4"), corev1.ResourceCPU: resource.MustParse("2")}, Pods: 2,
				Taints: []corev1.Taint{{Key: "google.com/tpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}},
		},
		"a Node not Ready, cordoned, tainted and being deleted": {
			node: testutil.MakeNode("n").TPU(v6e, "4x4", "pool-a").TPUCapacity(4).Ready(false).Unschedulable().
				Taint("example.com/x").Deleting().Obj(),
			want: Candidate{Name: "n", Unschedulable: true, Deleting: true, AllocatableChips: 4,
				Taints: []corev1.Taint{{Key: "example.com/x", Effect: corev1.TaintEffectNoSchedule}}},
		},
		"a Node without status (trimmed of it) has no chips, no room for a Pod and is not Ready": {
			node: testutil.MakeNode("n").TPU(v6e, "4x4", "pool-a").Obj(),
			want: Candidate{Name: "n", Allocatable: corev1.ResourceList{}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tc.want.Labels = tc.node.Labels
			if tc.want.Allocatable == nil {
				tc.want.Allocatable = tc.node.Status.Allocatable
			}
			if diff := cmp.Diff(tc.want, CandidateFromNode(tc.node, tc.requested, tc.pods)); diff != "" {
				t.Errorf("CandidateFromNode (-want +got):\n%s", diff)
			}
		})
	}
}

// TestChooseAllocatesPerDomainNotPerNode: a hundred times the Nodes in the same domains cost no
// more allocations (both counts above 255, which fmt boxes without allocating).
func TestChooseAllocatesPerDomainNotPerNode(t *testing.T) {
	allocs := func(hosts int) float64 {
		nodes := nodeSet([][]Candidate{candidates("pool-a", hosts), candidates("pool-b", hosts), candidates("pool-c", hosts)},
			map[string]func(*Candidate){"pool-a-1": notReady, "pool-b-2": chipsTaken})
		req := request(nodes)
		req.Hosts = int32(hosts)
		return testing.AllocsPerRun(20, func() {
			if got, err := Choose(req); err != nil || got.Domain != "pool-c" {
				t.Fatalf("Choose = %+v, %v", got, err)
			}
		})
	}
	small, large := allocs(300), allocs(30000)
	t.Logf("allocations per Choose: %v for 900 Nodes, %v for 90,000", small, large)
	if large > small {
		t.Errorf("allocations per Choose: %v for 900 Nodes, %v for 90,000: want no more", small, large)
	}
}

// BenchmarkChoose chooses a pool for a 2,304-host tpu7x slice among 20 pools of 2,304 Nodes
// (46,080 Nodes, each with its own GKE-sized labels, as a cache holds them): 10 pools held by
// other slices, 9 each lacking one Node (not Ready, cordoned or without free chips), one that
// fits; and the same slice choosing again, its previous choice still fitting.
func BenchmarkChoose(b *testing.B) {
	const pools, hosts = 20, 2304
	nodes := make([]Candidate, 0, pools*hosts)
	var holds []Hold
	for p := range pools {
		pool := fmt.Sprintf("gke-tpu7x-pool-%02d", p)
		if p < 10 {
			holds = append(holds, Hold{Domain: pool, Slice: fmt.Sprintf("ns/slice-%d", p), UID: types.UID(strconv.Itoa(p))})
		}
		for h := range hosts {
			node := testutil.MakeNode(fmt.Sprintf("%s-%04d", pool, h)).TPU("tpu7x", "8x16x18", pool).
				GCE("block-"+strconv.Itoa(p), fmt.Sprintf("sb-%d-%d", p, h/16)).TPUCapacity(4).TPUTaint().Ready(true)
			var requested corev1.ResourceList
			if h == 7 && p >= 10 && p < pools-1 {
				switch p % 3 {
				case 0:
					node.Ready(false)
				case 1:
					node.Unschedulable()
				default:
					requested = corev1.ResourceList{constants.TPUResourceName: resource.MustParse("4")}
				}
			}
			nodes = append(nodes, CandidateFromNode(node.Obj(), requested, 0))
		}
	}
	req := Request{UID: selfUID, Key: poolKey, Hosts: hosts, ChipsPerHost: 4, Nodes: nodes, Holds: holds,
		NodeSelector: map[string]string{constants.AcceleratorNodeSelectorKey: "tpu7x", constants.TopologyNodeSelectorKey: "8x16x18"}}
	for name, previous := range map[string]string{"first choice": "", "previous still fits": "gke-tpu7x-pool-19"} {
		b.Run(name, func(b *testing.B) {
			req.Previous = previous
			b.ReportAllocs()
			for b.Loop() {
				got, err := Choose(req)
				if err != nil || got.Domain != "gke-tpu7x-pool-19" || len(got.Rejected) != pools-1 {
					b.Fatalf("Choose = %+v, %v", got, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(req.Nodes)), "ns/node")
		})
	}
}

func TestUsableNodes(t *testing.T) {
	cases := map[string]struct {
		nodes  []Candidate
		domain string
		want   []string
	}{
		"every Node of the domain usable, sorted by name, other domains left out": {
			nodes:  slices.Concat(candidates("pool-b", 3), []Candidate{candidates("pool-a", 12)[11]}, candidates("pool-a", 2)),
			domain: "pool-a",
			want:   []string{"pool-a-0", "pool-a-1", "pool-a-11"},
		},
		"each kind of unusable Node left out": {
			nodes: nodeSet([][]Candidate{candidates("pool-a", 8)}, map[string]func(*Candidate){
				"pool-a-0": notReady, "pool-a-1": cordoned, "pool-a-2": deleting, "pool-a-3": chipsTaken,
				"pool-a-4": taint("example.com/dedicated", corev1.TaintEffectNoSchedule),
				"pool-a-5": label(constants.TopologyNodeSelectorKey, "2x2"),
				"pool-a-6": taint("example.com/soft", corev1.TaintEffectPreferNoSchedule),
			}),
			domain: "pool-a",
			want:   []string{"pool-a-6", "pool-a-7"},
		},
		"a domain with no Node": {nodes: candidates("pool-a", 4), domain: "pool-z"},
		"no domain":             {nodes: candidates("pool-a", 4)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, UsableNodes(request(tc.nodes), tc.domain)); diff != "" {
				t.Errorf("UsableNodes (-want,+got):\n%s", diff)
			}
		})
	}
}

// withResources gives every candidate the allocatable of a GKE v6e host VM (the chips aside) and
// no Pod on it.
func withResources(nodes []Candidate) []Candidate {
	for i := range nodes {
		nodes[i].Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("180"),
			corev1.ResourceMemory: resource.MustParse("720Gi"), corev1.ResourcePods: resource.MustParse("110"),
			constants.TPUResourceName: resource.MustParse("4")}
	}
	return nodes
}

func used(list corev1.ResourceList, pods int64) func(*Candidate) {
	return func(c *Candidate) { c.Requested, c.Pods = list, pods }
}

// expectChoice runs Choose on req and checks the domain it chose, and its reason when wantReason
// is not empty.
func expectChoice(t *testing.T, req Request, wantDomain, wantReason string) Choice {
	t.Helper()
	got, err := Choose(req)
	if err != nil {
		t.Fatal(err)
	}
	if got.Domain != wantDomain {
		t.Errorf("Choose chose %q (%s), want %q", got.Domain, got.Reason, wantDomain)
	}
	if wantReason != "" {
		if diff := cmp.Diff(wantReason, got.Reason); diff != "" {
			t.Errorf("reason (-want,+got):\n%s", diff)
		}
	}
	return got
}

// TestChooseAsTheSchedulerFilters: a Node is usable only where kube-scheduler would bind one of
// the slice's Pods (docs/spec.md §12, "The choice"): the Pods' own required node affinity
// (k8s.io/component-helpers' node affinity), every resource a Pod requests free beside what the
// Pods on the Node request (NodeResourcesFit), room for one more Pod.
func TestChooseAsTheSchedulerFilters(t *testing.T) {
	cpu8 := corev1.ResourceList{constants.TPUResourceName: resource.MustParse("4"), corev1.ResourceCPU: resource.MustParse("8")}
	zoneA := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
		Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-a"}}}}}}
	inZone := func(z string) func(*Candidate) { return label(corev1.LabelTopologyZone, z) }
	cases := map[string]struct {
		edit         map[string]func(*Candidate)
		requests     corev1.ResourceList
		nodeAffinity *corev1.NodeSelector
		wantDomain   string
		wantReason   string
	}{
		"the CPU a Job's Pod takes on one Node of pool-a: pool-b": {
			edit:       map[string]func(*Candidate){"pool-a-2": used(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("175")}, 1)},
			requests:   cpu8,
			wantDomain: "pool-b",
		},
		"a request of CPU no Node has: no fit, naming the resource": {
			requests: corev1.ResourceList{constants.TPUResourceName: resource.MustParse("4"), corev1.ResourceCPU: resource.MustParse("200")},
			wantReason: "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: " +
				"pool-a: 0 of 4 needed Nodes usable (pool-a-0 has 180 of 180 cpu free, 200 needed, 3 more unusable); " +
				"pool-b: 0 of 4 needed Nodes usable (pool-b-0 has 180 of 180 cpu free, 200 needed, 3 more unusable)",
		},
		"an extended resource a Node does not list: nothing of it is free": {
			requests: corev1.ResourceList{constants.TPUResourceName: resource.MustParse("4"), "example.com/nic": resource.MustParse("1")},
			wantReason: "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: " +
				"pool-a: 0 of 4 needed Nodes usable (pool-a-0 has 0 of 0 example.com/nic free, 1 needed, 3 more unusable); " +
				"pool-b: 0 of 4 needed Nodes usable (pool-b-0 has 0 of 0 example.com/nic free, 1 needed, 3 more unusable)",
		},
		"a Node with as many Pods as it allows: pool-b": {
			edit:       map[string]func(*Candidate){"pool-a-0": used(nil, 110)},
			wantDomain: "pool-b",
		},
		"the Pods' zone: only pool-b is in it": {
			edit: map[string]func(*Candidate){
				"pool-a-0": inZone("zone-b"), "pool-a-1": inZone("zone-b"), "pool-a-2": inZone("zone-b"), "pool-a-3": inZone("zone-b"),
				"pool-b-0": inZone("zone-a"), "pool-b-1": inZone("zone-a"), "pool-b-2": inZone("zone-a"), "pool-b-3": inZone("zone-a"),
			},
			nodeAffinity: zoneA,
			wantDomain:   "pool-b",
		},
		"the Pods' zone, which no Node is in: no candidate at all": {
			nodeAffinity: zoneA,
			wantReason:   "no TPU Node matches the nodeSelector (cloud.google.com/gke-tpu-accelerator=tpu-v6e-slice, cloud.google.com/gke-tpu-topology=4x4) yet: the slice is kept together with inter-pod affinity, so that the Pods are not gated while a node pool scales up",
		},
		"a zero request needs nothing, whatever is used": {
			edit:       map[string]func(*Candidate){"pool-a-0": used(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("720Gi")}, 3)},
			requests:   corev1.ResourceList{constants.TPUResourceName: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("0")},
			wantDomain: "pool-a",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := request(nodeSet([][]Candidate{withResources(candidates("pool-a", 4)), withResources(candidates("pool-b", 4))}, tc.edit))
			req.Requests, req.NodeAffinity = tc.requests, tc.nodeAffinity
			expectChoice(t, req, tc.wantDomain, tc.wantReason)
			if tc.wantDomain != "" {
				usable := UsableNodes(req, tc.wantDomain)
				if len(usable) < int(req.Hosts) {
					t.Errorf("UsableNodes(%s) = %v, want at least %d", tc.wantDomain, usable, req.Hosts)
				}
			}
		})
	}
}

// TestChooseAcrossKeys: a Node in a domain of another key that another slice holds (a sub-block
// subslice inside a node pool, or the node pool around a sub-block) is that slice's, so slices
// of two keys over the same Nodes never take one Node twice nor wait for each other (docs/spec.md
// §12, "The choice").
func TestChooseAcrossKeys(t *testing.T) {
	const subblock = constants.GCETopologySubblockKey
	inSubblock := func(sb string) func(*Candidate) { return label(subblock, sb) }
	edits := map[string]func(*Candidate){
		"pool-a-0": inSubblock("sb-1"), "pool-a-1": inSubblock("sb-1"), "pool-a-2": inSubblock("sb-2"), "pool-a-3": inSubblock("sb-2"),
		"pool-b-0": inSubblock("sb-3"), "pool-b-1": inSubblock("sb-3"), "pool-b-2": inSubblock("sb-4"), "pool-b-3": inSubblock("sb-4"),
	}
	nodes := nodeSet([][]Candidate{candidates("pool-a", 4), candidates("pool-b", 4)}, edits)
	cases := map[string]struct {
		req        Request
		wantDomain string
		wantReason string
	}{
		"a node-pool slice, sub-block sb-1 of pool-a held by a subslice: pool-b": {
			req: func() Request {
				r := request(nodes)
				r.OtherHolds = []KeyHold{{Key: subblock, Hold: Hold{Domain: "sb-1", Slice: "ml/sub", UID: "uid-sub"}}}
				return r
			}(),
			wantDomain: "pool-b",
		},
		"a subslice of 2 hosts, pool-a held by a node-pool slice: a sub-block of pool-b": {
			req: func() Request {
				r := request(nodes)
				r.Key, r.Hosts = subblock, 2
				r.OtherHolds = []KeyHold{{Key: poolKey, Hold: Hold{Domain: "pool-a", Slice: "ml/pool", UID: "uid-pool"}}}
				return r
			}(),
			wantDomain: "sb-3",
		},
		"every pool partly held by subslices: no fit, naming the holder": {
			req: func() Request {
				r := request(nodes)
				r.OtherHolds = []KeyHold{
					{Key: subblock, Hold: Hold{Domain: "sb-1", Slice: "ml/sub-1", UID: "uid-1"}},
					{Key: subblock, Hold: Hold{Domain: "sb-4", Slice: "ml/sub-4", UID: "uid-4"}},
				}
				return r
			}(),
			wantReason: "no cloud.google.com/gke-nodepool domain has 4 usable Nodes free of other slices: " +
				"pool-a: 2 of 4 needed Nodes usable (pool-a-0 is in " + subblock + "=sb-1, which slice ml/sub-1 holds, 1 more unusable); " +
				"pool-b: 2 of 4 needed Nodes usable (pool-b-2 is in " + subblock + "=sb-4, which slice ml/sub-4 holds, 1 more unusable)",
		},
		"the slice's own hold of another key does not keep it out": {
			req: func() Request {
				r := request(nodes)
				r.OtherHolds = []KeyHold{{Key: subblock, Hold: Hold{Domain: "sb-1", Slice: "ml/self", UID: selfUID}}}
				return r
			}(),
			wantDomain: "pool-a",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := expectChoice(t, tc.req, tc.wantDomain, tc.wantReason)
			for _, n := range UsableNodes(tc.req, got.Domain) {
				for _, h := range tc.req.OtherHolds {
					if i := slices.IndexFunc(tc.req.Nodes, func(c Candidate) bool { return c.Name == n }); h.UID != selfUID && tc.req.Nodes[i].Labels[h.Key] == h.Domain {
						t.Errorf("usable Node %s is in %s=%s, which %s holds", n, h.Key, h.Domain, h.Slice)
					}
				}
			}
		})
	}
}
