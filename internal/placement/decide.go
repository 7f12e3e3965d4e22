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
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
)

// ErrInvalidTopologyKey means the ray.io/tpu-affinity-topology-key annotation is not a label key,
// so no Pod could carry it as a topologyKey.
var ErrInvalidTopologyKey = errors.New("invalid affinity topology key")

// Source says which rule of Decide chose a KeyChoice.
type Source int

const (
	// SourceSingleHost is a single-host slice, which needs no affinity.
	SourceSingleHost Source = iota + 1
	// SourceUserAffinity is a required pod affinity term of the Pod with a cloud.google.com/ key.
	SourceUserAffinity
	// SourceAnnotation is the Pod's ray.io/tpu-affinity-topology-key annotation.
	SourceAnnotation
	// SourceKueue is Kueue or GKE's dynamic slicing placing the slice: no affinity.
	SourceKueue
	// SourceNodes is the smallest GCE topology domain holding exactly the slice's hosts.
	SourceNodes
	// SourceDefault is cloud.google.com/gke-nodepool: a TPU node pool is one slice.
	SourceDefault
)

// String returns a short name of the source, for logs and metrics.
func (s Source) String() string {
	switch s {
	case SourceSingleHost:
		return "single-host"
	case SourceUserAffinity:
		return "user-affinity"
	case SourceAnnotation:
		return "annotation"
	case SourceKueue:
		return "kueue"
	case SourceNodes:
		return "nodes"
	case SourceDefault:
		return "default"
	default:
		return "unknown"
	}
}

// KeyChoice is the topologyKey Decide chose for a slice's affinity, with the rule that chose it.
type KeyChoice struct {
	// Key is the topologyKey of the slice's required pod affinity and anti-affinity; "" means the
	// operator adds no slice affinity at all.
	Key string
	// Source is the rule that decided.
	Source Source
	// Reason is a short sentence saying why, for logs and Events.
	Reason string
	// Nodes is what the Nodes said when Decide consulted them (a subslice that no earlier rule
	// decided, SourceNodes or SourceDefault), else nil.
	Nodes *Fit
}

// Input is what Decide reads about one Pod.
type Input struct {
	// Pod is the Pod being admitted; its annotations, nodeSelector and affinity are read.
	Pod *corev1.Pod
	// Slice is the Pod's slice (topology.FromPod).
	Slice topology.Slice
	// Managed is the Kueue or dynamic-slicing signal of the Pod and its RayCluster (Managed),
	// the zero Signal when there is none.
	Managed Signal
	// Nodes returns the TPU Nodes. Decide calls it at most once, and only for a subslice (an
	// annotated slice) whose key no rule before the Nodes chose. A nil Nodes is no Nodes known.
	Nodes func() ([]Node, error)
}

