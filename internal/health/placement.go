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

package health

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
)

// PlacementKey returns the Node label whose value must be the same on every host of the slice
// (docs/spec.md §11), the first that applies of:
//
//  1. the topologyKey of the affinity the operator gave the slice's Pods (spec.affinityTopologyKey);
//  2. for a slice with no affinity that Kueue places, the topology level Kueue requires for each
//     slice of the Pods' pod set, or for the whole pod set (the annotations
//     kueue.x-k8s.io/podset-slice-required-topology, then podset-required-topology, on the
//     claimed Pods, lowest worker ID first): Kueue puts every host inside one such domain;
//  3. for a GKE dynamic slice (the Pods carry cloud.google.com/gke-tpu-slice-topology and select
//     no cloud.google.com/gke-tpu-topology), cloud.google.com/gce-topology-block: dynamic slicing
//     stitches sub-blocks, each its own node pool, into one slice, so the node pool would report a
//     split that is none;
//  4. cloud.google.com/gke-nodepool: a multi-host TPU node pool is one slice by GKE's construction,
//     and it is the key slices created before the operator recorded one were given.
//
// pods are the slice's claimed Pods by worker ID (nil for none).
func PlacementKey(s *tpuv1alpha1.TPUSliceAssignment, pods []*corev1.Pod) string {
	if s.Spec.AffinityTopologyKey != "" {
		return s.Spec.AffinityTopologyKey
	}
	for _, annotation := range []string{constants.KueuePodSetSliceRequiredTopologyAnnotation, constants.KueuePodSetRequiredTopologyAnnotation} {
		for _, p := range pods {
			if p == nil {
				continue
			}
			if v := strings.TrimSpace(p.Annotations[annotation]); v != "" {
				return v
			}
		}
	}
	for _, p := range pods {
		if p == nil {
			continue
		}
		_, subslice := p.Annotations[constants.SliceTopologyAnnotation]
		_, pool := p.Spec.NodeSelector[constants.TopologyNodeSelectorKey]
		if subslice && !pool {
			return constants.GCETopologyBlockKey
		}
		break // one Pod decides: every Pod of a slice comes from one template
	}
	return constants.NodePoolTopologyKey
}

// maxDomainsNamed bounds the domains a Placed message names.
const maxDomainsNamed = 6

// placedCondition: True when every scheduled host has the same value of key, False when they
// differ or a host's node has none, Unknown while no host is scheduled.
func placedCondition(s *tpuv1alpha1.TPUSliceAssignment, hosts []host, key string) metav1.Condition {
	cond := metav1.Condition{Type: tpuv1alpha1.ConditionPlaced, ObservedGeneration: s.Generation}
	var order []string
	byDomain := map[string][]int32{}
	scheduled := 0
	for i := range hosts {
		if !hosts[i].scheduled {
			continue
		}
		scheduled++
		d := hosts[i].fact.Domain
		if _, ok := byDomain[d]; !ok {
			order = append(order, d)
		}
		byDomain[d] = append(byDomain[d], hosts[i].id)
	}
	_, unknown := byDomain[tpuv1alpha1.NoDomain]
	known := len(order)
	if unknown {
		known--
	}
	switch {
	case scheduled == 0:
		cond.Status, cond.Reason = metav1.ConditionUnknown, tpuv1alpha1.ReasonNoHostScheduled
		cond.Message = fmt.Sprintf("no host is bound to a node yet (placement key %s)", key)
		return cond
	case known == 1 && !unknown:
		cond.Status, cond.Reason = metav1.ConditionTrue, tpuv1alpha1.ReasonOneDomain
		if scheduled == len(hosts) {
			cond.Message = fmt.Sprintf("all %d hosts on %s=%s", scheduled, key, order[0])
		} else {
			cond.Message = fmt.Sprintf("the %d scheduled hosts of %d on %s=%s", scheduled, len(hosts), key, order[0])
		}
		return cond
	case known > 1:
		cond.Reason = tpuv1alpha1.ReasonSplitDomains
	default:
		cond.Reason = tpuv1alpha1.ReasonDomainUnknown
	}
	cond.Status = metav1.ConditionFalse
	parts := make([]string, 0, min(len(order), maxDomainsNamed))
	for _, d := range order[:min(len(order), maxDomainsNamed)] {
		where := "on " + d
		if d == tpuv1alpha1.NoDomain {
			where = "on nodes without " + key
		}
		parts = append(parts, Ranges(byDomain[d])+" "+where)
	}
	more := ""
	if n := len(order) - len(parts); n > 0 {
		more = fmt.Sprintf(" and %d more domains", n)
	}
	cond.Message = fmt.Sprintf("hosts %s%s (placement key %s)", strings.Join(parts, ", "), more, key)
	return cond
}
