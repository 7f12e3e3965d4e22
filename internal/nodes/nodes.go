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

// Package nodes is the operator's view of the TPU Nodes: a cache limited to the Nodes GKE labels
// with cloud.google.com/gke-tpu-accelerator and trimmed to what the operator reads (name, labels,
// unschedulable, taints, the Ready condition and allocatable resources), shared by the Pod webhook
// (which GCE topology domain a subslice's affinity names), the RayCluster webhook (its warnings)
// and the reconciler (slice health, the placement step). The operator never writes Nodes.
package nodes

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/placement"
)

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch

// CacheOptions limits the manager's Node cache to TPU Nodes, trimmed by Trim.
func CacheOptions() cache.ByObject {
	r, err := labels.NewRequirement(constants.AcceleratorNodeSelectorKey, selection.Exists, nil)
	utilruntime.Must(err)
	return cache.ByObject{Label: labels.NewSelector().Add(*r), Transform: Trim}
}

// Trim keeps of a Node its name, labels, unschedulable flag, taints, Ready condition and
// allocatable resources (what the placement step checks a Pod's requests against, as
// kube-scheduler does: placement.CandidateFromNode).
func Trim(obj any) (any, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{
		TypeMeta: node.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: node.Name, UID: node.UID, ResourceVersion: node.ResourceVersion,
			Labels: node.Labels, DeletionTimestamp: node.DeletionTimestamp,
		},
		Spec: corev1.NodeSpec{Unschedulable: node.Spec.Unschedulable, Taints: node.Spec.Taints},
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Status.Conditions = []corev1.NodeCondition{c}
		}
	}
	out.Status.Allocatable = node.Status.Allocatable
	return out, nil
}

// Lister lists TPU Nodes from a reader, normally the manager's cache.
type Lister struct {
	Reader client.Reader
}

var _ placement.NodeLister = Lister{}

// ListNodes returns the TPU Nodes whose labels hold every key and value of selector.
func (l Lister) ListNodes(ctx context.Context, selector map[string]string) ([]placement.Node, error) {
	var list corev1.NodeList
	if err := l.Reader.List(ctx, &list, client.MatchingLabels(selector)); err != nil {
		return nil, fmt.Errorf("listing TPU Nodes: %w", err)
	}
	out := make([]placement.Node, 0, len(list.Items))
	for i := range list.Items {
		if _, tpu := list.Items[i].Labels[constants.AcceleratorNodeSelectorKey]; tpu {
			out = append(out, placement.Node{Name: list.Items[i].Name, Labels: list.Items[i].Labels})
		}
	}
	return out, nil
}
