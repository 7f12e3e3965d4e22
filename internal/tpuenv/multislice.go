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
// (the MEGASCALE_PORT of its container 0). ok is false for a single-host slice, which has no DNS
// name to give (docs/design.md, "Multislice and v7x gaps").
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
