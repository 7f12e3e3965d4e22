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

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
)

// DefaultMode is the --slice-placement default: the operator chooses a slice's domain.
const DefaultMode = tpuv1alpha1.PlacementChosenDomain

// ValidMode reports whether mode is a value of --slice-placement.
func ValidMode(mode tpuv1alpha1.SlicePlacement) bool {
	return mode == tpuv1alpha1.PlacementChosenDomain || mode == tpuv1alpha1.PlacementInterPodAffinity
}

// OperatorPlaces reports whether the operator places a slice whose affinity key source chose:
// the Pod's annotation, the Nodes or the default node pool. A single-host slice, Kueue or
// dynamic slicing, and a user's own cloud.google.com/ term are placed by others.
func OperatorPlaces(source Source) bool {
	return source == SourceAnnotation || source == SourceNodes || source == SourceDefault
}

// ModeInput is what DecideMode reads about the slice being created.
type ModeInput struct {
	// Mode is --slice-placement; "" is DefaultMode.
	Mode tpuv1alpha1.SlicePlacement
	// Hosts, Key and Source are the slice's host count and the affinity key Decide chose for its
	// first Pod, with the rule that chose it.
	Hosts  int32
	Key    string
	Source Source
	// DomainNodeKnown reports whether some TPU Node matching the Pod's nodeSelector has a value
	// of Key. DecideMode calls it at most once, and only when its answer decides; nil is no Node
	// known.
	DomainNodeKnown func() (bool, error)
}

// ModeChoice is the placement DecideMode chose, and why.
type ModeChoice struct {
	// Placement is the slice's spec.placement; "" for a slice the operator does not place.
	Placement tpuv1alpha1.SlicePlacement
	// Fallback is true when the mode asked for ChosenDomain but no Node could carry the choice,
	// so the slice is placed with inter-pod affinity (a Warning for the reconciler to record).
	Fallback bool
	// Reason is a short sentence saying why, for logs and Events.
	Reason string
}

// DecideMode chooses spec.placement for a slice, once, when its first claim creates it
// (docs/spec.md §4):
//
//  1. a slice the operator does not place (single-host, no key, or a key that Kueue, dynamic
//     slicing or the user's own term decided; see OperatorPlaces): "";
//  2. --slice-placement=InterPodAffinity: InterPodAffinity;
//  3. ChosenDomain when a TPU Node matching the Pod's nodeSelector has a value of the key;
//  4. otherwise InterPodAffinity, a fallback: with no such Node the reconciler has no domain to
//     choose, and the scheduler places the slice with today's terms.
//
// An error of in.DomainNodeKnown is returned wrapped: the caller denies the Pod as transient.
func DecideMode(in ModeInput) (ModeChoice, error) {
	if in.Hosts <= 1 || in.Key == "" || !OperatorPlaces(in.Source) {
		return ModeChoice{Reason: fmt.Sprintf("the operator does not place the slice (affinity key %q, %s)", in.Key, in.Source)}, nil
	}
	if in.Mode == tpuv1alpha1.PlacementInterPodAffinity {
		return ModeChoice{Placement: tpuv1alpha1.PlacementInterPodAffinity, Reason: "--slice-placement=InterPodAffinity"}, nil
	}
	if in.DomainNodeKnown == nil {
		return ModeChoice{Placement: tpuv1alpha1.PlacementInterPodAffinity, Fallback: true,
			Reason: "no TPU Nodes are known, so no domain of " + in.Key + " can be chosen"}, nil
	}
	known, err := in.DomainNodeKnown()
	if err != nil {
		return ModeChoice{}, fmt.Errorf("looking for a TPU Node labeled %s: %w", in.Key, err)
	}
	if !known {
		return ModeChoice{Placement: tpuv1alpha1.PlacementInterPodAffinity, Fallback: true,
			Reason: "no TPU Node matching the Pod's nodeSelector has label " + in.Key + ", so no domain can be chosen"}, nil
	}
	return ModeChoice{Placement: tpuv1alpha1.PlacementChosenDomain,
		Reason: "a TPU Node matching the Pod's nodeSelector has label " + in.Key}, nil
}
