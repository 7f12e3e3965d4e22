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

package validation

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// fakeNodes is a NodeLister of fixed Nodes that records the selectors it was asked for. Like a
// cache, it returns only the Nodes matching the selector.
type fakeNodes struct {
	nodes     []placement.Node
	err       error
	selectors []map[string]string
}

func (f *fakeNodes) ListNodes(_ context.Context, selector map[string]string) ([]placement.Node, error) {
	f.selectors = append(f.selectors, selector)
	if f.err != nil {
		return nil, f.err
	}
	var out []placement.Node
	for _, n := range f.nodes {
		if placement.FindFit([]placement.Node{n}, selector, 1).Matching == 1 {
			out = append(out, n)
		}
	}
	return out, nil
}

// v6e4x4Pool returns the Nodes of the v6e 4x4 node pool "pool-a"; with labeled, each Node has
// its own host and the pool is split into two subblocks of two Nodes in one block.
func v6e4x4Pool(labeled bool) []placement.Node {
	const pool = "pool-a"
	nodes := make([]placement.Node, 0, 4)
	for i := range 4 {
		labels := map[string]string{
			constants.AcceleratorNodeSelectorKey: v6e,
			constants.TopologyNodeSelectorKey:    "4x4",
			constants.NodePoolTopologyKey:        pool,
		}
		if labeled {
			labels[constants.GCETopologyBlockKey] = "b1"
			labels[constants.GCETopologySubblockKey] = fmt.Sprintf("%s-sb%d", pool, i/2)
			labels[constants.GCETopologyHostKey] = fmt.Sprintf("%s-h%d", pool, i)
		}
		nodes = append(nodes, placement.Node{Name: fmt.Sprintf("%s-%d", pool, i), Labels: labels})
	}
	return nodes
}

const (
	v6eSelector = "cloud.google.com/gke-tpu-accelerator=tpu-v6e-slice, cloud.google.com/gke-tpu-topology=4x4"
	fallback    = "so its Pods are kept on one node pool (cloud.google.com/gke-nodepool), which no other subslice can then share"
)

