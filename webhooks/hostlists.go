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
	"context"
	"fmt"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/hostlists"
	"github.com/ray-tpu/tpu-slice-operator/internal/reads"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// maxRemembered bounds the ConfigMaps a hostListsWriter remembers having written; past it, it
// forgets them all and writes (or finds) each again once.
const maxRemembered = 4096

// hostListsWriter writes the host lists ConfigMap of a slice before the webhook admits a Pod that
// references it (docs/spec.md §4). It remembers the ConfigMaps it wrote or found, with the UID
// of the slice that owns them, so that a slice costs one write per webhook instance, not one per Pod.
type hostListsWriter struct {
	writer      client.Writer
	cache, live client.Reader

	mu      sync.Mutex
	written map[types.NamespacedName]types.UID
}

func newHostListsWriter(writer client.Writer, cache, live client.Reader) *hostListsWriter {
	return &hostListsWriter{writer: writer, cache: cache, live: live, written: make(map[types.NamespacedName]types.UID)}
}

// ensure makes sure the ConfigMap of the slice of vals for Pods of n TPU containers exists,
// owned by the slice, in which this admission just made the claim of assignment.
func (w *hostListsWriter) ensure(ctx context.Context, namespace string, assignment allocator.Assignment, vals tpuenv.Values, n int) error {
	// The name costs nothing per host; the lists are built only when the ConfigMap is to be
	// written, not on every admission of the slice.
	key := types.NamespacedName{Namespace: namespace, Name: tpuenv.HostListsConfigMapName(vals, n)}
	owner := hostlists.Slice{Name: assignment.SliceName, UID: assignment.SliceUID}
	if owner.UID == "" {
		// A peer of a version before Assignment.SliceUID made the claim: read the slice that
		// holds it, the cache's copy only if it has the claim (a slice deleted and re-created
		// under the same name is another owner).
		slice, err := reads.CacheThenLive(ctx, w.cache, w.live, types.NamespacedName{Namespace: namespace, Name: assignment.SliceName},
			func(s *tpuv1alpha1.TPUSliceAssignment) bool { return holdsToken(s, assignment.Token) })
		if err != nil {
			return fmt.Errorf("reading slice %s: %w", assignment.SliceName, err)
		}
		if slice == nil {
			return fmt.Errorf("slice %s not found", assignment.SliceName)
		}
		owner.UID = slice.UID
	}
	w.mu.Lock()
	uid, ok := w.written[key]
	w.mu.Unlock()
	if ok && uid == owner.UID {
		return nil
	}
	// Once per slice and instance; Ensure reads the slice live first: an ID handed out from a
	// reservation names the slice the reservation was written to, which may have been replaced
	// under its name since, and a ConfigMap created for it would have a dead controller
	// (docs/spec.md §4).
	if _, err := hostlists.Ensure(ctx, w.writer, w.live, owner, tpuenv.HostListsConfigMap(namespace, vals, n)); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.written) >= maxRemembered {
		clear(w.written)
	}
	w.written[key] = owner.UID
	return nil
}

// holdsToken reports whether slice records a claim with token.
func holdsToken(slice *tpuv1alpha1.TPUSliceAssignment, token string) bool {
	return slices.ContainsFunc(slice.Status.Claims, func(c tpuv1alpha1.WorkerClaim) bool { return c.Token == token })
}
