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
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
)

// writeSlice makes the slice of replica hold exactly w.Claims, conditional on the state it was
// planned on: a create (AlreadyExists if someone was first), for a slice of a deleted RayCluster
// UID a delete with UID and resourceVersion preconditions first, and a resourceVersion-checked
// status update.
// It returns the slice as the API server stored it, and the versions its writes went over ("" for
// none), which a cache may still show.
func (a *Allocator) writeSlice(ctx context.Context, req Request, replica int32,
	current *tpuv1alpha1.TPUSliceAssignment, w claims.Write) (*tpuv1alpha1.TPUSliceAssignment, []string, error) {
	if err := a.storable(current, w); err != nil {
		return nil, nil, err
	}
	slice := current
	var over []string
	if slice != nil {
		over = append(over, slice.ResourceVersion)
	}
	if slice != nil && w.Replace {
		a.countWrite()
		if err := a.client.Delete(ctx, slice, client.Preconditions{UID: &slice.UID, ResourceVersion: &slice.ResourceVersion}); err != nil {
			return nil, nil, fmt.Errorf("removing slice %s of a deleted RayCluster UID: %w", slice.Name, err)
		}
		slice = nil
	}
	if slice == nil {
		spec := sliceSpec(req, replica, w)
		choice, err := a.slicePlacement(ctx, req)
		if err != nil {
			return nil, nil, err
		}
		spec.Placement = choice.Placement
		slice = claims.NewSlice(req.Namespace, spec)
		logPlacement(ctx, slice, choice)
		a.countWrite()
		if err := a.client.Create(ctx, slice, client.FieldOwner(constants.FieldManager)); err != nil {
			return nil, nil, fmt.Errorf("creating slice: %w", err)
		}
		over = append(over, "", slice.ResourceVersion)
	} else {
		slice = slice.DeepCopy()
	}
	slice.Status.Claims = w.Claims
	slice.Status.Claimed = int32(len(w.Claims)) //nolint:gosec // at most Hosts claims.
	a.countWrite()
	if err := a.client.Status().Update(ctx, slice, client.FieldOwner(constants.FieldManager)); err != nil {
		return nil, nil, err
	}
	return slice, over, nil
}

// sliceSpec is the spec of the slice of replica that a write creates.
func sliceSpec(req Request, replica int32, w claims.Write) tpuv1alpha1.TPUSliceAssignmentSpec {
	return tpuv1alpha1.TPUSliceAssignmentSpec{
		RayClusterName:       req.ClusterName,
		RayClusterUID:        req.ClusterUID,
		GroupName:            req.GroupName,
		ReplicaIndex:         replica,
		ReplicaName:          w.ReplicaName,
		ReplacedReplicaNames: w.ReplacedReplicaNames,
		Hosts:                req.Hosts,
		Topology:             req.Topology,
		Accelerator:          req.Accelerator,
		AffinityTopologyKey:  req.AffinityTopologyKey,
	}
}

// storable refuses, before anything is written, a write the status encoder would refuse, as a
// denial rather than a retry until the deadline: lines that do not parse would be dropped (refuseMalformed denies those before any
// plan), or a claim line could not be parsed back (a value the doors let through: a bug).
func (a *Allocator) storable(current *tpuv1alpha1.TPUSliceAssignment, w claims.Write) error {
	if current != nil {
		if err := a.refuseMalformed(current); err != nil {
			return err
		}
	}
	if _, err := tpuv1alpha1.ClaimList(w.Claims).Format(); err != nil {
		return a.deny(false, "the claims cannot be stored: %v", err)
	}
	return nil
}

func (a *Allocator) countWrite() {
	a.m.Writes.Inc()
}

// isPermanent reports whether the API server refused a request for a reason a retry cannot
// change: invalid (422), forbidden (403), malformed (400) or too large (413).
func isPermanent(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsRequestEntityTooLargeError(err)
}

func isConflict(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err)
}
