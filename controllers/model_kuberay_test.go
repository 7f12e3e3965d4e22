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

package controllers

// KubeRay's side of the model-based test (model_test.go): the model's RayClusters, their TPU worker
// groups, and what KubeRay's creates of their Pods ask the webhook for. With KubeRay's
// RayMultiHostIndexing gate on, a multi-host group's Pods carry the replica index, the replica name
// and the host index (internal/claims.Request, as the webhook reads them from the labels); with it
// off, none. The model draws the gate once per RayCluster and history, so that one RayCluster's
// admissions are all indexed or all not, as on a real cluster, and the two RayClusters of a
// history may differ.

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"pgregory.net/rapid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// The failures of what docs/spec.md §3 and §10 promise the admissions (details go to the log).
const (
	invReplica    = "§3.2 broken: a Pod was given a replica at or above its group's desired replicas"
	invIndexed    = "§3.1 broken: a Pod with KubeRay's index labels was given another replica or worker ID than they name"
	invGeneration = "§3.1 broken: a Pod with KubeRay's index labels was given an ID in a slice of another KubeRay replica"
	invBeyond     = "§10 broken: a Pod whose labels name a replica at or above the desired replicas was not denied permanently"
	invPermanent  = "§5 broken: a Pod KubeRay makes from the RayCluster was denied permanently"
)

// indexingFired counts, over all histories, the admissions of indexed Pods answered with an ID
// and denied, the replicas KubeRay replaced, and the histories in which a 16-host slice held all
// of its IDs: the new coverage is not vacuous.
var indexingFired struct{ admitted, denied, replaced, full16 atomic.Int64 }

// workerGroup is a TPU worker group of one of the model's RayClusters, as KubeRay makes its Pods.
type workerGroup struct {
	cluster  string
	uid      types.UID
	name     string
	accel    string
	topology string
	hosts    int32
	// replicas is the group's replicas in its RayCluster (minReplicas 0, maxReplicas 4 × replicas):
	// its desired replicas, what the allocator's bounds check reads.
	replicas int32
	// stray is a topology of another host count that hand-made Pods of the group carry with
	// -model.mixed-hosts ("" for none); KubeRay never creates one.
	stray string
	// indexed reports whether KubeRay labels the group's Pods with replica index, replica name and
	// host index (RayMultiHostIndexing on).
	indexed bool
	// names are, by replica index, the KubeRay replica names the replica has had, the current one
	// last; given are, by replica name, the host indexes the webhook gave a Pod of the name.
	names map[int32][]string
	given map[string]map[int32]bool
}

// newModelGroups returns the model's worker groups: a 4-host v6e group (with 2-host strays) and a
// 16-host v5p group, two replicas each, in two RayClusters.
func newModelGroups() []*workerGroup {
	return []*workerGroup{
		{cluster: "rc", uid: "rc-uid", name: "tpu", accel: "tpu-v6e-slice", topology: "4x4", hosts: 4, replicas: 2, stray: "2x4"},
		{cluster: "rc16", uid: "rc16-uid", name: "tpu", accel: "tpu-v5p-slice", topology: "4x4x4", hosts: 16, replicas: 2},
	}
}

// rayCluster returns the group's RayCluster as a user applies it (4 chips per host).
func (g *workerGroup) rayCluster() *rayv1.RayCluster {
	return testutil.MakeRayCluster(g.cluster, modelNS).UID(g.uid).
		TPUGroup(g.name, g.accel, g.topology, 4, g.hosts, g.replicas).Obj()
}

// sliceName is the name of the slice of replica.
func (g *workerGroup) sliceName(replica int32) string {
	return naming.SliceName(g.cluster, g.name, replica)
}

// replicaName returns the current KubeRay replica name of replica, naming it on first use. KubeRay
// names a replica <group>-<5 random characters>; the model's names say whose they are.
func (g *workerGroup) replicaName(replica int32) string {
	if len(g.names[replica]) == 0 {
		g.rename(replica)
	}
	return g.names[replica][len(g.names[replica])-1]
}

// rename gives replica a new KubeRay replica name, as KubeRay does when it makes the replica again.
func (g *workerGroup) rename(replica int32) string {
	name := fmt.Sprintf("%s-%s-r%dg%d", g.cluster, g.name, replica, len(g.names[replica]))
	g.names[replica] = append(g.names[replica], name)
	return name
}

// ask is what one create of a worker Pod asks the webhook for.
type ask struct {
	g        *workerGroup
	topology string
	// claim carries KubeRay's index labels, as the webhook reads them (kubeRayIndexes).
	claim claims.Request
	// kubeRay: a create KubeRay makes from the RayCluster as it is (the group's topology, a
	// replica index below its desired replicas, the replica's current name); docs/spec.md §5
	// allows no permanent denial of it.
	kubeRay bool
	// beyond: the labels name a replica index at or above the desired replicas (a label anyone
	// can write): it opens no slice and, the live RayCluster agreeing, is denied permanently (§10).
	beyond bool
}

