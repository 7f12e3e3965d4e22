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

package webhooks

import (
	"context"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/ray-tpu/tpu-slice-operator/internal/validation"
)

// +kubebuilder:webhook:path=/validate-ray-io-v1-raycluster,mutating=false,failurePolicy=fail,sideEffects=None,groups=ray.io,resources=rayclusters,verbs=create;update,versions=v1,name=vraycluster.tpu.ray.io,admissionReviewVersions=v1,timeoutSeconds=10

// rayClusterWebhook refuses RayClusters whose TPU worker groups cannot form a slice, and warns
// about subsliced groups the TPU Nodes cannot place as asked (docs/spec.md §6).
type rayClusterWebhook struct {
	// validator checks the groups; nil uses the default options and checks no Nodes.
	validator *validation.Validator
}

var _ admission.Validator[*rayv1.RayCluster] = &rayClusterWebhook{}

var rayClusterGK = schema.GroupKind{Group: rayv1.GroupVersion.Group, Kind: "RayCluster"}

// ValidateCreate checks every TPU worker group; the warnings are returned even when it refuses.
func (w *rayClusterWebhook) ValidateCreate(ctx context.Context, rc *rayv1.RayCluster) (admission.Warnings, error) {
	errs, warnings := w.validator.ValidateCreate(ctx, rc)
	if len(errs) > 0 {
		return warnings, apierrors.NewInvalid(rayClusterGK, rc.Name, errs)
	}
	return warnings, nil
}

// ValidateUpdate checks changed TPU worker groups; unchanged groups only get warnings (ratcheting).
func (w *rayClusterWebhook) ValidateUpdate(ctx context.Context, oldRC, newRC *rayv1.RayCluster) (admission.Warnings, error) {
	errs, warnings := w.validator.ValidateUpdate(ctx, oldRC, newRC)
	if len(errs) > 0 {
		return warnings, apierrors.NewInvalid(rayClusterGK, newRC.Name, errs)
	}
	return warnings, nil
}

// ValidateDelete allows every delete.
func (w *rayClusterWebhook) ValidateDelete(context.Context, *rayv1.RayCluster) (admission.Warnings, error) {
	return nil, nil
}
