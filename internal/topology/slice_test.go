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

package topology

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
)

// specWrapper builds PodSpecs for tests.
type specWrapper struct{ corev1.PodSpec }

func makeSpec() *specWrapper {
	return &specWrapper{}
}

func (w *specWrapper) nodeSelector(key, value string) *specWrapper {
	if w.NodeSelector == nil {
		w.NodeSelector = map[string]string{}
	}
	w.NodeSelector[key] = value
	return w
}

func (w *specWrapper) topology(value string) *specWrapper {
	return w.nodeSelector(constants.TopologyNodeSelectorKey, value)
}

func (w *specWrapper) accelerator(value string) *specWrapper {
	return w.nodeSelector(constants.AcceleratorNodeSelectorKey, value)
}

// tpu adds a container whose google.com/tpu request and limit are both chips.
func (w *specWrapper) tpu(chips string) *specWrapper {
	return w.container(tpuContainer(chips, chips))
}

// cpu adds a container without TPUs.
func (w *specWrapper) cpu() *specWrapper {
	return w.container(corev1.Container{
		Name: "sidecar",
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
		},
	})
}

func (w *specWrapper) container(c corev1.Container) *specWrapper {
	w.Containers = append(w.Containers, c)
	return w
}

func (w *specWrapper) initContainer(c corev1.Container) *specWrapper {
	w.InitContainers = append(w.InitContainers, c)
	return w
}

func (w *specWrapper) obj() *corev1.PodSpec {
	return &w.PodSpec
}

// tpuContainer returns a container with the given google.com/tpu request and limit; "" leaves
// it unset.
func tpuContainer(request, limit string) corev1.Container {
	c := corev1.Container{Name: "ray-worker"}
	if request != "" {
		c.Resources.Requests = corev1.ResourceList{constants.TPUResourceName: resource.MustParse(request)}
	}
	if limit != "" {
		c.Resources.Limits = corev1.ResourceList{constants.TPUResourceName: resource.MustParse(limit)}
	}
	return c
}

// sliceTopology returns the annotations of a Pod whose slice topology annotation is value.
func sliceTopology(value string) map[string]string {
	return map[string]string{constants.SliceTopologyAnnotation: value}
}

