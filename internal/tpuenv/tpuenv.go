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

// Package tpuenv applies a claimed TPU identity to a KubeRay TPU worker Pod (docs/spec.md §4): the TPU_*
// and MEGASCALE_* environment of its TPU containers, the labels and annotation linking it to its
// claim and, for multi-host slices, its hostname, subdomain and scheduling affinity.
//
// The package is pure: it makes no API calls and decides nothing. The webhook chooses the slice and
// worker ID, then calls Apply. Apply is deterministic and idempotent: applying the same Values
// twice, or to a Pod the API server has since round-tripped, changes nothing more.
package tpuenv

import (
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
)

// hostIPFieldPath is the Pod field the TPU device plugin address is derived from.
const hostIPFieldPath = "status.hostIP"

// Values are what Apply writes into one TPU worker Pod: its claimed place in the slice (group,
// replica, worker ID), the slice's shape and name, its claim token and its slice affinity.
type Values struct {
	// GroupName is the RayCluster worker group name (label ray.io/group).
	GroupName string
	// ReplicaIndex is the slice index inside the group.
	ReplicaIndex int32
	// WorkerID is the host ID in [0, Hosts).
	WorkerID int32
	// Hosts is the number of hosts in the slice; more than 1 means multi-host.
	Hosts int32
	// Subdomain is the headless worker Service name (<cluster>-headless). It becomes the Pod's
	// subdomain and the domain of TPU_WORKER_HOSTNAMES, TPU_PROCESS_ADDRESSES and (multislice)
	// MEGASCALE_COORDINATOR_ADDRESS when multi-host.
	Subdomain string
	// V7x marks Ironwood (tpu7x): per-container worker IDs and process addresses.
	V7x bool
	// SliceName is the TPUSliceAssignment name, written to label tpuv1alpha1.SliceLabel.
	SliceName string
	// Namespace is the namespace of the Pod and its slice (admission may see a Pod without
	// one). A slice's name is unique only in it: the anti-affinity to the slices of every other
	// namespace names it (docs/spec.md §4).
	Namespace string
	// ClaimToken is written to annotation tpuv1alpha1.ClaimTokenAnnotation.
	ClaimToken string

	// Topology are the dimensions of the slice's own topology (topology.Slice.Topology: a
	// subslice's, never its parent's) and ChipsPerHost the google.com/tpu chips of one Pod
	// (topology.Slice.ChipsPerPod). They give TORCH_TPU_TOPOLOGY and
	// TORCH_TPU_SLICEBUILDER_ADDRESSES (torch.go); while either is unset, neither is written.
	Topology     []int32
	ChipsPerHost int64

	// AffinityTopologyKey is the topologyKey of a multi-host slice's required pod affinity and
	// anti-affinity (placement.Decide); "" means cloud.google.com/gke-nodepool. NoAffinity adds
	// neither, for a slice Kueue or GKE's dynamic slicing places (placement.Decide chose no key).
	AffinityTopologyKey string
	NoAffinity          bool
	// Placement is the slice's spec.placement. A multi-host Pod of a ChosenDomain slice gets the
	// scheduling gate tpuv1alpha1.PlacementSchedulingGate and no slice affinity: the reconciler
	// adds a nodeSelector on the chosen domain and removes the gate. Any other placement (""
	// for a slice created before the field existed) gets the slice affinity as above.
	Placement tpuv1alpha1.SlicePlacement
	// HostListsInConfigMap makes a multi-host Pod take the variables of HostListKeys from its
	// slice's ConfigMap (HostListsConfigMap) through valueFrom.configMapKeyRef instead of inline
	// values, so that the Pod's size does not grow with the slice (docs/spec.md §4).
	HostListsInConfigMap bool
	// DNSSearch is the search domain (DNSSearchDomain) under which the bare hostnames of the
	// slice's Pods resolve. Apply adds it to spec.dnsConfig.searches of a Pod whose host lists take
	// the short form (ShortHostNames: the qualified ones would not fit in one environment entry).
	DNSSearch string
}

// multiHost reports whether vals belong to a slice of more than one host.
func (vals Values) multiHost() bool {
	return vals.Hosts > 1
}

