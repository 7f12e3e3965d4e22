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
	"hash/fnv"
	"os"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/health"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// Slice health under chaos (docs/spec.md §11, I8). The runner stands in for the scheduler and the
// kubelets envtest lacks: it binds the worker Pods to fake TPU Nodes (mostly into their replica's
// pool, sometimes into another: a host that moved), reports them Ready, and flaps Nodes (NotReady,
// GKE's termination taint, cordoned, and back). Once activity stops, every slice's hosts and
// conditions must converge to what the live Pods and Nodes say. On the local cluster the scheduler
// binds and kwok reports the Pods: the step only flaps the cluster's Nodes, NotReady through kwok
// (cluster_test.go).

// poolsPerRun and nodesPerPool are the fake TPU node pools of a run.
const (
	poolsPerRun  = 3
	nodesPerPool = 48
)

// healthNodes are the run's fake Nodes, by pool, and what the run did with them.
type healthNodes struct {
	pools [][]string
	next  int
	// binds, moves (binds outside the slice's home pool), flaps and recoveries count the operations.
	binds, moves, flaps, recoveries int
}

// createNodes creates the run's Ready TPU Nodes, named <namespace>-<pool>-<i>.
func (r *runner) createNodes() *healthNodes {
	h := &healthNodes{}
	for p := range poolsPerRun {
		pool := fmt.Sprintf("pool-%d", p)
		names := make([]string, nodesPerPool)
		err := framework.Parallel(nodesPerPool, 8, func(i int) error {
			names[i] = fmt.Sprintf("%s-%s-%d", r.ns, pool, i)
			return framework.CreateNode(ctx, k8sClient, testutil.MakeNode(names[i]).TPU("tpu-v6e-slice", "4x4", pool).Ready(true).Obj())
		})
		if err != nil {
			r.errs = append(r.errs, fmt.Errorf("creating the chaos TPU Nodes: %w", err))
		}
		h.pools = append(h.pools, names)
	}
	return h
}

// deleteNodes removes the run's Nodes.
func (r *runner) deleteNodes() {
	if r.nodes == nil {
		return
	}
	for _, pool := range r.nodes.pools {
		for _, name := range pool {
			_ = k8sClient.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}
	}
}

// healthStep is one random operation of slice health: schedule and ready the Pods (a host moves
// into another pool one time in eight), then flap a Node, or bring one back, or neither.
func (r *runner) healthStep() {
	if r.nodes == nil {
		r.nodes = r.createNodes()
	}
	if !r.cluster {
		r.schedule(8)
	}
	// The first health step of a run always flaps a Node, so that a short run sees one.
	switch op := r.rng.IntN(4); {
	case op < 2 || r.nodes.flaps == 0:
		r.flapNode()
	case op == 2:
		r.recoverNodes()
	}
}

// schedule binds the unbound live worker Pods to a Node, the replica's own pool unless the host
// moves (one time in moveOdds) or the pool is full, and reports bound Pods Ready as kubelets do.
func (r *runner) schedule(moveOdds int) {
	for _, p := range r.workerPods(nil) {
		if p.Spec.NodeName == "" {
			pool := homePool(p.Labels[tpuv1alpha1.SliceLabel])
			if r.rng.IntN(moveOdds) == 0 {
				pool = r.rng.IntN(poolsPerRun) // the host moved, maybe into another pool
			}
			r.nodes.binds++
			if pool != homePool(p.Labels[tpuv1alpha1.SliceLabel]) {
				r.nodes.moves++
			}
			names := r.nodes.pools[pool]
			node := names[r.nodes.next%len(names)]
			r.nodes.next++
			if err := framework.BindPod(ctx, k8sClient, &p, node); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				r.errs = append(r.errs, fmt.Errorf("binding Pod %s: %w", p.Name, err))
			}
		}
		if err := framework.SetPodReady(ctx, k8sClient, &p, true); client.IgnoreNotFound(err) != nil {
			r.errs = append(r.errs, fmt.Errorf("reporting Pod %s Ready: %w", p.Name, err))
		}
	}
}

// homePool is the pool a slice's hosts are scheduled into unless they move.
func homePool(slice string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(slice))
	return int(h.Sum32() % poolsPerRun)
}

