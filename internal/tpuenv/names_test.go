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

package tpuenv_test

import (
	"math"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// TestNames pins the names of every shortening rule. The values are golden on purpose: webhook
// replicas of different versions must agree on the hostnames of one slice.
func TestNames(t *testing.T) {
	cases := map[string]struct {
		group                string
		replica, host, hosts int32
		wantHostname         string
		wantReplicaIndex     string
		wantWorkerHostnames  string
	}{
		"plain group keeps the plain form": {
			group: "tpu-group", replica: 1, host: 2, hosts: 3,
			wantHostname:        "tpu-group-1-2",
			wantReplicaIndex:    "tpu-group-1",
			wantWorkerHostnames: "tpu-group-1-0.rc-headless,tpu-group-1-1.rc-headless,tpu-group-1-2.rc-headless",
		},
		"59-character group still fits in 63 characters": {
			group: group60[:59], replica: 0, host: 9, hosts: 1,
			wantHostname:        group60[:59] + "-0-9",
			wantReplicaIndex:    group60[:59] + "-0",
			wantWorkerHostnames: group60[:59] + "-0-0.rc-headless",
		},
		"59-character group is shortened once the host index has two digits": {
			group: group60[:59], replica: 0, host: 10, hosts: 1,
			wantHostname:        "tpu-worker-group-with-a-rather-c863cb08-0-10",
			wantReplicaIndex:    group60[:59] + "-0",
			wantWorkerHostnames: group60[:59] + "-0-0.rc-headless",
		},
		"60-character group is shortened for the hostname but is still a valid label value": {
			group: group60, replica: 0, host: 1, hosts: 2,
			wantHostname:     "tpu-worker-group-with-a-rather-b6f4094a-0-1",
			wantReplicaIndex: group60 + "-0",
			wantWorkerHostnames: "tpu-worker-group-with-a-rather-b6f4094a-0-0.rc-headless," +
				"tpu-worker-group-with-a-rather-b6f4094a-0-1.rc-headless",
		},
		"62-character group is shortened for both": {
			group: strings.Repeat("a", 62), replica: 3, host: 0, hosts: 1,
			wantHostname:        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-f506898c-3-0",
			wantReplicaIndex:    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-f506898c-3",
			wantWorkerHostnames: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-f506898c-3-0.rc-headless",
		},
		"uppercase and underscore are lowercased and replaced for the hostname only": {
			group: "TPU_Group", replica: 0, host: 1, hosts: 2,
			wantHostname:        "tpu-group-2f2aa042-0-1",
			wantReplicaIndex:    "TPU_Group-0",
			wantWorkerHostnames: "tpu-group-2f2aa042-0-0.rc-headless,tpu-group-2f2aa042-0-1.rc-headless",
		},
		"dot is replaced for the hostname only": {
			group: "tpu.group", replica: 0, host: 0, hosts: 1,
			wantHostname:        "tpu-group-d8215e14-0-0",
			wantReplicaIndex:    "tpu.group-0",
			wantWorkerHostnames: "tpu-group-d8215e14-0-0.rc-headless",
		},
		"leading hyphen is trimmed in both": {
			group: "-grp", replica: 3, host: 0, hosts: 1,
			wantHostname:        "grp-481c8be1-3-0",
			wantReplicaIndex:    "grp-481c8be1-3",
			wantWorkerHostnames: "grp-481c8be1-3-0.rc-headless",
		},
		"group of only invalid characters becomes its hash": {
			group: "___", replica: 0, host: 0, hosts: 1,
			wantHostname:        "bda25155-0-0",
			wantReplicaIndex:    "bda25155-0",
			wantWorkerHostnames: "bda25155-0-0.rc-headless",
		},
		"non-ASCII characters are replaced": {
			group: "Ünïcode_Grp", replica: 0, host: 0, hosts: 1,
			wantHostname:        "n-code-grp-d2fe1fb2-0-0",
			wantReplicaIndex:    "n-code-grp-d2fe1fb2-0",
			wantWorkerHostnames: "n-code-grp-d2fe1fb2-0-0.rc-headless",
		},
		"largest indexes still fit after shortening": {
			group: group60, replica: math.MaxInt32, host: math.MaxInt32, hosts: 1,
			wantHostname:        "tpu-worker-group-with-a-rather-b6f4094a-2147483647-2147483647",
			wantReplicaIndex:    "tpu-worker-group-with-a-rather-b6f4094a-2147483647",
			wantWorkerHostnames: "tpu-worker-group-with-a-rather-b6f4094a-2147483647-0.rc-headless",
		},
		"no hosts means no hostnames": {
			group: "tpu-group", replica: 0, host: 0, hosts: 0,
			wantHostname:        "tpu-group-0-0",
			wantReplicaIndex:    "tpu-group-0",
			wantWorkerHostnames: "",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := naming.Hostname(tc.group, tc.replica, tc.host); got != tc.wantHostname {
				t.Errorf("Hostname(%q, %d, %d) = %q, want %q", tc.group, tc.replica, tc.host, got, tc.wantHostname)
			}
			if got := naming.ReplicaIndexValue(tc.group, tc.replica); got != tc.wantReplicaIndex {
				t.Errorf("ReplicaIndexValue(%q, %d) = %q, want %q", tc.group, tc.replica, got, tc.wantReplicaIndex)
			}
			if got := tpuenv.WorkerHostnames(tc.group, tc.replica, tc.hosts, testSubdomain); got != tc.wantWorkerHostnames {
				t.Errorf("WorkerHostnames(%q, %d, %d, %q) = %q, want %q",
					tc.group, tc.replica, tc.hosts, testSubdomain, got, tc.wantWorkerHostnames)
			}
		})
	}
}

