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

package testutil

import (
	"context"
	"slices"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/provisioning"
)

// Scheme returns a new scheme of the types the operator reads and writes: client-go's, KubeRay's
// ray.io/v1 and tpu.ray.io/v1alpha1. They are those of internal/operator.Scheme, which testutil
// cannot import (the operator imports the packages whose tests import testutil); a test of
// internal/operator keeps the two alike.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(rayv1.AddToScheme(s))
	utilruntime.Must(tpuv1alpha1.AddToScheme(s))
	utilruntime.Must(provisioning.AddToScheme(s))
	return s
}

// NewClientBuilder returns a fake client builder shaped like the operator's API server and cache:
// Scheme, the status subresource of TPUSliceAssignments, and the Pod field indexes the operator
// registers on its cache (identity.SliceIndex and identity.TokenIndex). Add objects and
// interceptors to it, then Build.
func NewClientBuilder() *fake.ClientBuilder {
	return fake.NewClientBuilder().
		WithScheme(Scheme()).
		WithStatusSubresource(&tpuv1alpha1.TPUSliceAssignment{}, &provisioning.ProvisioningRequest{}).
		WithIndex(&corev1.Pod{}, identity.SliceIndex, identity.SliceIndexValue).
		WithIndex(&corev1.Pod{}, identity.TokenIndex, identity.TokenIndexValue).
		// The API server's own field selector on Pods, which the reconciler's live reads use.
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string {
			if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName != "" {
				return []string{p.Spec.NodeName}
			}
			return nil
		})
}

// WorkerPodCache is the operator's cache as it shows the store c: only the Pods KubeRay's worker
// labels select (internal/operator.CacheOptions). A Pod whose ray.io/group label was removed is
// seen only by the live reads.
func WorkerPodCache(c client.WithWatch) client.WithWatch {
	selected := func(pod *corev1.Pod) bool {
		_, cluster := pod.Labels[rayutils.RayClusterLabelKey]
		_, group := pod.Labels[rayutils.RayNodeGroupLabelKey]
		return pod.Labels[rayutils.RayNodeTypeLabelKey] == string(rayv1.WorkerNode) && cluster && group
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if pod, ok := obj.(*corev1.Pod); ok && !selected(pod) {
				return apierrors.NewNotFound(corev1.Resource("pods"), key.Name)
			}
			return nil
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := c.List(ctx, list, opts...); err != nil {
				return err
			}
			if pods, ok := list.(*corev1.PodList); ok {
				pods.Items = slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return !selected(&p) })
			}
			return nil
		},
	})
}
