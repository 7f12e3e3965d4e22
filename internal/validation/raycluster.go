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

// Package validation checks the TPU worker groups of a RayCluster (docs/spec.md §6): the topology
// (or GKE subslice) agrees with numOfHosts and the chips each Pod requests, the slice is not larger
// than the operator allows, and the hostnames and affinity the Pod webhook will give the hosts are
// valid. Those are field errors. Where a subsliced group's Pods will land depends on the TPU Nodes,
// which change, so what the Nodes say about it comes back as warnings. The package makes no API
// calls of its own: Nodes come from the caller's NodeLister.
package validation

import (
	"context"
	"errors"
	"fmt"
	"strings"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

var workerGroupsPath = field.NewPath("spec", "workerGroupSpecs")

// IsTPUGroup reports whether a worker group asks for TPUs: one of its containers requests
// google.com/tpu, or its Pods select a TPU topology or carry the slice topology annotation.
func IsTPUGroup(group *rayv1.WorkerGroupSpec) bool {
	_, hasTopology := group.Template.Spec.NodeSelector[constants.TopologyNodeSelectorKey]
	_, hasSliceTopology := group.Template.Annotations[constants.SliceTopologyAnnotation]
	return hasTopology || hasSliceTopology || topology.ChipsPerPod(&group.Template.Spec) > 0
}

// Options configure a Validator. The zero value is the default.
type Options struct {
	// MaxSliceHosts bounds the hosts of one slice; below 1 means topology.DefaultMaxSliceHosts.
	MaxSliceHosts int32
	// Nodes lists the TPU Nodes, for the warnings about where a subsliced group's Pods will land.
	// nil skips those warnings.
	Nodes placement.NodeLister
}

// Validator checks the TPU worker groups of RayClusters. A nil *Validator uses the default
// Options.
type Validator struct {
	opts Options
}

// New returns a Validator with opts.
func New(opts Options) *Validator {
	return &Validator{opts: opts}
}

func (v *Validator) options() Options {
	if v == nil {
		return Options{}
	}
	return v.opts
}

// ValidateCreate returns the field errors of every TPU worker group of rc and the warnings about
// the valid ones (see nodeWarnings).
func (v *Validator) ValidateCreate(ctx context.Context, rc *rayv1.RayCluster) (field.ErrorList, []string) {
	var errs field.ErrorList
	var warnings []string
	for i := range rc.Spec.WorkerGroupSpecs {
		groupErrs, groupWarnings := v.validateWorkerGroup(ctx, rc, &rc.Spec.WorkerGroupSpecs[i], workerGroupsPath.Index(i), true)
		errs = append(errs, groupErrs...)
		warnings = append(warnings, groupWarnings...)
	}
	return errs, warnings
}

// ValidateUpdate validates newRC like ValidateCreate, but ratchets: a TPU group whose TPU fields
// did not change is not refused for a rule it already broke. Such problems come back as warnings,
// so scaling a cluster created before the operator was installed is never blocked. An unchanged
// group is not checked against the Nodes again either: it was when it was created or last changed.
func (v *Validator) ValidateUpdate(ctx context.Context, oldRC, newRC *rayv1.RayCluster) (field.ErrorList, []string) {
	oldGroups := make(map[string]*rayv1.WorkerGroupSpec, len(oldRC.Spec.WorkerGroupSpecs))
	for i := range oldRC.Spec.WorkerGroupSpecs {
		oldGroups[oldRC.Spec.WorkerGroupSpecs[i].GroupName] = &oldRC.Spec.WorkerGroupSpecs[i]
	}
	var errs field.ErrorList
	var warnings []string
	for i := range newRC.Spec.WorkerGroupSpecs {
		group := &newRC.Spec.WorkerGroupSpecs[i]
		old, ok := oldGroups[group.GroupName]
		unchanged := ok && oldRC.Name == newRC.Name && !tpuFieldsChanged(old, group)
		groupErrs, groupWarnings := v.validateWorkerGroup(ctx, newRC, group, workerGroupsPath.Index(i), !unchanged)
		warnings = append(warnings, groupWarnings...)
		if len(groupErrs) == 0 {
			continue
		}
		if unchanged {
			for _, e := range groupErrs {
				warnings = append(warnings, fmt.Sprintf("worker group %q is unchanged but invalid for TPU: %s", group.GroupName, e.Error()))
			}
			continue
		}
		errs = append(errs, groupErrs...)
	}
	return errs, warnings
}

// ValidateRayCluster returns the field errors of every TPU worker group of rc, with the default
// Options and no Nodes.
func ValidateRayCluster(rc *rayv1.RayCluster) field.ErrorList {
	errs, _ := New(Options{}).ValidateCreate(context.Background(), rc)
	return errs
}

// ValidateRayClusterUpdate is ValidateUpdate with the default Options and no Nodes.
func ValidateRayClusterUpdate(oldRC, newRC *rayv1.RayCluster) (field.ErrorList, []string) {
	return New(Options{}).ValidateUpdate(context.Background(), oldRC, newRC)
}

// tpuFieldsChanged reports whether anything the TPU rules read differs between two versions of a group.
func tpuFieldsChanged(oldGroup, newGroup *rayv1.WorkerGroupSpec) bool {
	if oldGroup.NumOfHosts != newGroup.NumOfHosts ||
		annotationChanged(oldGroup, newGroup, constants.SliceTopologyAnnotation) ||
		annotationChanged(oldGroup, newGroup, constants.AffinityTopologyKeyAnnotation) ||
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

// annotationChanged reports whether the Pod template annotation key differs, present or not.
func annotationChanged(oldGroup, newGroup *rayv1.WorkerGroupSpec, key string) bool {
	oldValue, oldOK := oldGroup.Template.Annotations[key]
	newValue, newOK := newGroup.Template.Annotations[key]
	return oldOK != newOK || oldValue != newValue
}

// validateWorkerGroup returns the field errors of one worker group of rc and, when checkNodes and
// it has none, its warnings about the Nodes.
func (v *Validator) validateWorkerGroup(ctx context.Context, rc *rayv1.RayCluster, group *rayv1.WorkerGroupSpec,
	path *field.Path, checkNodes bool,
) (field.ErrorList, []string) {
	if !IsTPUGroup(group) {
		return nil, nil
	}
	templatePath := path.Child("template")
	slice, err := topology.FromPod(group.Template.Annotations, &group.Template.Spec)
	if err != nil {
		return field.ErrorList{topologyFieldError(err, templatePath, &group.Template)}, nil
	}
	var errs field.ErrorList
	if err := slice.CheckMaxHosts(v.options().MaxSliceHosts); err != nil {
		errs = append(errs, topologyFieldError(err, templatePath, &group.Template))
	}
	if slice.Hosts != group.NumOfHosts {
		errs = append(errs, field.Invalid(path.Child("numOfHosts"), group.NumOfHosts,
			fmt.Sprintf("topology %s%s has %d chips and each Pod requests %d, so the slice needs numOfHosts %d",
				slice.Topology, topologySource(slice), slice.Topology.Chips(), slice.ChipsPerPod, slice.Hosts)))
	}
	if len(errs) == 0 {
		// The Pod webhook denies a Pod whose host lists cannot be passed to its container; so is
		// the group whose Pods they would be, rather than every replica KubeRay creates of it
		// (docs/spec.md §4, §6). The largest replica index has the longest hostnames.
		replicas := max(ptr.Deref(group.Replicas, 0), ptr.Deref(group.MaxReplicas, 0), ptr.Deref(group.MinReplicas, 0), 1)
		probe := tpuenv.Values{GroupName: group.GroupName, ReplicaIndex: replicas - 1, Hosts: slice.Hosts,
			Subdomain: naming.HeadlessServiceName(rc.Name), V7x: topology.IsV7x(slice.Accelerator)}
		if err := tpuenv.HostListsFit(probe, len(slice.TPUContainers)); err != nil {
			errs = append(errs, field.Invalid(path.Child("numOfHosts"), group.NumOfHosts, err.Error()))
		}
	}
	if slice.Hosts > 1 {
		subdomain := naming.HeadlessServiceName(rc.Name)
		if problems := naming.ValidateSubdomain(subdomain); len(problems) > 0 {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), rc.Name,
				fmt.Sprintf("multi-host TPU group %q needs the headless worker Service %q as its Pods' subdomain: %s",
					group.GroupName, subdomain, strings.Join(problems, "; "))))
		}
		if value, ok := group.Template.Annotations[constants.AffinityTopologyKeyAnnotation]; ok {
			if problems := placement.ValidateTopologyKey(strings.TrimSpace(value)); len(problems) > 0 {
				errs = append(errs, field.Invalid(
					templatePath.Child("metadata", "annotations").Key(constants.AffinityTopologyKeyAnnotation), value,
					"the topologyKey of the slice's pod affinity must be a label key: "+strings.Join(problems, "; ")))
			}
		}
	}
	if len(errs) > 0 || !checkNodes {
		return errs, nil
	}
	return nil, v.nodeWarnings(ctx, rc, group, slice)
}

