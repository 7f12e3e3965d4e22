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

// Package reads holds the one way the operator reads an object the cache may not have caught up
// with: the cache first, the API server when the cached object is missing or not good enough.
package reads

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CacheThenLive reads key from cache and returns it when good accepts it. Otherwise (not cached,
// a cache error, or not good: an older RayCluster UID, a claim the cache has not seen yet) it reads
// key from live into a fresh object, because client-go decodes into the object it is given without
// zeroing it, so a reused one would keep the fields the live object omits. It returns nil and no
// error when the object does not exist live, and the live read's error otherwise. The live read
// waits as long as ctx allows: on the admission path ctx carries the admission's deadline
// (docs/spec.md §5), never the bare HTTP request's context. cacheOpts apply to the cache read only:
// a caller that only reads the object passes client.UnsafeDisableDeepCopy, and must then neither
// change it nor keep it past the call (the cache's own object).
func CacheThenLive[T any, PT interface {
	*T
	client.Object
}](ctx context.Context, cache, live client.Reader, key client.ObjectKey, good func(PT) bool, cacheOpts ...client.GetOption) (PT, error) {
	if cached := PT(new(T)); cache.Get(ctx, key, cached, cacheOpts...) == nil && good(cached) {
		return cached, nil
	}
	fresh := PT(new(T))
	if err := live.Get(ctx, key, fresh); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return fresh, nil
}
