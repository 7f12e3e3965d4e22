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
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
)

// torchDims is the number of mesh dimensions TORCH_TPU_TOPOLOGY names before v7x's core dimension.
const torchDims = 3

// v7xCoresPerChip is the TensorCores of one Ironwood chip. torch_tpu runs each as its own device
// and process (its GKE bootstrap doubles the chips per host on tpu7x and appends a core dimension
// of 2 to the host bounds), so a v7x host has twice as many slice-builder processes as chips.
const v7xCoresPerChip = 2

// TorchTopology returns the TORCH_TPU_TOPOLOGY value of a slice whose topology has dimensions
// dims: the dimensions joined by ",", padded with trailing 1s to three (a 2-D 4x4 is "4,4,1", a
// 1-D 8 of an unknown accelerator "8,1,1"), then on v7x ",2" for the two TensorCores of each chip
// (2x2x2 is "2,2,2,2"). It returns "" for no dimensions.
//
// dims must be the slice's own topology: a subslice's, never its parent's, so that the product of
// the value is the number of processes TorchSlicebuilderAddresses lists.
func TorchTopology(dims []int32, v7x bool) string {
	if len(dims) == 0 {
		return ""
	}
	parts := make([]string, 0, torchDims+1)
	for _, d := range dims {
		parts = append(parts, itoa(d))
	}
	for len(parts) < torchDims {
		parts = append(parts, "1")
	}
	if v7x {
		parts = append(parts, strconv.Itoa(v7xCoresPerChip))
	}
	return strings.Join(parts, ",")
}

// TorchSlicebuilderAddresses returns the TORCH_TPU_SLICEBUILDER_ADDRESSES value of the slice of vals:
// for every host h of the slice in order, then every slice-builder process p of that host,
// "<host>:<8471+p>", comma-joined. A host has vals.ChipsPerHost processes, twice that on v7x. host is
// "localhost" for a single-host slice, else "<Hostname(group, replica, h)>.<subdomain>", the names
// of TPU_WORKER_HOSTNAMES. It returns "" when vals has no hosts or no chips per host.
func TorchSlicebuilderAddresses(vals Values) string {
	return torchSlicebuilderAddresses(vals, false)
}

// torchSlicebuilderAddresses is TorchSlicebuilderAddresses with each host named by
// hostAddr(vals, h, short): bare hostnames in the short form (ShortHostNames).
func torchSlicebuilderAddresses(vals Values, short bool) string {
	perHost := torchProcessesPerHost(vals)
	if vals.Hosts < 1 || perHost < 1 {
		return ""
	}
	addrs := make([]string, 0, int64(vals.Hosts)*perHost)
	for h := range vals.Hosts {
		host := hostAddr(vals, h, short)
		for p := range perHost {
			addrs = append(addrs, host+":"+strconv.FormatInt(constants.TorchSlicebuilderPortBase+p, 10))
		}
	}
	return strings.Join(addrs, ",")
}

// torchAddressesFit reports whether TORCH_TPU_SLICEBUILDER_ADDRESSES of the slice of vals can be passed
// to a container at all (MaxEnvEntry), in the host form short, bounding its length by the longest address times their
// number without building it. It lists every chip of the slice (every TensorCore on v7x), about 35
// bytes each, so past about 3,700 of them, around 900 hosts of 4 chips, it cannot: the operator
// then writes neither TorchTPU variable (docs/spec.md §4), and the Pod stays small.
func torchAddressesFit(vals Values, short bool) bool {
	perHost := torchProcessesPerHost(vals)
	if vals.Hosts < 1 || perHost < 1 {
		return true
	}
	host := hostAddr(vals, vals.Hosts-1, short)
	longest := int64(len(host)) + 1 + int64(len(strconv.FormatInt(constants.TorchSlicebuilderPortBase+perHost-1, 10)))
	total := int64(vals.Hosts)*perHost*(longest+1) - 1
	return int64(len(constants.EnvTorchSlicebuilderAddresses))+1+total+1 <= MaxEnvEntry
}

// torchProcessesPerHost is the number of torch_tpu slice-builder processes of one host of vals.
func torchProcessesPerHost(vals Values) int64 {
	if vals.V7x {
		return vals.ChipsPerHost * v7xCoresPerChip
	}
	return vals.ChipsPerHost
}

// addTorchEnv adds TORCH_TPU_TOPOLOGY and TORCH_TPU_SLICEBUILDER_ADDRESSES to env, each unless env
// has an entry of that name. Neither is added when env already defines TORCH_TPU_TOPOLOGY (value or
// valueFrom: the user configures torch_tpu), nor when vals does not describe the slice's shape.
func addTorchEnv(env []corev1.EnvVar, lists *hostLists) []corev1.EnvVar {
	vals := lists.vals
	if hasEnv(env, constants.EnvTorchTopology) || !torchAddressesApply(vals, lists.short) {
		return env
	}
	env = addEnv(env, constants.EnvTorchTopology, TorchTopology(vals.Topology, vals.V7x))
	if hasEnv(env, constants.EnvTorchSlicebuilderAddresses) {
		return env
	}
	return append(env, lists.envVar(constants.EnvTorchSlicebuilderAddresses, lists.torchSlicebuilderAddresses))
}

// torchAddressesApply reports whether the slice of vals gets the TorchTPU variables at all: its
// shape is known (a topology and chips per host) and its addresses fit in one environment entry.
func torchAddressesApply(vals Values, short bool) bool {
	return TorchTopology(vals.Topology, vals.V7x) != "" && vals.Hosts >= 1 && torchProcessesPerHost(vals) >= 1 &&
		torchAddressesFit(vals, short)
}
