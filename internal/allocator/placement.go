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

package allocator

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/placement"
)

// slicePlacement decides spec.placement of the slice req's claim creates (placement.DecideMode).
// It is called only for a slice being created (or, by a dry run, one that would be), so the
// Nodes are looked at once per slice, not once per Pod.
func (a *Allocator) slicePlacement(ctx context.Context, req Request) (placement.ModeChoice, error) {
	return placement.DecideMode(placement.ModeInput{
		Mode: req.Placement.Mode, Hosts: req.Hosts, Key: req.AffinityTopologyKey, Source: req.Placement.Source,
		DomainNodeKnown: func() (bool, error) {
			return a.domainNodeKnown(ctx, req.Placement.NodeSelector, req.AffinityTopologyKey)
		},
	})
}

// domainNodeKnown reports whether the cache holds a TPU Node that matches selector and has a
// value of key. The cache stops at the first match (Limit 1) and copies nothing: its objects are
// only counted here, never kept or changed.
func (a *Allocator) domainNodeKnown(ctx context.Context, selector map[string]string, key string) (bool, error) {
	sel := labels.SelectorFromSet(selector)
	for _, k := range []string{constants.AcceleratorNodeSelectorKey, key} {
		r, err := labels.NewRequirement(k, selection.Exists, nil)
		if err != nil {
			return false, fmt.Errorf("label key %q: %w", k, err)
		}
		sel = sel.Add(*r)
	}
	var nodes corev1.NodeList
	if err := a.client.List(ctx, &nodes, client.MatchingLabelsSelector{Selector: sel}, client.Limit(1), client.UnsafeDisableDeepCopy); err != nil {
		return false, fmt.Errorf("listing TPU Nodes: %w", err)
	}
	return len(nodes.Items) > 0, nil
}

// logPlacement logs the placement of a slice being created; a fallback to inter-pod affinity is
// logged at the default level, with its reason (the reconciler records the Warning Event).
func logPlacement(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment, choice placement.ModeChoice) {
	log := logf.FromContext(ctx).WithValues("slice", slice.Name, "namespace", slice.Namespace,
		"placement", choice.Placement, "affinityTopologyKey", slice.Spec.AffinityTopologyKey)
	if choice.Fallback {
		log.Info("Slice placed by inter-pod affinity instead of a chosen domain", "reason", choice.Reason)
		return
	}
	log.V(1).Info("Slice placement decided", "reason", choice.Reason)
}