// Decide chooses the topologyKey of the slice affinity of in.Pod; the first rule that applies wins
// (docs/spec.md §4; why, docs/design.md "Slice affinity"):
//
//  1. a single-host slice: no affinity (Key "");
//  2. the Pod's first required pod affinity term on a cloud.google.com/ key, not on label
//     tpu.ray.io/slice (this operator's);
//  3. the Pod's annotation ray.io/tpu-affinity-topology-key, trimmed; a value that is not a label
//     key is an error wrapping ErrInvalidTopologyKey;
//  4. a Kueue or dynamic-slicing signal (in.Managed): no affinity;
//  5. for a subslice only, the key FindFit finds among the Nodes (in.Nodes, called at most once);
//  6. cloud.google.com/gke-nodepool, also when no Node matches or no level fits.
//
// An error of in.Nodes is returned wrapped: the caller denies the Pod as transient.
func Decide(in Input) (KeyChoice, error) {
	if in.Slice.Hosts <= 1 {
		return KeyChoice{Source: SourceSingleHost, Reason: "single-host slice: no slice affinity"}, nil
	}
	if key, ok := userAffinityKey(in.Pod); ok {
		return KeyChoice{Key: key, Source: SourceUserAffinity,
			Reason: "the Pod's own required pod affinity uses topologyKey " + key}, nil
	}
	if key, ok, err := AnnotatedKey(podAnnotations(in.Pod)); err != nil {
		return KeyChoice{}, err
	} else if ok {
		return KeyChoice{Key: key, Source: SourceAnnotation,
			Reason: "annotation " + constants.AffinityTopologyKeyAnnotation}, nil
	}
	if in.Managed.Found() {
		return KeyChoice{Source: SourceKueue,
			Reason: fmt.Sprintf("Kueue or GKE dynamic slicing places the slice (%s): no slice affinity", in.Managed)}, nil
	}
	def := KeyChoice{Key: constants.NodePoolTopologyKey, Source: SourceDefault, Reason: "a TPU node pool is one slice"}
	if !in.Slice.Annotated || in.Nodes == nil {
		return def, nil
	}
	nodes, err := in.Nodes()
	if err != nil {
		return KeyChoice{}, fmt.Errorf("listing the TPU Nodes for the subslice's affinity: %w", err)
	}
	selector := podNodeSelector(in.Pod)
	fit := FindFit(nodes, selector, in.Slice.Hosts)
	def.Nodes = &fit
	switch {
	case fit.Key != "":
		return KeyChoice{Key: fit.Key, Source: SourceNodes, Nodes: &fit,
			Reason: fmt.Sprintf("a %s domain holds exactly %d of the %d Nodes matching the nodeSelector", fit.Key, in.Slice.Hosts, fit.Matching)}, nil
	case fit.Matching == 0:
		def.Reason = "no Node matches the nodeSelector yet, so the subslice is kept on one node pool"
	case fit.Labeled == 0:
		def.Reason = fmt.Sprintf("none of the %d Nodes matching the nodeSelector has a GCE topology label, so the subslice is kept on one node pool", fit.Matching)
	default:
		def.Reason = fmt.Sprintf("no GCE topology domain holds exactly %d of the %d Nodes matching the nodeSelector, so the subslice is kept on one node pool",
			in.Slice.Hosts, fit.Matching)
	}
	return def, nil
}

// AnnotatedKey returns the trimmed value of the ray.io/tpu-affinity-topology-key annotation, and
// ok=false when it is absent or blank. A value that is not a label key (a qualified name with an
// optional DNS prefix) is an error wrapping ErrInvalidTopologyKey that says why.
func AnnotatedKey(annotations map[string]string) (key string, ok bool, err error) {
	key = strings.TrimSpace(annotations[constants.AffinityTopologyKeyAnnotation])
	if key == "" {
		return "", false, nil
	}
	if problems := ValidateTopologyKey(key); len(problems) > 0 {
		return "", false, fmt.Errorf("%w: annotation %s is %q, which is not a label key: %s",
			ErrInvalidTopologyKey, constants.AffinityTopologyKeyAnnotation, key, strings.Join(problems, "; "))
	}
	return key, true, nil
}

// ValidateTopologyKey returns the problems of key as the topologyKey of a pod affinity term, which
// must be a label key (a qualified name with an optional DNS prefix). A blank key is no key and
// has none: the annotation is then ignored.
func ValidateTopologyKey(key string) []string {
	if key == "" {
		return nil
	}
	return validation.IsQualifiedName(key)
}

// userAffinityKey returns the topologyKey of the first required pod affinity term of pod that
// starts with cloud.google.com/, skipping this operator's own slice terms.
func userAffinityKey(pod *corev1.Pod) (string, bool) {
	if pod == nil || pod.Spec.Affinity == nil || pod.Spec.Affinity.PodAffinity == nil {
		return "", false
	}
	for _, term := range pod.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if strings.HasPrefix(term.TopologyKey, constants.GKELabelPrefix) && !isSliceTerm(term) {
			return term.TopologyKey, true
		}
	}
	return "", false
}

// isSliceTerm reports whether term selects on the operator's slice label, as the terms of
// tpuenv do: it is not the user's.
func isSliceTerm(term corev1.PodAffinityTerm) bool {
	if term.LabelSelector == nil {
		return false
	}
	if _, ok := term.LabelSelector.MatchLabels[tpuv1alpha1.SliceLabel]; ok {
		return true
	}
	for _, r := range term.LabelSelector.MatchExpressions {
		if r.Key == tpuv1alpha1.SliceLabel {
			return true
		}
	}
	return false
}

func podAnnotations(pod *corev1.Pod) map[string]string {
	if pod == nil {
		return nil
	}
	return pod.Annotations
}

func podNodeSelector(pod *corev1.Pod) map[string]string {
	if pod == nil {
		return nil
	}
	return pod.Spec.NodeSelector
}
