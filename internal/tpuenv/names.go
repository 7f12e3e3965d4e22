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

	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
)

// WorkerHostnames returns the TPU_WORKER_HOSTNAMES value of a replica: the comma-separated
// "<Hostname(group, replica, h)>.<subdomain>" for h = 0..hosts-1. It is empty when hosts < 1.
func WorkerHostnames(group string, replica, hosts int32, subdomain string) string {
	names := make([]string, 0, max(hosts, 0))
	for h := range hosts {
		names = append(names, naming.Hostname(group, replica, h)+"."+subdomain)
	}
	return strings.Join(names, ",")
}

// shortWorkerHostnames is the short form of the TPU_WORKER_HOSTNAMES value of vals
// (ShortHostNames): the bare hostnames, comma-joined.
func shortWorkerHostnames(vals Values) string {
	names := make([]string, 0, max(vals.Hosts, 0))
	for h := range vals.Hosts {
		names = append(names, naming.Hostname(vals.GroupName, vals.ReplicaIndex, h))
	}
	return strings.Join(names, ",")
}

// tpuName returns the TPU_NAME value of a replica: the raw "<group>-<replica>".
func tpuName(group string, replica int32) string {
	return group + "-" + itoa(replica)
}

func itoa(i int32) string {
	return strconv.FormatInt(int64(i), 10)
}
