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

package operator

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// recordingCache records the objects informers are requested for, without any API server.
type recordingCache struct {
	cache.Cache
	synced    bool
	informers []string
}

func (c *recordingCache) GetInformer(_ context.Context, obj client.Object, _ ...cache.InformerGetOption) (cache.Informer, error) {
	c.informers = append(c.informers, fmt.Sprintf("%T", obj))
	return nil, nil
}

func (c *recordingCache) WaitForCacheSync(context.Context) bool { return c.synced }

func TestCachesSynced(t *testing.T) {
	for _, synced := range []bool{true, false} {
		t.Run(fmt.Sprint("synced=", synced), func(t *testing.T) {
			err := CachesSynced(&recordingCache{synced: synced})(httptest.NewRequest(http.MethodGet, "/readyz", nil))
			if got := err == nil; got != synced {
				t.Errorf("CachesSynced() error = %v, want ready %v", err, synced)
			}
		})
	}
}

// TestSetupStartsWebhookInformers checks that the informers the Pod webhook reads through are
// registered at setup, so that they start with the manager on every replica and the first
// admission does not wait for a full list.
func TestSetupStartsWebhookInformers(t *testing.T) {
	rec := &recordingCache{}
	mgr, err := manager.New(&rest.Config{Host: "https://127.0.0.1:1"}, manager.Options{
		Scheme:                 Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		NewCache: func(*rest.Config, cache.Options) (cache.Cache, error) {
			return rec, nil
		},
	})
	if err != nil {
		t.Fatalf("manager.New() error: %v", err)
	}
	if err := Setup(mgr, Options{DisableControllers: true}); err != nil {
		t.Fatalf("Setup() error: %v", err)
	}
	slices.Sort(rec.informers)
	want := []string{"*v1.Pod", "*v1.RayCluster", "*v1alpha1.TPUSliceAssignment"}
	if diff := cmp.Diff(want, rec.informers); diff != "" {
		t.Errorf("informers registered at setup (-want,+got):\n%s", diff)
	}
}
