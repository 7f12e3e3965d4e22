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

package claims

import (
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
)

// NewSlice returns the TPUSliceAssignment of spec's replica, named from its cluster, group and
// replica, labeled with the cluster (ours and KubeRay's key) and group, and owned (not controlled) by the RayCluster.
// The webhook creates it on a slice's first claim and the reconciler on adopting a Pod whose
// slice does not exist.
func NewSlice(namespace string, spec tpuv1alpha1.TPUSliceAssignmentSpec) *tpuv1alpha1.TPUSliceAssignment {
	return &tpuv1alpha1.TPUSliceAssignment{
		ObjectMeta: metav1.ObjectMeta{
			Name:      naming.SliceName(spec.RayClusterName, spec.GroupName, spec.ReplicaIndex),
			Namespace: namespace,
			Labels: map[string]string{
				tpuv1alpha1.ClusterLabel: naming.LabelValue(spec.RayClusterName),
				tpuv1alpha1.GroupLabel:   naming.LabelValue(spec.GroupName),
				// KubeRay's own key, so that `kubectl wait tpusliceassignment -l ray.io/cluster=<c>`
				// selects the cluster's slices as it selects its Pods (docs/spec.md §7).
				rayutils.RayClusterLabelKey: naming.LabelValue(spec.RayClusterName),
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "ray.io/v1",
				Kind:       "RayCluster",
				Name:       spec.RayClusterName,
				UID:        spec.RayClusterUID,
				Controller: ptr.To(false),
			}},
		},
		Spec: spec,
	}
}

// IsSliceOf reports whether slice is the slice of replica of the worker group, under the name it
// must have. Another group whose slice name collides (a hash collision of the shortened name, or a
// hand-made object) fails it: two groups never share one object (docs/spec.md §10).
func IsSliceOf(slice *tpuv1alpha1.TPUSliceAssignment, cluster, group string, replica int32) bool {
	return slice.Spec.RayClusterName == cluster && slice.Spec.GroupName == group && slice.Spec.ReplicaIndex == replica &&
		slice.Name == naming.SliceName(cluster, group, replica)
}
