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

package allocator

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/reads"
)

// Reinvoked reports whether a Pod being created that already carries claim token in slice
// sliceName with worker ID workerID is this same admission coming back (webhook re-invocation
// after a later webhook changed the Pod): the slice holds a pending claim with that token on that
// ID, and no live Pod carries the token yet. Any other token (bound to a Pod, unknown to the
// slice, carried by a live Pod) is a copy: a manifest copied from a running Pod, a template or a
// dry-run output, and the Pod must be admitted as a new one (docs/spec.md §8). The cache answers
// first; a miss is confirmed live, because the claim is only milliseconds old.
func (a *Allocator) Reinvoked(ctx context.Context, namespace, sliceName, token string, workerID int32) (bool, error) {
	if token == "" || sliceName == "" {
		return false, nil
	}
	// One deadline for both reads, as a claim has: a slow API server must not hold the admission
	// past the webhook's timeout (docs/spec.md §5).
	ctx, cancel := context.WithTimeout(ctx, a.opts.Timeout)
	defer cancel()
	slice, err := reads.CacheThenLive(ctx, a.client, a.reader, types.NamespacedName{Namespace: namespace, Name: sliceName},
		func(s *tpuv1alpha1.TPUSliceAssignment) bool { return pendingOn(s, token, workerID) })
	if err != nil || slice == nil || !pendingOn(slice, token, workerID) {
		return false, err
	}
	var carriers corev1.PodList
	if err := a.client.List(ctx, &carriers, client.InNamespace(namespace), client.MatchingFields{identity.TokenIndex: token}); err != nil {
		return false, err
	}
	return !slices.ContainsFunc(carriers.Items, func(p corev1.Pod) bool { return lifecycle.PodLive(&p) }), nil
}

func pendingOn(slice *tpuv1alpha1.TPUSliceAssignment, token string, workerID int32) bool {
	return slices.ContainsFunc(slice.Status.Claims, func(c tpuv1alpha1.WorkerClaim) bool {
		return c.Token == token && c.WorkerID == workerID && c.PodUID == ""
	})
}
