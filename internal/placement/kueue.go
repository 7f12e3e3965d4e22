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

package placement

import (
	"fmt"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
)

// Object is the metadata of one object the Kueue and dynamic-slicing signals are read from: a
// RayCluster, a worker group's Pod template, or a Pod.
type Object struct {
	// Kind names the object in messages, such as "RayCluster" or "Pod template".
	Kind        string
	Labels      map[string]string
	Annotations map[string]string
}

// Signal is a label or annotation saying that Kueue or GKE's dynamic slicing places a slice.
// The zero Signal is no signal.
type Signal struct {
	// Kind is the Object.Kind it was found on.
	Kind string
	// Label is true for a label, false for an annotation.
	Label bool
	// Key and Value are the label's or annotation's.
	Key, Value string
}

// Found reports whether s is a signal.
func (s Signal) Found() bool {
	return s.Key != ""
}

// String describes the signal, such as `label kueue.x-k8s.io/queue-name=lq on the RayCluster`.
func (s Signal) String() string {
	if !s.Found() {
		return "no Kueue or dynamic slicing signal"
	}
	what := "annotation"
	if s.Label {
		what = "label"
	}
	return fmt.Sprintf("%s %s=%s on the %s", what, s.Key, s.Value, s.Kind)
}

// kueueTopologyAnnotations are the annotations by which Kueue's topology-aware scheduling is
// asked to choose the domain of a PodSet's Pods (any non-empty value).
var kueueTopologyAnnotations = [...]string{
	constants.KueuePodSetRequiredTopologyAnnotation,
	constants.KueuePodSetPreferredTopologyAnnotation,
	constants.KueuePodSetSliceRequiredTopologyAnnotation,
	constants.KueuePodSetSliceRequiredTopologyConstraintsAnnotation,
}

// Managed returns the first sign, in objs in order, that Kueue or GKE's dynamic slicing (Kueue with
// GKE's slice controller) places the slice, or the zero Signal. Per object it looks, in this
// order, for:
//
//  1. a non-empty label kueue.x-k8s.io/queue-name: the workload is queued by Kueue, which
//     admits it and, with a topology-aware flavor or dynamic slicing, chooses its nodes;
//  2. a non-empty Kueue topology annotation (podset-required-topology, -preferred-topology,
//     -slice-required-topology, -slice-required-topology-constraints): Kueue chooses the domain;
//  3. annotation cloud.google.com/skip-tpu-webhook-check set to "true": the user says so.
//
// Callers pass the RayCluster too (docs/design.md, "Kueue and dynamic slicing" says why).
func Managed(objs ...Object) Signal {
	for _, o := range objs {
		if v := o.Labels[constants.KueueQueueNameLabel]; v != "" {
			return Signal{Kind: o.Kind, Label: true, Key: constants.KueueQueueNameLabel, Value: v}
		}
		for _, k := range kueueTopologyAnnotations {
			if v := o.Annotations[k]; v != "" {
				return Signal{Kind: o.Kind, Key: k, Value: v}
			}
		}
		if v := o.Annotations[constants.SkipTPUWebhookCheckAnnotation]; v == "true" {
			return Signal{Kind: o.Kind, Key: constants.SkipTPUWebhookCheckAnnotation, Value: v}
		}
	}
	return Signal{}
}
