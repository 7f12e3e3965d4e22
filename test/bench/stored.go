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

package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
)

// storedBytes is what one slice takes in etcd: the protobuf size of its Pods and of the ConfigMaps
// labeled with its name, as read back from the API server. The API server stores built-in types
// as protobuf, so an object's Size() is its size in etcd but for a few bytes of envelope.
type storedBytes struct {
	pods, podBytes             int
	configMaps, configMapBytes int
}

// sumStored adds up the stored size of pods and configMaps.
func sumStored(pods []corev1.Pod, configMaps []corev1.ConfigMap) storedBytes {
	s := storedBytes{pods: len(pods), configMaps: len(configMaps)}
	for i := range pods {
		s.podBytes += pods[i].Size()
	}
	for i := range configMaps {
		s.configMapBytes += configMaps[i].Size()
	}
	return s
}

// plus is s and o together.
func (s storedBytes) plus(o storedBytes) storedBytes {
	return storedBytes{
		pods: s.pods + o.pods, podBytes: s.podBytes + o.podBytes,
		configMaps: s.configMaps + o.configMaps, configMapBytes: s.configMapBytes + o.configMapBytes,
	}
}

// perPod is the slice's stored bytes, Pods and ConfigMaps together, divided by its Pods.
func (s storedBytes) perPod() int {
	if s.pods == 0 {
		return 0
	}
	return (s.podBytes + s.configMapBytes) / s.pods
}

// fields returns the BENCH fields of s, each name after prefix: stored_pod_bytes,
// stored_configmap_bytes and stored_bytes_per_pod.
func (s storedBytes) fields(prefix string) string {
	return fmt.Sprintf("%[1]sstored_pod_bytes=%[2]d %[1]sstored_configmap_bytes=%[3]d %[1]sstored_bytes_per_pod=%[4]d",
		prefix, s.podBytes, s.configMapBytes, s.perPod())
}

// storedPageSize is how many Pods sliceStored reads per list call: Pods of a big slice are up to
// 150 KiB each.
const storedPageSize = 100

// sliceStored reads, from the API server (not a cache), the Pods and the ConfigMaps in namespace
// labeled tpu.ray.io/slice=slice and returns their stored size.
func (b *bench) sliceStored(ctx context.Context, namespace, slice string) (storedBytes, error) {
	opts := []client.ListOption{client.InNamespace(namespace), client.MatchingLabels{tpuv1alpha1.SliceLabel: slice}}
	var s storedBytes
	cont := ""
	for {
		var pods corev1.PodList
		if err := b.c.List(ctx, &pods, append(opts, client.Limit(storedPageSize), client.Continue(cont))...); err != nil {
			return s, fmt.Errorf("listing the Pods of slice %s/%s: %w", namespace, slice, err)
		}
		s = s.plus(sumStored(pods.Items, nil))
		if cont = pods.Continue; cont == "" {
			break
		}
	}
	var configMaps corev1.ConfigMapList
	if err := b.c.List(ctx, &configMaps, opts...); err != nil {
		return s, fmt.Errorf("listing the ConfigMaps of slice %s/%s: %w", namespace, slice, err)
	}
	return s.plus(sumStored(nil, configMaps.Items)), nil
}
