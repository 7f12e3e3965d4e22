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
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
)

// checkChosenDomains checks, on every step of a cluster run, the promise of a ChosenDomain slice
// (docs/spec.md §4, issue 24): its Pods never bind outside one domain of its key ("no slice split
// over domains"), and no two such slices have live Pods bound in one domain (the per-domain
// Lease). A slice's Pods are found by their spec identity and their RayCluster's UID, not by their
// labels, which the run edits; Pods terminating or finished are left out (an older generation
// still going may share a domain with the new one, as it may with any slice), and so are the Pods
// the run created past the webhook (r.bypassed): the operator never gated them, so the scheduler put
// them where it liked (docs/spec.md §12, "Pods that bypass admission"). They are counted in
// r.cl.bypassedElsewhere when bound outside their slice's domain, so a run shows how often that was.
func (r *runner) checkChosenDomains() {
	list, err := r.listSlices()
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("chosen domains: %w", err))
		return
	}
	var pods corev1.PodList
	if err := k8sClient.List(ctx, &pods, client.InNamespace(r.ns)); err != nil {
		r.errs = append(r.errs, fmt.Errorf("chosen domains: %w", err))
		return
	}
	nodes := make(map[string]*corev1.Node, len(localCluster.Nodes))
	for _, n := range localCluster.Nodes {
		nodes[n.Name] = n
	}
	type holder struct{ slice, pod string }
	taken := map[string]holder{} // key=domain -> the first slice seen bound there
	for i := range list.Items {
		s := &list.Items[i]
		key := s.Spec.AffinityTopologyKey
		if s.Spec.Placement != tpuv1alpha1.PlacementChosenDomain || key == "" {
			continue
		}
		domains := map[string][]string{}
		for j := range pods.Items {
			p := &pods.Items[j]
			if p.Spec.NodeName == "" || !lifecycle.PodLive(p) {
				continue
			}
			id, ok := identity.FromPod(p)
			if !ok || id.SliceName() != s.Name || !id.OfClusterUID(s.Spec.RayClusterUID) {
				continue
			}
			n, ok := nodes[p.Spec.NodeName]
			if !ok {
				continue
			}
			d := n.Labels[key]
			if r.bypassed[p.UID] {
				if s.Status.Domain != "" && d != s.Status.Domain {
					r.cl.bypassedElsewhere[p.UID] = true
				}
				continue
			}
			domains[d] = append(domains[d], fmt.Sprintf("%d:%s@%s", id.WorkerID, p.Name, p.Spec.NodeName))
		}
		if len(domains) > 0 {
			r.cl.chosen[s.UID] = true
		}
		if len(domains) > 1 {
			r.violationf("ChosenDomain slice %s (domain %q) has live Pods bound in %d domains of %s: %v",
				s.Name, s.Status.Domain, len(domains), key, domains)
		}
		for d, hosts := range domains {
			k := key + "=" + d
			if h, ok := taken[k]; ok {
				r.violationf("ChosenDomain slices %s and %s both have live Pods bound in %s (%s and %s)", h.slice, s.Name, k, h.pod, hosts[0])
				continue
			}
			taken[k] = holder{s.Name, hosts[0]}
		}
	}
}
