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

// Package slicectrl holds what the slice controllers share (docs/design.md): the claim reconciler
// (controllers) and the placement reconciler (controllers/placement) read a slice's Pods the same
// way, from the cache and from the API server, index the cached Pods by their Node, map a Pod to
// its slices, bound the notes and messages they write, and time bursts of a slice's changes.
package slicectrl

import (
	"context"
	"fmt"
	"slices"
	"sync"

	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/tombstones"
)

// liveGetConcurrency bounds the live Pod reads one reconcile makes at once.
const liveGetConcurrency = 16

// CachedPods returns, from the cache c, the Pods whose spec identity names the slice. Labels play
// no part: a Pod whose tpu.ray.io labels were removed is still found.
//
// The Pods are the cache's own, not copies: their maps, slices and pointers are shared with the
// informer, so nothing may write to them (a copy is made before any change, as for a patch). The
// reconcilers list a slice's Pods on every reconcile, and during a burst of creates they reconcile
// the slice about once a second, so deep copies cost O(hosts) a reconcile: at 2,240 hosts they were
// 0.51 s of the bench process's 8.04 s of CPU in S5, as much as the Pod webhook's handling of all
// the Pods (docs/performance.md). The integration and end-to-end suites run with client-go's cache
// mutation detector on (KUBE_CACHE_MUTATION_DETECTOR, the Makefile), which fails the suite when a
// cached object is changed.
func CachedPods(ctx context.Context, c client.Reader, slice *tpuv1alpha1.TPUSliceAssignment) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(slice.Namespace), client.MatchingFields{identity.SliceIndex: slice.Name},
		client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing Pods of slice %s: %w", slice.Name, err)
	}
	return pods.Items, nil
}

// Of returns the Pods whose spec identity names the slice: the live reads list the whole worker
// group's.
func Of(slice *tpuv1alpha1.TPUSliceAssignment, pods []corev1.Pod) []corev1.Pod {
	out := make([]corev1.Pod, 0, slice.Spec.Hosts)
	for i := range pods {
		if id, ok := identity.FromPod(&pods[i]); ok && id.SliceName() == slice.Name {
			out = append(out, pods[i])
		}
	}
	return out
}

// LiveView is what the API server shows of the Pods that may hold a slice's worker IDs.
type LiveView struct {
	Pods []corev1.Pod
	// Gone holds the tokens of pending claims whose Pod, as its tombstone names it, the API server
	// reports gone by name: NotFound, or that name now belongs to a Pod of another UID.
	Gone map[string]bool
	// Outside counts the live Pods read by name that the List by KubeRay's labels missed: their fate
	// reaches no informer, so the slice is looked at again after a while.
	Outside int
}

// LivePods reads from the API server (reader) the Pods that may hold the slice's worker IDs: the
// worker group's Pods (by KubeRay's labels), and, by name, every Pod a bound claim names and every
// Pod a pending claim's tombstone (in deleted) names that this List did not return. A Pod missing
// from the List may only have left the label selector (docs/spec.md §8): its claim is released
// only when the read by name shows it gone, terminating or finished. The reconcilers make these
// reads only before a release, a repair, a deletion or a placement decision the cache cannot
// make alone.
func LivePods(ctx context.Context, reader client.Reader, deleted *tombstones.Tombstones, slice *tpuv1alpha1.TPUSliceAssignment) (LiveView, error) {
	var list corev1.PodList
	if err := reader.List(ctx, &list, client.InNamespace(slice.Namespace), client.MatchingLabels{
		rayutils.RayClusterLabelKey:   slice.Spec.RayClusterName,
		rayutils.RayNodeGroupLabelKey: slice.Spec.GroupName,
	}); err != nil {
		return LiveView{}, fmt.Errorf("listing Pods of slice %s: %w", slice.Name, err)
	}
	listed := make(map[types.UID]bool, len(list.Items))
	for i := range list.Items {
		listed[list.Items[i].UID] = true
	}
	var missing []string
	deletedPods := map[string]tombstones.Pod{} // by the pending claim's token
	for _, c := range slice.Status.Claims {
		switch {
		case c.PodUID != "":
			if !listed[c.PodUID] {
				missing = append(missing, c.PodName)
			}
		default:
			// A tombstone stands for the claim only when its Pod's spec named the claim's place: a
			// copy of the token annotation on another Pod says nothing of the claim's own Pod.
			t, ok := deleted.Lookup(slice.Namespace, c.Token)
			if !ok || listed[t.UID] || t.Slice != slice.Name || t.WorkerID != c.WorkerID {
				continue
			}
			deletedPods[c.Token] = t
			missing = append(missing, t.Name)
		}
	}
	found, err := getPods(ctx, reader, slice.Namespace, slices.Compact(slices.Sorted(slices.Values(missing))))
	if err != nil {
		return LiveView{}, err
	}
	v := LiveView{Pods: list.Items, Gone: map[string]bool{}}
	present := map[types.UID]bool{}
	for i := range found {
		if !listed[found[i].UID] {
			present[found[i].UID] = true
			v.Pods = append(v.Pods, found[i])
			if lifecycle.PodLive(&found[i]) {
				v.Outside++
			}
		}
	}
	for token, t := range deletedPods {
		if !present[t.UID] {
			v.Gone[token] = true
		}
	}
	return v, nil
}

// getPods reads the named Pods from the API server, a few at a time; missing ones are left out.
func getPods(ctx context.Context, reader client.Reader, namespace string, names []string) ([]corev1.Pod, error) {
	var (
		mu    sync.Mutex
		found []corev1.Pod
		errs  []error
		wg    sync.WaitGroup
		slots = make(chan struct{}, liveGetConcurrency)
	)
	for _, name := range names {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			pod := &corev1.Pod{} // fresh: decoding into a reused object keeps omitted fields.
			err := reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, pod)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				found = append(found, *pod)
			case !apierrors.IsNotFound(err):
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, fmt.Errorf("reading Pods of claims by name: %w", errs[0])
	}
	return found, nil
}
