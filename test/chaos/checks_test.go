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
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// forgedHold is how long after its AdmissionReview was posted a forged claim may still be pending:
// the pending TTL counts from when the reconciler first saw the claim, and starts again when the
// reconciling instance restarts, so allow it three times and a reconcile's latency.
const forgedHold = 3*pendingTTL + 10*time.Second

// boundClaim is where a live Pod's worker ID was seen bound.
type boundClaim struct {
	slice    string
	workerID int32
}

// forgedClaim is a claim a forged AdmissionReview made: its Pod is never created.
type forgedClaim struct {
	token    string
	posted   time.Time
	reported bool
}

// violation records a violation of docs/spec.md, naming the step and operation it followed.
func (r *runner) violationf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf("after op %d (%s): %w", r.ops, r.op, fmt.Errorf(format, args...)))
}

// checkClaimsFollowPods checks that a claim once bound to a live Pod stays bound to it, on the same
// slice and worker ID, as long as the Pod is live (docs/spec.md §8, I7): label and annotation edits,
// copies of its manifest, other Pods' topologies, stale generations and forged requests never
// release, move or replace it. Slices are read before Pods, so a Pod deleted between the two reads
// is not live in the second and its released claim is not mistaken for a violation.
func (r *runner) checkClaimsFollowPods() {
	var list tpuv1alpha1.TPUSliceAssignmentList
	if err := k8sClient.List(ctx, &list, client.InNamespace(r.ns)); err != nil {
		return
	}
	var pods corev1.PodList
	if err := k8sClient.List(ctx, &pods, client.InNamespace(r.ns)); err != nil {
		return
	}
	live := map[types.UID]*corev1.Pod{}
	for i := range pods.Items {
		if p := &pods.Items[i]; lifecycle.PodLive(p) && r.current(p) {
			live[p.UID] = p
		}
	}
	held := map[types.UID]boundClaim{}
	for _, s := range list.Items {
		for _, c := range s.Status.Claims {
			if c.PodUID != "" {
				held[c.PodUID] = boundClaim{slice: s.Name, workerID: c.WorkerID}
			}
		}
	}
	for uid, want := range r.bound {
		p, ok := live[uid]
		if !ok {
			delete(r.bound, uid)
			continue
		}
		if got, ok := held[uid]; !ok || got != want {
			r.violationf("§8: the claim of live Pod %s on worker ID %d of slice %s was released or moved (now %+v, bound %t)",
				p.Name, want.workerID, want.slice, got, ok)
			delete(r.bound, uid)
		}
	}
	for uid, c := range held {
		if _, ok := live[uid]; ok {
			r.bound[uid] = c
		}
	}
}

// checkForgedClaims checks docs/spec.md §10 for the AdmissionReviews posted straight to a webhook
// instance: each holds at most one worker ID, and only until the pending TTL.
func (r *runner) checkForgedClaims() {
	if len(r.forgedClaims) == 0 {
		return
	}
	var list tpuv1alpha1.TPUSliceAssignmentList
	if err := k8sClient.List(ctx, &list, client.InNamespace(r.ns)); err != nil {
		return
	}
	type held struct {
		n       int
		pending bool
		where   string
	}
	byToken := map[string]*held{}
	for _, s := range list.Items {
		for _, c := range s.Status.Claims {
			h := byToken[c.Token]
			if h == nil {
				h = &held{}
				byToken[c.Token] = h
			}
			h.n++
			h.pending = h.pending || c.PodUID == ""
			h.where = fmt.Sprintf("ID %d of slice %s", c.WorkerID, s.Name)
		}
	}
	kept := r.forgedClaims[:0]
	for _, f := range r.forgedClaims {
		h := byToken[f.token]
		switch {
		case h != nil && h.n > 1 && !f.reported:
			r.violationf("§10: one forged AdmissionReview holds %d worker IDs (token %s)", h.n, f.token)
			f.reported = true
		case h != nil && h.pending && time.Since(f.posted) > forgedHold && !f.reported:
			r.violationf("§10: a forged AdmissionReview posted %v ago still holds %s (token %s), past the pending TTL of %v",
				time.Since(f.posted).Round(time.Second), h.where, f.token, pendingTTL)
			f.reported = true
		}
		// A released claim is done with; one since bound follows a real Pod that holds its ID by
		// its spec, and is no longer forged.
		if h != nil && h.pending && time.Since(f.posted) < 2*forgedHold {
			kept = append(kept, f)
		}
	}
	r.forgedClaims = kept
}

// adoptions is the count of claims the instances adopted, at admission and by their reconcilers.
func adoptions(instances []*framework.Instance) float64 {
	var n float64
	for _, inst := range instances {
		n += metrics.Value(inst.Metrics.ClaimsAdopted.WithLabelValues(metrics.AdoptedByReconciler)) +
			metrics.Value(inst.Metrics.ClaimsAdopted.WithLabelValues(metrics.AdoptedAtAdmission))
	}
	return n
}