func (a ask) String() string {
	if a.claim.ReplicaIndex == nil {
		return a.topology + " of " + a.g.cluster
	}
	return fmt.Sprintf("%s of %s [replica %d host %d %s]", a.topology, a.g.cluster, *a.claim.ReplicaIndex,
		ptr.Deref(a.claim.HostIndex, 0), a.claim.ReplicaName)
}

// drawGroup draws the worker group a create is for.
func (m *model) drawGroup(t *rapid.T) *workerGroup {
	return m.groups[rapid.IntRange(0, len(m.groups)-1).Draw(t, "group")]
}

// drawAsk draws one create of a Pod of g. Of an indexed group it names, mostly, a replica below
// the desired replicas, its current name, and the lowest host index of that name not yet given
// to a Pod nor asked for by this burst (busy), the order KubeRay creates a replica's hosts in;
// sometimes any host index (a retry, or a label written by hand), the host index of a Pod of the
// name that was given one (a copied manifest, labels and all), the name of a replica KubeRay has
// replaced (a create of it still in flight), or a replica index beyond the desired ones.
func (m *model) drawAsk(t *rapid.T, g *workerGroup, busy map[string]map[int32]bool) ask {
	a := ask{g: g, topology: g.topology}
	if *modelMixedHosts && g.stray != "" && rapid.IntRange(0, 3).Draw(t, "odd host count") == 0 {
		a.topology = g.stray
	}
	if !g.indexed {
		a.kubeRay = a.topology == g.topology
		return a
	}
	replica := rapid.Int32Range(0, g.replicas-1).Draw(t, "replica index")
	if rapid.IntRange(0, 11).Draw(t, "beyond desired") == 0 {
		replica, a.beyond = g.replicas, true
	}
	name := g.replicaName(replica)
	current := true
	if names := g.names[replica]; len(names) > 1 && rapid.IntRange(0, 5).Draw(t, "older replica name") == 0 {
		name, current = rapid.SampledFrom(names[:len(names)-1]).Draw(t, "older name"), false
	}
	host, copied := int32(-1), false
	switch rapid.IntRange(0, 9).Draw(t, "host index kind") {
	case 0: // a retry, or a label written by hand
	case 1: // a copy of a Pod of the replica, labels and all (a copied manifest)
		if given := slices.Sorted(maps.Keys(g.given[name])); len(given) > 0 {
			host, copied = rapid.SampledFrom(given).Draw(t, "copied host index"), true
		}
	default:
		for h := range g.hosts {
			if !g.given[name][h] && !busy[name][h] {
				host = h
				break
			}
		}
	}
	if host < 0 {
		host = rapid.Int32Range(0, g.hosts-1).Draw(t, "host index")
	}
	if busy[name] == nil {
		busy[name] = map[int32]bool{}
	}
	busy[name][host] = true
	a.claim = claims.Request{ReplicaIndex: ptr.To(replica), HostIndex: ptr.To(host), ReplicaName: name}
	a.kubeRay = a.topology == g.topology && !a.beyond && current && !copied
	return a
}

// kubeRayLabels gives a Pod the index labels its admission read.
func kubeRayLabels(pod *testutil.PodWrapper, claim claims.Request) *testutil.PodWrapper {
	if claim.ReplicaIndex == nil {
		return pod
	}
	return pod.KubeRayIndexes(*claim.ReplicaIndex, claim.ReplicaName, ptr.Deref(claim.HostIndex, 0))
}

// checkPlace checks where an admitted Pod went against what docs/spec.md §3 promises: the replica
// is below the group's desired replicas (§3.2, for every Pod); a Pod with KubeRay's labels is in
// the replica they name with the host index as its worker ID, in a slice of its own KubeRay
// replica (§3.1: a slice of another replica name is replaced by the Pod's once its claims are
// gone, and a Pod of a replica name the slice has replaced is refused).
func (m *model) checkPlace(t *rapid.T, p *admittedPod, slice *tpuv1alpha1.TPUSliceAssignment) {
	g, claim := p.ask.g, p.ask.claim
	if p.a.Replica >= g.replicas {
		m.failf(t, invReplica, "§3.2: Pod %s was given replica %d, its group asks for %d replicas", p, p.a.Replica, g.replicas)
	}
	if slice != nil && slice.Spec.Hosts == 16 && len(slice.Status.Claims) == 16 {
		m.full16 = true
	}
	if claim.ReplicaIndex == nil {
		return
	}
	replica, host := *claim.ReplicaIndex, ptr.Deref(claim.HostIndex, 0)
	if p.a.Replica != replica || p.a.WorkerID != host || p.a.SliceName != g.sliceName(replica) {
		m.failf(t, invIndexed, "§3.1: Pod %s, labeled replica %d host %d, was given %s ID %d", p, replica, host, shortSlice(p.a.SliceName), p.a.WorkerID)
	}
	if slice != nil && !m.userBroke(slice.Name) && slice.Spec.ReplicaName != "" && slice.Spec.ReplicaName != claim.ReplicaName {
		m.failf(t, invGeneration, "§3.1: Pod %s of KubeRay replica %s was given an ID in slice %s of replica %s (replaced %v)",
			p, claim.ReplicaName, shortSlice(slice.Name), slice.Spec.ReplicaName, slice.Spec.ReplacedReplicaNames)
	}
	indexingFired.admitted.Add(1)
}

