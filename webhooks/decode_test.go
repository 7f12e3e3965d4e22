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
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// crDecoder is controller-runtime's decoder, which the Pod webhook used before decodePod.
var crDecoder = admission.NewDecoder(clientgoscheme.Scheme)

// bigWorkerPod is a TPU worker Pod of the size KubeRay creates for a 1,024-host v5p slice (about
// 7 KiB as JSON): the webhook's decoding cost is per byte.
func bigWorkerPod() *corev1.Pod {
	p := tpuWorkerPod(v6e, "4x4", 4).Label("ray.io/worker-group-replica-index", "0").Label("ray.io/replica-host-index", "3").Obj()
	c := &p.Spec.Containers[0]
	for i := range 60 {
		c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("RAY_SETTING_%d", i), Value: strings.Repeat("v", 40)})
	}
	c.Args = []string{"ulimit -n 65536; ray start --address=rc-head-svc.ns.svc.cluster.local:6379 --block --dashboard-agent-listen-port=52365 --memory=100000000000 --num-cpus=8"}
	return p
}

// TestDecodePodAsControllerRuntime checks that decodePod reads every request as controller-runtime's
// decoder does: the same Pod, or an error where it gives one.
func TestDecodePodAsControllerRuntime(t *testing.T) {
	encoded := func(p *corev1.Pod) string {
		data, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	withKind := bigWorkerPod()
	withKind.APIVersion, withKind.Kind = "v1", "Pod"
	cases := map[string]struct {
		raw     string
		wantErr bool
	}{
		"a worker Pod as the API server sends it, with no kind": {raw: encoded(bigWorkerPod())},
		"with its kind":                    {raw: encoded(withKind)},
		"kind only":                        {raw: `{"kind":"Pod","metadata":{"name":"p"}}`},
		"apiVersion only":                  {raw: `{"apiVersion":"v1","metadata":{"name":"p"}}`},
		"unknown fields are ignored":       {raw: `{"metadata":{"name":"p"},"spec":{"noSuchField":1,"containers":[{"name":"c","image":"i"}]}}`},
		"field names are case-sensitive":   {raw: `{"Metadata":{"name":"p"},"spec":{"NodeName":"n"}}`},
		"a duplicate field, the last wins": {raw: `{"metadata":{"name":"a"},"metadata":{"name":"b"}}`},
		"an empty object":                  {raw: `{}`},
		"another kind":                     {raw: `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"}}`, wantErr: true},
		"a Pod of another version":         {raw: `{"apiVersion":"v2","kind":"Pod","metadata":{"name":"p"}}`, wantErr: true},
		"another kind of v1":               {raw: `{"apiVersion":"v1","kind":"Service","metadata":{"name":"s"}}`, wantErr: true},
		"no content":                       {raw: ``, wantErr: true},
		"not JSON":                         {raw: `{"metadata":`, wantErr: true},
		"a field of the wrong type":        {raw: `{"metadata":{"name":3}}`, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			raw := runtime.RawExtension{Raw: []byte(tc.raw)}
			want := &corev1.Pod{}
			wantErr := crDecoder.DecodeRaw(raw, want)
			got, err := decodePod(raw.Raw)
			if (wantErr != nil) != tc.wantErr {
				t.Fatalf("controller-runtime's decoder: err %v, want an error: %t (the case is wrong)", wantErr, tc.wantErr)
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("decodePod: err %v, want an error: %t", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("decodePod differs from controller-runtime's decoder (-want,+got):\n%s", diff)
			}
		})
	}
}

// BenchmarkDecodePod compares decodePod with controller-runtime's decoder on a Pod the size of a
// 1,024-host slice's.
func BenchmarkDecodePod(b *testing.B) {
	raw, err := json.Marshal(bigWorkerPod())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("controller-runtime", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if err := crDecoder.DecodeRaw(runtime.RawExtension{Raw: raw}, &corev1.Pod{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decodePod", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if _, err := decodePod(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}
