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

// Package constants holds the names other software defines and this operator reads or writes: GKE's
// node labels and selectors, Kueue's and Ray's keys, resource names and the environment variables of
// libtpu, JAX and TorchTPU. The labels, annotation, conditions and Event reasons this operator
// defines itself are API and live in api/v1alpha1.
package constants

const (
	// TPUResourceName is the extended resource GKE's TPU device plugin advertises.
	TPUResourceName = "google.com/tpu"

	// TopologyNodeSelectorKey selects nodes of a TPU slice topology, e.g. 4x4 or 2x2x4.
	TopologyNodeSelectorKey = "cloud.google.com/gke-tpu-topology"
	// AcceleratorNodeSelectorKey selects the TPU generation, e.g. tpu-v6e-slice.
	AcceleratorNodeSelectorKey = "cloud.google.com/gke-tpu-accelerator"
	// NodePoolTopologyKey is the node label that groups the hosts of one TPU slice.
	NodePoolTopologyKey = "cloud.google.com/gke-nodepool"

	// ReplicaIndexLabel is read by the Ray autoscaler to remove a multi-host replica as a unit.
	// Its value is <group>-<replica>.
	ReplicaIndexLabel = "replicaIndex"

	// FieldManager is the field manager of every write this operator makes.
	FieldManager = "tpu-slice-operator"
)

// Environment variables read by libtpu, JAX and Ray.
const (
	EnvWorkerID             = "TPU_WORKER_ID"
	EnvName                 = "TPU_NAME"
	EnvWorkerHostnames      = "TPU_WORKER_HOSTNAMES"
	EnvProcessAddresses     = "TPU_PROCESS_ADDRESSES"
	EnvProcessPort          = "TPU_PROCESS_PORT"
	EnvDevicePluginHostIP   = "TPU_DEVICE_PLUGIN_HOST_IP"
	EnvDevicePluginAddr     = "TPU_DEVICE_PLUGIN_ADDR"
	EnvMegascaleNumSlices   = "MEGASCALE_NUM_SLICES"
	EnvMegascaleSliceID     = "MEGASCALE_SLICE_ID"
	EnvMegascaleCoordinator = "MEGASCALE_COORDINATOR_ADDRESS"
	EnvMegascalePort        = "MEGASCALE_PORT"
	DevicePluginPort        = 2112
	ProcessPortBase         = 8471
	MegascalePortBase       = 8081
)