func TestFromPod(t *testing.T) {
	cases := map[string]struct {
		annotations map[string]string
		spec        *corev1.PodSpec
		want        Slice
		wantErr     error // sentinel; nil means success
		wantField   Field
		wantErrMsg  string // substring of the error message
	}{
		"v4 2x2x1 with 4 chips per Pod is a single host": {
			spec: makeSpec().accelerator("tpu-v4-podslice").topology("2x2x1").tpu("4").obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{2, 2, 1}},
				Accelerator:   "tpu-v4-podslice",
				ChipsPerPod:   4,
				Hosts:         1,
				TPUContainers: []int{0},
			},
		},
		"v4 2x2x4 with 4 chips per Pod is 4 hosts": {
			spec: makeSpec().accelerator("tpu-v4-podslice").topology("2x2x4").tpu("4").obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{2, 2, 4}},
				Accelerator:   "tpu-v4-podslice",
				ChipsPerPod:   4,
				Hosts:         4,
				TPUContainers: []int{0},
			},
		},
		"v5e 2x4 with 4 chips per Pod is 2 hosts": {
			spec: makeSpec().accelerator("tpu-v5-lite-podslice").topology("2x4").tpu("4").obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{2, 4}},
				Accelerator:   "tpu-v5-lite-podslice",
				ChipsPerPod:   4,
				Hosts:         2,
				TPUContainers: []int{0},
			},
		},
		"v5e 2x4 with 8 chips per Pod is a single host": {
			spec: makeSpec().accelerator("tpu-v5-lite-podslice").topology("2x4").tpu("8").obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{2, 4}},
				Accelerator:   "tpu-v5-lite-podslice",
				ChipsPerPod:   8,
				Hosts:         1,
				TPUContainers: []int{0},
			},
		},
		"v5e device 4x4 with 4 chips per Pod is 4 hosts": {
			spec: makeSpec().accelerator("tpu-v5-lite-device").topology("4x4").tpu("4").obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{4, 4}},
				Accelerator:   "tpu-v5-lite-device",
				ChipsPerPod:   4,
				Hosts:         4,
				TPUContainers: []int{0},
			},
		},
		"v6e 16x16 with 4 chips per Pod is 64 hosts": {
			spec: makeSpec().accelerator("tpu-v6e-slice").topology("16x16").tpu("4").obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{16, 16}},
				Accelerator:   "tpu-v6e-slice",
				ChipsPerPod:   4,
				Hosts:         64,
				TPUContainers: []int{0},
			},
		},
		"v5p 16x16x24 with 4 chips per Pod is 1536 hosts": {
			spec: makeSpec().accelerator("tpu-v5p-slice").topology("16x16x24").tpu("4").obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{16, 16, 24}},
				Accelerator:   "tpu-v5p-slice",
				ChipsPerPod:   4,
				Hosts:         1536,
				TPUContainers: []int{0},
			},
		},
		"v7x 2x2x2 with two containers of 2 chips each is 2 hosts": {
			spec: makeSpec().accelerator("tpu7x").topology("2x2x2").tpu("2").tpu("2").obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{2, 2, 2}},
				Accelerator:   "tpu7x",
				ChipsPerPod:   4,
				Hosts:         2,
				TPUContainers: []int{0, 1},
			},
		},
		"v7x 1x1x1 with a prefixed accelerator value is a single 1-chip host": {
			spec: makeSpec().accelerator("tpu7x-standard-1t").topology("1x1x1").tpu("1").obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{1, 1, 1}},
				Accelerator:   "tpu7x-standard-1t",
				ChipsPerPod:   1,
				Hosts:         1,
				TPUContainers: []int{0},
			},
		},
		"the request wins over the limit when both are set": {
			spec: makeSpec().accelerator("tpu-v6e-slice").topology("4x4").container(tpuContainer("4", "8")).obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{4, 4}},
				Accelerator:   "tpu-v6e-slice",
				ChipsPerPod:   4,
				Hosts:         4,
				TPUContainers: []int{0},
			},
		},
		"the limit is used when there is no request": {
			spec: makeSpec().accelerator("tpu-v6e-slice").topology("4x4").container(tpuContainer("", "8")).obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{4, 4}},
				Accelerator:   "tpu-v6e-slice",
				ChipsPerPod:   8,
				Hosts:         2,
				TPUContainers: []int{0},
			},
		},
		"init containers requesting TPUs are ignored": {
			spec: makeSpec().accelerator("tpu-v6e-slice").topology("4x4").
				initContainer(tpuContainer("4", "4")).tpu("4").obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{4, 4}},
				Accelerator:   "tpu-v6e-slice",
				ChipsPerPod:   4,
				Hosts:         4,
				TPUContainers: []int{0},
			},
		},
		"containers without TPUs are not TPU containers": {
			spec: makeSpec().accelerator("tpu-v4-podslice").topology("2x2x2").cpu().tpu("4").cpu().obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{2, 2, 2}},
				Accelerator:   "tpu-v4-podslice",
				ChipsPerPod:   4,
				Hosts:         2,
				TPUContainers: []int{1},
			},
		},
		"an unknown accelerator is not an error and its dimensionality is not checked": {
			spec: makeSpec().accelerator("tpu-v8-slice").topology("8").tpu("4").obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{8}},
				Accelerator:   "tpu-v8-slice",
				ChipsPerPod:   4,
				Hosts:         2,
				TPUContainers: []int{0},
			},
		},
		"without accelerator a 1-D topology is accepted": {
			spec: makeSpec().topology("8").tpu("4").obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{8}},
				ChipsPerPod:   4,
				Hosts:         2,
				TPUContainers: []int{0},
			},
		},
		"an empty accelerator value is not checked": {
			spec: makeSpec().accelerator("").topology("2x2x4").tpu("4").obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{2, 2, 4}},
				ChipsPerPod:   4,
				Hosts:         4,
				TPUContainers: []int{0},
			},
		},
		"a missing topology names the nodeSelector and the annotation": {
			spec:      makeSpec().accelerator("tpu-v6e-slice").tpu("4").obj(),
			wantErr:   ErrMissingTopology,
			wantField: FieldTopology,
			wantErrMsg: "nodeSelector cloud.google.com/gke-tpu-topology (or, for GKE subslicing and dynamic slicing, " +
				"annotation cloud.google.com/gke-tpu-slice-topology) is required: set it to the TPU slice topology, such as 4x4 or 2x2x4",
		},
		"other annotations do not stand in for the topology": {
			annotations: map[string]string{"cloud.google.com/gke-tpu-topology": "4x4"},
			spec:        makeSpec().accelerator("tpu-v6e-slice").tpu("4").obj(),
			wantErr:     ErrMissingTopology,
			wantField:   FieldTopology,
			wantErrMsg:  "is required",
		},
		"subslice: a 2x4 annotation inside a 4x4 v6e parent is 2 hosts of 4 chips": {
			annotations: sliceTopology("2x4"),
			spec:        makeSpec().accelerator("tpu-v6e-slice").topology("4x4").tpu("4").obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{2, 4}},
				Parent:        &Topology{Dims: []int32{4, 4}},
				Annotated:     true,
				Accelerator:   "tpu-v6e-slice",
				ChipsPerPod:   4,
				Hosts:         2,
				TPUContainers: []int{0},
			},
		},
		"subslice: an annotation equal to its parent is the whole parent": {
			annotations: sliceTopology("4x4"),
			spec:        makeSpec().accelerator("tpu-v6e-slice").topology("4x4").tpu("4").obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{4, 4}},
				Parent:        &Topology{Dims: []int32{4, 4}},
				Annotated:     true,
				Accelerator:   "tpu-v6e-slice",
				ChipsPerPod:   4,
				Hosts:         4,
				TPUContainers: []int{0},
			},
		},
		"subslice: a 2x2 annotation of 4-chip Pods is a single host of a multi-host parent": {
			annotations: sliceTopology("2x2"),
			spec:        makeSpec().accelerator("tpu-v6e-slice").topology("4x4").tpu("4").obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{2, 2}},
				Parent:        &Topology{Dims: []int32{4, 4}},
				Annotated:     true,
				Accelerator:   "tpu-v6e-slice",
				ChipsPerPod:   4,
				Hosts:         1,
				TPUContainers: []int{0},
			},
		},
		"subslice: a v4 2x2x2 annotation inside 2x2x4 is 2 hosts": {
			annotations: sliceTopology("2x2x2"),
			spec:        makeSpec().accelerator("tpu-v4-podslice").topology("2x2x4").tpu("4").obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{2, 2, 2}},
				Parent:        &Topology{Dims: []int32{2, 2, 4}},
				Annotated:     true,
				Accelerator:   "tpu-v4-podslice",
				ChipsPerPod:   4,
				Hosts:         2,
				TPUContainers: []int{0},
			},
		},
		"dynamic slicing: a tpu7x 4x12x16 annotation without topology nodeSelector is 192 hosts": {
			annotations: sliceTopology("4x12x16"),
			spec:        makeSpec().accelerator("tpu7x").tpu("4").obj(),
			want: Slice{
				Topology:      Topology{Dims: []int32{4, 12, 16}},
				Annotated:     true,
				Accelerator:   "tpu7x",
				ChipsPerPod:   4,
				Hosts:         192,
				TPUContainers: []int{0},
			},
		},
		"an empty slice topology annotation names the key and does not fall back to the nodeSelector": {
			annotations: sliceTopology(""),
			spec:        makeSpec().accelerator("tpu-v6e-slice").topology("4x4").tpu("4").obj(),
			wantErr:     ErrEmptySliceTopology,
			wantField:   FieldSliceTopology,
			wantErrMsg: "annotation cloud.google.com/gke-tpu-slice-topology is empty: set it to the topology of the slice, " +
				"such as 2x4, or remove it to use the nodeSelector cloud.google.com/gke-tpu-topology",
		},
		"an unparseable slice topology annotation blames the annotation": {
			annotations: sliceTopology("2X4"),
			spec:        makeSpec().accelerator("tpu-v6e-slice").topology("4x4").tpu("4").obj(),
			wantErr:     ErrInvalidTopology,
			wantField:   FieldSliceTopology,
			wantErrMsg:  `invalid topology "2X4"`,
		},
		"an unparseable parent of a valid annotation blames the nodeSelector": {
			annotations: sliceTopology("2x4"),
			spec:        makeSpec().accelerator("tpu-v6e-slice").topology("4x").tpu("4").obj(),
			wantErr:     ErrInvalidTopology,
			wantField:   FieldTopology,
			wantErrMsg:  `invalid topology "4x"`,
		},
		"a subslice of the wrong dimensionality for the accelerator blames the accelerator": {
			annotations: sliceTopology("2x2x2"),
			spec:        makeSpec().accelerator("tpu-v6e-slice").topology("4x4").tpu("4").obj(),
			wantErr:     ErrDimensionMismatch,
			wantField:   FieldAccelerator,
			wantErrMsg:  "accelerator tpu-v6e-slice needs a 2-D topology such as 4x4, got 2x2x2",
		},
		"a parent of the wrong dimensionality for the accelerator blames the accelerator": {
			annotations: sliceTopology("2x4"),
			spec:        makeSpec().accelerator("tpu-v6e-slice").topology("2x2x4").tpu("4").obj(),
			wantErr:     ErrDimensionMismatch,
			wantField:   FieldAccelerator,
			wantErrMsg:  "accelerator tpu-v6e-slice needs a 2-D topology such as 4x4, got 2x2x4",
		},
		"a subslice with another number of dimensions than its parent does not fit": {
			annotations: sliceTopology("2x2x2"),
			spec:        makeSpec().topology("4x4").tpu("4").obj(),
			wantErr:     ErrNotInParent,
			wantField:   FieldSliceTopology,
			wantErrMsg: "the slice topology 2x2x2 of annotation cloud.google.com/gke-tpu-slice-topology does not fit inside " +
				"the parent topology 4x4 of nodeSelector cloud.google.com/gke-tpu-topology: it has 3 dimensions and the parent 2",
		},
		"a subslice larger than its parent in one dimension does not fit": {
			annotations: sliceTopology("2x8"),
			spec:        makeSpec().accelerator("tpu-v6e-slice").topology("4x4").tpu("4").obj(),
			wantErr:     ErrNotInParent,
			wantField:   FieldSliceTopology,
			wantErrMsg: "the slice topology 2x8 of annotation cloud.google.com/gke-tpu-slice-topology does not fit inside " +
				"the parent topology 4x4 of nodeSelector cloud.google.com/gke-tpu-topology: every dimension must be at most the parent's",
		},
		"a subslice in another orientation than its parent does not fit, and the error names the one that does": {
			annotations: sliceTopology("4x2"),
			spec:        makeSpec().accelerator("tpu-v6e-slice").topology("2x4").tpu("4").obj(),
			wantErr:     ErrNotInParent,
			wantField:   FieldSliceTopology,
			wantErrMsg:  "every dimension must be at most the parent's (the same shape as 2x4 fits)",
		},
		"the subslice is checked against its parent before the resources": {
			annotations: sliceTopology("2x8"),
			spec:        makeSpec().accelerator("tpu-v6e-slice").topology("4x4").cpu().obj(),
			wantErr:     ErrNotInParent,
			wantField:   FieldSliceTopology,
			wantErrMsg:  "does not fit inside",
		},
		"a subslice without TPU chips is an error on the resources": {
			annotations: sliceTopology("2x4"),
			spec:        makeSpec().accelerator("tpu-v6e-slice").topology("4x4").cpu().obj(),
			wantErr:     ErrNoTPUChips,
			wantField:   FieldResources,
			wantErrMsg:  "no container requests google.com/tpu",
		},
		"the hosts of a subslice are its own chips divided by the chips per Pod, exactly": {
			annotations: sliceTopology("2x4"),
			spec:        makeSpec().accelerator("tpu-v6e-slice").topology("4x4").tpu("3").obj(),
			wantErr:     ErrChipsMismatch,
			wantField:   FieldResources,
			wantErrMsg:  "topology 2x4 has 8 chips, which is not a multiple of 3 chips per Pod",
		},
		"a subslice of fewer chips than one Pod requests is an error, not one host": {
			annotations: sliceTopology("1x1"),
			spec:        makeSpec().accelerator("tpu-v6e-slice").topology("4x4").tpu("4").obj(),
			wantErr:     ErrChipsMismatch,
			wantField:   FieldResources,
			wantErrMsg:  "topology 1x1 has fewer chips (1) than one Pod requests (4)",
		},
		"a nil spec has no topology": {
			spec:       nil,
			wantErr:    ErrMissingTopology,
			wantField:  FieldTopology,
			wantErrMsg: "cloud.google.com/gke-tpu-topology",
		},
		"a spec without TPUs nor topology reports the missing topology first": {
			spec:       makeSpec().cpu().obj(),
			wantErr:    ErrMissingTopology,
			wantField:  FieldTopology,
			wantErrMsg: "cloud.google.com/gke-tpu-topology",
		},
		"an empty topology value is invalid, not missing": {
			spec:       makeSpec().topology("").tpu("4").obj(),
			wantErr:    ErrInvalidTopology,
			wantField:  FieldTopology,
			wantErrMsg: `invalid topology "": it is empty`,
		},
		"an unparseable topology is invalid": {
			spec:       makeSpec().accelerator("tpu-v6e-slice").topology("4X4").tpu("4").obj(),
			wantErr:    ErrInvalidTopology,
			wantField:  FieldTopology,
			wantErrMsg: `invalid topology "4X4"`,
		},
		"a 3-D topology for 2-D v6e blames the accelerator": {
			spec:       makeSpec().accelerator("tpu-v6e-slice").topology("2x2x4").tpu("4").obj(),
			wantErr:    ErrDimensionMismatch,
			wantField:  FieldAccelerator,
			wantErrMsg: "accelerator tpu-v6e-slice needs a 2-D topology such as 4x4, got 2x2x4",
		},
		"a 2-D topology for 3-D v4 blames the accelerator": {
			spec:       makeSpec().accelerator("tpu-v4-podslice").topology("4x4").tpu("4").obj(),
			wantErr:    ErrDimensionMismatch,
			wantField:  FieldAccelerator,
			wantErrMsg: "accelerator tpu-v4-podslice needs a 3-D topology such as 2x2x4, got 4x4",
		},
		"a 1-D topology for v5e is the wrong dimensionality": {
			spec:       makeSpec().accelerator("tpu-v5-lite-podslice").topology("16").tpu("4").obj(),
			wantErr:    ErrDimensionMismatch,
			wantField:  FieldAccelerator,
			wantErrMsg: "accelerator tpu-v5-lite-podslice needs a 2-D topology such as 4x4, got 16",
		},
		"a 2-D topology for a tpu7x-prefixed accelerator is the wrong dimensionality": {
			spec:       makeSpec().accelerator("tpu7x-standard-4t").topology("4x4").tpu("4").obj(),
			wantErr:    ErrDimensionMismatch,
			wantField:  FieldAccelerator,
			wantErrMsg: "accelerator tpu7x-standard-4t needs a 3-D topology such as 2x2x4, got 4x4",
		},
		"no container requesting TPUs is an error": {
			spec:       makeSpec().accelerator("tpu-v6e-slice").topology("4x4").cpu().obj(),
			wantErr:    ErrNoTPUChips,
			wantField:  FieldResources,
			wantErrMsg: "no container requests google.com/tpu",
		},
		"a zero request wins over a positive limit": {
			spec:       makeSpec().accelerator("tpu-v6e-slice").topology("4x4").container(tpuContainer("0", "4")).obj(),
			wantErr:    ErrNoTPUChips,
			wantField:  FieldResources,
			wantErrMsg: "no container requests google.com/tpu",
		},
		"TPUs requested only by an init container say init containers are not counted": {
			spec: makeSpec().accelerator("tpu-v6e-slice").topology("4x4").
				initContainer(tpuContainer("4", "4")).cpu().obj(),
			wantErr:    ErrNoTPUChips,
			wantField:  FieldResources,
			wantErrMsg: "(init containers are not counted)",
		},
		"chips per Pod not dividing the topology name both numbers": {
			spec:       makeSpec().accelerator("tpu-v6e-slice").topology("4x4").tpu("3").obj(),
			wantErr:    ErrChipsMismatch,
			wantField:  FieldResources,
			wantErrMsg: "topology 4x4 has 16 chips, which is not a multiple of 3 chips per Pod",
		},
		"a Pod requesting more chips than the topology has": {
			spec:       makeSpec().accelerator("tpu-v5-lite-podslice").topology("2x1").tpu("4").obj(),
			wantErr:    ErrChipsMismatch,
			wantField:  FieldResources,
			wantErrMsg: "topology 2x1 has fewer chips (2) than one Pod requests (4)",
		},
		"two containers summing past the topology": {
			spec:       makeSpec().accelerator("tpu7x").topology("1x1x1").tpu("1").tpu("1").obj(),
			wantErr:    ErrChipsMismatch,
			wantField:  FieldResources,
			wantErrMsg: "topology 1x1x1 has fewer chips (1) than one Pod requests (2)",
		},
		"the dimensionality is checked before the resources": {
			spec:       makeSpec().accelerator("tpu-v6e-slice").topology("2x2x4").cpu().obj(),
			wantErr:    ErrDimensionMismatch,
			wantField:  FieldAccelerator,
			wantErrMsg: "needs a 2-D topology",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := FromPod(tc.annotations, tc.spec)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("FromPod() returned unexpected error: %v", err)
				}
			} else {
				if err == nil {
					t.Fatalf("FromPod() = %+v, want error wrapping %q", got, tc.wantErr)
				}
				assertError(t, err, tc.wantErr, tc.wantField, tc.wantErrMsg)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("FromPod() (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestContainerChips(t *testing.T) {
	cases := map[string]struct {
		container *corev1.Container
		wantChips int64
	}{
		"a nil container has no chips": {
			container: nil,
			wantChips: 0,
		},
		"a container without resources has no chips": {
			container: &corev1.Container{Name: "c"},
			wantChips: 0,
		},
		"other resources are not chips": {
			container: &corev1.Container{Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")},
				Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")},
			}},
			wantChips: 0,
		},
		"a request alone is used": {
			container: ptrTo(tpuContainer("4", "")),
			wantChips: 4,
		},
		"a limit alone is used": {
			container: ptrTo(tpuContainer("", "8")),
			wantChips: 8,
		},
		"the request wins over the limit": {
			container: ptrTo(tpuContainer("4", "8")),
			wantChips: 4,
		},
		"a zero request wins over the limit": {
			container: ptrTo(tpuContainer("0", "8")),
			wantChips: 0,
		},
		"a negative quantity counts as zero": {
			container: ptrTo(tpuContainer("-4", "")),
			wantChips: 0,
		},
		"a fractional quantity is rounded up": {
			container: ptrTo(tpuContainer("500m", "")),
			wantChips: 1,
		},
		"a quantity in exponent form is read": {
			container: ptrTo(tpuContainer("8e0", "")),
			wantChips: 8,
		},
		"the largest int64 is read exactly": {
			container: ptrTo(tpuContainer("9223372036854775807", "")),
			wantChips: math.MaxInt64,
		},
		"a quantity beyond int64 saturates": {
			container: ptrTo(tpuContainer("1e30", "")),
			wantChips: math.MaxInt64,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ContainerChips(tc.container); got != tc.wantChips {
				t.Errorf("ContainerChips() = %d, want %d", got, tc.wantChips)
			}
		})
	}
}