func TestValidatorNodeWarnings(t *testing.T) {
	cases := map[string]struct {
		rc            *rayv1.RayCluster
		nodes         *fakeNodes // nil: no lister
		wantErrs      field.ErrorList
		wantWarnings  []string
		wantSelectors []map[string]string // nil: the lister must not be called
	}{
		"the guide's 2x4 subslice on a pool of 2-Node subblocks fits: no warning": {
			rc:            subsliced(2).Obj(),
			nodes:         &fakeNodes{nodes: v6e4x4Pool(true)},
			wantSelectors: []map[string]string{{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4"}},
		},
		"a subsliced group targeting no Nodes yet is allowed with a warning": {
			rc:    subsliced(2).Obj(),
			nodes: &fakeNodes{nodes: []placement.Node{{Name: "cpu", Labels: map[string]string{constants.NodePoolTopologyKey: "cpu"}}}},
			wantWarnings: []string{`worker group "tpu": subslice 2x4 targets no Nodes yet (nodeSelector ` + v6eSelector + `): ` +
				"Pods created before such Nodes exist cannot be kept on a GCE topology domain, " + fallback},
			wantSelectors: []map[string]string{{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4"}},
		},
		"a subsliced group on Nodes without GCE topology labels is allowed with a warning (the reference denies)": {
			rc:    subsliced(2).Obj(),
			nodes: &fakeNodes{nodes: v6e4x4Pool(false)},
			wantWarnings: []string{`worker group "tpu": none of the 4 Nodes matching nodeSelector ` + v6eSelector + ` has a GCE topology label ` +
				"(cloud.google.com/gce-topology-host, cloud.google.com/gce-topology-subblock, cloud.google.com/gce-topology-block), " +
				"so subslice 2x4 cannot be placed inside a node pool (this TPU type or GKE version needs GKE dynamic slicing for it), " + fallback},
			wantSelectors: []map[string]string{{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4"}},
		},
		"a 3-host subslice of a 4-host pool is ambiguous: allowed with a warning (the reference denies)": {
			rc: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, 3, 1).
				GroupAnnotation(0, constants.SliceTopologyAnnotation, "3x4").Obj(),
			nodes: &fakeNodes{nodes: v6e4x4Pool(true)},
			wantWarnings: []string{`worker group "tpu": no GCE topology domain holds exactly 3 of the 4 Nodes matching nodeSelector ` +
				v6eSelector + ", so subslice 3x4 is ambiguous, " + fallback},
			wantSelectors: []map[string]string{{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4"}},
		},
		"a Node list error is a warning, not a denial": {
			rc:            subsliced(2).Obj(),
			nodes:         &fakeNodes{err: errors.New("cache not synced")},
			wantWarnings:  []string{`worker group "tpu": could not check where subslice 2x4 fits: listing the TPU Nodes for the subslice's affinity: cache not synced`},
			wantSelectors: []map[string]string{{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4"}},
		},
		"a Kueue-queued RayCluster's subslice is not checked against the Nodes": {
			rc:    subsliced(2).Label(constants.KueueQueueNameLabel, "lq").Obj(),
			nodes: &fakeNodes{},
		},
		"a subslice whose template asks for Kueue's topology is not checked": {
			rc:    subsliced(2).GroupAnnotation(0, constants.KueuePodSetRequiredTopologyAnnotation, constants.GCETopologyBlockKey).Obj(),
			nodes: &fakeNodes{},
		},
		"a subslice whose template skips the webhook's checks is not checked": {
			rc:    subsliced(2).GroupAnnotation(0, constants.SkipTPUWebhookCheckAnnotation, "true").Obj(),
			nodes: &fakeNodes{},
		},
		"the guide's dynamic slicing manifest is not checked against the Nodes": {
			rc: testutil.MakeRayCluster("rc", ns).Label(constants.KueueQueueNameLabel, "lq").
				TPUGroup("tpu", v7x, "", 4, 192, 1).WithoutNodeSelector(0, constants.TopologyNodeSelectorKey).
				GroupAnnotation(0, constants.SliceTopologyAnnotation, "4x12x16").Obj(),
			nodes: &fakeNodes{},
		},
		"a subslice whose key the user chose is not checked": {
			rc:    subsliced(2).GroupAnnotation(0, constants.AffinityTopologyKeyAnnotation, constants.GCETopologyBlockKey).Obj(),
			nodes: &fakeNodes{},
		},
		"a whole slice is not checked against the Nodes": {
			rc:    testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, 4, 1).Obj(),
			nodes: &fakeNodes{},
		},
		"a single-host subslice gets no affinity and is not checked": {
			rc: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, 1, 1).
				GroupAnnotation(0, constants.SliceTopologyAnnotation, "2x2").Obj(),
			nodes: &fakeNodes{},
		},
		"an invalid subsliced group is refused without checking the Nodes": {
			rc:    subsliced(4).Obj(),
			nodes: &fakeNodes{},
			wantErrs: field.ErrorList{field.Invalid(group0.Child("numOfHosts"), int32(4),
				"topology 2x4 of annotation cloud.google.com/gke-tpu-slice-topology has 8 chips and each Pod requests 4, so the slice needs numOfHosts 2")},
		},
		"without a Node lister a subslice is only validated": {
			rc: subsliced(2).Obj(),
		},
		"each subsliced group is checked with its own nodeSelector, warnings in group order": {
			rc: subsliced(2).TPUGroup("other", v6e, "4x4", 4, 2, 1).
				NodeSelector(1, constants.NodePoolTopologyKey, "pool-b").
				GroupAnnotation(1, constants.SliceTopologyAnnotation, "2x4").Obj(),
			nodes: &fakeNodes{nodes: v6e4x4Pool(true)},
			wantWarnings: []string{`worker group "other": subslice 2x4 targets no Nodes yet (nodeSelector cloud.google.com/gke-nodepool=pool-b, ` +
				v6eSelector + `): Pods created before such Nodes exist cannot be kept on a GCE topology domain, ` + fallback},
			wantSelectors: []map[string]string{
				{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4"},
				{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4", constants.NodePoolTopologyKey: "pool-b"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			opts := Options{}
			if tc.nodes != nil {
				opts.Nodes = tc.nodes
			}
			gotErrs, gotWarnings := New(opts).ValidateCreate(t.Context(), tc.rc)
			if diff := cmp.Diff(tc.wantErrs.ToAggregate(), gotErrs.ToAggregate()); diff != "" {
				t.Errorf("ValidateCreate() errors (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWarnings, gotWarnings); diff != "" {
				t.Errorf("ValidateCreate() warnings (-want,+got):\n%s", diff)
			}
			if tc.nodes != nil {
				if diff := cmp.Diff(tc.wantSelectors, tc.nodes.selectors); diff != "" {
					t.Errorf("Node list selectors (-want,+got):\n%s", diff)
				}
			}
		})
	}
}

func TestValidatorUpdateNodeWarnings(t *testing.T) {
	noNodesWarning := `worker group "tpu": subslice 2x4 targets no Nodes yet (nodeSelector ` + v6eSelector + `): ` +
		"Pods created before such Nodes exist cannot be kept on a GCE topology domain, " + fallback
	cases := map[string]struct {
		oldRC, newRC *rayv1.RayCluster
		wantWarnings []string
		wantLists    int
	}{
		"scaling an unchanged subsliced group does not check the Nodes again": {
			oldRC: subsliced(2).Obj(),
			newRC: subsliced(2).Replicas(0, 2).Obj(),
		},
		"changing a subsliced group checks the Nodes": {
			oldRC:        subsliced(2).GroupAnnotation(0, constants.SliceTopologyAnnotation, "4x2").Obj(),
			newRC:        subsliced(2).Obj(),
			wantWarnings: []string{noNodesWarning},
			wantLists:    1,
		},
		"a new subsliced group is checked": {
			oldRC:        testutil.MakeRayCluster("rc", ns).CPUGroup("cpu", 1).Obj(),
			newRC:        subsliced(2).Obj(),
			wantWarnings: []string{noNodesWarning},
			wantLists:    1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			nodes := &fakeNodes{}
			gotErrs, gotWarnings := New(Options{Nodes: nodes}).ValidateUpdate(t.Context(), tc.oldRC, tc.newRC)
			if gotErrs != nil {
				t.Errorf("ValidateUpdate() errors = %v, want none", gotErrs)
			}
			if diff := cmp.Diff(tc.wantWarnings, gotWarnings); diff != "" {
				t.Errorf("ValidateUpdate() warnings (-want,+got):\n%s", diff)
			}
			if len(nodes.selectors) != tc.wantLists {
				t.Errorf("The Nodes were listed %d times, want %d", len(nodes.selectors), tc.wantLists)
			}
		})
	}
}

func TestValidatorMaxSliceHosts(t *testing.T) {
	cases := map[string]struct {
		rc       *rayv1.RayCluster
		max      int32
		wantErrs field.ErrorList
	}{
		"the largest v5p slice, 2,240 hosts, is within the default limit": {
			rc: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", "tpu-v5p-slice", "16x20x28", 4, 2240, 1).Obj(),
		},
		"a slice above the default limit of 2,400 hosts is invalid on its topology, naming the limit": {
			rc: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", "tpu-v5p-slice", "16x24x28", 4, 2688, 1).Obj(),
			wantErrs: field.ErrorList{field.Invalid(group0.Child("template", "spec", "nodeSelector").Key(constants.TopologyNodeSelectorKey), "16x24x28",
				"topology 16x24x28 with 4 chips per Pod is a slice of 2688 hosts, more than the limit of 2400 hosts per slice")},
		},
		"a slice within a lower limit is valid": {
			rc:  testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "8x8", 4, 16, 1).Obj(),
			max: 16,
		},
		"a slice above a lower limit is invalid, and a wrong numOfHosts is reported too": {
			rc:  testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "8x16", 4, 16, 1).Obj(),
			max: 16,
			wantErrs: field.ErrorList{
				field.Invalid(group0.Child("template", "spec", "nodeSelector").Key(constants.TopologyNodeSelectorKey), "8x16",
					"topology 8x16 with 4 chips per Pod is a slice of 32 hosts, more than the limit of 16 hosts per slice"),
				field.Invalid(group0.Child("numOfHosts"), int32(16),
					"topology 8x16 has 128 chips and each Pod requests 4, so the slice needs numOfHosts 32"),
			},
		},
		"a subslice above the limit is invalid on the annotation": {
			rc:  subsliced(2).Obj(),
			max: 1,
			wantErrs: field.ErrorList{field.Invalid(sliceKey0, "2x4",
				"topology 2x4 with 4 chips per Pod is a slice of 2 hosts, more than the limit of 1 hosts per slice")},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			gotErrs, _ := New(Options{MaxSliceHosts: tc.max}).ValidateCreate(t.Context(), tc.rc)
			if diff := cmp.Diff(tc.wantErrs.ToAggregate(), gotErrs.ToAggregate()); diff != "" {
				t.Errorf("ValidateCreate() errors (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestValidatorAffinityTopologyKey(t *testing.T) {
	multiHost := func() *testutil.RayClusterWrapper {
		return testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, 4, 1)
	}
	cases := map[string]struct {
		rc       *rayv1.RayCluster
		wantErrs field.ErrorList
	}{
		"a label key is valid": {
			rc: multiHost().GroupAnnotation(0, constants.AffinityTopologyKeyAnnotation, constants.GCETopologySubblockKey).Obj(),
		},
		"surrounding space is trimmed": {
			rc: multiHost().GroupAnnotation(0, constants.AffinityTopologyKeyAnnotation, " cloud.google.com/gke-tpu-slice ").Obj(),
		},
		"a blank value is ignored": {
			rc: multiHost().GroupAnnotation(0, constants.AffinityTopologyKeyAnnotation, "  ").Obj(),
		},
		"a value that is not a label key is invalid on the annotation": {
			rc:       multiHost().GroupAnnotation(0, constants.AffinityTopologyKeyAnnotation, "gce topology block").Obj(),
			wantErrs: field.ErrorList{badAffinityKey("gce topology block")},
		},
		"a single-host group gets no affinity, so its annotation is not checked": {
			rc: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "2x4", 8, 1, 1).
				GroupAnnotation(0, constants.AffinityTopologyKeyAnnotation, "not a key").Obj(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			gotErrs, _ := New(Options{}).ValidateCreate(t.Context(), tc.rc)
			if diff := cmp.Diff(tc.wantErrs.ToAggregate(), gotErrs.ToAggregate()); diff != "" {
				t.Errorf("ValidateCreate() errors (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestNilValidatorUsesDefaults(t *testing.T) {
	var v *Validator
	errs, warnings := v.ValidateCreate(t.Context(), subsliced(4).Obj())
	if len(errs) != 1 || warnings != nil {
		t.Errorf("nil Validator: ValidateCreate() = %v, %q; want one error and no warnings", errs, warnings)
	}
}
