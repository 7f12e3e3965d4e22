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

import corev1 "k8s.io/api/core/v1"

// ContainerWrapper builds containers, for PodWrapper.Containers.
type ContainerWrapper struct{ corev1.Container }

// MakeContainer returns a container named name running the Ray image, without TPUs or env.
func MakeContainer(name string) *ContainerWrapper {
	return &ContainerWrapper{corev1.Container{Name: name, Image: rayImage}}
}

// Obj returns a copy of the built container, so that a wrapper can be reused as a template.
func (c *ContainerWrapper) Obj() corev1.Container { return *c.DeepCopy() }

// TPU sets the container's google.com/tpu request and limit.
func (c *ContainerWrapper) TPU(chips int64) *ContainerWrapper {
	setTPU(&c.Container, chips)
	return c
}

// Env appends the environment variable name=value.
func (c *ContainerWrapper) Env(name, value string) *ContainerWrapper {
	return c.EnvVars(corev1.EnvVar{Name: name, Value: value})
}

// EnvVars appends env entries as given.
func (c *ContainerWrapper) EnvVars(env ...corev1.EnvVar) *ContainerWrapper {
	c.Container.Env = append(c.Container.Env, env...)
	return c
}
