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
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
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
	nodes, err := liveNodes()
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("chosen domains: %w", err))
		return
	}
	type holder struct{ slice, pod string }
	var placed []placedSlice
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
			placed = append(placed, placedSlice{name: s.Name, key: key, domain: d, host: hosts[0]})
			k := key + "=" + d
			if h, ok := taken[k]; ok {
				r.violationf("ChosenDomain slices %s and %s both have live Pods bound in %s (%s and %s)", h.slice, s.Name, k, h.pod, hosts[0])
				continue
			}
			taken[k] = holder{s.Name, hosts[0]}
		}
	}
	r.checkAcrossKeys(placed, nodes)
}

// placedSlice is a ChosenDomain slice with live Pods bound in a domain of its key.
type placedSlice struct{ name, key, domain, host string }

// checkAcrossKeys checks that no two ChosenDomain slices of different keys have live Pods bound
// in domains that share a Node (docs/spec.md §12: the Lease of any key takes every Node of its
// domain, so a node-pool slice and a sub-block subslice never share a pool's Nodes), and records,
// per node pool, the keys of the slices seen bound in it: a pool that held slices of both keys
// over the run (one after the other) is what issue 43's "slices of two keys over one pool" asks
// the run to show (cross_key_pools).
func (r *runner) checkAcrossKeys(placed []placedSlice, nodes map[string]*corev1.Node) {
	in := func(p placedSlice, n *corev1.Node) bool { v, ok := n.Labels[p.key]; return ok && v == p.domain }
	for _, n := range nodes {
		var here []placedSlice
		for _, p := range placed {
			if in(p, n) {
				here = append(here, p)
			}
		}
		for _, p := range here {
			pool := n.Labels[constants.NodePoolTopologyKey]
			if r.cl.capacity.keysByPool[pool] == nil {
				r.cl.capacity.keysByPool[pool] = map[string]bool{}
			}
			r.cl.capacity.keysByPool[pool][p.key] = true
		}
		for i := range here {
			for j := i + 1; j < len(here); j++ {
				if a, b := here[i], here[j]; a.key != b.key && !r.cl.capacity.crossReported[a.name+"/"+b.name] {
					r.cl.capacity.crossReported[a.name+"/"+b.name] = true
					r.violationf("§12: ChosenDomain slices %s (%s=%s, %s) and %s (%s=%s, %s) both have live Pods bound in domains that share Node %s",
						a.name, a.key, a.domain, a.host, b.name, b.key, b.domain, b.host, n.Name)
				}
			}
		}
	}
}

// liveNodes reads the cluster's Nodes, the stand-in autoscaler's among them, by name.
func liveNodes() (map[string]*corev1.Node, error) {
	var list corev1.NodeList
	if err := k8sClient.List(ctx, &list); err != nil {
		return nil, err
	}
	nodes := make(map[string]*corev1.Node, len(list.Items))
	for i := range list.Items {
		nodes[list.Items[i].Name] = &list.Items[i]
	}
	return nodes, nil
}