// Apply writes vals into pod in place, what docs/spec.md §4 lists; applying it again changes
// nothing. tpuContainers are the indexes of the containers requesting TPUs, in order (a
// container's position numbers it on v7x); other containers are left alone.
//
// In each TPU container the operator-owned variables (TPU_WORKER_ID, TPU_NAME and, multi-host,
// TPU_WORKER_HOSTNAMES) replace any entry of that name; every other variable is added only where
// the container has no entry of that name. On the Pod, Apply sets the slice labels and the
// claim-token annotation and, multi-host, spec.hostname, spec.subdomain and either the
// operator's scheduling gate (a ChosenDomain slice) or the slice affinity, merged with the Pod's
// own (none with vals.NoAffinity).
func Apply(pod *corev1.Pod, vals Values, tpuContainers []int) {
	applyMetadata(pod, vals)
	gated := vals.multiHost() && vals.Placement == tpuv1alpha1.PlacementChosenDomain
	if !gated {
		// The gate's name is the operator's: one the Pod brought (a template that names it)
		// would hold a Pod that no reconciler releases.
		removeGate(pod)
	}
	if vals.multiHost() {
		pod.Spec.Hostname = naming.Hostname(vals.GroupName, vals.ReplicaIndex, vals.WorkerID)
		pod.Spec.Subdomain = vals.Subdomain
		if gated {
			addGate(pod)
		} else {
			mergeAffinity(pod, vals)
		}
	}
	lists := newHostLists(vals, len(tpuContainers))
	if lists.short && vals.DNSSearch != "" {
		addDNSSearch(pod, vals.DNSSearch)
	}
	for c, i := range tpuContainers {
		container := &pod.Spec.Containers[i]
		container.Env = applyEnv(container.Env, lists, c)
	}
}

// hostLists are the values of vals, written into each of n TPU containers, that grow with the
// slice's hosts. Each is built at most once per Apply or Strip and shared by every container
// (a string is immutable), so that the cost is O(hosts), not O(hosts × containers).
type hostLists struct {
	vals Values
	n    int
	// configMap is the name of the ConfigMap the lists are taken from ("" for inline values).
	configMap string
	// short names each host by its bare hostname (ShortHostNames).
	short bool

	hostnames, processAddrs, torchAddrs *string
}

func newHostLists(vals Values, n int) *hostLists {
	l := &hostLists{vals: vals, n: n, short: ShortHostNames(vals, n)}
	if vals.HostListsInConfigMap && vals.multiHost() {
		l.configMap = HostListsConfigMapName(vals, n)
	}
	return l
}

// envVar returns the entry of variable name: a reference to the ConfigMap's key of that name, or
// the value build returns.
func (l *hostLists) envVar(name string, value func() string) corev1.EnvVar {
	if l.configMap != "" {
		return configMapRef(l.configMap, name)
	}
	return corev1.EnvVar{Name: name, Value: value()}
}

// once returns *slot, building it with build the first time.
func once(slot **string, build func() string) string {
	if *slot == nil {
		v := build()
		*slot = &v
	}
	return **slot
}

func (l *hostLists) workerHostnames() string {
	return once(&l.hostnames, func() string {
		if l.short {
			return shortWorkerHostnames(l.vals)
		}
		return WorkerHostnames(l.vals.GroupName, l.vals.ReplicaIndex, l.vals.Hosts, l.vals.Subdomain)
	})
}

func (l *hostLists) processAddresses() string {
	return once(&l.processAddrs, func() string { return processAddresses(l.vals, l.n, l.short) })
}

func (l *hostLists) torchSlicebuilderAddresses() string {
	return once(&l.torchAddrs, func() string { return torchSlicebuilderAddresses(l.vals, l.short) })
}

func applyMetadata(pod *corev1.Pod, vals Values) {
	if pod.Labels == nil {
		pod.Labels = make(map[string]string, 3)
	}
	pod.Labels[constants.ReplicaIndexLabel] = naming.ReplicaIndexValue(vals.GroupName, vals.ReplicaIndex)
	pod.Labels[tpuv1alpha1.SliceLabel] = vals.SliceName
	pod.Labels[tpuv1alpha1.WorkerIDLabel] = itoa(vals.WorkerID)
	if pod.Annotations == nil {
		pod.Annotations = make(map[string]string, 1)
	}
	pod.Annotations[tpuv1alpha1.ClaimTokenAnnotation] = vals.ClaimToken
}

