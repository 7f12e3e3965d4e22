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

// cluster resolves req's RayCluster: from the cache when it has the UID the Pod names and has
// the Pod's group with the Pod's host count, else from the API server (a cluster just re-created,
// or a group just added or resized, that the cache has not seen). The RayCluster is read here, by
// whoever commits the claim, never taken from the request: a forwarded claim names its cluster, not
// its replica count. A Pod whose topology gives another host count than the group's numOfHosts is
// denied here, before it joins any batch (docs/spec.md §10): KubeRay creates numOfHosts Pods per
// replica, so such a Pod is not one the RayCluster asks for, and a batch or a slice shaped by it
// would split the group's own Pods.
func (a *Allocator) cluster(ctx context.Context, req *Request) (clusterInfo, error) {
	key := types.NamespacedName{Namespace: req.Namespace, Name: req.ClusterName}
	rc, err := reads.CacheThenLive(ctx, a.client, a.reader, key, func(rc *rayv1.RayCluster) bool {
		hosts, hasGroup := numOfHosts(rc, req.GroupName)
		return (req.ClusterUID == "" || rc.UID == req.ClusterUID) && hasGroup && hosts == req.Hosts
	}, client.UnsafeDisableDeepCopy) // read here only, on every claim: no copy of its templates
	if rc == nil || err != nil {
		return clusterInfo{}, a.clusterReadDenial(key, err)
	}
	if req.ClusterUID != "" && rc.UID != req.ClusterUID {
		return clusterInfo{}, a.staleClusterUID(req, rc.UID)
	}
	desired, ok := claims.DesiredReplicas(rc, req.GroupName)
	if !ok {
		return clusterInfo{}, a.deny(false, "RayCluster %s has no worker group %q", req.ClusterName, req.GroupName)
	}
	if hosts, _ := numOfHosts(rc, req.GroupName); hosts != req.Hosts {
		return clusterInfo{}, a.deny(false,
			"this Pod's topology %s gives %d hosts per slice, but worker group %q of RayCluster %s/%s has numOfHosts %d, a slice of %d hosts; "+
				"create the group's Pods from its template (its topology and google.com/tpu request give numOfHosts hosts), or fix numOfHosts",
			req.Topology, req.Hosts, req.GroupName, req.Namespace, req.ClusterName, hosts, hosts)
	}
	return clusterInfo{uid: rc.UID, desired: desired}, nil
}

// numOfHosts returns the hosts per replica of a RayCluster worker group (its numOfHosts; 1, the
// CRD's default, when unset); ok is false when the group does not exist.
func numOfHosts(rc *rayv1.RayCluster, group string) (hosts int32, ok bool) {
	for _, g := range rc.Spec.WorkerGroupSpecs {
		if g.GroupName == group {
			return max(g.NumOfHosts, 1), true
		}
	}
	return 0, false
}

// liveCluster reads a RayCluster from the API server; a missing one is a permanent denial.
func (a *Allocator) liveCluster(ctx context.Context, key types.NamespacedName) (*rayv1.RayCluster, error) {
	// A fresh object: client-go decodes into the object it is given without zeroing it, so
	// fields the live RayCluster omits would keep a cached object's values.
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

// confirmLiveClusterUID checks with a live read that req's RayCluster UID is the live one,
// before a slice of another UID is deleted (docs/spec.md §10): the cache may still show a
// deleted RayCluster whose in-flight creates would otherwise replace the new one's slices.
func (a *Allocator) confirmLiveClusterUID(ctx context.Context, req Request) error {
	rc, err := a.liveCluster(ctx, types.NamespacedName{Namespace: req.Namespace, Name: req.ClusterName})
	if err != nil {
		return err
	}
	if rc.UID != req.ClusterUID {
		return a.staleClusterUID(&req, rc.UID)
	}
	return nil
}

func (a *Allocator) staleClusterUID(req *Request, live types.UID) error {
	return a.deny(false, "the Pod's owner, RayCluster %s/%s with UID %s, has been deleted (the cluster now has UID %s): a create for the deleted RayCluster is refused",
		req.Namespace, req.ClusterName, req.ClusterUID, live)
}
