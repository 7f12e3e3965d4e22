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

package webhooks

import (
	"os"
	"testing"

	"github.com/google/cel-go/cel"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"

	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// selectorsPatch holds the webhooks' matchConditions (config/webhook).
const selectorsPatch = "../config/webhook/webhook_selectors_patch.yaml"

// rayClusterMatchConditions returns the RayCluster webhook's matchConditions, compiled.
func rayClusterMatchConditions(t *testing.T) map[string]cel.Program {
	t.Helper()
	f, err := os.Open(selectorsPatch)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType), cel.Variable("request", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]cel.Program{}
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var cfg admissionregistrationv1.ValidatingWebhookConfiguration
		if err := dec.Decode(&cfg); err != nil {
			break
		}
		if cfg.Kind != "ValidatingWebhookConfiguration" {
			continue
		}
		for _, w := range cfg.Webhooks {
			if w.Name != "vraycluster.tpu.ray.io" {
				continue
			}
			for _, c := range w.MatchConditions {
				ast, iss := env.Compile(c.Expression)
				if iss.Err() != nil {
					t.Fatalf("matchCondition %s: %v", c.Name, iss.Err())
				}
				prg, err := env.Program(ast)
				if err != nil {
					t.Fatal(err)
				}
				out[c.Name] = prg
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no matchConditions for vraycluster.tpu.ray.io", selectorsPatch)
	}
	return out
}

// TestRayClusterWebhookMatchConditions: the API server calls the RayCluster webhook for creates of
// TPU RayClusters and for the updates that change what it validates (a TPU group's template or
// numOfHosts, a TPU group added or renamed), never for replica, finalizer, label or CPU group
// changes, which so pass while the operator is down (docs/spec.md §6).
func TestRayClusterWebhookMatchConditions(t *testing.T) {
	conditions := rayClusterMatchConditions(t)
	const cpu, tpu = 0, 1
	base := func() *rayv1.RayCluster {
		return testutil.MakeRayCluster("rc", "ns").CPUGroup("cpu", 1).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 1).Obj()
	}
	for _, tc := range []struct {
		name      string
		operation string
		old       *rayv1.RayCluster
		change    func(rc *rayv1.RayCluster)
		want      bool
	}{
		{name: "create of a TPU RayCluster", operation: "CREATE", want: true},
		{name: "create of a CPU-only RayCluster", operation: "CREATE", change: func(rc *rayv1.RayCluster) {
			rc.Spec.WorkerGroupSpecs = rc.Spec.WorkerGroupSpecs[:1]
		}},
		{name: "nothing changed", operation: "UPDATE", old: base()},
		{name: "a TPU group's replicas (the autoscaler)", operation: "UPDATE", old: base(), change: func(rc *rayv1.RayCluster) {
			rc.Spec.WorkerGroupSpecs[tpu].Replicas, rc.Spec.WorkerGroupSpecs[tpu].MaxReplicas = ptr.To[int32](3), ptr.To[int32](3)
		}},
		{name: "a finalizer", operation: "UPDATE", old: base(), change: func(rc *rayv1.RayCluster) {
			rc.Finalizers = []string{"ray.io/gcs-ft-redis-cleanup-finalizer"}
		}},
		{name: "the RayCluster's labels", operation: "UPDATE", old: base(), change: func(rc *rayv1.RayCluster) {
			rc.Labels = map[string]string{"team": "a"}
		}},
		{name: "a CPU group's template", operation: "UPDATE", old: base(), change: func(rc *rayv1.RayCluster) {
			rc.Spec.WorkerGroupSpecs[cpu].Template.Labels = map[string]string{"rev": "2"}
		}},
		{name: "a TPU group's template", operation: "UPDATE", old: base(), want: true, change: func(rc *rayv1.RayCluster) {
			rc.Spec.WorkerGroupSpecs[tpu].Template.Labels = map[string]string{"rev": "2"}
		}},
		{name: "a TPU group's topology", operation: "UPDATE", old: base(), want: true, change: func(rc *rayv1.RayCluster) {
			rc.Spec.WorkerGroupSpecs[tpu].Template.Spec.NodeSelector["cloud.google.com/gke-tpu-topology"] = "2x4"
		}},
		{name: "a TPU group's numOfHosts", operation: "UPDATE", old: base(), want: true, change: func(rc *rayv1.RayCluster) {
			rc.Spec.WorkerGroupSpecs[tpu].NumOfHosts = 2
		}},
		{name: "a TPU group added", operation: "UPDATE", old: base(), want: true, change: func(rc *rayv1.RayCluster) {
			added := *rc.Spec.WorkerGroupSpecs[tpu].DeepCopy()
			added.GroupName = "tpu-2"
			rc.Spec.WorkerGroupSpecs = append(rc.Spec.WorkerGroupSpecs, added)
		}},
		{name: "a TPU group renamed", operation: "UPDATE", old: base(), want: true, change: func(rc *rayv1.RayCluster) {
			rc.Spec.WorkerGroupSpecs[tpu].GroupName = "renamed"
		}},
		{name: "a TPU group removed", operation: "UPDATE", old: base(), change: func(rc *rayv1.RayCluster) {
			extra := *rc.Spec.WorkerGroupSpecs[tpu].DeepCopy()
			extra.GroupName = "tpu-2"
			rc.Spec.WorkerGroupSpecs = append(rc.Spec.WorkerGroupSpecs, extra)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := base()
			if tc.change != nil {
				tc.change(obj)
			}
			old := tc.old
			if tc.name == "a TPU group removed" { // the old object had the extra group, the new one not
				old, obj = obj, base()
			}
			vars := map[string]any{
				"object":    toMap(t, obj),
				"oldObject": nil,
				"request":   map[string]any{"operation": tc.operation},
			}
			if old != nil {
				vars["oldObject"] = toMap(t, old)
			}
			called := true
			for name, prg := range conditions {
				val, _, err := prg.Eval(vars)
				if err != nil {
					t.Fatalf("matchCondition %s: %v", name, err)
				}
				matched, ok := val.Value().(bool)
				if !ok {
					t.Fatalf("matchCondition %s returned %v, not a bool", name, val)
				}
				called = called && matched
			}
			if called != tc.want {
				t.Errorf("webhook called = %v, want %v", called, tc.want)
			}
		})
	}
}

// toMap converts a RayCluster to the map the API server's CEL sees.
func toMap(t *testing.T, rc *rayv1.RayCluster) map[string]any {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(rc)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
