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

package allocator

import (
	"context"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// v6eSelector is the nodeSelector of the test group's Pods.
var v6eSelector = map[string]string{constants.AcceleratorNodeSelectorKey: "tpu-v6e-slice", constants.TopologyNodeSelectorKey: "4x4"}

// placed is request(4) kept on key, chosen by source, under --slice-placement=mode.
func placed(mode tpuv1alpha1.SlicePlacement, source placement.Source, key string) Request {
	req := request(4)
	req.AffinityTopologyKey = key
	req.Placement = PlacementRequest{Mode: mode, Source: source, NodeSelector: v6eSelector}
	return req
}

// nodeListCounter counts the Node lists made through the client, and the cheap ones among them:
// those asking the cache for at most one Node, without a deep copy.
func nodeListCounter(lists, cheap *atomic.Int32) interceptor.Funcs {
	return interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		if _, ok := list.(*corev1.NodeList); ok {
			lists.Add(1)
			o := (&client.ListOptions{}).ApplyOptions(opts)
			if o.Limit == 1 && o.UnsafeDisableDeepCopy != nil && *o.UnsafeDisableDeepCopy {
				cheap.Add(1)
			}
		}
		return c.List(ctx, list, opts...)
	}}
}

// TestClaimDecidesThePlacementOfANewSlice checks placement.DecideMode as the allocator applies it
// (docs/spec.md §4): once, when the first claim creates the slice, from the TPU Nodes in the
// cache; the slice records it and the claim returns it.
func TestClaimDecidesThePlacementOfANewSlice(t *testing.T) {
	pool := constants.NodePoolTopologyKey
	v6eNode := testutil.MakeNode("n0").TPU("tpu-v6e-slice", "4x4", "pool-a").Obj()
	cases := map[string]struct {
		nodes         []client.Object
		req           Request
		wantPlacement tpuv1alpha1.SlicePlacement
		wantLists     int32
	}{
		"a node pool slice with a matching labeled Node gets a chosen domain": {
			nodes: []client.Object{v6eNode}, req: placed(tpuv1alpha1.PlacementChosenDomain, placement.SourceDefault, pool),
			wantPlacement: tpuv1alpha1.PlacementChosenDomain, wantLists: 1,
		},
		"the default mode is a chosen domain": {
			nodes: []client.Object{v6eNode}, req: placed("", placement.SourceDefault, pool),
			wantPlacement: tpuv1alpha1.PlacementChosenDomain, wantLists: 1,
		},
		"no TPU Node falls back to inter-pod affinity": {
			req:           placed(tpuv1alpha1.PlacementChosenDomain, placement.SourceDefault, pool),
			wantPlacement: tpuv1alpha1.PlacementInterPodAffinity, wantLists: 1,
		},
		"a TPU Node of another topology falls back to inter-pod affinity": {
			nodes:         []client.Object{testutil.MakeNode("n0").TPU("tpu-v6e-slice", "8x8", "pool-a").Obj()},
			req:           placed(tpuv1alpha1.PlacementChosenDomain, placement.SourceDefault, pool),
			wantPlacement: tpuv1alpha1.PlacementInterPodAffinity, wantLists: 1,
		},
		"a matching Node without the annotated key's label falls back to inter-pod affinity": {
			nodes:         []client.Object{v6eNode},
			req:           placed(tpuv1alpha1.PlacementChosenDomain, placement.SourceAnnotation, constants.GCETopologyBlockKey),
			wantPlacement: tpuv1alpha1.PlacementInterPodAffinity, wantLists: 1,
		},
		"a labeled Node matching the nodeSelector that is not a TPU Node does not count": {
			nodes: []client.Object{func() *corev1.Node {
				n := testutil.MakeNode("cpu").Obj()
				n.Labels[pool], n.Labels[constants.TopologyNodeSelectorKey] = "cpu-pool", "4x4"
				return n
			}()},
			req: func() Request {
				req := placed(tpuv1alpha1.PlacementChosenDomain, placement.SourceDefault, pool)
				req.Placement.NodeSelector = map[string]string{constants.TopologyNodeSelectorKey: "4x4"}
				return req
			}(),
			wantPlacement: tpuv1alpha1.PlacementInterPodAffinity, wantLists: 1,
		},
		"--slice-placement=InterPodAffinity does not look at the Nodes": {
			nodes: []client.Object{v6eNode}, req: placed(tpuv1alpha1.PlacementInterPodAffinity, placement.SourceDefault, pool),
			wantPlacement: tpuv1alpha1.PlacementInterPodAffinity,
		},
		"a Kueue slice records no placement": {
			nodes: []client.Object{v6eNode}, req: placed(tpuv1alpha1.PlacementChosenDomain, placement.SourceKueue, ""),
		},
		"a user's own term records no placement": {
			nodes: []client.Object{v6eNode}, req: placed(tpuv1alpha1.PlacementChosenDomain, placement.SourceUserAffinity, pool),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var lists, cheap atomic.Int32
			c := newClient(t, nodeListCounter(&lists, &cheap), tc.nodes...)
			a := newAllocator(c, c, timeout)

			got, err := a.Claim(t.Context(), tc.req)

			if err != nil {
				t.Fatalf("Claim() = %v", err)
			}
			if got.Placement != tc.wantPlacement {
				t.Errorf("Claim().Placement = %q, want %q", got.Placement, tc.wantPlacement)
			}
			if s := storedSlices(t, c); len(s) != 1 || s[0].Spec.Placement != tc.wantPlacement {
				t.Errorf("stored slices %+v, want one recording placement %q", s, tc.wantPlacement)
			}
			if n := lists.Load(); n != tc.wantLists {
				t.Errorf("Node lists = %d, want %d", n, tc.wantLists)
			}
			if n := cheap.Load(); n != lists.Load() {
				t.Errorf("%d of %d Node lists asked for one Node without a deep copy, want all", n, lists.Load())
			}
		})
	}
}

