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
	"strings"
	"sync"

	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
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

// CheckAdmitted checks I1 and I2 of docs/spec.md §9 on the API server's live state, by the TPU
// identity the Pods' specs carry (labels are hints and may have been edited): no two live Pods of a
// slice share TPU_WORKER_ID; every admitted TPU worker Pod has an identity with an ID in [0, hosts)
// of a slice that exists, and every full slice has exactly one host with ID 0. Pods of another
// RayCluster generation than their slice's are counted apart.
func CheckAdmitted(ctx context.Context, c client.Reader, namespace string) (Report, error) {
	return CheckAdmittedPods(ctx, c, namespace, nil)
}

// CheckAdmittedPods is CheckAdmitted over the Pods keep accepts (all when keep is nil), e.g. to
// leave out Pods of a deleted RayCluster that the garbage collector envtest lacks would remove.
func CheckAdmittedPods(ctx context.Context, c client.Reader, namespace string, keep func(*corev1.Pod) bool) (Report, error) {
	pods, slicesByName, err := liveState(ctx, c, namespace, keep)
	if err != nil {
		return Report{}, err
	}
	report := Report{IDs: map[string][]int{}}
	var errs []error
	for i := range pods {
		pod := &pods[i]
		report.LivePods++
		id, ok := identity.FromPod(pod)
		if !ok {
			errs = append(errs, fmt.Errorf("I2: TPU worker Pod %s carries no TPU identity (%s, %s)", pod.Name, constants.EnvWorkerID, constants.EnvName))
			continue
		}
		name := id.SliceName()
		slice, known := slicesByName[name]
		switch {
		case !known:
			errs = append(errs, fmt.Errorf("I2: Pod %s names slice %s, which does not exist", pod.Name, name))
			continue
		case id.ClusterUID != "" && id.ClusterUID != slice.Spec.RayClusterUID:
			name += "@" + string(id.ClusterUID) // another generation: its own slice
		case id.WorkerID >= slice.Spec.Hosts:
			errs = append(errs, fmt.Errorf("I2: Pod %s has worker ID %d outside [0, %d)", pod.Name, id.WorkerID, slice.Spec.Hosts))
		}
		// With KubeRay's RayMultiHostIndexing labels, KubeRay decides the replica and host.
		if v, ok := pod.Labels[rayutils.RayWorkerReplicaIndexKey]; ok && v != strconv.Itoa(int(id.Replica)) {
			errs = append(errs, fmt.Errorf("KubeRay labels: Pod %s has replica index %s but sits in replica %d", pod.Name, v, id.Replica))
		}
		if v, ok := pod.Labels[rayutils.RayHostIndexKey]; ok && v != strconv.Itoa(int(id.WorkerID)) {
			errs = append(errs, fmt.Errorf("KubeRay labels: Pod %s has host index %s but worker ID %d", pod.Name, v, id.WorkerID))
		}
		report.IDs[name] = append(report.IDs[name], int(id.WorkerID))
	}
	for name, ids := range report.IDs {
		slices.Sort(ids)
		for i := 1; i < len(ids); i++ {
			if ids[i] == ids[i-1] {
				errs = append(errs, fmt.Errorf("I1: slice %s has two live Pods with worker ID %d", name, ids[i]))
			}
		}
		if s, ok := slicesByName[name]; ok && len(ids) == int(s.Spec.Hosts) && slices.Index(ids, 0) < 0 {
			errs = append(errs, fmt.Errorf("I2: full slice %s has no host with ID 0", name))
		}
	}
	return report, errors.Join(errs...)
}

// liveState lists the live TPU worker Pods (KubeRay's worker label, a RayCluster owner or a TPU
// identity in the spec, and a TPU container) that keep accepts, and the slices by name. A Pod whose
// KubeRay labels were removed (isolated for debugging) is still counted: it keeps its claim.
func liveState(ctx context.Context, c client.Reader, namespace string, keep func(*corev1.Pod) bool) ([]corev1.Pod, map[string]*tpuv1alpha1.TPUSliceAssignment, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(namespace)); err != nil {
		return nil, nil, err
	}
	pods.Items = slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool {
		_, hasIdentity := identity.FromPod(&p)
		worker := p.Labels[rayutils.RayNodeTypeLabelKey] == "worker" || ownedByRayCluster(&p) || hasIdentity
		return !worker || topology.ChipsPerPod(&p.Spec) == 0 || !lifecycle.PodLive(&p) || (keep != nil && !keep(&p))
	})
	var list tpuv1alpha1.TPUSliceAssignmentList
	if err := c.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, nil, err
	}
	byName := make(map[string]*tpuv1alpha1.TPUSliceAssignment, len(list.Items))
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}
	return pods.Items, byName, nil
}

func ownedByRayCluster(p *corev1.Pod) bool {
	ref := metav1.GetControllerOfNoCopy(p)
	return ref != nil && ref.Kind == "RayCluster"
}

