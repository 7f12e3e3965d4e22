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
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
)

// DefaultHostListsConfigMapAbove is the default HostListsConfigMapAbove of the webhook: slices of
// more hosts than this take their host lists from a ConfigMap (docs/spec.md §4). A v6e-256 (64
// hosts) keeps them inline.
const DefaultHostListsConfigMapAbove = 64

// HostListsInConfigMap reports whether the Pods of a slice of that many hosts take their host lists
// from the slice's ConfigMap when the webhook runs with --host-lists-configmap-above=above: a
// multi-host slice of more than above hosts (0 is DefaultHostListsConfigMapAbove; a negative
// above never).
func HostListsInConfigMap(hosts, above int32) bool {
	if above == 0 {
		above = DefaultHostListsConfigMapAbove
	}
	return above > 0 && hosts > 1 && hosts > above
}

// HostListKeys are the variables a slice's ConfigMap may hold, the ones whose values grow with
// the slice's hosts; each is the ConfigMap key of its own value.
var HostListKeys = []string{constants.EnvWorkerHostnames, constants.EnvProcessAddresses, constants.EnvTorchSlicebuilderAddresses}

// configMapHashLen is the number of hex characters of the hash in a ConfigMap's name.
const configMapHashLen = 10

// HostListsConfigMapName returns the name of the ConfigMap that holds the host lists of the
// slice of vals for Pods of n TPU containers: "<slice>-hosts-<hash>", where the hash covers
// everything the lists are built from (group, replica, hosts, subdomain, v7x, topology, chips per
// host and n). The content is a function of the name: a ConfigMap of that name, once written,
// never needs to change, and a Pod whose values differ gets another name, never a wrong list.
func HostListsConfigMapName(vals Values, n int) string {
	key := fmt.Sprintf("%s\x00%d\x00%d\x00%s\x00%t\x00%v\x00%d\x00%d",
		vals.GroupName, vals.ReplicaIndex, vals.Hosts, vals.Subdomain, vals.V7x, vals.Topology, vals.ChipsPerHost, n)
	sum := sha256.Sum256([]byte(key))
	return vals.SliceName + "-hosts-" + hex.EncodeToString(sum[:])[:configMapHashLen]
}

// HostListsConfigMap returns the immutable ConfigMap, in namespace, that the Pods of n TPU
// containers of the slice of vals read their host lists from when vals.HostListsInConfigMap
// (Apply): its name is HostListsConfigMapName, it is labeled with the slice, and its data hold
// each variable of HostListKeys that Apply would write inline for such a Pod, under its own name.
// The caller sets the owner.
func HostListsConfigMap(namespace string, vals Values, n int) *corev1.ConfigMap {
	inline := vals
	inline.HostListsInConfigMap = false
	lists := newHostLists(inline, n)
	data := make(map[string]string, len(HostListKeys))
	if vals.multiHost() {
		data[constants.EnvWorkerHostnames] = lists.workerHostnames()
	}
	if processAddressesApply(vals, n) {
		data[constants.EnvProcessAddresses] = lists.processAddresses()
	}
	if torchAddressesApply(vals, lists.short) {
		data[constants.EnvTorchSlicebuilderAddresses] = lists.torchSlicebuilderAddresses()
	}
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace,
			Name:      HostListsConfigMapName(vals, n),
			Labels:    map[string]string{tpuv1alpha1.SliceLabel: vals.SliceName},
		},
		Immutable: ptr.To(true),
		Data:      data,
	}
}

// ValuesOf returns the Values whose host lists a Pod of identity id in slice (the Pod's, as
// topology.FromPod reads it) with subdomain carries: what HostListsConfigMap and Strip need.
// Worker ID and slice name come from id; claim token and placement are left unset.
func ValuesOf(id identity.Identity, slice topology.Slice, subdomain string) Values {
	return Values{
		GroupName: id.Group, ReplicaIndex: id.Replica, WorkerID: id.WorkerID, Hosts: id.Hosts,
		Subdomain: subdomain, V7x: topology.IsV7x(slice.Accelerator), SliceName: id.SliceName(),
		Topology: slice.Topology.Dims, ChipsPerHost: slice.ChipsPerPod,
	}
}

// ReferencedHostListsConfigMaps returns the names of the ConfigMaps the TPU containers tpu of pod
// take one of HostListKeys from, in order of first reference, each once.
func ReferencedHostListsConfigMaps(pod *corev1.Pod, tpu []int) []string {
	var names []string
	for _, i := range tpu {
		if i < 0 || i >= len(pod.Spec.Containers) {
			continue
		}
		for _, e := range pod.Spec.Containers[i].Env {
			if !IsHostListsRef(e) {
				continue
			}
			if name := e.ValueFrom.ConfigMapKeyRef.Name; !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	return names
}

// IsHostListsRef reports whether e takes one of HostListKeys from a ConfigMap key of its own name,
// as Apply writes it.
func IsHostListsRef(e corev1.EnvVar) bool {
	return e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil && e.ValueFrom.ConfigMapKeyRef.Key == e.Name &&
		slices.Contains(HostListKeys, e.Name)
}

// configMapRef is the entry that takes variable key from ConfigMap name.
func configMapRef(name, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: key, ValueFrom: &corev1.EnvVarSource{
		ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key},
	}}
}