// TestNamesAreValidDeterministicAndDistinct checks the properties the shortening exists for, over
// groups that need it, for every extreme of the replica and host indexes.
func TestNamesAreValidDeterministicAndDistinct(t *testing.T) {
	groups := []string{
		"tpu-group",
		"tpu_group",
		"TPU-group",
		"TPU_Group",
		"tpu.group",
		group60,
		group60[:59] + "7", // same 59-character prefix as group60
		strings.Repeat("x", 63),
		strings.Repeat("x", 64),
		strings.Repeat("Long_Group.", 23), // 253 characters, a valid DNS subdomain
		"-leading",
		"trailing-",
		"___",
		"",
	}
	indexes := []struct{ replica, host int32 }{
		{0, 0},
		{7, 255},
		{math.MaxInt32, math.MaxInt32},
		{math.MinInt32, math.MinInt32},
	}
	// Every (group, replica, host) below is distinct, and so must be every name.
	hostnameOwner := map[string]string{}
	replicaIndexOwner := map[string]string{}
	for _, group := range groups {
		for _, idx := range indexes {
			hostname := naming.Hostname(group, idx.replica, idx.host)
			if errs := validation.IsDNS1123Label(hostname); len(errs) > 0 {
				t.Errorf("Hostname(%q, %d, %d) = %q, not a DNS-1123 label: %v", group, idx.replica, idx.host, hostname, errs)
			}
			if again := naming.Hostname(group, idx.replica, idx.host); again != hostname {
				t.Errorf("Hostname(%q, %d, %d) = %q, then %q", group, idx.replica, idx.host, hostname, again)
			}
			if owner, taken := hostnameOwner[hostname]; taken {
				t.Errorf("Hostname %q is produced for both group %q and group %q", hostname, owner, group)
			}
			hostnameOwner[hostname] = group

			value := naming.ReplicaIndexValue(group, idx.replica)
			if errs := content.IsLabelValue(value); len(errs) > 0 {
				t.Errorf("ReplicaIndexValue(%q, %d) = %q, not a label value: %v", group, idx.replica, value, errs)
			}
			if again := naming.ReplicaIndexValue(group, idx.replica); again != value {
				t.Errorf("ReplicaIndexValue(%q, %d) = %q, then %q", group, idx.replica, value, again)
			}
			if owner, taken := replicaIndexOwner[value]; taken {
				t.Errorf("ReplicaIndexValue %q is produced for both groups %q and %q", value, owner, group)
			}
			replicaIndexOwner[value] = group
		}
	}
}
