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
	"maps"
	"slices"
	"time"

	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
)

// adoptionMemo is how long this process trusts its last adoption of a group's Pods.
const adoptionMemo = time.Hour

// ensureAdopted records, before this process hands out an ID of a worker group for the first time,
// every live Pod of the group that carries a TPU identity in its spec but holds no claim
// (docs/spec.md §3.4): Pods created before the operator ran, by the reference webhook, by an
// earlier install whose slices were deleted, or by hand. It reads the group's Pods from the API
// server (not the cache, which may not have seen a Pod created a moment ago) once per group and
// process, and writes a bound claim for each such Pod whose worker ID no claim holds. A Pod whose
// ID is taken is left to the reconciler, which reports the conflict. It runs on the group's drain
// goroutine, so one group's adoption never runs twice at once in a process.
func (a *Allocator) ensureAdopted(ctx context.Context, key groupKey, q *queue, req Request) error {
	now := a.clock.Now()
	a.mu.Lock()
	at, done := a.adopted[key]
	a.mu.Unlock()
	if done && now.Sub(at) < adoptionMemo {
		return nil
	}
	members, err := a.unclaimedCandidates(ctx, req)
	if err != nil {
		return err
	}
	for _, replica := range slices.Sorted(maps.Keys(members)) {
		if err := a.adoptReplica(ctx, q, req, replica, members[replica]); err != nil {
			return err
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.adopted[key] = now
	maps.DeleteFunc(a.adopted, func(_ groupKey, t time.Time) bool { return now.Sub(t) >= adoptionMemo })
	return nil
}

// unclaimedCandidates lists, live, the group's Pods that carry a TPU identity of this RayCluster
// UID and host count, by replica.
func (a *Allocator) unclaimedCandidates(ctx context.Context, req Request) (map[int32][]*corev1.Pod, error) {
	var pods corev1.PodList
	if err := a.reader.List(ctx, &pods, client.InNamespace(req.Namespace), client.MatchingLabels{
		rayutils.RayClusterLabelKey:   req.ClusterName,
		rayutils.RayNodeGroupLabelKey: req.GroupName,
	}); err != nil {
		if isPermanent(err) {
			return nil, a.deny(false, "listing the worker group's Pods: %v", err)
		}
		return nil, err
	}
	out := map[int32][]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		id, ok := identity.FromPod(p)
		if !ok || !lifecycle.PodLive(p) || id.Cluster != req.ClusterName || id.Group != req.GroupName ||
			!id.OfClusterUID(req.ClusterUID) || id.Hosts != req.Hosts || id.WorkerID >= req.Hosts {
			continue
		}
		out[id.Replica] = append(out[id.Replica], p)
	}
	return out, nil
}

// adoptReplica writes a bound claim for each of the Pods whose worker ID the replica's slice does
// not claim yet, creating the slice if needed, retrying conflicts until ctx ends. A slice it
// creates records no placement: its first Pods were placed by whoever gave them their identity,
// so, like a slice created before spec.placement, it keeps the inter-pod terms.
func (a *Allocator) adoptReplica(ctx context.Context, q *queue, req Request, replica int32, pods []*corev1.Pod) error {
	req.Placement = PlacementRequest{}
	for attempt := 0; ; attempt++ {
		slice, err := a.readSlice(ctx, req, replica)
		if err != nil {
			return err
		}
		if slice != nil && slice.Spec.RayClusterUID == req.ClusterUID && slice.Spec.Hosts != req.Hosts {
			// Another host count of this RayCluster: the planner decides what happens to it.
			return nil
		}
		older := slice != nil && slice.Spec.RayClusterUID != req.ClusterUID
		current := slice
		if older {
			// The slice of an older RayCluster generation (the same name): the planner would
			// replace it with this generation's claims, so this generation's Pods are adopted
			// into the replacement first. Skipping them, and remembering the group as adopted,
			// let the planner hand out their IDs (a Pod made by hand right after the RayCluster
			// was re-created, before the reconciler removed the old slice).
			current = nil
		}
		w, adopted := adoption(current, pods)
		if len(adopted) == 0 {
			return nil
		}
		if older {
			if err := a.confirmLiveClusterUID(ctx, req); err != nil {
				return err
			}
			w.Replace = true
		}
		written, over, err := a.writeSlice(ctx, req, replica, slice, w)
		if err == nil {
			q.mu.Lock()
			q.remember(replica, over, written)
			q.mu.Unlock()
			a.m.ClaimsAdopted.WithLabelValues(metrics.AdoptedAtAdmission).Add(float64(len(adopted)))
			logf.FromContext(ctx).Info("Adopted TPU worker Pods that carry an identity but no claim",
				"slice", written.Name, "workerIDs", adopted)
			return nil
		}
		if !isConflict(err) {
			if isPermanent(err) {
				return a.deny(false, "recording the worker group's existing Pods in TPUSliceAssignment: %v", err)
			}
			return err
		}
		if ctx.Err() != nil {
			return a.deny(true, "recording the worker group's existing Pods: %v", err)
		}
		a.backoff(ctx, attempt)
	}
}

// adoption returns the write that adds a bound claim for each Pod whose worker ID the slice (nil:
// none yet) does not claim, oldest Pod first, and the IDs it adopts.
func adoption(slice *tpuv1alpha1.TPUSliceAssignment, pods []*corev1.Pod) (claims.Write, []int32) {
	var w claims.Write
	held := map[int32]bool{}
	bound := map[types.UID]bool{}
	if slice != nil {
		w.Claims = slices.Clone(slice.Status.Claims)
		w.ReplicaName = slice.Spec.ReplicaName
		for _, c := range slice.Status.Claims {
			held[c.WorkerID], bound[c.PodUID] = true, true
		}
	}
	slices.SortStableFunc(pods, func(x, y *corev1.Pod) int { return x.CreationTimestamp.Compare(y.CreationTimestamp.Time) })
	var adopted []int32
	for _, p := range pods {
		id, _ := identity.FromPod(p)
		if held[id.WorkerID] || bound[p.UID] || !tpuv1alpha1.ValidPodName(p.Name) || !tpuv1alpha1.ValidPodUID(string(p.UID)) {
			continue
		}
		held[id.WorkerID] = true
		w.Claims = append(w.Claims, tpuv1alpha1.WorkerClaim{WorkerID: id.WorkerID, Token: adoptedToken(p),
			PodName: p.Name, PodUID: p.UID})
		adopted = append(adopted, id.WorkerID)
		if w.ReplicaName == "" && slice == nil {
			w.ReplicaName = p.Labels[rayutils.RayWorkerReplicaNameKey]
		}
	}
	return w, adopted
}

// adoptedToken is the token of an adopted Pod's claim: its own claim token when it carries a valid
// one (a late Pod of this operator; identity.Token ignores any other), else its UID, which is
// unique and never a token the webhook makes.
func adoptedToken(p *corev1.Pod) string {
	if t := identity.Token(p); t != "" {
		return t
	}
	return string(p.UID)
}
