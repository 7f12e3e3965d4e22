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

package tpuenv_test

// Small builders for Pods and containers in the style of Kueue's testing wrappers. They are local
// for now and meant to move to a shared testutil package.

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
)

// podWrapper builds a Pod.
type podWrapper struct{ corev1.Pod }

// makePod returns a Pod wrapper with the given name and namespace and nothing else.
func makePod(name, namespace string) *podWrapper {
	return &podWrapper{corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
	}}
}

// Obj returns a deep copy of the built Pod, so a wrapper can be reused as a template.
func (p *podWrapper) Obj() *corev1.Pod {
	return p.DeepCopy()
}

// GenerateName sets metadata.generateName.
func (p *podWrapper) GenerateName(prefix string) *podWrapper {
	p.ObjectMeta.GenerateName = prefix
	return p
}

// Label sets a label.
func (p *podWrapper) Label(key, value string) *podWrapper {
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[key] = value
	return p
}

// Annotation sets an annotation.
func (p *podWrapper) Annotation(key, value string) *podWrapper {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[key] = value
	return p
}

// Claim sets the labels and annotation tying a Pod to its claim.
func (p *podWrapper) Claim(replicaIndex, slice, workerID, token string) *podWrapper {
	return p.Label(constants.ReplicaIndexLabel, replicaIndex).
		Label(tpuv1alpha1.SliceLabel, slice).
		Label(tpuv1alpha1.WorkerIDLabel, workerID).
		Annotation(tpuv1alpha1.ClaimTokenAnnotation, token)
}

// Containers appends containers.
func (p *podWrapper) Containers(containers ...corev1.Container) *podWrapper {
	p.Spec.Containers = append(p.Spec.Containers, containers...)
	return p
}

// Hostname sets spec.hostname and spec.subdomain.
func (p *podWrapper) Hostname(hostname, subdomain string) *podWrapper {
	p.Spec.Hostname = hostname
	p.Spec.Subdomain = subdomain
	return p
}

// Affinity sets spec.affinity.
func (p *podWrapper) Affinity(affinity *corev1.Affinity) *podWrapper {
	p.Spec.Affinity = affinity
	return p
}

// containerWrapper builds a container.
type containerWrapper struct{ corev1.Container }

// makeContainer returns a container wrapper with the given name and a fixed image.
func makeContainer(name string) *containerWrapper {
	return &containerWrapper{corev1.Container{Name: name, Image: "rayproject/ray:2.50.0"}}
}

// Obj returns a deep copy of the built container.
func (c *containerWrapper) Obj() corev1.Container {
	return *c.DeepCopy()
}

// TPU requests and limits chips of constants.TPUResourceName.
func (c *containerWrapper) TPU(chips int64) *containerWrapper {
	q := *resource.NewQuantity(chips, resource.DecimalSI)
	c.Resources.Requests = corev1.ResourceList{constants.TPUResourceName: q}
	c.Resources.Limits = corev1.ResourceList{constants.TPUResourceName: q}
	return c
}

// Env appends name=value.
func (c *containerWrapper) Env(name, value string) *containerWrapper {
	return c.EnvVars(corev1.EnvVar{Name: name, Value: value})
}

// EnvVars appends env entries as given.
func (c *containerWrapper) EnvVars(env ...corev1.EnvVar) *containerWrapper {
	c.Container.Env = append(c.Container.Env, env...)
	return c
}

// fieldRefEnv returns an env entry read from a Pod field, as the API server stores it.
func fieldRefEnv(name, fieldPath string) corev1.EnvVar {
	return corev1.EnvVar{
		Name: name,
		ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: fieldPath},
		},
	}
}

// configMapEnv returns an env entry read from a ConfigMap key.
func configMapEnv(name, configMap, key string) corev1.EnvVar {
	return corev1.EnvVar{
		Name: name,
		ValueFrom: &corev1.EnvVarSource{
			ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: configMap},
				Key:                  key,
			},
		},
	}
}
