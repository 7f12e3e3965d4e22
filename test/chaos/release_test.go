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

package chaos

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/gate"
)

// TestReleaseOf: the release check (release.go) recognizes every patch gate.ReleasePatch makes,
// and nothing else, so that the chaos run cannot judge no release without noticing.
func TestReleaseOf(t *testing.T) {
	gated := func(selector map[string]string, gates ...string) *corev1.Pod {
		p := &corev1.Pod{}
		p.Name, p.UID = "w", "uid-1"
		p.Spec.NodeSelector = selector
		for _, g := range append([]string{tpuv1alpha1.PlacementSchedulingGate}, gates...) {
			p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: g})
		}
		return p
	}
	const key, domain = constants.NodePoolTopologyKey, "pool-a"
	withAffinity := func(p *corev1.Pod, a *corev1.Affinity) *corev1.Pod {
		p.Spec.Affinity = a
		return p
	}
	for name, pod := range map[string]*corev1.Pod{
		"no nodeSelector":         gated(nil),
		"a nodeSelector":          gated(map[string]string{"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"}),
		"another gate stays":      gated(nil, "example.com/other"),
		"selector and other gate": gated(map[string]string{"a/b~c": "x"}, "example.com/other"),
		"pod anti-affinity":       withAffinity(gated(nil), &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{}}),
		"preferred node affinity": withAffinity(gated(nil), &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}}),
		"required, no term":       withAffinity(gated(nil), &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{}}}),
	} {
		for _, node := range []string{"", "pool-a-3"} {
			body, err := gate.ReleasePatch(pod, key, domain, node)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			gotKey, gotDomain, gotNode, ok := releaseOf(body)
			if !ok || gotKey != key || gotDomain != domain || gotNode != node {
				t.Errorf("%s: releaseOf(%s) = %q, %q, %q, %v; want %q, %q, %q, true", name, body, gotKey, gotDomain, gotNode, ok, key, domain, node)
			}
		}
	}
	for _, body := range []string{
		`[{"op":"add","path":"/metadata/labels/x","value":"y"}]`,
		`[{"op":"add","path":"/spec/nodeSelector","value":{"k":"v"}}]`,
		`[{"op":"remove","path":"/spec/schedulingGates"}]`,
		`{"metadata":{"labels":{"x":"y"}}}`,
	} {
		if _, _, _, ok := releaseOf([]byte(body)); ok {
			t.Errorf("releaseOf(%s) = true, want false: not a release", body)
		}
	}
}
