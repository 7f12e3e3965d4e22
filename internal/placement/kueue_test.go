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
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
)

func TestManaged(t *testing.T) {
	queued := map[string]string{constants.KueueQueueNameLabel: "lq"}
	cases := map[string]struct {
		objs       []Object
		want       Signal
		wantString string
	}{
		"the guide's dynamic slicing: the queue label on the RayCluster only": {
			objs: []Object{
				{Kind: "RayCluster", Labels: queued},
				{Kind: "Pod template", Annotations: map[string]string{constants.SliceTopologyAnnotation: "4x12x16"}},
			},
			want:       Signal{Kind: "RayCluster", Label: true, Key: constants.KueueQueueNameLabel, Value: "lq"},
			wantString: "label kueue.x-k8s.io/queue-name=lq on the RayCluster",
		},
		"the queue label on the Pod template": {
			objs:       []Object{{Kind: "RayCluster"}, {Kind: "Pod template", Labels: queued}},
			want:       Signal{Kind: "Pod template", Label: true, Key: constants.KueueQueueNameLabel, Value: "lq"},
			wantString: "label kueue.x-k8s.io/queue-name=lq on the Pod template",
		},
		"an empty queue label is no signal": {
			objs: []Object{{Kind: "RayCluster", Labels: map[string]string{constants.KueueQueueNameLabel: ""}}},
		},
		"the queue name as an annotation is no signal": {
			objs: []Object{{Kind: "Pod", Annotations: queued}},
		},
		"Kueue's required topology annotation": {
			objs: []Object{{Kind: "Pod", Annotations: map[string]string{
				constants.KueuePodSetRequiredTopologyAnnotation: constants.GCETopologyBlockKey,
			}}},
			want:       Signal{Kind: "Pod", Key: constants.KueuePodSetRequiredTopologyAnnotation, Value: constants.GCETopologyBlockKey},
			wantString: "annotation kueue.x-k8s.io/podset-required-topology=cloud.google.com/gce-topology-block on the Pod",
		},
		"Kueue's preferred topology annotation": {
			objs: []Object{{Kind: "Pod", Annotations: map[string]string{constants.KueuePodSetPreferredTopologyAnnotation: "x"}}},
			want: Signal{Kind: "Pod", Key: constants.KueuePodSetPreferredTopologyAnnotation, Value: "x"},
		},
		"Kueue's slice required topology annotation": {
			objs: []Object{{Kind: "Pod", Annotations: map[string]string{constants.KueuePodSetSliceRequiredTopologyAnnotation: "x"}}},
			want: Signal{Kind: "Pod", Key: constants.KueuePodSetSliceRequiredTopologyAnnotation, Value: "x"},
		},
		"Kueue's slice topology constraints annotation": {
			objs: []Object{{Kind: "Pod", Annotations: map[string]string{constants.KueuePodSetSliceRequiredTopologyConstraintsAnnotation: "x"}}},
			want: Signal{Kind: "Pod", Key: constants.KueuePodSetSliceRequiredTopologyConstraintsAnnotation, Value: "x"},
		},
		"an empty Kueue topology annotation is no signal": {
			objs: []Object{{Kind: "Pod", Annotations: map[string]string{constants.KueuePodSetRequiredTopologyAnnotation: ""}}},
		},
		"the skip annotation set to true": {
			objs:       []Object{{Kind: "Pod template", Annotations: map[string]string{constants.SkipTPUWebhookCheckAnnotation: "true"}}},
			want:       Signal{Kind: "Pod template", Key: constants.SkipTPUWebhookCheckAnnotation, Value: "true"},
			wantString: "annotation cloud.google.com/skip-tpu-webhook-check=true on the Pod template",
		},
		"the skip annotation set to anything else is no signal": {
			objs: []Object{{Kind: "Pod", Annotations: map[string]string{constants.SkipTPUWebhookCheckAnnotation: "True"}}},
		},
		"the first object with a signal wins": {
			objs: []Object{
				{Kind: "RayCluster", Annotations: map[string]string{constants.SkipTPUWebhookCheckAnnotation: "true"}},
				{Kind: "Pod", Labels: queued},
			},
			want: Signal{Kind: "RayCluster", Key: constants.SkipTPUWebhookCheckAnnotation, Value: "true"},
		},
		"within an object the queue label comes first": {
			objs: []Object{{Kind: "Pod", Labels: queued, Annotations: map[string]string{constants.KueuePodSetRequiredTopologyAnnotation: "x"}}},
			want: Signal{Kind: "Pod", Label: true, Key: constants.KueueQueueNameLabel, Value: "lq"},
		},
		"a subslice annotation alone is no signal": {
			objs:       []Object{{Kind: "Pod", Annotations: map[string]string{constants.SliceTopologyAnnotation: "2x4"}}},
			wantString: "no Kueue or dynamic slicing signal",
		},
		"no objects, no signal": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Managed(tc.objs...)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Managed() (-want,+got):\n%s", diff)
			}
			if got.Found() != (tc.want != Signal{}) {
				t.Errorf("Found() = %t", got.Found())
			}
			if tc.wantString != "" && got.String() != tc.wantString {
				t.Errorf("String() = %q, want %q", got.String(), tc.wantString)
			}
		})
	}
}
