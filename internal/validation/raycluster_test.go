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
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

const (
	v6e = "tpu-v6e-slice"
	v4  = "tpu-v4-podslice"
	v7x = "tpu7x"
	ns  = "default"
)

var (
	group0       = field.NewPath("spec", "workerGroupSpecs").Index(0)
	group1       = field.NewPath("spec", "workerGroupSpecs").Index(1)
	topologyKey0 = group0.Child("template", "spec", "nodeSelector").Key(constants.TopologyNodeSelectorKey)
	// sliceKey0 is the slice topology annotation of group 0's Pod template.
	sliceKey0 = group0.Child("template", "metadata", "annotations").Key(constants.SliceTopologyAnnotation)
	// longName is the longest RayCluster name KubeRay accepts whose "<name>-headless" Service name
	// (64 characters) is not a valid Pod subdomain.
	longName = strings.Repeat("c", 55)
	// longestName is the longest RayCluster name whose headless Service name (63) is still valid.
	longestName = strings.Repeat("c", 54)
)

// missingTopology is the message of a TPU group with neither the topology nodeSelector nor the
// slice topology annotation.
const missingTopology = "nodeSelector cloud.google.com/gke-tpu-topology (or, for GKE subslicing and dynamic slicing, " +
	"annotation cloud.google.com/gke-tpu-slice-topology) is required: set it to the TPU slice topology, such as 4x4 or 2x2x4"

// subsliced is a cluster of one v6e group of hosts 4-chip Pods in a 2x4 subslice of a 4x4 parent.
func subsliced(hosts int32) *testutil.RayClusterWrapper {
	return testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, hosts, 1).
		GroupAnnotation(0, constants.SliceTopologyAnnotation, "2x4")
}

// badAffinityKey is the error of group 0's ray.io/tpu-affinity-topology-key annotation value, a
// value with spaces.
func badAffinityKey(value string) *field.Error {
	return field.Invalid(group0.Child("template", "metadata", "annotations").Key(constants.AffinityTopologyKeyAnnotation), value,
		"the topologyKey of the slice's pod affinity must be a label key: name part must consist of alphanumeric characters, "+
			"'-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', "+
			"regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
}

// wrongHosts is the numOfHosts error of a v6e/v4 16-chip group of 4-chip Pods.
func wrongHosts(path *field.Path, got int32) *field.Error {
	return field.Invalid(path.Child("numOfHosts"), got,
		"topology 4x4 has 16 chips and each Pod requests 4, so the slice needs numOfHosts 4")
}

func TestIsTPUGroup(t *testing.T) {
	cases := map[string]struct {
		rc   *rayv1.RayCluster
		want bool
	}{
		"a group requesting chips with a topology is a TPU group": {
			rc:   testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, 4, 1).Obj(),
			want: true,
		},
		"a group requesting chips without a topology is a TPU group": {
			rc: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, 4, 1).
				WithoutNodeSelector(0, constants.TopologyNodeSelectorKey).Obj(),
			want: true,
		},
		"a group selecting a topology without chips is a TPU group": {
			rc:   testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 0, 4, 1).Obj(),
			want: true,
		},
		"a group whose TPU container is a sidecar is a TPU group": {
			rc:   testutil.MakeRayCluster("rc", ns).CPUGroup("cpu", 1).GroupContainer(0, "tpu-sidecar", 4).Obj(),
			want: true,
		},
		"a CPU group is not a TPU group": {
			rc: testutil.MakeRayCluster("rc", ns).CPUGroup("cpu", 1).Obj(),
		},
		"a group carrying the slice topology annotation without chips is a TPU group": {
			rc: testutil.MakeRayCluster("rc", ns).CPUGroup("cpu", 1).
				GroupAnnotation(0, constants.SliceTopologyAnnotation, "2x4").Obj(),
			want: true,
		},
		"an accelerator selector alone does not make a TPU group": {
			rc: testutil.MakeRayCluster("rc", ns).CPUGroup("cpu", 1).
				NodeSelector(0, constants.AcceleratorNodeSelectorKey, v6e).Obj(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := IsTPUGroup(&tc.rc.Spec.WorkerGroupSpecs[0]); got != tc.want {
				t.Errorf("IsTPUGroup() = %t, want %t", got, tc.want)
			}
		})
	}
}

