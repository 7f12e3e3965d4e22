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

package operator

import (
	"testing"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
)

func TestSlicePlacementFlag(t *testing.T) {
	cases := map[string]struct {
		args    []string
		want    tpuv1alpha1.SlicePlacement
		wantErr bool
	}{
		"the operator chooses the domain by default": {want: tpuv1alpha1.PlacementChosenDomain},
		"--slice-placement=InterPodAffinity keeps the inter-pod terms": {
			args: []string{"--slice-placement=InterPodAffinity"}, want: tpuv1alpha1.PlacementInterPodAffinity,
		},
		"--slice-placement=ChosenDomain": {args: []string{"--slice-placement=ChosenDomain"}, want: tpuv1alpha1.PlacementChosenDomain},
		"another value is refused":       {args: []string{"--slice-placement=chosendomain"}, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			opts, err := parseFlags(tc.args)

			if (err != nil) != tc.wantErr {
				t.Fatalf("Parse(%q) = %v, want error %t", tc.args, err, tc.wantErr)
			}
			if !tc.wantErr && opts.SlicePlacement != tc.want {
				t.Errorf("SlicePlacement = %q, want %q", opts.SlicePlacement, tc.want)
			}
		})
	}
}