// TestTheSliceKeepsThePlacementOfItsFirstClaim: every later claim and dry run of a slice gets the
// placement its first claim recorded, whatever its own request would decide, and the Nodes are
// not looked at again; a slice created before the field existed stays without one.
func TestTheSliceKeepsThePlacementOfItsFirstClaim(t *testing.T) {
	pool := constants.NodePoolTopologyKey
	var lists, cheap atomic.Int32
	c := newClient(t, nodeListCounter(&lists, &cheap), testutil.MakeNode("n0").TPU("tpu-v6e-slice", "4x4", "pool-a").Obj())
	a := newAllocator(c, c, timeout)
	for i, req := range []Request{
		placed(tpuv1alpha1.PlacementChosenDomain, placement.SourceDefault, pool),
		placed(tpuv1alpha1.PlacementInterPodAffinity, placement.SourceDefault, pool),
		placed(tpuv1alpha1.PlacementChosenDomain, placement.SourceKueue, ""),
	} {
		got, err := a.Claim(t.Context(), req)
		if err != nil || got.Placement != tpuv1alpha1.PlacementChosenDomain {
			t.Errorf("claim %d (%+v): Claim() = %+v, %v; want placement ChosenDomain", i, req.Placement, got, err)
		}
	}
	if got, err := a.Plan(t.Context(), placed(tpuv1alpha1.PlacementInterPodAffinity, placement.SourceDefault, pool)); err != nil ||
		got.Placement != tpuv1alpha1.PlacementChosenDomain {
		t.Errorf("Plan() = %+v, %v; want placement ChosenDomain", got, err)
	}
	if n := lists.Load(); n != 1 {
		t.Errorf("Node lists = %d, want 1 (at the slice's creation only)", n)
	}

	t.Run("a slice created before placement existed keeps none", func(t *testing.T) {
		var lists, cheap atomic.Int32
		legacy := existingSlice(0, clusterUID).AffinityTopologyKey(pool).Claim(0, "t0", "", "").Obj()
		c := newClient(t, nodeListCounter(&lists, &cheap), legacy, testutil.MakeNode("n0").TPU("tpu-v6e-slice", "4x4", "pool-a").Obj())
		a := newAllocator(c, c, timeout)
		req := placed(tpuv1alpha1.PlacementChosenDomain, placement.SourceDefault, pool)
		if got, err := a.Claim(t.Context(), req); err != nil || got.Placement != "" || got.AffinityTopologyKey != pool {
			t.Errorf("Claim() = %+v, %v; want key %q and no placement", got, err, pool)
		}
		if got, err := a.Plan(t.Context(), req); err != nil || got.Placement != "" || got.AffinityTopologyKey != pool {
			t.Errorf("Plan() = %+v, %v; want key %q and no placement", got, err, pool)
		}
		if n := lists.Load(); n != 0 {
			t.Errorf("Node lists = %d, want none", n)
		}
	})

	t.Run("a dry run that would create the slice decides as the claim would", func(t *testing.T) {
		c := newClient(t, interceptor.Funcs{}, testutil.MakeNode("n0").TPU("tpu-v6e-slice", "4x4", "pool-a").Obj())
		got, err := newAllocator(c, c, timeout).Plan(t.Context(), placed(tpuv1alpha1.PlacementChosenDomain, placement.SourceDefault, pool))
		if err != nil || got.Placement != tpuv1alpha1.PlacementChosenDomain {
			t.Errorf("Plan() = %+v, %v; want placement ChosenDomain", got, err)
		}
		if s := storedSlices(t, c); len(s) != 0 {
			t.Errorf("Plan() wrote slices %+v", s)
		}
	})
}

// TestAnAdoptedSliceRecordsNoPlacement: a slice that adoption creates for Pods that got their
// identity elsewhere records no placement (its Pods are not gated), and the claim that triggered
// the adoption follows it, though a TPU Node would have made a new slice ChosenDomain.
func TestAnAdoptedSliceRecordsNoPlacement(t *testing.T) {
	pool := constants.NodePoolTopologyKey
	c := newClient(t, interceptor.Funcs{}, testutil.MakeNode("n0").TPU("tpu-v6e-slice", "4x4", "pool-a").Obj(),
		identityPod("ref-0-0", 0, 0).Obj())
	got, err := newAllocator(c, c, timeout).Claim(t.Context(), placed(tpuv1alpha1.PlacementChosenDomain, placement.SourceDefault, pool))
	if err != nil || got.Replica != 0 || got.Placement != "" {
		t.Fatalf("Claim() = %+v, %v; want replica 0 without placement", got, err)
	}
	if s := storedSlices(t, c); len(s) != 1 || s[0].Spec.Placement != "" {
		t.Errorf("stored slices %+v, want one without placement", s)
	}
}
