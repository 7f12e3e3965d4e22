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

// Package validation checks the TPU worker groups of a RayCluster (docs/spec.md §6): the topology agrees
// with numOfHosts and the chips each Pod requests, and the hostnames the Pod webhook will give the
// hosts are valid. It makes no API calls.
package validation

import (
	"errors"
	"fmt"
	"strings"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
)

var workerGroupsPath = field.NewPath("spec", "workerGroupSpecs")

// IsTPUGroup reports whether a worker group asks for TPUs: one of its containers requests
// google.com/tpu, or its Pods select a TPU topology or carry the slice topology annotation.
func IsTPUGroup(group *rayv1.WorkerGroupSpec) bool {
	_, hasTopology := group.Template.Spec.NodeSelector[constants.TopologyNodeSelectorKey]
	_, hasSliceTopology := group.Template.Annotations[constants.SliceTopologyAnnotation]
	return hasTopology || hasSliceTopology || topology.ChipsPerPod(&group.Template.Spec) > 0
}

// ValidateRayCluster returns the field errors of every TPU worker group of rc.
func ValidateRayCluster(rc *rayv1.RayCluster) field.ErrorList {
	errs := make(field.ErrorList, 0, len(rc.Spec.WorkerGroupSpecs))
	for i := range rc.Spec.WorkerGroupSpecs {
		errs = append(errs, validateWorkerGroup(rc.Name, &rc.Spec.WorkerGroupSpecs[i], workerGroupsPath.Index(i))...)
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// ValidateRayClusterUpdate validates newRC like ValidateRayCluster, but ratchets: a TPU group whose
// TPU fields did not change is not refused for a rule it already broke. Such problems come back as
// warnings, so scaling a cluster created before the operator was installed is never blocked.
func ValidateRayClusterUpdate(oldRC, newRC *rayv1.RayCluster) (field.ErrorList, []string) {
	oldGroups := make(map[string]*rayv1.WorkerGroupSpec, len(oldRC.Spec.WorkerGroupSpecs))
	for i := range oldRC.Spec.WorkerGroupSpecs {
		oldGroups[oldRC.Spec.WorkerGroupSpecs[i].GroupName] = &oldRC.Spec.WorkerGroupSpecs[i]
	}
	var errs field.ErrorList
	var warnings []string
	for i := range newRC.Spec.WorkerGroupSpecs {
		group := &newRC.Spec.WorkerGroupSpecs[i]
		groupErrs := validateWorkerGroup(newRC.Name, group, workerGroupsPath.Index(i))
		if len(groupErrs) == 0 {
			continue
		}
		if old, ok := oldGroups[group.GroupName]; ok && oldRC.Name == newRC.Name && !tpuFieldsChanged(old, group) {
			for _, e := range groupErrs {
				warnings = append(warnings, fmt.Sprintf("worker group %q is unchanged but invalid for TPU: %s", group.GroupName, e.Error()))
			}
			continue
		}
		errs = append(errs, groupErrs...)
	}
	return errs, warnings
}

// tpuFieldsChanged reports whether anything the TPU rules read differs between two versions of a group.
func tpuFieldsChanged(oldGroup, newGroup *rayv1.WorkerGroupSpec) bool {
	oldSlice, oldAnnotated := oldGroup.Template.Annotations[constants.SliceTopologyAnnotation]
	newSlice, newAnnotated := newGroup.Template.Annotations[constants.SliceTopologyAnnotation]
	if oldGroup.NumOfHosts != newGroup.NumOfHosts || oldSlice != newSlice || oldAnnotated != newAnnotated ||
		!equality.Semantic.DeepEqual(oldGroup.Template.Spec.NodeSelector, newGroup.Template.Spec.NodeSelector) ||
		len(oldGroup.Template.Spec.Containers) != len(newGroup.Template.Spec.Containers) {
		return true
	}
	for i := range newGroup.Template.Spec.Containers {
		if !equality.Semantic.DeepEqual(oldGroup.Template.Spec.Containers[i].Resources, newGroup.Template.Spec.Containers[i].Resources) {
			return true
		}
	}
	return false
}

func validateWorkerGroup(cluster string, group *rayv1.WorkerGroupSpec, path *field.Path) field.ErrorList {
	if !IsTPUGroup(group) {
		return nil
	}
	slice, err := topology.FromPod(group.Template.Annotations, &group.Template.Spec)
	if err != nil {
		return field.ErrorList{topologyFieldError(err, path.Child("template"), &group.Template)}
	}
	var errs field.ErrorList
	if slice.Hosts != group.NumOfHosts {
		errs = append(errs, field.Invalid(path.Child("numOfHosts"), group.NumOfHosts,
			fmt.Sprintf("topology %s%s has %d chips and each Pod requests %d, so the slice needs numOfHosts %d",
				slice.Topology, topologySource(slice), slice.Topology.Chips(), slice.ChipsPerPod, slice.Hosts)))
	}
	if slice.Hosts > 1 {
		subdomain := naming.HeadlessServiceName(cluster)
		if problems := naming.ValidateSubdomain(subdomain); len(problems) > 0 {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), cluster,
				fmt.Sprintf("multi-host TPU group %q needs the headless worker Service %q as its Pods' subdomain: %s",
					group.GroupName, subdomain, strings.Join(problems, "; "))))
		}
	}
	return errs
}

// topologySource names where an annotated slice's topology comes from, for messages; it is empty
// for the usual nodeSelector topology.
func topologySource(slice topology.Slice) string {
	if slice.Annotated {
		return " of annotation " + constants.SliceTopologyAnnotation
	}
	return ""
}

// topologyFieldError turns a topology error into a field error on the input at fault.
func topologyFieldError(err error, templatePath *field.Path, template *corev1.PodTemplateSpec) *field.Error {
	specPath := templatePath.Child("spec")
	spec := &template.Spec
	selectorPath := specPath.Child("nodeSelector")
	var terr *topology.Error
	if !errors.As(err, &terr) {
		return field.InternalError(specPath, err)
	}
	switch terr.Field {
	case topology.FieldSliceTopology:
		key := templatePath.Child("metadata", "annotations").Key(constants.SliceTopologyAnnotation)
		if errors.Is(err, topology.ErrEmptySliceTopology) {
			return field.Required(key, terr.Error())
		}
		return field.Invalid(key, template.Annotations[constants.SliceTopologyAnnotation], terr.Error())
	case topology.FieldTopology:
		key := selectorPath.Key(constants.TopologyNodeSelectorKey)
		if errors.Is(err, topology.ErrMissingTopology) {
			return field.Required(key, terr.Error())
		}
		return field.Invalid(key, spec.NodeSelector[constants.TopologyNodeSelectorKey], terr.Error())
	case topology.FieldAccelerator:
		return field.Invalid(selectorPath.Key(constants.AcceleratorNodeSelectorKey), spec.NodeSelector[constants.AcceleratorNodeSelectorKey], terr.Error())
	default:
		return field.Invalid(specPath.Child("containers"), topology.ChipsPerPod(spec), terr.Error())
	}
}