func TestValidateRayCluster(t *testing.T) {
	cases := map[string]struct {
		rc       *rayv1.RayCluster
		wantErrs field.ErrorList
	}{
		"a v6e 4x4 slice of four 4-chip hosts is valid": {
			rc: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, 4, 2).Obj(),
		},
		"a CPU-only cluster is valid": {
			rc: testutil.MakeRayCluster("rc", ns).CPUGroup("cpu", 3).Obj(),
		},
		"a cluster without worker groups is valid": {
			rc: testutil.MakeRayCluster("rc", ns).Obj(),
		},
		"a v4 2x2x4 slice of four hosts is valid": {
			rc: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v4, "2x2x4", 4, 4, 1).Obj(),
		},
		"a v7x 2x2x2 slice of two hosts with two 2-chip containers each is valid": {
			rc: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v7x, "2x2x2", 2, 2, 1).
				GroupContainer(0, "second", 2).Obj(),
		},
		"a tpu7x group whose Pods' host lists no environment entry holds is invalid (issue 44)": {
			rc: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v7x, "16x24x24", 1, 2304, 1).
				GroupContainer(0, "second", 1).GroupContainer(0, "third", 1).GroupContainer(0, "fourth", 1).Obj(),
			wantErrs: field.ErrorList{field.Invalid(group0.Child("numOfHosts"), int32(2304),
				`TPU_PROCESS_ADDRESSES of a slice of 2304 hosts with 4 TPU container(s) per Pod would be 143038 bytes even with bare hostnames ("tpu-3-2303"): `+
					"more than the 131072 bytes Linux allows one environment entry, so the container could not start; "+
					"request the host's TPU chips in one container instead of 4 (one libtpu process per host), use a shorter worker group name, or fewer hosts per slice")},
		},
		"numOfHosts disagreeing with the topology names the topology, the chips and the right count": {
			rc:       testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, 2, 1).Obj(),
			wantErrs: field.ErrorList{wrongHosts(group0, 2)},
		},
		"the error points at the TPU group when it comes after a CPU group": {
			rc: testutil.MakeRayCluster("rc", ns).CPUGroup("cpu", 1).
				TPUGroup("tpu", v6e, "4x4", 4, 2, 1).Obj(),
			wantErrs: field.ErrorList{wrongHosts(group1, 2)},
		},
		"a TPU group requesting chips without a topology selector misses the selector": {
			rc: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, 4, 1).
				WithoutNodeSelector(0, constants.TopologyNodeSelectorKey).Obj(),
			wantErrs: field.ErrorList{field.Required(topologyKey0, missingTopology)},
		},
		"subslice: numOfHosts matching a 2x4 subslice of a 4x4 parent is valid": {
			rc: subsliced(2).Obj(),
		},
		"subslice: numOfHosts of the parent is refused, naming the annotation's topology and its host count": {
			rc: subsliced(4).Obj(),
			wantErrs: field.ErrorList{field.Invalid(group0.Child("numOfHosts"), int32(4),
				"topology 2x4 of annotation cloud.google.com/gke-tpu-slice-topology has 8 chips and each Pod requests 4, so the slice needs numOfHosts 2")},
		},
		"dynamic slicing: the guide's tpu7x 4x12x16 group of 192 hosts selecting only the accelerator is valid": {
			rc: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v7x, "", 4, 192, 1).
				WithoutNodeSelector(0, constants.TopologyNodeSelectorKey).
				GroupAnnotation(0, constants.SliceTopologyAnnotation, "4x12x16").Obj(),
		},
		"an empty slice topology annotation is required on the annotation, even with a topology selector": {
			rc: subsliced(2).GroupAnnotation(0, constants.SliceTopologyAnnotation, "").Obj(),
			wantErrs: field.ErrorList{field.Required(sliceKey0,
				"annotation cloud.google.com/gke-tpu-slice-topology is empty: set it to the topology of the slice, such as 2x4, "+
					"or remove it to use the nodeSelector cloud.google.com/gke-tpu-topology")},
		},
		"an unparseable slice topology annotation is invalid on the annotation": {
			rc: subsliced(2).GroupAnnotation(0, constants.SliceTopologyAnnotation, "2x4x").Obj(),
			wantErrs: field.ErrorList{field.Invalid(sliceKey0, "2x4x",
				`invalid topology "2x4x": dimension 3 is empty; want 1 to 3 positive integers separated by a lowercase "x", such as 4x4 or 2x2x4`)},
		},
		"a subslice that does not fit inside its parent is invalid on the annotation": {
			rc: subsliced(2).GroupAnnotation(0, constants.SliceTopologyAnnotation, "2x8").Obj(),
			wantErrs: field.ErrorList{field.Invalid(sliceKey0, "2x8",
				"the slice topology 2x8 of annotation cloud.google.com/gke-tpu-slice-topology does not fit inside the parent topology 4x4 "+
					"of nodeSelector cloud.google.com/gke-tpu-topology: every dimension must be at most the parent's")},
		},
		"a subslice in the orientation its parent cannot hold is invalid and names the one it can": {
			rc: subsliced(2).NodeSelector(0, constants.TopologyNodeSelectorKey, "2x4").
				GroupAnnotation(0, constants.SliceTopologyAnnotation, "4x2").Obj(),
			wantErrs: field.ErrorList{field.Invalid(sliceKey0, "4x2",
				"the slice topology 4x2 of annotation cloud.google.com/gke-tpu-slice-topology does not fit inside the parent topology 2x4 "+
					"of nodeSelector cloud.google.com/gke-tpu-topology: every dimension must be at most the parent's (the same shape as 2x4 fits)")},
		},
		"a subslice whose parent is unparseable is invalid on the topology selector": {
			rc: subsliced(2).NodeSelector(0, constants.TopologyNodeSelectorKey, "4X4").Obj(),
			wantErrs: field.ErrorList{field.Invalid(topologyKey0, "4X4",
				`invalid topology "4X4": dimension 1 "4X4" is not a positive decimal integer; separate dimensions with a lowercase "x", such as 4x4 or 2x2x4`)},
		},
		"an unparseable topology is invalid on the topology selector": {
			rc: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4X4", 4, 4, 1).Obj(),
			wantErrs: field.ErrorList{field.Invalid(topologyKey0, "4X4",
				`invalid topology "4X4": dimension 1 "4X4" is not a positive decimal integer; separate dimensions with a lowercase "x", such as 4x4 or 2x2x4`)},
		},
		"a topology selector without chips is invalid on the containers": {
			rc: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 0, 4, 1).Obj(),
			wantErrs: field.ErrorList{field.Invalid(group0.Child("template", "spec", "containers"), int64(0),
				"no container requests google.com/tpu: set resources.requests or resources.limits of google.com/tpu on the containers that use TPUs")},
		},
		"a 3-D topology for the 2-D v6e is invalid on the accelerator selector": {
			rc: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "2x2x4", 4, 4, 1).Obj(),
			wantErrs: field.ErrorList{field.Invalid(
				group0.Child("template", "spec", "nodeSelector").Key(constants.AcceleratorNodeSelectorKey), v6e,
				"accelerator tpu-v6e-slice needs a 2-D topology such as 4x4, got 2x2x4")},
		},
		"an unknown accelerator is not checked for dimensionality": {
			rc: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", "tpu-v9-slice", "2x2x4", 4, 4, 1).Obj(),
		},
		"a topology of more than 3 dimensions is invalid even without an accelerator": {
			rc: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", "", "2x2x2x", 4, 2, 1).Obj(),
			wantErrs: field.ErrorList{field.Invalid(topologyKey0, "2x2x2x",
				`invalid topology "2x2x2x": it has 4 dimensions, at most 3 are allowed`)},
		},
		"chips per Pod that do not divide the topology are invalid on the containers": {
			rc: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 3, 4, 1).Obj(),
			wantErrs: field.ErrorList{field.Invalid(group0.Child("template", "spec", "containers"), int64(3),
				"topology 4x4 has 16 chips, which is not a multiple of 3 chips per Pod")},
		},
		"chips per Pod above the topology's chips are invalid on the containers": {
			rc: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "2x2", 8, 1, 1).Obj(),
			wantErrs: field.ErrorList{field.Invalid(group0.Child("template", "spec", "containers"), int64(8),
				"topology 2x2 has fewer chips (4) than one Pod requests (8)")},
		},
		"a multi-host group of a cluster whose headless Service name is too long is invalid on the name": {
			rc: testutil.MakeRayCluster(longName, ns).TPUGroup("tpu", v6e, "4x4", 4, 4, 1).Obj(),
			wantErrs: field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), longName,
				`multi-host TPU group "tpu" needs the headless worker Service "`+longName+`-headless" as its Pods' subdomain: must be no more than 63 characters`)},
		},
		"a multi-host group of a cluster whose headless Service name is exactly 63 characters is valid": {
			rc: testutil.MakeRayCluster(longestName, ns).TPUGroup("tpu", v6e, "4x4", 4, 4, 1).Obj(),
		},
		"a single-host group needs no headless Service, so a long cluster name is valid": {
			rc: testutil.MakeRayCluster(longName, ns).TPUGroup("tpu", v6e, "2x4", 8, 1, 1).Obj(),
		},
		"a wrong numOfHosts and a too-long name are both reported": {
			rc: testutil.MakeRayCluster(longName, ns).TPUGroup("tpu", v6e, "4x4", 4, 2, 1).Obj(),
			wantErrs: field.ErrorList{
				wrongHosts(group0, 2),
				field.Invalid(field.NewPath("metadata", "name"), longName,
					`multi-host TPU group "tpu" needs the headless worker Service "`+longName+`-headless" as its Pods' subdomain: must be no more than 63 characters`),
			},
		},
		"two wrong TPU groups give one error each": {
			rc: testutil.MakeRayCluster("rc", ns).
				TPUGroup("a", v6e, "4x4", 4, 2, 1).
				TPUGroup("b", v4, "2x2x4", 4, 8, 1).Obj(),
			wantErrs: field.ErrorList{
				wrongHosts(group0, 2),
				field.Invalid(group1.Child("numOfHosts"), int32(8),
					"topology 2x2x4 has 16 chips and each Pod requests 4, so the slice needs numOfHosts 4"),
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ValidateRayCluster(tc.rc)
			if diff := cmp.Diff(tc.wantErrs.ToAggregate(), got.ToAggregate()); diff != "" {
				t.Errorf("ValidateRayCluster() errors (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestValidateRayClusterNumOfHostsMessage(t *testing.T) {
	rc := testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, 2, 1).Obj()
	want := "spec.workerGroupSpecs[0].numOfHosts: Invalid value: 2: topology 4x4 has 16 chips and each Pod requests 4, so the slice needs numOfHosts 4"
	if got := ValidateRayCluster(rc).ToAggregate(); got == nil || got.Error() != want {
		t.Errorf("ValidateRayCluster() = %v, want %q", got, want)
	}
}

func TestValidateRayClusterUpdate(t *testing.T) {
	// invalid is a cluster created before the operator was installed: 2 hosts for a 4-host slice.
	invalid := func() *testutil.RayClusterWrapper {
		return testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, 2, 1)
	}
	unchangedWarning := `worker group "tpu" is unchanged but invalid for TPU: ` + wrongHosts(group0, 2).Error()
	cases := map[string]struct {
		oldRC, newRC *rayv1.RayCluster
		wantErrs     field.ErrorList
		wantWarnings []string
	}{
		"scaling a valid cluster passes without warnings": {
			oldRC: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, 4, 1).Obj(),
			newRC: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, 4, 3).Obj(),
		},
		"scaling an invalid group whose TPU fields did not change passes with a warning naming the group": {
			oldRC:        invalid().Obj(),
			newRC:        invalid().Replicas(0, 3).Obj(),
			wantWarnings: []string{unchangedWarning},
		},
		"an invalid group moved to another index is still the same group": {
			oldRC:        invalid().Obj(),
			newRC:        testutil.MakeRayCluster("rc", ns).CPUGroup("cpu", 1).TPUGroup("tpu", v6e, "4x4", 4, 2, 1).Obj(),
			wantWarnings: []string{`worker group "tpu" is unchanged but invalid for TPU: ` + wrongHosts(group1, 2).Error()},
		},
		"changing numOfHosts to another wrong value is refused": {
			oldRC:    invalid().Obj(),
			newRC:    invalid().NumOfHosts(0, 3).Obj(),
			wantErrs: field.ErrorList{wrongHosts(group0, 3)},
		},
		"changing the topology of an invalid group is refused": {
			oldRC: invalid().Obj(),
			newRC: invalid().NodeSelector(0, constants.TopologyNodeSelectorKey, "4x8").Obj(),
			wantErrs: field.ErrorList{field.Invalid(group0.Child("numOfHosts"), int32(2),
				"topology 4x8 has 32 chips and each Pod requests 4, so the slice needs numOfHosts 8")},
		},
		"changing the slice topology annotation of an invalid group is refused": {
			oldRC: subsliced(4).Obj(),
			newRC: subsliced(4).GroupAnnotation(0, constants.SliceTopologyAnnotation, "2x2").Obj(),
			wantErrs: field.ErrorList{field.Invalid(group0.Child("numOfHosts"), int32(4),
				"topology 2x2 of annotation cloud.google.com/gke-tpu-slice-topology has 4 chips and each Pod requests 4, so the slice needs numOfHosts 1")},
		},
		"removing the slice topology annotation is a change and is validated against the nodeSelector": {
			oldRC:    subsliced(2).Obj(),
			newRC:    testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, 2, 1).Obj(),
			wantErrs: field.ErrorList{wrongHosts(group0, 2)},
		},
		"an empty slice topology annotation is a change from no annotation": {
			oldRC: invalid().Obj(),
			newRC: invalid().GroupAnnotation(0, constants.SliceTopologyAnnotation, "").Obj(),
			wantErrs: field.ErrorList{field.Required(sliceKey0,
				"annotation cloud.google.com/gke-tpu-slice-topology is empty: set it to the topology of the slice, such as 2x4, "+
					"or remove it to use the nodeSelector cloud.google.com/gke-tpu-topology")},
		},
		"an unchanged invalid affinity key annotation is only warned about": {
			oldRC: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, 4, 1).
				GroupAnnotation(0, constants.AffinityTopologyKeyAnnotation, "not a key").Obj(),
			newRC: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, 4, 3).
				GroupAnnotation(0, constants.AffinityTopologyKeyAnnotation, "not a key").Obj(),
			wantWarnings: []string{`worker group "tpu" is unchanged but invalid for TPU: ` + badAffinityKey("not a key").Error()},
		},
		"changing the affinity key annotation to another invalid value is refused": {
			oldRC: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, 4, 1).
				GroupAnnotation(0, constants.AffinityTopologyKeyAnnotation, "not a key").Obj(),
			newRC: testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, 4, 1).
				GroupAnnotation(0, constants.AffinityTopologyKeyAnnotation, "still not a key").Obj(),
			wantErrs: field.ErrorList{badAffinityKey("still not a key")},
		},
		"adding a container to an invalid group is a change of its resources and is refused": {
			oldRC:    invalid().Obj(),
			newRC:    invalid().GroupContainer(0, "sidecar", 0).Obj(),
			wantErrs: field.ErrorList{wrongHosts(group0, 2)},
		},
		"fixing an invalid group passes": {
			oldRC: invalid().Obj(),
			newRC: invalid().NumOfHosts(0, 4).Obj(),
		},
		"breaking a valid group is refused": {
			oldRC:    testutil.MakeRayCluster("rc", ns).TPUGroup("tpu", v6e, "4x4", 4, 4, 1).Obj(),
			newRC:    invalid().Obj(),
			wantErrs: field.ErrorList{wrongHosts(group0, 2)},
		},
		"a new invalid group added next to a ratcheted one is refused, the old one only warned about": {
			oldRC:        invalid().Obj(),
			newRC:        invalid().TPUGroup("new", v4, "2x2x4", 4, 2, 1).Obj(),
			wantErrs:     field.ErrorList{field.Invalid(group1.Child("numOfHosts"), int32(2), "topology 2x2x4 has 16 chips and each Pod requests 4, so the slice needs numOfHosts 4")},
			wantWarnings: []string{unchangedWarning},
		},
		"a renamed invalid group is validated as a new group": {
			oldRC:    invalid().Obj(),
			newRC:    invalid().GroupName(0, "tpu-renamed").Obj(),
			wantErrs: field.ErrorList{wrongHosts(group0, 2)},
		},
		"an invalid group added to a CPU-only cluster is refused": {
			oldRC:    testutil.MakeRayCluster("rc", ns).CPUGroup("cpu", 1).Obj(),
			newRC:    testutil.MakeRayCluster("rc", ns).CPUGroup("cpu", 1).TPUGroup("tpu", v6e, "4x4", 4, 2, 1).Obj(),
			wantErrs: field.ErrorList{wrongHosts(group1, 2)},
		},
		"a long-named cluster created before the operator can still scale its multi-host group": {
			oldRC: testutil.MakeRayCluster(longName, ns).TPUGroup("tpu", v6e, "4x4", 4, 4, 1).Obj(),
			newRC: testutil.MakeRayCluster(longName, ns).TPUGroup("tpu", v6e, "4x4", 4, 4, 2).Obj(),
			wantWarnings: []string{`worker group "tpu" is unchanged but invalid for TPU: metadata.name: Invalid value: "` + longName +
				`": multi-host TPU group "tpu" needs the headless worker Service "` + longName + `-headless" as its Pods' subdomain: must be no more than 63 characters`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			gotErrs, gotWarnings := ValidateRayClusterUpdate(tc.oldRC, tc.newRC)
			if diff := cmp.Diff(tc.wantErrs.ToAggregate(), gotErrs.ToAggregate()); diff != "" {
				t.Errorf("ValidateRayClusterUpdate() errors (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWarnings, gotWarnings); diff != "" {
				t.Errorf("ValidateRayClusterUpdate() warnings (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestSamples checks that the RayCluster samples users apply first behave as their comments say.
func TestSamples(t *testing.T) {
	cases := map[string]struct {
		wantErrs field.ErrorList
	}{
		"ray_v1_raycluster_v6e_4x4.yaml":         {},
		"ray_v1_raycluster_v4_2x2x4.yaml":        {},
		"ray_v1_raycluster_v5e_single_host.yaml": {},
		"ray_v1_raycluster_invalid.yaml":         {wantErrs: field.ErrorList{wrongHosts(group0, 2)}},
	}
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "samples", "ray_v1_raycluster_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	gotFiles := make([]string, 0, len(files))
	for _, f := range files {
		gotFiles = append(gotFiles, filepath.Base(f))
	}
	wantFiles := make([]string, 0, len(cases))
	for f := range cases {
		wantFiles = append(wantFiles, f)
	}
	if diff := cmp.Diff(wantFiles, gotFiles, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("RayCluster samples (-want,+got), add new samples to this test:\n%s", diff)
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("..", "..", "config", "samples", name))
			if err != nil {
				t.Fatal(err)
			}
			var rc rayv1.RayCluster
			if err := yaml.UnmarshalStrict(data, &rc); err != nil {
				t.Fatalf("decoding %s: %v", name, err)
			}
			if rc.Kind != "RayCluster" || rc.APIVersion != rayv1.GroupVersion.String() {
				t.Errorf("%s is a %s %s, want a %s RayCluster", name, rc.APIVersion, rc.Kind, rayv1.GroupVersion)
			}
			if len(rc.Spec.WorkerGroupSpecs) == 0 || !IsTPUGroup(&rc.Spec.WorkerGroupSpecs[0]) {
				t.Errorf("%s has no TPU worker group", name)
			}
			got := ValidateRayCluster(&rc)
			if diff := cmp.Diff(tc.wantErrs.ToAggregate(), got.ToAggregate()); diff != "" {
				t.Errorf("ValidateRayCluster(%s) errors (-want,+got):\n%s", name, diff)
			}
		})
	}
}
