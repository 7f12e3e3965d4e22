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

package framework

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// WorkerEnv returns the value of an environment variable of the Pod's first TPU container.
func WorkerEnv(pod *corev1.Pod, name string) (string, bool) {
	tpu := topology.TPUContainers(&pod.Spec)
	if len(tpu) == 0 {
		return "", false
	}
	for _, e := range pod.Spec.Containers[tpu[0]].Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// Report summarizes the TPU worker Pods of a namespace by slice.
type Report struct {
	// LivePods is the number of live TPU worker Pods checked.
	LivePods int
	// IDs lists the worker IDs of live Pods per slice (TPUSliceAssignment name).
	IDs map[string][]int
}

// CheckAdmitted checks I1 and I2 of docs/spec.md §9 on the API server's live state: no two live Pods of a
// slice share TPU_WORKER_ID; every admitted TPU worker Pod has an ID in [0, hosts), a TPU_NAME that
// names its slice, and every full slice has exactly one host with ID 0.
func CheckAdmitted(ctx context.Context, c client.Reader, namespace string) (Report, error) {
	return CheckAdmittedPods(ctx, c, namespace, nil)
}

// CheckAdmittedPods is CheckAdmitted over the Pods keep accepts (all when keep is nil), e.g. to
// leave out Pods of a deleted RayCluster that the garbage collector envtest lacks would remove.
func CheckAdmittedPods(ctx context.Context, c client.Reader, namespace string, keep func(*corev1.Pod) bool) (Report, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(namespace)); err != nil {
		return Report{}, err
	}
	if keep != nil {
		pods.Items = slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return !keep(&p) })
	}
	var slicesList tpuv1alpha1.TPUSliceAssignmentList
	if err := c.List(ctx, &slicesList, client.InNamespace(namespace)); err != nil {
		return Report{}, err
	}
	hosts := map[string]int32{}
	for _, s := range slicesList.Items {
		hosts[s.Name] = s.Spec.Hosts
	}
	report := Report{IDs: map[string][]int{}}
	var errs []error
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Labels[rayutils.RayNodeTypeLabelKey] != "worker" || topology.ChipsPerPod(&pod.Spec) == 0 || !lifecycle.PodLive(pod) {
			continue
		}
		report.LivePods++
		slice := pod.Labels[constants.SliceLabel]
		idStr, ok := WorkerEnv(pod, constants.EnvWorkerID)
		if slice == "" || !ok {
			errs = append(errs, fmt.Errorf("I2: TPU worker Pod %s has no slice label or no %s", pod.Name, constants.EnvWorkerID))
			continue
		}
		id, err := strconv.Atoi(idStr)
		h, known := hosts[slice]
		shape, shapeErr := topology.FromPod(pod.Annotations, &pod.Spec)
		if shapeErr == nil && topology.IsV7x(shape.Accelerator) && len(shape.TPUContainers) > 1 {
			id /= len(shape.TPUContainers)
		}
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("I2: Pod %s has %s=%q", pod.Name, constants.EnvWorkerID, idStr))
			continue
		case !known:
			errs = append(errs, fmt.Errorf("I2: Pod %s names slice %s, which does not exist", pod.Name, slice))
			continue
		case id < 0 || id >= int(h):
			errs = append(errs, fmt.Errorf("I2: Pod %s has worker ID %d outside [0, %d)", pod.Name, id, h))
		}
		group := pod.Labels[rayutils.RayNodeGroupLabelKey]
		wantName := group + "-" + replicaOf(&slicesList, slice)
		if name, _ := WorkerEnv(pod, constants.EnvName); name != wantName {
			errs = append(errs, fmt.Errorf("I2: Pod %s has TPU_NAME %q, want %q", pod.Name, name, wantName))
		}
		if lbl := pod.Labels[constants.ReplicaIndexLabel]; lbl != tpuenv.ReplicaIndexValue(group, replicaNum(&slicesList, slice)) {
			errs = append(errs, fmt.Errorf("I2: Pod %s has replicaIndex label %q", pod.Name, lbl))
		}
		// With KubeRay's RayMultiHostIndexing labels, KubeRay decides the replica and host.
		if v, ok := pod.Labels[rayutils.RayWorkerReplicaIndexKey]; ok && v != replicaOf(&slicesList, slice) {
			errs = append(errs, fmt.Errorf("KubeRay labels: Pod %s has replica index %s but sits in replica %s", pod.Name, v, replicaOf(&slicesList, slice)))
		}
		if v, ok := pod.Labels[rayutils.RayHostIndexKey]; ok && v != strconv.Itoa(id) {
			errs = append(errs, fmt.Errorf("KubeRay labels: Pod %s has host index %s but worker ID %d", pod.Name, v, id))
		}
		report.IDs[slice] = append(report.IDs[slice], id)
	}
	for slice, ids := range report.IDs {
		slices.Sort(ids)
		for i := 1; i < len(ids); i++ {
			if ids[i] == ids[i-1] {
				errs = append(errs, fmt.Errorf("I1: slice %s has two live Pods with worker ID %d", slice, ids[i]))
			}
		}
		if len(ids) == int(hosts[slice]) && slices.Index(ids, 0) < 0 {
			errs = append(errs, fmt.Errorf("I2: full slice %s has no host with ID 0", slice))
		}
	}
	return report, errors.Join(errs...)
}

// CheckClaimsMatchPods checks I3: every claim of every slice belongs to a live Pod carrying its
// token, and every live TPU worker Pod's token is claimed in its slice.
func CheckClaimsMatchPods(ctx context.Context, c client.Reader, namespace string) error {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(namespace)); err != nil {
		return err
	}
	var slicesList tpuv1alpha1.TPUSliceAssignmentList
	if err := c.List(ctx, &slicesList, client.InNamespace(namespace)); err != nil {
		return err
	}
	live := map[string]string{} // token -> slice
	for i := range pods.Items {
		p := &pods.Items[i]
		if t := p.Annotations[constants.ClaimTokenAnnotation]; t != "" && lifecycle.PodLive(p) {
			live[t] = p.Labels[constants.SliceLabel]
		}
	}
	var errs []error
	claimed := map[string]bool{}
	for _, s := range slicesList.Items {
		for _, cl := range s.Status.Claims {
			claimed[cl.Token] = true
			if live[cl.Token] != s.Name {
				errs = append(errs, fmt.Errorf("I3: slice %s claims ID %d for token %s, held by no live Pod", s.Name, cl.WorkerID, cl.Token))
			} else if cl.PodUID == "" {
				errs = append(errs, fmt.Errorf("I3: slice %s claim on ID %d is not bound to its Pod", s.Name, cl.WorkerID))
			}
		}
	}
	for token, slice := range live {
		if !claimed[token] {
			errs = append(errs, fmt.Errorf("I3: live Pod with token %s in slice %s has no claim", token, slice))
		}
	}
	return errors.Join(errs...)
}

func replicaNum(list *tpuv1alpha1.TPUSliceAssignmentList, name string) int32 {
	for _, s := range list.Items {
		if s.Name == name {
			return s.Spec.ReplicaIndex
		}
	}
	return -1
}

func replicaOf(list *tpuv1alpha1.TPUSliceAssignmentList, name string) string {
	return strconv.Itoa(int(replicaNum(list, name)))
}