// flapNode gives a random Node of the run one problem: NotReady, GKE's impending termination
// taint, or cordoned.
func (r *runner) flapNode() {
	pool := r.nodes.pools[r.rng.IntN(len(r.nodes.pools))]
	name := pool[r.rng.IntN(len(pool))]
	r.nodes.flaps++
	var err error
	switch r.rng.IntN(3) {
	case 0:
		if r.cluster {
			r.failNode(name)
			break
		}
		err = framework.SetNodeReady(ctx, k8sClient, name, false)
	case 1:
		err = framework.UpdateNode(ctx, k8sClient, name, func(n *corev1.Node) {
			// A Node flapped before and not recovered since has the taint already: the API
			// server refuses a second of the same key and effect.
			if !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == health.TaintImpendingNodeTermination }) {
				n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: health.TaintImpendingNodeTermination, Effect: corev1.TaintEffectNoSchedule})
			}
		}, false)
	default:
		err = framework.UpdateNode(ctx, k8sClient, name, func(n *corev1.Node) { n.Spec.Unschedulable = true }, false)
	}
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("flapping Node %s: %w", name, err))
	}
}

// recoverNodes brings one random problem Node back: Ready, untainted, schedulable.
func (r *runner) recoverNodes() {
	pool := r.nodes.pools[r.rng.IntN(len(r.nodes.pools))]
	name := pool[r.rng.IntN(len(pool))]
	r.nodes.recoveries++
	if r.cluster {
		if f, ok := r.cl.failed[name]; !ok || f.checked {
			r.recoverNode(name)
		}
	} else if err := framework.SetNodeReady(ctx, k8sClient, name, true); err != nil {
		r.errs = append(r.errs, fmt.Errorf("recovering Node %s: %w", name, err))
		return
	}
	err := framework.UpdateNode(ctx, k8sClient, name, func(n *corev1.Node) {
		n.Spec.Unschedulable = false
		kept := n.Spec.Taints[:0]
		for _, t := range n.Spec.Taints {
			if t.Key != health.TaintImpendingNodeTermination {
				kept = append(kept, t)
			}
		}
		n.Spec.Taints = kept
	}, false)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("recovering Node %s: %w", name, err))
	}
}

// checkHealth checks I8 once activity has stopped: the last Pods are scheduled and Ready, and then
// every slice's hosts and health conditions must equal what the live Pods and Nodes say, within
// twice the bind settle plus a reconcile (given some margin for the faults the instances see):
// what the health package evaluates from them (CheckHealthConverged), and what an oracle of its
// own reads in docs/spec.md §11 (healthAgrees).
func (r *runner) checkHealth() {
	if r.nodes == nil {
		return
	}
	if !r.cluster {
		r.schedule(1 << 30)
	}
	var last error
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if last = errors.Join(framework.CheckHealthConverged(ctx, k8sClient, r.ns), r.healthAgrees()); last == nil {
			r.reportHealth()
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.reportHealth()
	r.errs = append(r.errs, fmt.Errorf("I8 at the end: %w", last))
}

// reportHealth prints what the run did to slice health and the conditions it converged to, so
// that a run whose I8 held vacuously (no flap, no move) shows it:
//
//	CHAOS-health gate=<on|off> binds=<n> moves=<n> flaps=<n> recoveries=<n> slices=<n> placed_false=<n> degraded=<n> ready=<n>
func (r *runner) reportHealth() {
	var list tpuv1alpha1.TPUSliceAssignmentList
	if err := k8sClient.List(ctx, &list, client.InNamespace(r.ns)); err != nil {
		return
	}
	var split, degraded, ready int
	for i := range list.Items {
		conds := list.Items[i].Status.Conditions
		split += count(apimeta.IsStatusConditionFalse(conds, tpuv1alpha1.ConditionPlaced))
		degraded += count(apimeta.IsStatusConditionTrue(conds, tpuv1alpha1.ConditionDegraded))
		ready += count(apimeta.IsStatusConditionTrue(conds, tpuv1alpha1.ConditionReady))
	}
	gate := map[bool]string{false: "off", true: "on"}[r.gate]
	fmt.Fprintf(os.Stdout, "CHAOS-health gate=%s binds=%d moves=%d flaps=%d recoveries=%d slices=%d placed_false=%d degraded=%d ready=%d\n",
		gate, r.nodes.binds, r.nodes.moves, r.nodes.flaps, r.nodes.recoveries, len(list.Items), split, degraded, ready)
}

func count(b bool) int {
	if b {
		return 1
	}
	return 0
}

// finishTerminating stands in for the kubelets: a Pod bound to a node is not removed at once on
// delete, it waits for its kubelet to stop it. With none, every deleted Pod the runner bound would
// stay Terminating for good (and KubeRay wait for it). It removes them, as their kubelet would
// once the containers stopped.
func (r *runner) finishTerminating() {
	if r.nodes == nil {
		return
	}
	var pods corev1.PodList
	if err := k8sClient.List(ctx, &pods, client.InNamespace(r.ns)); err != nil {
		return
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp != nil && p.Spec.NodeName != "" {
			_ = client.IgnoreNotFound(k8sClient.Delete(ctx, p, client.GracePeriodSeconds(0)))
		}
	}
}
