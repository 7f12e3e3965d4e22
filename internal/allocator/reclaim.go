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

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
)

// maxLiveChecks bounds the live Pod reads one plan makes to confirm claims gone. Past it, claims
// count as held: the Pod is denied as transient and the reconciler, which confirms in bulk off the
// admission path, releases them. A replica of up to 64 hosts replaced whole is confirmed inline.
const maxLiveChecks = 64

// reclaimable returns a check that a claim's Pod is gone, terminating or finished, so that its ID
// may be taken over or its slice replaced (docs/spec.md §3.2, §8). For a bound claim that Pod is the
// one with the claim's name and UID. For a pending claim it is the Pod that carried the claim's
// token, which must have been seen (in the cache, or deleted: a tombstone): a pending claim whose
// Pod was never seen may belong to a create still in flight, and is never taken. The cache
// answers "alive" cheaply; every other answer is confirmed by a live read, because the cache also
// loses a Pod whose labels stop matching its selector.
func (a *Allocator) reclaimable(ctx context.Context, req Request) claims.Reclaimable {
	budget := maxLiveChecks
	answers := map[string]bool{} // by token: Plan may ask about one claim more than once.
	return func(replica int32, claim *tpuv1alpha1.WorkerClaim) bool {
		if gone, asked := answers[claim.Token]; asked {
			return gone
		}
		pod, ok := a.claimPod(ctx, req.Namespace, naming.SliceName(req.ClusterName, req.GroupName, replica), claim)
		gone := false
		if ok && !pod.live && budget > 0 {
			budget--
			gone = a.goneLive(ctx, req.Namespace, pod.name, pod.uid)
		}
		answers[claim.Token] = gone
		return gone
	}
}

// seenPod is the Pod a claim belongs to, as the cache or a tombstone knows it.
type seenPod struct {
	name string
	uid  types.UID
	// live reports whether the cache shows it live.
	live bool
}

// claimPod returns the Pod a claim of slice belongs to and whether one is known. A pending claim's
// Pod is one that carries its token and whose spec names the claim's slice and worker ID: the token
// annotation alone can be copied onto, or edited into, any Pod (docs/spec.md §8), and a copy that
// is gone says nothing of the claim's own Pod.
func (a *Allocator) claimPod(ctx context.Context, namespace, slice string, claim *tpuv1alpha1.WorkerClaim) (seenPod, bool) {
	if claim.PodUID != "" {
		var cached corev1.Pod
		err := a.client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: claim.PodName}, &cached)
		return seenPod{name: claim.PodName, uid: claim.PodUID, live: err == nil && PodHolds(&cached, claim)}, true
	}
	var carriers corev1.PodList
	if err := a.client.List(ctx, &carriers, client.InNamespace(namespace), client.MatchingFields{identity.TokenIndex: claim.Token}); err == nil {
		var seen *corev1.Pod
		for i := range carriers.Items {
			p := &carriers.Items[i]
			if !names(p, slice, claim.WorkerID) {
				continue
			}
			if lifecycle.PodLive(p) {
				return seenPod{name: p.Name, uid: p.UID, live: true}, true
			}
			seen = p
		}
		if seen != nil {
			return seenPod{name: seen.Name, uid: seen.UID}, true
		}
	}
	if t, ok := a.opts.Tombstones.Lookup(namespace, claim.Token); ok && t.Slice == slice && t.WorkerID == claim.WorkerID {
		return seenPod{name: t.Name, uid: t.UID}, true
	}
	return seenPod{}, false
}

// names reports whether pod's spec names worker ID id of slice.
func names(pod *corev1.Pod, slice string, id int32) bool {
	got, ok := identity.FromPod(pod)
	return ok && got.SliceName() == slice && got.WorkerID == id
}

// goneLive reports whether the API server confirms that the Pod name with UID uid is gone,
// terminating or finished.
func (a *Allocator) goneLive(ctx context.Context, namespace, name string, uid types.UID) bool {
	// A fresh object for the live read: client-go's JSON decoding fills the object it is given
	// without zeroing it, so fields the live Pod omits would keep another Pod's values.
	var live corev1.Pod
	err := a.reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &live)
	if apierrors.IsNotFound(err) {
		return true
	}
	return err == nil && (live.UID != uid || !lifecycle.PodLive(&live))
}

// PodHolds reports whether pod is the live holder of a bound claim: same UID and live as the
// reconciler counts it (lifecycle.PodLive), so that the webhook takes over exactly the claims the
// reconciler would release.
func PodHolds(pod *corev1.Pod, claim *tpuv1alpha1.WorkerClaim) bool {
	return pod.UID == claim.PodUID && lifecycle.PodLive(pod)
}
