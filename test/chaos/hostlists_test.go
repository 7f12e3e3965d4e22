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

package chaos

import (
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// deleteHostLists deletes a random host lists ConfigMap of the run's namespace, as a user cleaning
// up ConfigMaps might, under the Pods that reference it.
func (r *runner) deleteHostLists() {
	var list corev1.ConfigMapList
	if err := k8sClient.List(ctx, &list, client.InNamespace(r.ns), client.HasLabels{tpuv1alpha1.SliceLabel}); err != nil || len(list.Items) == 0 {
		return
	}
	cm := list.Items[r.rng.IntN(len(list.Items))]
	if err := k8sClient.Delete(ctx, &cm); err == nil {
		r.hostListsDeleted++
	}
}

// checkHostLists checks docs/spec.md §4 on every live admitted Pod of the run: the host lists each
// TPU container gets, inline or from a ConfigMap, are the ones its spec identity gives, and a
// referenced ConfigMap that exists is controlled by the Pod's slice. A referenced ConfigMap may be
// missing for a moment (deleteHostLists), never at the end (final): the reconciler re-creates it.
// Copies, restarts and instances that write the lists in either form must never leave a Pod with
// another slice's lists, a mix that resolves to something else, or a reference to a ConfigMap that
// is not its slice's.
func (r *runner) checkHostLists(final bool) error {
	// The Pods first, then the ConfigMaps, then the slices: the webhook adopts a ConfigMap left by
	// a former slice of the name before it admits the first Pod of the new slice, so a Pod listed
	// was admitted after that adoption, and the ConfigMap listed after it shows the adopter or a
	// later one, which the slices listed last show. Listed the other way round, a ConfigMap read
	// before a RayCluster's re-created Pods were admitted still showed the former slice as owner
	// (seed 111 at 1 min, gate off: a false violation after a re-create).
	pods := r.workerPods(func(p *corev1.Pod) bool { return p.Annotations[tpuv1alpha1.ClaimTokenAnnotation] != "" })
	var list corev1.ConfigMapList
	if err := k8sClient.List(ctx, &list, client.InNamespace(r.ns), client.HasLabels{tpuv1alpha1.SliceLabel}); err != nil {
		return fmt.Errorf("listing host lists ConfigMaps: %w", err)
	}
	var slices tpuv1alpha1.TPUSliceAssignmentList
	if err := k8sClient.List(ctx, &slices, client.InNamespace(r.ns)); err != nil {
		return fmt.Errorf("listing slices: %w", err)
	}
	sliceUIDs := make(map[string]types.UID, len(slices.Items))
	for _, s := range slices.Items {
		sliceUIDs[s.Name] = s.UID
	}
	configMaps := make(map[string]*corev1.ConfigMap, len(list.Items))
	for i := range list.Items {
		configMaps[list.Items[i].Name] = &list.Items[i]
	}
	var errs []error
	refs := 0
	for _, p := range pods {
		id, ok := identity.FromPod(&p)
		slice, err := topology.FromPod(p.Annotations, &p.Spec)
		if !ok || err != nil || id.Hosts < 2 || id.Hosts > topology.DefaultMaxSliceHosts {
			continue
		}
		if len(tpuenv.ReferencedHostListsConfigMaps(&p, slice.TPUContainers)) > 0 {
			refs++
		}
		want := tpuenv.HostListsConfigMap(r.ns, tpuenv.ValuesOf(id, slice, p.Spec.Subdomain), len(slice.TPUContainers)).Data
		for _, c := range slice.TPUContainers {
			for _, e := range p.Spec.Containers[c].Env {
				if err := checkHostList(&p, id, sliceUIDs[id.SliceName()], e, want, configMaps, final); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	r.hostListsRefs = max(r.hostListsRefs, refs)
	return errors.Join(errs...)
}

// checkHostList checks one env entry of Pod p (identity id, of the slice with UID sliceUID, "" when
// it is gone) whose value is one of the host lists want gives (tpuenv.HostListKeys).
func checkHostList(p *corev1.Pod, id identity.Identity, sliceUID types.UID, e corev1.EnvVar, want map[string]string, configMaps map[string]*corev1.ConfigMap, final bool) error {
	wantValue, listed := want[e.Name]
	if !listed {
		return nil
	}
	if e.ValueFrom == nil {
		if e.Name == constants.EnvWorkerHostnames && e.Value != wantValue {
			return fmt.Errorf("§4: Pod %s (worker %d of %s) has TPU_WORKER_HOSTNAMES %.80q inline, not its slice's", p.Name, id.WorkerID, id.SliceName(), e.Value)
		}
		return nil
	}
	if !tpuenv.IsHostListsRef(e) {
		return nil // the user's own valueFrom, which the operator keeps for a default
	}
	name := e.ValueFrom.ConfigMapKeyRef.Name
	cm, ok := configMaps[name]
	if !ok {
		if final {
			return fmt.Errorf("§4, §8: Pod %s (worker %d of %s) references host lists ConfigMap %s, which is missing at the end", p.Name, id.WorkerID, id.SliceName(), name)
		}
		return nil
	}
	owner := metav1.GetControllerOfNoCopy(cm)
	switch {
	case owner == nil || owner.Kind != "TPUSliceAssignment" || owner.Name != id.SliceName() || cm.Labels[tpuv1alpha1.SliceLabel] != id.SliceName() ||
		sliceUID != "" && owner.UID != sliceUID:
		return fmt.Errorf("§4: Pod %s (worker %d of %s) takes %s from ConfigMap %s, which is not its slice's (owner %v)", p.Name, id.WorkerID, id.SliceName(), e.Name, name, owner)
	case !maps.Equal(cm.Data, want) && cm.Data[e.Name] != wantValue:
		return fmt.Errorf("§4: Pod %s (worker %d of %s) takes %s from ConfigMap %s, which holds another value", p.Name, id.WorkerID, id.SliceName(), e.Name, name)
	}
	return nil
}
