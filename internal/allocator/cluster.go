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

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/reads"
)

// clusterInfo is what a claim needs of its RayCluster.
type clusterInfo struct {
	uid types.UID
	// desired is the group's clamp(replicas, min, max): the replica indexes the operator may open.
	desired int32
}

// cluster resolves req's RayCluster: from the cache when it is the generation the Pod names and has
// the Pod's group, else from the API server (a cluster just re-created, or a group just added,
// that the cache has not seen). The RayCluster is read here, by whoever commits the claim, never
// taken from the request: a forwarded claim names its cluster, not its replica count.
func (a *Allocator) cluster(ctx context.Context, req *Request) (clusterInfo, error) {
	key := types.NamespacedName{Namespace: req.Namespace, Name: req.ClusterName}
	rc, err := reads.CacheThenLive(ctx, a.client, a.reader, key, func(rc *rayv1.RayCluster) bool {
		_, hasGroup := claims.DesiredReplicas(rc, req.GroupName)
		return (req.ClusterUID == "" || rc.UID == req.ClusterUID) && hasGroup
	})
	if rc == nil || err != nil {
		return clusterInfo{}, a.clusterReadDenial(key, err)
	}
	if req.ClusterUID != "" && rc.UID != req.ClusterUID {
		return clusterInfo{}, a.staleGeneration(req, rc.UID)
	}
	desired, ok := claims.DesiredReplicas(rc, req.GroupName)
	if !ok {
		return clusterInfo{}, a.deny(false, "RayCluster %s has no worker group %q", req.ClusterName, req.GroupName)
	}
	return clusterInfo{uid: rc.UID, desired: desired}, nil
}

// liveCluster reads a RayCluster from the API server; a missing one is a permanent denial.
func (a *Allocator) liveCluster(ctx context.Context, key types.NamespacedName) (*rayv1.RayCluster, error) {
	// A fresh object: client-go decodes into the object it is given without zeroing it, so
	// fields the live RayCluster omits would keep a cached generation's values.
	rc := &rayv1.RayCluster{}
	if err := a.reader.Get(ctx, key, rc); err != nil {
		return nil, a.clusterReadDenial(key, client.IgnoreNotFound(err))
	}
	return rc, nil
}

// clusterReadDenial is the denial of a RayCluster that could not be read (err), or does not
// exist (nil err): permanent unless the error may go away.
func (a *Allocator) clusterReadDenial(key types.NamespacedName, err error) error {
	if err == nil {
		return a.deny(false, "RayCluster %s/%s of this TPU worker Pod does not exist", key.Namespace, key.Name)
	}
	return a.deny(!isPermanent(err), "reading RayCluster %s/%s: %v", key.Namespace, key.Name, err)
}

// confirmGeneration checks with a live read that req's RayCluster generation is the live one,
// before a slice of another generation is deleted (docs/spec.md §10): the cache may still show a
// deleted generation whose in-flight creates would otherwise replace the new one's slices.
func (a *Allocator) confirmGeneration(ctx context.Context, req Request) error {
	rc, err := a.liveCluster(ctx, types.NamespacedName{Namespace: req.Namespace, Name: req.ClusterName})
	if err != nil {
		return err
	}
	if rc.UID != req.ClusterUID {
		return a.staleGeneration(&req, rc.UID)
	}
	return nil
}

func (a *Allocator) staleGeneration(req *Request, live types.UID) error {
	return a.deny(false, "the Pod's owner, RayCluster %s/%s with UID %s, has been deleted (the cluster now has UID %s): a create of the deleted generation is refused",
		req.Namespace, req.ClusterName, req.ClusterUID, live)
}
