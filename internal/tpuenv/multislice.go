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

package tpuenv

import (
	"strconv"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
)

// megascaleCoordinator returns the MEGASCALE_COORDINATOR_ADDRESS of a multislice container of vals:
// host 0 of replica 0 of the group, "<Hostname(group, 0, 0)>.<subdomain>", with ":8081" on v7x
// (the MEGASCALE_PORT of its container 0). ok is false for a single-host slice, whose container
// gets no coordinator address from the operator.
//
// That name only resolves for a multi-host group: the headless Service publishes a DNS record for
// a Pod only when the Pod sets spec.hostname and spec.subdomain, which the operator does for
// multi-host slices alone (single-host Pods keep the hostname KubeRay gives them, and KubeRay
// creates "<cluster>-headless" only for clusters with a multi-host group). The reference webhook
// writes "<group>-0-0.<cluster>-headless" for single-host slices too, which never resolves, so
// every slice's megascale client waits for a coordinator that cannot be found. No name the
// operator can compute at admission points at the first Pod of a single-host group (its IP is not
// known yet), so the operator leaves the address to whoever can know it: the user's env, or Ray,
// whose TPU utilities (ray.util.tpu.get_tpu_coordinator_env_vars, the multi-slice placement
// groups) pass slice 0's head address at run time. MEGASCALE_SLICE_ID and MEGASCALE_PORT are still
// written: they do not depend on DNS.
func megascaleCoordinator(vals Values) (string, bool) {
	if !vals.multiHost() {
		return "", false
	}
	coordinator := naming.Hostname(vals.GroupName, 0, 0) + "." + vals.Subdomain
	if vals.V7x {
		coordinator += ":" + strconv.Itoa(constants.MegascalePortBase)
	}
	return coordinator, true
}
