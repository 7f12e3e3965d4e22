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

	"k8s.io/apimachinery/pkg/types"

	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
)

// checkReplicaIndex bounds a request whose KubeRay labels name a replica index by the group's
// desired replicas, before any slice is read or written: a label is a hint anyone can write, and
// a slice opened beyond the desired replicas would hold a pending claim for the TTL
// (docs/spec.md §10). An index at or above what cluster (possibly the cache's view) asks for is
// checked against the live RayCluster, which may already show a scale-up KubeRay acts on; only
// when the live one agrees is the request denied permanently. A live read that fails is a
// transient denial.
func (a *Allocator) checkReplicaIndex(ctx context.Context, req *Request, cluster *clusterInfo) error {
	if req.Claim.ReplicaIndex == nil || *req.Claim.ReplicaIndex < cluster.desired {
		return nil
	}
	replica := *req.Claim.ReplicaIndex
	rc, err := a.liveCluster(ctx, types.NamespacedName{Namespace: req.Namespace, Name: req.ClusterName})
	if err != nil {
		return err
	}
	if rc.UID != req.ClusterUID {
		return a.staleClusterUID(req, rc.UID)
	}
	desired, ok := claims.DesiredReplicas(rc, req.GroupName)
	if !ok {
		return a.deny(false, "RayCluster %s has no worker group %q", req.ClusterName, req.GroupName)
	}
	if replica >= desired {
		return a.deny(false, "%s", claims.BeyondDesiredMessage(replica, desired))
	}
	cluster.desired = desired
	return nil
}
