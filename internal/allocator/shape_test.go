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

package allocator

import (
	"context"
	"errors"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
)

// oddRequest asks for a worker ID in the test group with a topology that gives 2 hosts (v6e 2x4,
// 4 chips per Pod) where the group's numOfHosts is 4: a stray or hand-made Pod, or a forged review.
func oddRequest() Request {
	req := request(2)
	req.Topology = "2x4"
	return req
}

// oddDenial is the denial of oddRequest: both counts, at once.
var oddDenial = &DeniedError{Message: `this Pod's topology 2x4 gives 2 hosts per slice, but worker group "tpu" of RayCluster team-a/rc has numOfHosts 4, a slice of 4 hosts; ` +
	"create the group's Pods from its template (its topology and google.com/tpu request give numOfHosts hosts), or fix numOfHosts"}

// heldCommit is a fake API server whose slice creates wait until release is closed: the first
// commit of a group stays in flight while the test queues the next claims behind it.
type heldCommit struct {
	client.WithWatch
	release chan struct{}
	// entered counts the creates that reached the API server.
	entered atomic.Int32
}

func newHeldCommit(t *testing.T, objs ...client.Object) *heldCommit {
	t.Helper()
	h := &heldCommit{release: make(chan struct{})}
	h.WithWatch = newClient(t, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*tpuv1alpha1.TPUSliceAssignment); ok {
				h.entered.Add(1)
				select {
				case <-h.release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return c.Create(ctx, obj, opts...)
		},
	}, objs...)
	return h
}

// queuedCalls counts the calls waiting in a's queues behind a commit.
func queuedCalls(a *Allocator) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, q := range a.queues {
		n += len(q.pending)
	}
	return n
}

// claimCall is one Claim made in the background.
type claimCall struct {
	req      Request
	done     chan struct{}
	got      Assignment
	err      error
	answered time.Duration
}

func (c *claimCall) answeredYet() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// claimInOrder starts a Claim for each request, one after the other: each is answered, waits in a
// queue, or holds a create at the API server before the next starts, so the calls that queue form
// one batch behind the commit that is in flight.
func claimInOrder(t *testing.T, a *Allocator, h *heldCommit, reqs []Request) []*claimCall {
	t.Helper()
	calls := make([]*claimCall, len(reqs))
	for i, req := range reqs {
		c := &claimCall{req: req, done: make(chan struct{})}
		calls[i] = c
		inFlight := int(h.entered.Load()) + queuedCalls(a)
		start := time.Now()
		go func() {
			defer close(c.done)
			c.got, c.err = a.Claim(t.Context(), req)
			c.answered = time.Since(start)
		}()
		// A call that starts a commit holds a create; one behind a commit waits in its queue.
		waitFor(t, func() bool {
			entered := int(h.entered.Load())
			return c.answeredYet() || (entered > 0 && entered+queuedCalls(a) > inFlight)
		})
	}
	return calls
}

