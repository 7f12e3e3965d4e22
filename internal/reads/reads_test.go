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

package reads_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/ray-tpu/tpu-slice-operator/internal/reads"
)

func configMap(data string, extra map[string]string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns"}, Data: map[string]string{"v": data}}
	maps.Copy(cm.Data, extra)
	return cm
}

// decodingInPlace is an API server that decodes into the object it is given without zeroing it,
// as client-go does: keys of a map the object already holds stay.
func decodingInPlace(objs ...client.Object) client.Reader {
	return fake.NewClientBuilder().WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			stored := &corev1.ConfigMap{}
			if err := c.Get(ctx, key, stored, opts...); err != nil {
				return err
			}
			data, err := json.Marshal(stored)
			if err != nil {
				return err
			}
			return json.Unmarshal(data, obj)
		},
	}).Build()
}

func TestCacheThenLive(t *testing.T) {
	key := client.ObjectKey{Namespace: "ns", Name: "cm"}
	isNew := func(cm *corev1.ConfigMap) bool { return cm.Data["v"] == "new" }
	broken := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return errors.New("cache not synced")
		},
	}).Build()
	cases := map[string]struct {
		cache, live client.Reader
		want        *corev1.ConfigMap
		wantErr     bool
	}{
		"a good cached object is returned without a live read": {
			cache: fake.NewClientBuilder().WithObjects(configMap("new", nil)).Build(), live: broken,
			want: configMap("new", nil),
		},
		"a cached object that is not good is read live": {
			cache: fake.NewClientBuilder().WithObjects(configMap("old", nil)).Build(),
			live:  fake.NewClientBuilder().WithObjects(configMap("new", nil)).Build(),
			want:  configMap("new", nil),
		},
		"the live read decodes into a fresh object: the cached copy's extra keys are gone": {
			cache: fake.NewClientBuilder().WithObjects(configMap("old", map[string]string{"stale": "x"})).Build(),
			live:  decodingInPlace(configMap("new", nil)),
			want:  configMap("new", nil),
		},
		"a cache error falls back to the live read": {
			cache: broken, live: fake.NewClientBuilder().WithObjects(configMap("new", nil)).Build(),
			want: configMap("new", nil),
		},
		"missing live is nil and no error": {
			cache: fake.NewClientBuilder().Build(), live: fake.NewClientBuilder().Build(),
		},
		"a live error is returned": {
			cache: fake.NewClientBuilder().Build(), live: broken, wantErr: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := reads.CacheThenLive(t.Context(), tc.cache, tc.live, key, isNew)
			if (err != nil) != tc.wantErr {
				t.Fatalf("CacheThenLive() error = %v, want error %t", err, tc.wantErr)
			}
			switch {
			case tc.want == nil && got != nil:
				t.Errorf("CacheThenLive() = %v, want nil", got.Data)
			case tc.want != nil && (got == nil || len(got.Data) != len(tc.want.Data) || got.Data["v"] != tc.want.Data["v"]):
				t.Errorf("CacheThenLive() = %v, want data %v", got, tc.want.Data)
			}
		})
	}
}

// TestCacheThenLivePassesCacheOptionsToTheCacheOnly checks that the options reach the cache read
// (a caller that only reads asks it for no copy) and never the live read.
func TestCacheThenLivePassesCacheOptionsToTheCacheOnly(t *testing.T) {
	key := client.ObjectKey{Namespace: "ns", Name: "cm"}
	recording := func(seen *[]client.GetOption, objs ...client.Object) client.Reader {
		return fake.NewClientBuilder().WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				*seen = append(*seen, opts...)
				return c.Get(ctx, key, obj, opts...)
			},
		}).Build()
	}
	var cacheOpts, liveOpts []client.GetOption
	cache := recording(&cacheOpts, configMap("old", nil))
	live := recording(&liveOpts, configMap("new", nil))
	got, err := reads.CacheThenLive(t.Context(), cache, live, key, func(cm *corev1.ConfigMap) bool { return cm.Data["v"] == "new" },
		client.UnsafeDisableDeepCopy)
	if err != nil || got == nil || got.Data["v"] != "new" {
		t.Fatalf("CacheThenLive() = %v, %v; want the live object", got, err)
	}
	if len(cacheOpts) != 1 || cacheOpts[0] != client.UnsafeDisableDeepCopy {
		t.Errorf("the cache read got options %v, want [UnsafeDisableDeepCopy]", cacheOpts)
	}
	if len(liveOpts) != 0 {
		t.Errorf("the live read got options %v, want none", liveOpts)
	}
}
