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
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
)

func TestDecideMode(t *testing.T) {
	errList := errors.New("cache not synced")
	pool := constants.NodePoolTopologyKey
	cases := map[string]struct {
		in ModeInput
		// known and knownErr are DomainNodeKnown's answer; noNodes passes a nil DomainNodeKnown.
		known    bool
		knownErr error
		noNodes  bool
		// wantAsked says DomainNodeKnown was called.
		wantAsked bool
		want      ModeChoice
		wantErr   error
	}{
		"a default node pool slice with a labeled Node gets a chosen domain": {
			in: ModeInput{Hosts: 4, Key: pool, Source: SourceDefault}, known: true, wantAsked: true,
			want: ModeChoice{Placement: tpuv1alpha1.PlacementChosenDomain},
		},
		"an annotated key with a labeled Node gets a chosen domain": {
			in:    ModeInput{Mode: tpuv1alpha1.PlacementChosenDomain, Hosts: 4, Key: constants.GCETopologyBlockKey, Source: SourceAnnotation},
			known: true, wantAsked: true,
			want: ModeChoice{Placement: tpuv1alpha1.PlacementChosenDomain},
		},
		"a subslice kept on the Nodes' sub-block gets a chosen domain": {
			in:    ModeInput{Hosts: 2, Key: constants.GCETopologySubblockKey, Source: SourceNodes},
			known: true, wantAsked: true,
			want: ModeChoice{Placement: tpuv1alpha1.PlacementChosenDomain},
		},
		"no Node labeled with the key falls back to inter-pod affinity": {
			in: ModeInput{Hosts: 4, Key: pool, Source: SourceDefault}, wantAsked: true,
			want: ModeChoice{Placement: tpuv1alpha1.PlacementInterPodAffinity, Fallback: true},
		},
		"no Nodes known at all falls back to inter-pod affinity": {
			in: ModeInput{Hosts: 4, Key: pool, Source: SourceDefault}, noNodes: true,
			want: ModeChoice{Placement: tpuv1alpha1.PlacementInterPodAffinity, Fallback: true},
		},
		"the InterPodAffinity mode never looks at the Nodes": {
			in:   ModeInput{Mode: tpuv1alpha1.PlacementInterPodAffinity, Hosts: 4, Key: pool, Source: SourceDefault},
			want: ModeChoice{Placement: tpuv1alpha1.PlacementInterPodAffinity},
		},
		"a user's own cloud.google.com term is not placed by the operator": {
			in:   ModeInput{Hosts: 4, Key: pool, Source: SourceUserAffinity},
			want: ModeChoice{},
		},
		"a Kueue slice is not placed by the operator": {
			in:   ModeInput{Hosts: 4, Source: SourceKueue},
			want: ModeChoice{},
		},
		"a single-host slice is not placed by the operator": {
			in:   ModeInput{Hosts: 1, Source: SourceSingleHost},
			want: ModeChoice{},
		},
		"a request without a source (an older replica's) is not placed by the operator": {
			in:   ModeInput{Hosts: 4, Key: pool},
			want: ModeChoice{},
		},
		"a failed Node lookup is an error, not a fallback": {
			in: ModeInput{Hosts: 4, Key: pool, Source: SourceDefault}, knownErr: errList, wantAsked: true,
			wantErr: errList,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			asked := 0
			in := tc.in
			if !tc.noNodes {
				in.DomainNodeKnown = func() (bool, error) {
					asked++
					return tc.known, tc.knownErr
				}
			}

			got, err := DecideMode(in)

			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("DecideMode() error = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(ModeChoice{}, "Reason")); diff != "" {
				t.Errorf("DecideMode() (-want +got):\n%s", diff)
			}
			if err == nil && got.Reason == "" {
				t.Error("DecideMode() gave no reason")
			}
			if wantAsked := map[bool]int{true: 1}[tc.wantAsked]; asked != wantAsked {
				t.Errorf("DomainNodeKnown called %d times, want %d", asked, wantAsked)
			}
		})
	}
}