// nodeWarnings returns the warnings about where the Pods of a valid subsliced multi-host group
// will land, when Options.Nodes is set. It runs the Pod webhook's choice (placement.Decide) on the
// group's Pod template and warns when the subslice cannot be kept on a GCE topology domain and
// falls back to its node pool: there are no matching Nodes yet, they carry no GCE topology labels,
// or no domain holds exactly the subslice's hosts. Groups Kueue or dynamic slicing places, or
// whose key the user chose, are not checked.
//
// These are warnings, not errors, though some variants of the reference webhook deny the last two:
// they describe the cluster's Nodes at this moment (a pool scaling up from zero, a Node being
// repaired), not the RayCluster, which stays correct when the Nodes change; refusing it would
// also refuse the same manifest on a re-apply, and its Pods are admitted either way. A Node list
// error is a warning too.
func (v *Validator) nodeWarnings(ctx context.Context, rc *rayv1.RayCluster, group *rayv1.WorkerGroupSpec, slice topology.Slice) []string {
	lister := v.options().Nodes
	if lister == nil || !slice.Annotated || slice.Hosts <= 1 {
		return nil
	}
	template := &group.Template
	pod := &corev1.Pod{ObjectMeta: template.ObjectMeta, Spec: template.Spec}
	selector := template.Spec.NodeSelector
	decision, err := placement.Decide(placement.Input{
		Pod:   pod,
		Slice: slice,
		Managed: placement.Managed(
			placement.Object{Kind: "RayCluster", Labels: rc.Labels, Annotations: rc.Annotations},
			placement.Object{Kind: "Pod template", Labels: template.Labels, Annotations: template.Annotations}),
		Nodes: func() ([]placement.Node, error) { return lister.ListNodes(ctx, selector) },
	})
	name, shape := group.GroupName, slice.Topology.String()
	switch {
	case err != nil:
		return []string{fmt.Sprintf("worker group %q: could not check where subslice %s fits: %v", name, shape, err)}
	case decision.Source != placement.SourceDefault || decision.Nodes == nil:
		return nil
	}
	fallback := fmt.Sprintf("so its Pods are kept on one node pool (%s), which no other subslice can then share", constants.NodePoolTopologyKey)
	fit := decision.Nodes
	switch {
	case fit.Matching == 0:
		return []string{fmt.Sprintf("worker group %q: subslice %s targets no Nodes yet (nodeSelector %s): Pods created before such Nodes exist "+
			"cannot be kept on a GCE topology domain, %s", name, shape, placement.FormatSelector(selector), fallback)}
	case fit.Labeled == 0:
		return []string{fmt.Sprintf("worker group %q: none of the %d Nodes matching nodeSelector %s has a GCE topology label (%s), "+
			"so subslice %s cannot be placed inside a node pool (this TPU type or GKE version needs GKE dynamic slicing for it), %s",
			name, fit.Matching, placement.FormatSelector(selector), strings.Join(placement.Levels(), ", "), shape, fallback)}
	default:
		return []string{fmt.Sprintf("worker group %q: no GCE topology domain holds exactly %d of the %d Nodes matching nodeSelector %s, "+
			"so subslice %s is ambiguous, %s", name, slice.Hosts, fit.Matching, placement.FormatSelector(selector), shape, fallback)}
	}
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