// applyEnv returns env with the variables of TPU container c of lists.n applied.
func applyEnv(env []corev1.EnvVar, lists *hostLists, c int) []corev1.EnvVar {
	vals, n := lists.vals, lists.n
	workerID := int(vals.WorkerID)
	if vals.V7x {
		workerID = workerID*n + c
	}

	// Operator-owned: always ours.
	env = setEnv(env, constants.EnvWorkerID, strconv.Itoa(workerID))
	env = setEnv(env, constants.EnvName, tpuName(vals.GroupName, vals.ReplicaIndex))
	if vals.multiHost() {
		env = setEnvVar(env, lists.envVar(constants.EnvWorkerHostnames, lists.workerHostnames))
	}

	// Defaults: the user's entry wins.
	// v7x runs one libtpu process per TPU container. The processes of a slice find each other by
	// these addresses: across hosts by DNS name, on one host by localhost; a single process alone
	// on its host needs none.
	if processAddressesApply(vals, n) {
		if !hasEnv(env, constants.EnvProcessAddresses) {
			env = append(env, lists.envVar(constants.EnvProcessAddresses, lists.processAddresses))
		}
		env = addEnv(env, constants.EnvProcessPort, strconv.Itoa(constants.ProcessPortBase+c))
	}
	env = addTorchEnv(env, lists)
	if hasEnv(env, constants.EnvMegascaleNumSlices) {
		port := constants.MegascalePortBase
		if vals.V7x {
			port += c
		}
		env = addEnv(env, constants.EnvMegascaleSliceID, itoa(vals.ReplicaIndex))
		if coordinator, ok := megascaleCoordinator(vals); ok {
			env = addEnv(env, constants.EnvMegascaleCoordinator, coordinator)
		}
		env = addEnv(env, constants.EnvMegascalePort, strconv.Itoa(port))
	}
	if !hasEnv(env, constants.EnvDevicePluginHostIP) {
		hostIP := corev1.EnvVar{
			Name: constants.EnvDevicePluginHostIP,
			ValueFrom: &corev1.EnvVarSource{
				// APIVersion as the API server defaults it, so a round-tripped Pod compares equal.
				FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: hostIPFieldPath},
			},
		}
		// Before any TPU_DEVICE_PLUGIN_ADDR: $(VAR) only expands variables defined earlier.
		at := slices.IndexFunc(env, named(constants.EnvDevicePluginAddr))
		if at < 0 {
			at = len(env)
		}
		env = slices.Insert(env, at, hostIP)
	}
	env = addEnv(env, constants.EnvDevicePluginAddr,
		"$("+constants.EnvDevicePluginHostIP+"):"+strconv.Itoa(constants.DevicePluginPort))
	return env
}

// processAddressesApply reports whether Pods of vals with n TPU containers get TPU_PROCESS_ADDRESSES
// and TPU_PROCESS_PORT: v7x, multi-host or with several TPU containers.
func processAddressesApply(vals Values, n int) bool {
	return vals.V7x && (vals.multiHost() || n > 1)
}

// processAddresses returns the TPU_PROCESS_ADDRESSES value of a v7x slice with n TPU containers
// per host: for each host, then each container k, "<hostname>.<subdomain>:<8471+k>"; on a
// single host, whose Pod has no DNS name, "localhost:<8471+k>". In the short form each host is
// its bare hostname (hostAddr).
func processAddresses(vals Values, n int, short bool) string {
	addrs := make([]string, 0, int(vals.Hosts)*n)
	for h := range vals.Hosts {
		host := hostAddr(vals, h, short)
		for k := range n {
			addrs = append(addrs, host+":"+strconv.Itoa(constants.ProcessPortBase+k))
		}
	}
	return strings.Join(addrs, ",")
}

// setEnv sets the operator-owned variable name to value: the first entry of that name is
// replaced in place, any later ones are removed, and without one a new entry is appended.
func setEnv(env []corev1.EnvVar, name, value string) []corev1.EnvVar {
	return setEnvVar(env, corev1.EnvVar{Name: name, Value: value})
}

// setEnvVar is setEnv of the entry want.
func setEnvVar(env []corev1.EnvVar, want corev1.EnvVar) []corev1.EnvVar {
	name := want.Name
	i := slices.IndexFunc(env, named(name))
	if i < 0 {
		return append(env, want)
	}
	env[i] = want
	rest := slices.DeleteFunc(env[i+1:], named(name))
	return env[:i+1+len(rest)]
}

// addEnv appends name=value unless env already has an entry of that name.
func addEnv(env []corev1.EnvVar, name, value string) []corev1.EnvVar {
	if hasEnv(env, name) {
		return env
	}
	return append(env, corev1.EnvVar{Name: name, Value: value})
}

func hasEnv(env []corev1.EnvVar, name string) bool {
	return slices.ContainsFunc(env, named(name))
}

func named(name string) func(corev1.EnvVar) bool {
	return func(e corev1.EnvVar) bool { return e.Name == name }
}