func TestChipsPerPodAndTPUContainers(t *testing.T) {
	cases := map[string]struct {
		spec              *corev1.PodSpec
		wantChips         int64
		wantTPUContainers []int
	}{
		"a nil spec has no chips": {
			spec: nil,
		},
		"a spec without containers has no chips": {
			spec: makeSpec().obj(),
		},
		"a spec without TPU containers has no chips": {
			spec: makeSpec().cpu().cpu().obj(),
		},
		"a single TPU container": {
			spec:              makeSpec().tpu("4").obj(),
			wantChips:         4,
			wantTPUContainers: []int{0},
		},
		"TPU containers are summed and listed in order around other containers": {
			spec:              makeSpec().cpu().tpu("2").cpu().container(tpuContainer("", "2")).obj(),
			wantChips:         4,
			wantTPUContainers: []int{1, 3},
		},
		"a zero request is not a TPU container": {
			spec:              makeSpec().container(tpuContainer("0", "4")).tpu("4").obj(),
			wantChips:         4,
			wantTPUContainers: []int{1},
		},
		"init containers are neither counted nor listed": {
			spec:              makeSpec().initContainer(tpuContainer("4", "4")).tpu("8").obj(),
			wantChips:         8,
			wantTPUContainers: []int{0},
		},
		"a sum beyond int64 saturates": {
			spec:              makeSpec().tpu("9223372036854775807").tpu("1").obj(),
			wantChips:         math.MaxInt64,
			wantTPUContainers: []int{0, 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ChipsPerPod(tc.spec); got != tc.wantChips {
				t.Errorf("ChipsPerPod() = %d, want %d", got, tc.wantChips)
			}
			if diff := cmp.Diff(tc.wantTPUContainers, TPUContainers(tc.spec)); diff != "" {
				t.Errorf("TPUContainers() (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestHosts(t *testing.T) {
	cases := map[string]struct {
		topology    Topology
		chipsPerPod int64
		wantHosts   int32
		wantErr     error
		wantField   Field
		wantErrMsg  string
	}{
		"one Pod takes the whole slice": {
			topology:    Topology{Dims: []int32{2, 2, 1}},
			chipsPerPod: 4,
			wantHosts:   1,
		},
		"the division is exact": {
			topology:    Topology{Dims: []int32{16, 16}},
			chipsPerPod: 4,
			wantHosts:   64,
		},
		"one chip per Pod is one host per chip": {
			topology:    Topology{Dims: []int32{2, 4}},
			chipsPerPod: 1,
			wantHosts:   8,
		},
		"a remainder is an error naming both numbers": {
			topology:    Topology{Dims: []int32{4, 4}},
			chipsPerPod: 3,
			wantErr:     ErrChipsMismatch,
			wantField:   FieldResources,
			wantErrMsg:  "topology 4x4 has 16 chips, which is not a multiple of 3 chips per Pod",
		},
		"fewer chips than one Pod is an error naming both numbers": {
			topology:    Topology{Dims: []int32{2, 1}},
			chipsPerPod: 4,
			wantErr:     ErrChipsMismatch,
			wantField:   FieldResources,
			wantErrMsg:  "topology 2x1 has fewer chips (2) than one Pod requests (4)",
		},
		"zero chips per Pod is an error, not a division by zero": {
			topology:    Topology{Dims: []int32{4, 4}},
			chipsPerPod: 0,
			wantErr:     ErrNoTPUChips,
			wantField:   FieldResources,
			wantErrMsg:  "a Pod must request at least 1 google.com/tpu chip, got 0",
		},
		"negative chips per Pod is an error": {
			topology:    Topology{Dims: []int32{4, 4}},
			chipsPerPod: -4,
			wantErr:     ErrNoTPUChips,
			wantField:   FieldResources,
			wantErrMsg:  "got -4",
		},
		"the zero topology is invalid": {
			topology:    Topology{},
			chipsPerPod: 4,
			wantErr:     ErrInvalidTopology,
			wantField:   FieldTopology,
			wantErrMsg:  "it has no chips",
		},
		"a hand-built topology with more hosts than int32 is an error": {
			topology:    Topology{Dims: []int32{math.MaxInt32, 4}},
			chipsPerPod: 1,
			wantErr:     ErrInvalidTopology,
			wantField:   FieldTopology,
			wantErrMsg:  "it has 8589934588 hosts, more than the maximum of 2147483647",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Hosts(tc.topology, tc.chipsPerPod)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Hosts(%v, %d) returned unexpected error: %v", tc.topology, tc.chipsPerPod, err)
				}
			} else {
				if err == nil {
					t.Fatalf("Hosts(%v, %d) = %d, want error wrapping %q", tc.topology, tc.chipsPerPod, got, tc.wantErr)
				}
				assertError(t, err, tc.wantErr, tc.wantField, tc.wantErrMsg)
			}
			if got != tc.wantHosts {
				t.Errorf("Hosts(%v, %d) = %d, want %d", tc.topology, tc.chipsPerPod, got, tc.wantHosts)
			}
		})
	}
}

func ptrTo[T any](v T) *T {
	return &v
}