// CheckClaimsMatchPods checks I3 by the Pods' spec identities and UIDs: every claim of every slice
// is bound to a live Pod (by UID) whose spec holds that worker ID of that slice, and every live TPU
// worker Pod of a slice's RayCluster generation holds a claim in it. Labels and claim tokens are
// not consulted: an adopted Pod has no token, and a user may have edited either.
func CheckClaimsMatchPods(ctx context.Context, c client.Reader, namespace string) error {
	return CheckClaimsMatchPodsExcept(ctx, c, namespace, nil)
}

// CheckClaimsMatchPodsExcept is CheckClaimsMatchPods leaving out the live Pods skip accepts (a Pod
// whose identity conflicts on purpose, which the operator reports instead of recording).
func CheckClaimsMatchPodsExcept(ctx context.Context, c client.Reader, namespace string, skip func(*corev1.Pod) bool) error {
	pods, byName, err := liveState(ctx, c, namespace, nil)
	if err != nil {
		return err
	}
	byUID := map[types.UID]*corev1.Pod{}
	for i := range pods {
		byUID[pods[i].UID] = &pods[i]
	}
	var errs []error
	held := map[types.UID]bool{}
	for _, s := range byName {
		for _, cl := range s.Status.Claims {
			pod := byUID[cl.PodUID]
			if cl.PodUID == "" {
				errs = append(errs, fmt.Errorf("I3: slice %s claim on ID %d (token %s) is not bound to a Pod", s.Name, cl.WorkerID, cl.Token))
				continue
			}
			id, ok := identity.Identity{}, false
			if pod != nil {
				id, ok = identity.FromPod(pod)
			}
			if !ok || id.SliceName() != s.Name || id.WorkerID != cl.WorkerID {
				errs = append(errs, fmt.Errorf("I3: slice %s claims ID %d for Pod %s (%s), which is not live or does not hold it", s.Name, cl.WorkerID, cl.PodName, cl.PodUID))
				continue
			}
			held[cl.PodUID] = true
		}
	}
	for i := range pods {
		p := &pods[i]
		id, ok := identity.FromPod(p)
		if !ok || held[p.UID] || (skip != nil && skip(p)) {
			continue
		}
		if s, exists := byName[id.SliceName()]; exists && id.ClusterUID != "" && id.ClusterUID != s.Spec.RayClusterUID {
			continue // another generation, awaiting the garbage collector
		}
		errs = append(errs, fmt.Errorf("I3: live Pod %s holds worker ID %d of slice %s but no claim", p.Name, id.WorkerID, id.SliceName()))
	}
	return errors.Join(errs...)
}

// I1Watcher checks I1 (CheckAdmittedPods) on a namespace's live Pods at every Pod watch event, and
// records the Pods it sees deleted (for I6).
type I1Watcher struct {
	w        watch.Interface
	done     chan struct{}
	stopOnce sync.Once
	mu       sync.Mutex
	errs     []string
	deleted  []string
}

// WatchI1 starts an I1Watcher on namespace ns, checking the Pods keep accepts (all when keep is
// nil) with the Env's client. Stop it with Stop.
func (e *Env) WatchI1(ctx context.Context, ns string, keep func(*corev1.Pod) bool) (*I1Watcher, error) {
	wc, err := client.NewWithWatch(e.Config, client.Options{Scheme: e.Client.Scheme()})
	if err != nil {
		return nil, err
	}
	w, err := wc.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns))
	if err != nil {
		return nil, err
	}
	iw := &I1Watcher{w: w, done: make(chan struct{})}
	go func() {
		defer close(iw.done)
		for ev := range w.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Deleted {
				iw.mu.Lock()
				iw.deleted = append(iw.deleted, pod.Name)
				iw.mu.Unlock()
			}
			if _, err := CheckAdmittedPods(ctx, e.Client, ns, keep); ViolatesI1(err) {
				iw.mu.Lock()
				iw.errs = append(iw.errs, err.Error())
				iw.mu.Unlock()
			}
		}
	}()
	return iw, nil
}

// Stop stops the watch and waits for the last check; later calls do nothing.
func (iw *I1Watcher) Stop() {
	iw.stopOnce.Do(func() {
		iw.w.Stop()
		<-iw.done
	})
}

// Violations returns the I1 violations seen so far, one CheckAdmittedPods error per event.
func (iw *I1Watcher) Violations() []string {
	iw.mu.Lock()
	defer iw.mu.Unlock()
	return slices.Clone(iw.errs)
}

// Deleted returns the names of the Pods seen deleted so far.
func (iw *I1Watcher) Deleted() []string {
	iw.mu.Lock()
	defer iw.mu.Unlock()
	return slices.Clone(iw.deleted)
}

// ViolatesI1 reports whether err, from CheckAdmitted or CheckAdmittedPods, names an I1 violation.
func ViolatesI1(err error) bool {
	return err != nil && strings.Contains(err.Error(), "I1:")
}