// refusal is a denied admission, checked once it is in the history.
type refusal struct {
	ask ask
	err error
}

// checkRefusal checks a denial: a replica index beyond the desired replicas is denied permanently,
// the live RayCluster agreeing (docs/spec.md §10), and a Pod KubeRay makes from the RayCluster
// never is (§5: it costs the whole replica, and a permanent refusal of one is a bug).
func (m *model) checkRefusal(t *rapid.T, r refusal) {
	var denied *allocator.DeniedError
	permanent := errors.As(r.err, &denied) && !denied.Transient
	switch {
	case r.ask.beyond && !permanent:
		m.failf(t, invBeyond, "§10: the admission of %s, %d desired replicas, was denied as transient: %v", r.ask, r.ask.g.replicas, r.err)
	case r.ask.kubeRay && permanent:
		m.failf(t, invPermanent, "§5: the admission of %s was denied permanently: %v", r.ask, r.err)
	}
	if r.ask.claim.ReplicaIndex != nil {
		indexingFired.denied.Add(1)
	}
}

// createReplica is KubeRay creating a replica's Pods at once: with indexing, every host of a
// replica's current name that no Pod was given yet, in host order (all 16 of a new 16-host
// replica); without, 2 to H Pods of the group, an unordered set.
func (m *model) createReplica(t *rapid.T) {
	g := m.drawGroup(t)
	var asks []ask
	if g.indexed {
		replica := rapid.Int32Range(0, g.replicas-1).Draw(t, "replica index")
		name := g.replicaName(replica)
		for h := range g.hosts {
			if !g.given[name][h] {
				asks = append(asks, ask{g: g, topology: g.topology, kubeRay: true,
					claim: claims.Request{ReplicaIndex: ptr.To(replica), HostIndex: ptr.To(h), ReplicaName: name}})
			}
		}
	} else {
		for range rapid.Int32Range(2, g.hosts).Draw(t, "creates") {
			asks = append(asks, ask{g: g, topology: g.topology, kubeRay: true})
		}
	}
	if len(asks) < 2 {
		t.Skip("the replica's Pods were all created")
	}
	m.admitAll(t, asks, fmt.Sprintf("KubeRay creates %d Pods of %s at once", len(asks), g.cluster))
}

// replaceReplica is KubeRay, with RayMultiHostIndexing on, replacing a replica whole because it
// lost a Pod (replace).
func (m *model) replaceReplica(t *rapid.T) {
	indexed := slices.DeleteFunc(slices.Clone(m.groups), func(g *workerGroup) bool { return !g.indexed })
	if len(indexed) == 0 {
		t.Skip("no RayCluster with KubeRay's indexing")
	}
	g := rapid.SampledFrom(indexed).Draw(t, "indexed group")
	m.replace(t, g, rapid.Int32Range(0, g.replicas-1).Draw(t, "replica index"), "it lost a Pod")
}

// replacedRefused is KubeRay's answer to refused creates of its indexed replicas: a refusal of one
// Pod costs the whole replica (docs/spec.md §5), which KubeRay makes again under a new name and
// never creates under the refused one again.
func (m *model) replaceRefused(t *rapid.T, refused []refusal) {
	done := map[*workerGroup]map[int32]bool{}
	for _, r := range refused {
		g, claim := r.ask.g, r.ask.claim
		if !r.ask.kubeRay || claim.ReplicaIndex == nil || done[g][*claim.ReplicaIndex] || claim.ReplicaName != g.replicaName(*claim.ReplicaIndex) {
			continue
		}
		if done[g] == nil {
			done[g] = map[int32]bool{}
		}
		done[g][*claim.ReplicaIndex] = true
		m.replace(t, g, *claim.ReplicaIndex, "a create of it was refused")
	}
}

// replace is KubeRay replacing a replica of an indexed group whole (docs/spec.md §3.1): it deletes
// the replica's live Pods and makes the replica again under a new name. A create of the old name
// still in flight may commit later, or be admitted later (drawAsk's older names).
func (m *model) replace(t *rapid.T, g *workerGroup, replica int32, why string) {
	old := g.replicaName(replica)
	var pods corev1.PodList
	if err := m.w.base.List(m.ctx, &pods, client.InNamespace(modelNS), client.MatchingLabels{
		rayutils.RayClusterLabelKey: g.cluster, rayutils.RayWorkerReplicaNameKey: old,
	}); err != nil {
		t.Fatalf("listing Pods: %v", err)
	}
	var deleted []string
	for i := range pods.Items {
		if p := &pods.Items[i]; lifecycle.PodLive(p) {
			if err := m.user.Delete(m.ctx, p); err != nil {
				t.Fatalf("deleting Pod %s: %v", p.Name, err)
			}
			deleted = append(deleted, p.Name)
		}
	}
	name := g.rename(replica)
	indexingFired.replaced.Add(1)
	m.logf("KubeRay replaces replica %d of %s (%s): deletes %s's Pods [%s], names it %s", replica, g.cluster, why, old, strings.Join(deleted, " "), name)
}