// TestClaimOfAnotherHostCountNextToTheGroupsBatch: docs/spec.md §10 and §5. While a commit of the
// group is in flight, a request whose topology gives another host count than the group's numOfHosts
// arrives with the group's own requests. It is denied at once, naming both counts, before the commit
// in flight lands; the group's own requests all get their IDs in the 4-host slice; no slice of 2
// hosts is made. Group commit once planned a whole batch with its last request's host count: the
// odd request got an ID in the 4-host slice, or made a 2-host slice, or got the group's own
// requests denied for good.
func TestClaimOfAnotherHostCountNextToTheGroupsBatch(t *testing.T) {
	own, odd := request(4), oddRequest()
	cases := map[string][]Request{
		"the odd request comes first, alone":                    {odd, own, own, own, own},
		"the odd request is in the middle of the group's batch": {own, own, odd, own, own},
		"the odd request comes last in the group's batch":       {own, own, own, own, odd},
		"two odd requests around the group's batch":             {odd, own, own, own, own, odd},
	}
	for name, reqs := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHeldCommit(t)
			a := newAllocator(h, h, timeout)
			calls := claimInOrder(t, a, h, reqs)
			// The odd requests are answered while the group's first commit is still in flight.
			inFlight := make([]bool, len(calls))
			for i, c := range calls {
				inFlight[i] = c.answeredYet()
			}
			close(h.release)
			for i, c := range calls {
				<-c.done
				if c.req.Hosts == own.Hosts {
					continue
				}
				if !inFlight[i] {
					t.Errorf("claim %d of 2 hosts not answered while the group's commit was in flight", i)
				}
				if diff := cmp.Diff(oddDenial, c.err); diff != "" {
					t.Errorf("claim %d of 2 hosts = %+v, error (-want,+got):\n%s", i, c.got, diff)
				}
				if c.answered > DefaultTimeout {
					t.Errorf("claim %d of 2 hosts denied after %s, want within %s (docs/spec.md §5)", i, c.answered, DefaultTimeout)
				}
				t.Logf("claim %d of 2 hosts answered after %s", i, c.answered)
			}
			var gotIDs []int32
			var held []tpuv1alpha1.WorkerClaim
			for i, c := range calls {
				if c.req.Hosts != own.Hosts {
					continue
				}
				if c.err != nil {
					t.Errorf("claim %d of the group: %v", i, c.err)
					continue
				}
				if c.got.Replica != 0 || c.got.SliceName != sliceName(0) {
					t.Errorf("claim %d of the group placed in replica %d (%s), want 0", i, c.got.Replica, c.got.SliceName)
				}
				gotIDs = append(gotIDs, c.got.WorkerID)
				held = append(held, claim(c.got.WorkerID, c.got.Token))
			}
			if diff := cmp.Diff([]int32{0, 1, 2, 3}, gotIDs, cmpSortedIDs); diff != "" {
				t.Errorf("worker IDs of the group's claims (-want,+got):\n%s", diff)
			}
			want := []tpuv1alpha1.TPUSliceAssignment{createdSlice(0, "", held...)}
			if diff := cmp.Diff(want, storedSlices(t, h), cmpSlices); diff != "" {
				t.Errorf("stored slices (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestGroupCommitPlansEachShapeOnItsOwn: batch planning. Requests of one group but of different
// slice shapes (the RayCluster's numOfHosts changed between their admissions, so each passed the
// numOfHosts check) never share a batch: each is planned with its own host count. Next to a 4-host
// slice whose Pods run, the 4-host requests get the free IDs and the 2-host ones are denied naming
// both counts, whatever their order.
func TestGroupCommitPlansEachShapeOnItsOwn(t *testing.T) {
	four, two := request(4), request(2)
	two.Topology = "2x4"
	running := existingSlice(0, clusterUID)
	for id := range int32(2) {
		name := podName(0, id)
		running.Claim(id, "t-"+name, name, types.UID("uid-"+name))
	}
	// The slice holds 2, 3 or 4 claims by then: the 4-host batch commits alongside.
	wantDenial := regexp.MustCompile(`^this Pod's topology gives 2 hosts per slice, but replica 0 of its worker group is a slice of 4 hosts that still holds [234] claims of live or starting Pods; ` +
		`delete the group's old replicas \(or the RayCluster\) before changing its topology, or keep the template's topology$`)
	cases := map[string][]Request{
		"2-host requests last":  {four, four, two, two},
		"2-host requests first": {two, two, four, four},
		"interleaved":           {two, four, two, four},
	}
	for name, reqs := range cases {
		t.Run(name, func(t *testing.T) {
			objs := append(livePods(0, 2, 3), running.Obj())
			h := newHeldCommit(t, objs...)
			a := newAllocator(h, h, timeout)
			// A commit of another replica's claim holds the group's queues while the batch forms.
			// The calls are enqueued as Claim does after prepare, each with the RayCluster it saw.
			blocker := &call{req: four, cluster: clusterInfo{uid: clusterUID, desired: 2}, token: "blocker",
				ctx: t.Context(), result: make(chan result, 1), m: a.m}
			blocker.req.Claim = claims.Request{ReplicaIndex: ptr.To(int32(1)), HostIndex: ptr.To(int32(0))}
			a.enqueue(blocker)
			waitFor(t, func() bool { return h.entered.Load() == 1 })
			calls := make([]*call, len(reqs))
			for i, req := range reqs {
				ctx, cancel := context.WithTimeout(t.Context(), timeout)
				t.Cleanup(cancel)
				calls[i] = &call{req: req, cluster: clusterInfo{uid: clusterUID, desired: 2}, token: NewToken(),
					ctx: ctx, result: make(chan result, 1), m: a.m}
				a.enqueue(calls[i])
			}
			close(h.release)
			if r := <-blocker.result; r.err != nil {
				t.Fatalf("blocking claim: %v", r.err)
			}
			var gotIDs []int32
			for i, c := range calls {
				r := <-c.result
				if c.req.Hosts == 4 {
					if r.err != nil || r.assignment.Replica != 0 {
						t.Errorf("claim %d of 4 hosts = %+v, %v; want a free ID of replica 0", i, r.assignment, r.err)
					}
					gotIDs = append(gotIDs, r.assignment.WorkerID)
					continue
				}
				var d *DeniedError
				if !errors.As(r.err, &d) || d.Transient || !wantDenial.MatchString(d.Message) {
					t.Errorf("claim %d of 2 hosts: error = %v, want a permanent denial matching %q", i, r.err, wantDenial)
				}
			}
			if diff := cmp.Diff([]int32{2, 3}, gotIDs, cmpSortedIDs); diff != "" {
				t.Errorf("worker IDs of the 4-host claims (-want,+got):\n%s", diff)
			}
			for _, s := range storedSlices(t, h) {
				if s.Spec.Hosts != 4 || s.Spec.Topology != "4x4" {
					t.Errorf("slice %s has %d hosts, topology %s; want only slices of 4 hosts, 4x4", s.Name, s.Spec.Hosts, s.Spec.Topology)
				}
			}
		})
	}
}

// TestKeyOf: the queue key, and so the batch, separates requests by group, RayCluster UID and slice
// shape, and by nothing a Pod of the same slice may differ in.
func TestKeyOf(t *testing.T) {
	base := request(4)
	cases := map[string]struct {
		change   func(*Request)
		wantSame bool
	}{
		"another host count":                    {change: func(r *Request) { r.Hosts = 2 }},
		"another topology of the same hosts":    {change: func(r *Request) { r.Topology = "2x8" }},
		"another accelerator":                   {change: func(r *Request) { r.Accelerator = "tpu-v5-lite-podslice" }},
		"another group":                         {change: func(r *Request) { r.GroupName = "other" }},
		"another RayCluster UID":                {change: func(r *Request) { r.ClusterUID = oldUID }},
		"another affinity key joins the batch":  {change: func(r *Request) { r.AffinityTopologyKey = "k" }, wantSame: true},
		"KubeRay's index labels join the batch": {change: func(r *Request) { r.Claim.ReplicaIndex = ptr.To(int32(1)) }, wantSame: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			other := base
			tc.change(&other)
			if got := keyOf(other) == keyOf(base); got != tc.wantSame {
				t.Errorf("keyOf(%+v) == keyOf(%+v) is %t, want %t", other, base, got, tc.wantSame)
			}
		})
	}
}

// TestABatchCreatesTheSliceOfItsFirstClaim: a slice a batch creates records the affinity key of
// the first request placed in it (docs/spec.md §4: every Pod of a slice gets the key of the slice's
// first claim), not of the batch's last request.
func TestABatchCreatesTheSliceOfItsFirstClaim(t *testing.T) {
	h := newHeldCommit(t, rayCluster(2))
	a := newAllocator(h, h, timeout)
	first := request(4)
	first.AffinityTopologyKey = "first"
	second := request(4)
	second.AffinityTopologyKey = "second"
	// Replica 0's create holds the queue; the batch behind it opens replica 0's remaining IDs and
	// then replica 1, first with the key "first".
	reqs := []Request{request(4), request(4), request(4), request(4), first, second}
	calls := claimInOrder(t, a, h, reqs)
	close(h.release)
	for i, c := range calls {
		<-c.done
		if c.err != nil {
			t.Fatalf("claim %d: %v", i, c.err)
		}
	}
	for i, c := range calls[4:] {
		if c.got.Replica != 1 || c.got.AffinityTopologyKey != "first" {
			t.Errorf("claim %d = replica %d, key %q; want replica 1 with the key of its first claim, %q", 4+i, c.got.Replica, c.got.AffinityTopologyKey, "first")
		}
	}
}

// cmpSortedIDs compares worker IDs as sets.
var cmpSortedIDs = cmpopts.SortSlices(func(a, b int32) bool { return a < b })

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached after 10s")
		}
		time.Sleep(time.Millisecond)
	}
}
