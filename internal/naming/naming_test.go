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

package naming

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestSliceName(t *testing.T) {
	cases := map[string]struct {
		cluster, group string
		replica        int32
		wantPrefix     string
	}{
		"short names keep cluster and group readable": {
			cluster: "raycluster", group: "tpu-group", replica: 3, wantPrefix: "raycluster-tpu-group-",
		},
		"upper case and underscores are sanitized": {
			cluster: "my-cluster", group: "TPU_Group", replica: 0, wantPrefix: "my-cluster-tpu-group-",
		},
		"long names are shortened": {
			cluster: strings.Repeat("c", 60), group: strings.Repeat("g", 60), replica: 1535,
			wantPrefix: strings.Repeat("c", 49),
		},
		"a group of only invalid characters still yields a valid name": {
			cluster: "_", group: "_", replica: 0, wantPrefix: "slice-",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := SliceName(tc.cluster, tc.group, tc.replica)
			if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
				t.Errorf("SliceName(%q, %q, %d) = %q is not a DNS label: %v", tc.cluster, tc.group, tc.replica, got, errs)
			}
			if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
				t.Errorf("SliceName = %q is not a label value: %v", got, errs)
			}
			if !strings.HasPrefix(got, tc.wantPrefix) {
				t.Errorf("SliceName = %q, want prefix %q", got, tc.wantPrefix)
			}
			if again := SliceName(tc.cluster, tc.group, tc.replica); again != got {
				t.Errorf("SliceName is not deterministic: %q then %q", got, again)
			}
		})
	}
}

func TestSliceNameDistinguishesIdentities(t *testing.T) {
	type identity struct {
		cluster, group string
		replica        int32
	}
	ids := []identity{
		{"a-b", "c", 0}, {"a", "b-c", 0}, {"a", "b_c", 0}, {"a", "B-c", 0},
		{"a", "b", 1}, {"a", "b", 11}, {"a1", "b", 1},
		{strings.Repeat("x", 70), "g1", 0}, {strings.Repeat("x", 70), "g2", 0},
	}
	seen := map[string]identity{}
	for _, id := range ids {
		name := SliceName(id.cluster, id.group, id.replica)
		if prev, ok := seen[name]; ok {
			t.Errorf("SliceName collision: %+v and %+v both give %q", prev, id, name)
		}
		seen[name] = id
	}
}

func TestHeadlessServiceName(t *testing.T) {
	cases := map[string]struct {
		cluster       string
		want          string
		wantSubdomain bool
	}{
		"kuberay appends -headless": {cluster: "raycluster-tpu", want: "raycluster-tpu-headless", wantSubdomain: true},
		"a 54 character cluster still fits": {
			cluster: strings.Repeat("r", 54), want: strings.Repeat("r", 54) + "-headless", wantSubdomain: true,
		},
		"a 55 character cluster does not fit in a DNS label": {
			cluster: strings.Repeat("r", 55), want: strings.Repeat("r", 55) + "-headless", wantSubdomain: false,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := HeadlessServiceName(tc.cluster)
			if got != tc.want {
				t.Errorf("HeadlessServiceName(%q) = %q, want %q", tc.cluster, got, tc.want)
			}
			if valid := len(ValidateSubdomain(got)) == 0; valid != tc.wantSubdomain {
				t.Errorf("ValidateSubdomain(%q) valid = %v, want %v", got, valid, tc.wantSubdomain)
			}
		})
	}
}
