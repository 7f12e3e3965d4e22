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

// Package provisioning is how a ChosenDomain slice that no domain fits gets capacity from the
// cluster autoscaler (docs/spec.md §12, "Capacity"): the autoscaler acts only on Pods the
// scheduler marked Unschedulable, never on gated ones, so the operator asks for the slice's
// capacity itself.
//
// Where the cluster serves the autoscaler's ProvisioningRequest API (autoscaling.x-k8s.io/v1) it
// creates one request per slice, with a PodTemplate of the slice's Pod shape and a count of its
// hosts. Elsewhere it creates the slice's capacity Pods: one Pod of the slice's shape per host,
// ungated, kept in one domain by required pod affinity and out of every domain that exists, which
// the scheduler marks Unschedulable and the autoscaler scales a new pool up for. Both are owned by
// the slice and deleted once its Pods are released onto a domain.
//
// The package holds the API's types as this operator uses them (the autoscaler's own module is
// not a dependency) and the pure decisions: what to create, and what a request's conditions mean.
//
// +kubebuilder:object:generate=true
// +groupName=autoscaling.x-k8s.io
// +versionName=v1
package provisioning
