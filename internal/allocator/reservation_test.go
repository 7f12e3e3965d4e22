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
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
)

// window is the reservation window of the tests (docs/spec.md §3.5).
const window = 5 * time.Second

// reservingAllocator returns an Allocator with reservations on whose clock stands at now.
func reservingAllocator(c client.Client, clk *clocktesting.FakeClock) *Allocator {
	return New(c, c, Options{Timeout: timeout, Metrics: metrics.New(), Clock: clk, ReservationWindow: window})
}

// storedToken is the token a claim handed out under token is stored under: the seal of a
// reserved ID's secret (docs/spec.md §3.5), else token itself.
func storedToken(token string) string {
	if strings.HasPrefix(token, identity.SecretPrefix) {
		return identity.Seal(token)
	}
	return token
}

// storedClaims returns the claims of the stored slice of replica by worker ID.
func storedClaims(t *testing.T, c client.Reader, replica int32) map[int32]tpuv1alpha1.WorkerClaim {
	t.Helper()
	out := map[int32]tpuv1alpha1.WorkerClaim{}
	for _, s := range storedSlices(t, c) {
		if s.Spec.ReplicaIndex == replica {
			for _, cl := range s.Status.Claims {
				out[cl.WorkerID] = cl
			}
		}
	}
	return out
}

// TestReservationsSequential: a slice's Pods admitted one after another are handed IDs from
// reservations (docs/spec.md §3.5): every ID once, each under a token the slice stores on that ID,
// with a handful of writes for the whole slice instead of one per Pod.
func TestReservationsSequential(t *testing.T) {
	const hosts = 64
	for name, indexedRequests := range map[string]bool{"operator chooses": false, "KubeRay's index labels": true} {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, interceptor.Funcs{}, rayClusterOf(hosts, 1))
			a := reservingAllocator(c, clocktesting.NewFakeClock(now))
			got := map[int32]string{}
			for h := range int32(hosts) {
				req := request(hosts)
				if indexedRequests {
					req = indexed(req, 0, h, "rep-a")
				}
				as, err := a.Claim(t.Context(), req)
				if err != nil {
					t.Fatalf("Claim %d: %v", h, err)
				}
				if _, dup := got[as.WorkerID]; dup {
					t.Fatalf("worker ID %d handed out twice", as.WorkerID)
				}
				if indexedRequests && as.WorkerID != h {
					t.Fatalf("Claim of host index %d got worker ID %d", h, as.WorkerID)
				}
				got[as.WorkerID] = as.Token
				waitRenewals(t, a)
			}
			stored := storedClaims(t, c, 0)
			for id, token := range got {
				if stored[id].Token != storedToken(token) {
					t.Errorf("worker ID %d was handed out with token %q; the slice stores %q", id, token, stored[id].Token)
				}
			}
			// The first claim's create and status update; renewals of 16, 32, then the IDs left, off
			// the admission path.
			if w := metrics.Value(a.m.Writes); w > 5 {
				t.Errorf("%d writes for %d sequential claims, want at most 5", int(w), hosts)
			}
			// Every claim after the first is handed out.
			if r := metrics.Value(a.m.Reserved); r < hosts-1 {
				t.Errorf("%d IDs handed out from reservations, want at least %d", int(r), hosts-1)
			}
		})
	}
}

// waitRenewals waits until no queue of a has a renewal queued or running. KubeRay's next create
// comes milliseconds after its last, time enough for a renewal's write on the fake client; a test
// loop that claims back to back on a loaded machine may not give it that time, and its next
// claims then find the bridge spent and write their own (6 writes, 61 hand-outs in one CI run).
func waitRenewals(t *testing.T, a *Allocator) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		busy := false
		a.mu.Lock()
		for _, q := range a.queues {
			q.mu.Lock()
			busy = busy || q.renewing
			q.mu.Unlock()
		}
		a.mu.Unlock()
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a renewal still queued or running after 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReservationsRenewedBeforeTheWindowEnds: once three quarters of a reservation's window have
// passed, the hand-out that notices queues a renewal off the admission path (docs/spec.md §3.5): a
// write that keeps a bridge of the reservation's next IDs under their tokens, reserves the others
// again under new tokens, and a new block. The next claim past the first block's window is handed
// an ID of the renewal, with no write of its own.
func TestReservationsRenewedBeforeTheWindowEnds(t *testing.T) {
	const hosts = 64
	c := newClient(t, interceptor.Funcs{}, rayClusterOf(hosts, 1))
	clk := clocktesting.NewFakeClock(now)
	a := reservingAllocator(c, clk)
	first, err := a.Claim(t.Context(), request(hosts))
	if err != nil {
		t.Fatal(err)
	}
	firstBlock := storedClaims(t, c, 0)
	firstTokens := map[string]bool{}
	for _, cl := range firstBlock {
		firstTokens[cl.Token] = true
	}
	writes := metrics.Value(a.m.Writes)
	clk.Step(window * 8 / 10)
	second, err := a.Claim(t.Context(), request(hosts))
	if err != nil {
		t.Fatal(err)
	}
	if firstBlock[second.WorkerID].Token != storedToken(second.Token) {
		t.Fatalf("inside the window, the claim got worker ID %d under %q, not an ID of the first block", second.WorkerID, second.Token)
	}
	waitFor(t, func() bool { return metrics.Value(a.m.Renewals) == 1 })
	if got := metrics.Value(a.m.Writes) - writes; got != 1 {
		t.Fatalf("%v writes since the first claim, want 1 (the renewal)", got)
	}
	stored := storedClaims(t, c, 0)
	kept := 0
	for id, cl := range firstBlock {
		switch {
		case stored[id].PodUID != "" || stored[id].Token == "":
			t.Errorf("the renewal freed worker ID %d of the first block: %+v", id, stored[id])
		case id != first.WorkerID && id != second.WorkerID && stored[id].Token == cl.Token:
			kept++
		}
	}
	// One ID handed out since the first write: a bridge of one (the lowest left) keeps its token.
	if kept != 1 {
		t.Errorf("the renewal kept %d unhanded tokens of the first block, want 1 (the bridge)", kept)
	}
	if want := 2 + 1 + minReservation; len(stored) != want {
		t.Errorf("%d claims stored after the renewal, want %d (2 handed out, the bridge, a block of %d)", len(stored), want, minReservation)
	}
	clk.Step(window * 3 / 10) // the first block's window has ended, the renewal's has not.
	third, err := a.Claim(t.Context(), request(hosts))
	if err != nil {
		t.Fatal(err)
	}
	if got := metrics.Value(a.m.Writes) - writes; got != 1 {
		t.Errorf("the claim past the first block's window made %v writes, want none", got-1)
	}
	if firstTokens[third.Token] {
		t.Errorf("past its window, worker ID %d was handed out under the first block's token %q", third.WorkerID, third.Token)
	}
	if stored := storedClaims(t, c, 0); stored[third.WorkerID].Token != storedToken(third.Token) {
		t.Errorf("worker ID %d handed out under %q, stored under %q", third.WorkerID, third.Token, stored[third.WorkerID].Token)
	}
	if third.WorkerID == first.WorkerID || third.WorkerID == second.WorkerID {
		t.Errorf("worker ID %d handed out twice", third.WorkerID)
	}
}

// TestReservationsHandOutsDuringARenewal: while a renewal's write is in flight, the group's claims
// are still handed IDs from the reservation, without waiting for the write (docs/spec.md §3.5), and
// the write keeps their claims: every ID handed out is stored under its token once it lands.
func TestReservationsHandOutsDuringARenewal(t *testing.T) {
	const hosts = 64
	var updates atomic.Int32
	inFlight, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	releaseWrite := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseWrite)
	c := newClient(t, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if updates.Add(1) == 2 { // the first renewal
				close(inFlight)
				<-release
			}
			return cl.SubResource(sub).Update(ctx, obj, opts...)
		},
	}, rayClusterOf(hosts, 1))
	a := reservingAllocator(c, clocktesting.NewFakeClock(now))
	got := map[int32]string{}
	claim := func() {
		t.Helper()
		as, err := a.Claim(t.Context(), request(hosts))
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := got[as.WorkerID]; dup {
			t.Fatalf("worker ID %d handed out twice", as.WorkerID)
		}
		got[as.WorkerID] = as.Token
	}
	// The first claim writes a block of 16; half of it handed out, a renewal is queued.
	for range 1 + minReservation/2 {
		claim()
	}
	select {
	case <-inFlight:
	case <-time.After(5 * time.Second):
		t.Fatal("no renewal was written once half of the block was handed out")
	}
	// 8 handed out since the first write: the renewal keeps a bridge of 4 for hand-outs meanwhile.
	const bridge = minReservation / 4
	start := time.Now()
	for range bridge {
		claim()
	}
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("%d claims took %v with a renewal in flight; they waited for it", bridge, waited)
	}
	writes := metrics.Value(a.m.Writes)
	releaseWrite()
	waitFor(t, func() bool { return metrics.Value(a.m.Renewals) == 1 })
	if w := metrics.Value(a.m.Writes); w != writes {
		t.Errorf("claims made %v writes of their own while the renewal was in flight", w-writes)
	}
	stored := storedClaims(t, c, 0)
	for id, token := range got {
		if stored[id].Token != storedToken(token) {
			t.Errorf("worker ID %d handed out under %q, stored under %q after the renewal", id, token, stored[id].Token)
		}
	}
	claim() // from the renewal's block
	if stored := storedClaims(t, c, 0); len(stored) != len(got)+minReservation-1 {
		t.Errorf("%d claims stored, want the %d handed out and the renewal's block of %d less the last one", len(stored), len(got), minReservation)
	}
	if r := metrics.Value(a.m.Reserved); int(r) != len(got)-1 {
		t.Errorf("%v IDs handed out from reservations, want %d (all but the first)", r, len(got)-1)
	}
}

// TestReservationsWindow: past the window a reservation's unhanded IDs are never handed out; the
// next claim writes, and its write drops (renews) them, so that the stored slice holds only the
// tokens handed out and the new reservation's.
func TestReservationsWindow(t *testing.T) {
	const hosts = 64
	c := newClient(t, interceptor.Funcs{}, rayClusterOf(hosts, 1))
	clk := clocktesting.NewFakeClock(now)
	a := reservingAllocator(c, clk)
	first, err := a.Claim(t.Context(), request(hosts))
	if err != nil {
		t.Fatal(err)
	}
	reserved := storedClaims(t, c, 0)
	if len(reserved) != 1+minReservation {
		t.Fatalf("the first write stored %d claims, want %d (its own and a block of %d)", len(reserved), 1+minReservation, minReservation)
	}
	writes := metrics.Value(a.m.Writes)
	clk.Step(window)
	second, err := a.Claim(t.Context(), request(hosts))
	if err != nil {
		t.Fatal(err)
	}
	if metrics.Value(a.m.Writes) != writes+1 {
		t.Errorf("a claim past the window made %v writes, want 1", metrics.Value(a.m.Writes)-writes)
	}
	for _, cl := range reserved {
		if cl.Token == storedToken(second.Token) {
			t.Fatalf("past the window, worker ID %d was handed out under the expired token %q", second.WorkerID, cl.Token)
		}
	}
	stored := storedClaims(t, c, 0)
	for id, cl := range reserved {
		if id != first.WorkerID && stored[id].Token == cl.Token {
			t.Errorf("worker ID %d still stored under the expired, unhanded token %q", id, cl.Token)
		}
	}
	if stored[first.WorkerID].Token != storedToken(first.Token) || stored[second.WorkerID].Token != storedToken(second.Token) {
		t.Errorf("the handed-out claims are not stored: %v", stored)
	}
}

// TestReservationsFencing: another process (another replica, or this one restarted with an empty
// memory) never hands out or takes an ID this one reserved; it claims free IDs with its own writes,
// and a request for a reserved ID waits (a transient denial) until the holder gives it back or the
// pending TTL frees it.
func TestReservationsFencing(t *testing.T) {
	const hosts = 64
	c := newClient(t, interceptor.Funcs{}, rayClusterOf(hosts, 1))
	clk := clocktesting.NewFakeClock(now)
	holder, other := reservingAllocator(c, clk), reservingAllocator(c, clk)
	if _, err := holder.Claim(t.Context(), indexed(request(hosts), 0, 0, "rep-a")); err != nil {
		t.Fatal(err)
	}
	_, err := other.Claim(t.Context(), indexed(request(hosts), 0, 1, "rep-a"))
	var denied *DeniedError
	if !errors.As(err, &denied) || !denied.Transient {
		t.Fatalf("another process's claim of a reserved ID = %v, want a transient denial", err)
	}
	as, err := other.Claim(t.Context(), indexed(request(hosts), 0, 40, "rep-a"))
	if err != nil || as.WorkerID != 40 {
		t.Fatalf("another process's claim of a free ID = %+v, %v; want worker ID 40", as, err)
	}
	// The holder still hands out its reserved IDs, and the other's write did not disturb them.
	held, err := holder.Claim(t.Context(), indexed(request(hosts), 0, 1, "rep-a"))
	if err != nil || held.WorkerID != 1 {
		t.Fatalf("the holder's claim of its reserved ID 1 = %+v, %v", held, err)
	}
	if got := storedClaims(t, c, 0)[1].Token; got != storedToken(held.Token) {
		t.Errorf("worker ID 1 stored under %q, handed out under %q", got, held.Token)
	}
}

// TestReservationsNewReplicaName: a Pod of a new KubeRay replica (KubeRay re-creating the replica
// under a new name) never gets an ID from the old replica's reservation: it waits until the old
// replica's claims are gone, as without reservations (docs/spec.md §3.1).
func TestReservationsNewReplicaName(t *testing.T) {
	c := newClient(t, interceptor.Funcs{}, rayClusterOf(64, 1))
	a := reservingAllocator(c, clocktesting.NewFakeClock(now))
	if _, err := a.Claim(t.Context(), indexed(request(64), 0, 0, "rep-a")); err != nil {
		t.Fatal(err)
	}
	as, err := a.Claim(t.Context(), indexed(request(64), 0, 1, "rep-b"))
	var denied *DeniedError
	if !errors.As(err, &denied) || !denied.Transient {
		t.Fatalf("a Pod of a new replica name = %+v, %v; want a transient denial while the old replica holds a claim", as, err)
	}
}

// TestReservationsNotOnRequest: a claim that asks for no reservation (forwarding's local fallback)
// writes its own claim only.
func TestReservationsNotOnRequest(t *testing.T) {
	c := newClient(t, interceptor.Funcs{}, rayClusterOf(64, 1))
	a := reservingAllocator(c, clocktesting.NewFakeClock(now))
	req := request(64)
	req.NoReservation = true
	if _, err := a.Claim(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if n := len(storedClaims(t, c, 0)); n != 1 {
		t.Errorf("%d claims stored, want 1: the request's own", n)
	}
}

// TestReservationsOtherWriters: a reserved ID is handed out only while its slice, as last read or
// written, still holds the reserved claim unbound and no line that does not parse. A claim bound
// meanwhile to a Pod created past the webhook, or a status written by hand, sends the request to a
// plan on the slice as it is.
func TestReservationsOtherWriters(t *testing.T) {
	cases := map[string]struct {
		edit func(s *tpuv1alpha1.TPUSliceAssignment)
		// malformed: the slice's stored status holds a line that does not parse from then on.
		malformed bool
		// notID is an ID that must not be handed out.
		notID int32
	}{
		"the reconciler bound reserved ID 1 to a Pod that carries it in its spec": {
			edit: func(s *tpuv1alpha1.TPUSliceAssignment) {
				for i := range s.Status.Claims {
					if s.Status.Claims[i].WorkerID == 1 {
						s.Status.Claims[i].PodName, s.Status.Claims[i].PodUID = "bypass", "bypass-uid"
					}
				}
			},
			notID: 1,
		},
		"a status written by hand holds a line that does not parse": {malformed: true, notID: -1},
		"a status written by hand dropped reserved ID 1 (which is then free, and claimed by a write)": {
			edit: func(s *tpuv1alpha1.TPUSliceAssignment) {
				s.Status.Claims = slices.DeleteFunc(s.Status.Claims, func(c tpuv1alpha1.WorkerClaim) bool { return c.WorkerID == 1 })
			},
			notID: -1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var malformed atomic.Bool
			marking := withMalformedLines()
			c := newClient(t, interceptor.Funcs{
				Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if malformed.Load() {
						return marking.Get(ctx, cl, key, obj, opts...)
					}
					return cl.Get(ctx, key, obj, opts...)
				},
				List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
					if malformed.Load() {
						return marking.List(ctx, cl, list, opts...)
					}
					return cl.List(ctx, list, opts...)
				},
			}, rayClusterOf(64, 1))
			a := reservingAllocator(c, clocktesting.NewFakeClock(now))
			if _, err := a.Claim(t.Context(), request(64)); err != nil {
				t.Fatal(err)
			}
			writes := metrics.Value(a.m.Writes)
			if tc.edit != nil {
				slice := &tpuv1alpha1.TPUSliceAssignment{}
				if err := c.Get(t.Context(), client.ObjectKey{Namespace: testNS, Name: sliceName(0)}, slice); err != nil {
					t.Fatal(err)
				}
				tc.edit(slice)
				if err := c.Status().Update(t.Context(), slice); err != nil {
					t.Fatal(err)
				}
			}
			malformed.Store(tc.malformed)
			as, err := a.Claim(t.Context(), request(64))
			if tc.malformed {
				var denied *DeniedError
				if !errors.As(err, &denied) || !denied.Transient {
					t.Fatalf("Claim = %+v, %v; want a transient denial until the repair", as, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if as.WorkerID == tc.notID {
				t.Fatalf("reserved ID %d was handed out after another writer bound it", as.WorkerID)
			}
			if metrics.Value(a.m.Writes) == writes {
				t.Errorf("the claim was answered from the reservation, with no write")
			}
			if got := storedClaims(t, c, 0)[as.WorkerID].Token; got != storedToken(as.Token) {
				t.Errorf("worker ID %d handed out under %q, stored under %q", as.WorkerID, as.Token, got)
			}
		})
	}
}

// TestReservationsNearDeadline: a call with less than handOutMargin left is claimed by a write under
// its own token, which a retry of its request elsewhere (forwarding's fallback) finds again, not
// handed a reserved ID its caller may never use.
func TestReservationsNearDeadline(t *testing.T) {
	c := newClient(t, interceptor.Funcs{}, rayClusterOf(64, 1))
	a := reservingAllocator(c, clocktesting.NewFakeClock(now))
	if _, err := a.Claim(t.Context(), request(64)); err != nil {
		t.Fatal(err)
	}
	writes := metrics.Value(a.m.Writes)
	ctx, cancel := context.WithTimeout(t.Context(), handOutMargin/2)
	defer cancel()
	req := request(64)
	req.Claim.Token = "forwarded-token"
	as, err := a.Claim(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if as.Token != "forwarded-token" || metrics.Value(a.m.Writes) == writes {
		t.Errorf("a call near its deadline got %+v with %v writes; want its own token, written", as, metrics.Value(a.m.Writes)-writes)
	}
	if got := storedClaims(t, c, 0)[as.WorkerID].Token; got != "forwarded-token" {
		t.Errorf("worker ID %d stored under %q", as.WorkerID, got)
	}
}

// TestReservationsRetrySameToken: a retry with the token of a request that got a reserved ID (a
// forwarded claim whose answer was lost) gets the same ID back, not a second one.
func TestReservationsRetrySameToken(t *testing.T) {
	c := newClient(t, interceptor.Funcs{}, rayClusterOf(8, 1))
	a := reservingAllocator(c, clocktesting.NewFakeClock(now))
	if _, err := a.Claim(t.Context(), request(8)); err != nil {
		t.Fatal(err)
	}
	req := request(8)
	req.Claim.Token = "caller-token"
	first, err := a.Claim(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := a.Claim(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("a retry with the same token got another assignment (-first +retry):\n%s", diff)
	}
	if got := metrics.Value(a.m.Results.WithLabelValues(metrics.ClaimCommitted)); got != 2 {
		t.Errorf("%v claims counted as committed, want 2: the retry is the same claim", got)
	}
}

// TestReservationsUnknownOutcome: a write whose answer is lost may have stored its reservation;
// none of its tokens is handed out, and the next write of the slice drops them.
func TestReservationsUnknownOutcome(t *testing.T) {
	const hosts = 64
	var fail sync.Once
	c := newClient(t, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			err := cl.SubResource(sub).Update(ctx, obj, opts...)
			failed := false
			fail.Do(func() { failed = true })
			if failed && err == nil {
				return errors.New("connection reset after the write was sent")
			}
			return err
		},
	}, rayClusterOf(hosts, 1))
	a := reservingAllocator(c, clocktesting.NewFakeClock(now))
	first, err := a.Claim(t.Context(), request(hosts))
	if err != nil {
		t.Fatal(err)
	}
	stored := storedClaims(t, c, 0)
	if len(stored) != 1+minReservation {
		// The retry's write replaced the lost one's reservation: its own claim and one block.
		t.Errorf("%d claims stored after the retry, want %d", len(stored), 1+minReservation)
	}
	for id, cl := range stored {
		if id != first.WorkerID && cl.PodUID == "" {
			if _, ok := a.queueOf(request(hosts)).unhanded[cl.Token]; !ok {
				t.Errorf("worker ID %d is stored under %q, which the allocator neither handed out nor remembers to drop", id, cl.Token)
			}
		}
	}
	second, err := a.Claim(t.Context(), request(hosts))
	if err != nil {
		t.Fatal(err)
	}
	if second.WorkerID == first.WorkerID {
		t.Fatalf("worker ID %d handed out twice", first.WorkerID)
	}
}

// TestReservationsGiveBack: once the window has passed with IDs left unhanded, the holder writes
// them back as free, so that another replica may claim them at once.
func TestReservationsGiveBack(t *testing.T) {
	const hosts = 64
	// The give-back's first write loses a conflict (the reconciler binding a Pod meanwhile): it is
	// retried on a live read rather than left to the pending TTL.
	var updates atomic.Int32
	c := newClient(t, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if updates.Add(1) == 2 {
				return apierrors.NewConflict(sliceGVR, obj.GetName(), errors.New("the object has been modified"))
			}
			return cl.SubResource(sub).Update(ctx, obj, opts...)
		},
	}, rayClusterOf(hosts, 1))
	clk := clocktesting.NewFakeClock(now)
	a := New(c, c, Options{Timeout: timeout, Metrics: metrics.New(), Clock: clk, ReservationWindow: 100 * time.Millisecond})
	first, err := a.Claim(t.Context(), request(hosts))
	if err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for len(storedClaims(t, c, 0)) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the unhanded IDs were not given back: %d claims stored", len(storedClaims(t, c, 0)))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := storedClaims(t, c, 0)[first.WorkerID].Token; got != storedToken(first.Token) {
		t.Errorf("the give-back removed the handed-out claim: %q", got)
	}
	waitFor(t, func() bool { return metrics.Value(a.m.GiveBacks) >= 1 }) // counted just after the write
	if metrics.Value(a.m.GiveBacks) != 1 {
		t.Errorf("%v give-backs, want 1", metrics.Value(a.m.GiveBacks))
	}
}

// TestReservationsConcurrentReplicas: replicas with reservations claiming one group's slices at
// the same time never hand out one ID twice (I5), and every ID handed out is stored under its token.
func TestReservationsConcurrentReplicas(t *testing.T) {
	const hosts, replicas, instances = 16, 4, 3
	c := newClient(t, interceptor.Funcs{}, rayClusterOf(hosts, replicas))
	clk := clocktesting.NewFakeClock(now)
	allocs := make([]*Allocator, 0, instances)
	for range instances {
		allocs = append(allocs, reservingAllocator(c, clk))
	}
	var mu sync.Mutex
	got := map[string]string{}
	var wg sync.WaitGroup
	for i := range instances {
		wg.Go(func() {
			for range hosts * replicas / instances {
				as, err := allocs[i].Claim(t.Context(), request(hosts))
				if err != nil {
					continue // a transient denial: IDs reserved by another replica
				}
				key := fmt.Sprintf("%d/%d", as.Replica, as.WorkerID)
				mu.Lock()
				if prev, dup := got[key]; dup {
					t.Errorf("replica %d worker ID %d handed out twice (%s, %s)", as.Replica, as.WorkerID, prev, as.Token)
				}
				got[key] = as.Token
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for key, token := range got {
		var replica, id int32
		_, _ = fmt.Sscanf(key, "%d/%d", &replica, &id)
		if stored := storedClaims(t, c, replica)[id].Token; stored != storedToken(token) {
			t.Errorf("replica %d worker ID %d handed out under %q, stored under %q", replica, id, token, stored)
		}
	}
	if len(got) < hosts*replicas/2 {
		t.Errorf("only %d of %d claims succeeded", len(got), hosts*replicas)
	}
}

// queueOf returns the queue of req's group (a test helper; the queue must exist).
func (a *Allocator) queueOf(req Request) *queue {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.queues[keyOf(req)]
}

// TestReservationsGiveBackQueuedDuringARetry: a give-back queued while a batch's write is in flight
// joins the batch's retry as a give-back, never as a claim (docs/spec.md §3.5). A give-back call
// names no request, so when it became the retry's last call (whose request names the group to plan
// on), the retry planned KubeRay's indexed claims for a slice of 0 hosts and denied them for good.
// Found by make bench S7: one permanent denial in the middle of a 1,024-host replica, and KubeRay
// deleted the 488 Pods it had made and started over.
func TestReservationsGiveBackQueuedDuringARetry(t *testing.T) {
	const hosts = 64
	cases := map[string]Request{
		"KubeRay's indexing labels name worker ID 5": indexed(request(hosts), 0, 5, "tpu-abcde"),
		"no indexing labels":                         request(hosts),
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			var a *Allocator
			var updates, deletes atomic.Int32
			c := newClient(t, interceptor.Funcs{
				SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
					if updates.Add(1) == 1 {
						// A reservation's window ends while the write is in flight: its give-back is queued.
						gctx, cancel := context.WithTimeout(context.Background(), timeout)
						a.enqueueCall(keyOf(req), &call{giveBack: true, ctx: gctx, cancel: cancel, result: make(chan result, 1), m: a.m})
						return apierrors.NewConflict(sliceGVR, obj.GetName(), errors.New("the object has been modified"))
					}
					return cl.SubResource(sub).Update(ctx, obj, opts...)
				},
				Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
					deletes.Add(1)
					return cl.Delete(ctx, obj, opts...)
				},
			}, rayClusterOf(hosts, 1))
			a = reservingAllocator(c, clocktesting.NewFakeClock(now))
			as, err := a.Claim(t.Context(), req)
			if err != nil {
				t.Fatalf("Claim() = %v, want a worker ID after the retry", err)
			}
			if req.Claim.HostIndex != nil && as.WorkerID != *req.Claim.HostIndex {
				t.Errorf("Claim() = worker ID %d, want %d, the one KubeRay's labels name", as.WorkerID, *req.Claim.HostIndex)
			}
			if n := deletes.Load(); n > 0 {
				t.Errorf("%d slice deletes: the retry replaced the slice", n)
			}
			for id, cl := range storedClaims(t, c, 0) {
				if !tpuv1alpha1.ValidToken(cl.Token) {
					t.Errorf("worker ID %d stored under token %q: a give-back was planned as a claim", id, cl.Token)
				}
			}
			if got := storedClaims(t, c, 0)[as.WorkerID].Token; got != storedToken(as.Token) {
				t.Errorf("worker ID %d handed out under %q, stored under %q", as.WorkerID, as.Token, got)
			}
		})
	}
}

// TestReservationsNoHandOutBesideAClaimWrite: while the queue commits a claim by a write of its own
// (here one with less than a second left, which a reservation never serves), no request is handed
// an ID from the reservation that write is about to drop (docs/spec.md §3.5: a write made for
// claims drops every unhanded token): the request waits for the write and is handed an ID of the
// block it reserved, stored under its token.
func TestReservationsNoHandOutBesideAClaimWrite(t *testing.T) {
	const hosts = 64
	var updates atomic.Int32
	inFlight, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	releaseWrite := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseWrite)
	c := newClient(t, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if updates.Add(1) == 2 { // the near-deadline claim's write
				close(inFlight)
				<-release
			}
			return cl.SubResource(sub).Update(ctx, obj, opts...)
		},
	}, rayClusterOf(hosts, 1))
	a := reservingAllocator(c, clocktesting.NewFakeClock(now))
	if _, err := a.Claim(t.Context(), request(hosts)); err != nil {
		t.Fatal(err)
	}
	hurried, cancel := context.WithTimeout(t.Context(), 900*time.Millisecond)
	defer cancel()
	go func() { _, _ = a.Claim(hurried, request(hosts)) }()
	select {
	case <-inFlight:
	case <-time.After(5 * time.Second):
		t.Fatal("the claim with under a second left made no write of its own")
	}
	type answer struct {
		as  Assignment
		err error
	}
	done := make(chan answer, 1)
	go func() {
		as, err := a.Claim(t.Context(), request(hosts))
		done <- answer{as, err}
	}()
	select {
	case got := <-done:
		t.Fatalf("a claim was answered (%+v, %v) while a claim write that drops the reservation was in flight", got.as, got.err)
	case <-time.After(100 * time.Millisecond):
	}
	releaseWrite()
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	if stored := storedClaims(t, c, 0)[got.as.WorkerID]; stored.Token != storedToken(got.as.Token) {
		t.Errorf("worker ID %d handed out under %q, stored under %q", got.as.WorkerID, got.as.Token, stored.Token)
	}
}

// TestReservationsSliceDeletedByHand: the owner created the slice, so its memory of its own write
// says "the cache may not show it yet". Once the slice is deleted (by a user) and the cache shows
// it gone, that memory never makes it live again: no ID of the deleted slice is handed out with no
// write, and the ID the request gets is stored in a slice that is there (docs/spec.md §3.5).
func TestReservationsSliceDeletedByHand(t *testing.T) {
	c := newClient(t, interceptor.Funcs{}, rayClusterOf(16, 1))
	a := reservingAllocator(c, clocktesting.NewFakeClock(now))
	if _, err := a.Claim(t.Context(), request(16)); err != nil {
		t.Fatal(err)
	}
	deleted := &tpuv1alpha1.TPUSliceAssignment{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: testNS, Name: sliceName(0)}, deleted); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(t.Context(), deleted); err != nil {
		t.Fatal(err)
	}
	writes := metrics.Value(a.m.Writes)
	as, err := a.Claim(t.Context(), request(16))
	if err != nil {
		t.Fatal(err)
	}
	if metrics.Value(a.m.Writes) == writes {
		t.Errorf("worker ID %d was handed out from the deleted slice's reservation, with no write", as.WorkerID)
	}
	if got := storedClaims(t, c, 0)[as.WorkerID].Token; got != storedToken(as.Token) {
		t.Errorf("worker ID %d handed out under %q, stored under %q", as.WorkerID, as.Token, got)
	}
}

// TestReservedTokenIsNoProofWithoutItsPod: a reserved token is readable in the slice's status
// before any Pod carries it. A hand-made Pod that copies it is not this admission coming back
// (Reinvoked is false: the webhook strips it and admits it as a new Pod), whereas the Pod the ID
// is handed out to proves its claim (docs/spec.md §3.5, §8).
func TestReservedTokenIsNoProofWithoutItsPod(t *testing.T) {
	c := newClient(t, interceptor.Funcs{}, rayClusterOf(16, 1))
	a := reservingAllocator(c, clocktesting.NewFakeClock(now))
	first, err := a.Claim(t.Context(), request(16))
	if err != nil {
		t.Fatal(err)
	}
	podWith := func(token string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{tpuv1alpha1.ClaimTokenAnnotation: token}}}
	}
	// The lowest reserved ID, the one the next request is handed, as the status shows it.
	next := tpuv1alpha1.WorkerClaim{WorkerID: -1}
	for id, cl := range storedClaims(t, c, 0) {
		if cl.Token != first.Token && cl.PodUID == "" && (next.WorkerID < 0 || id < next.WorkerID) {
			next = cl
		}
	}
	if next.WorkerID < 0 {
		t.Fatal("the first claim reserved no ID")
	}
	copied := identity.Token(podWith(next.Token))
	reinvoked, err := a.Reinvoked(t.Context(), testNS, sliceName(0), copied, next.WorkerID)
	if err != nil {
		t.Fatal(err)
	}
	if reinvoked {
		t.Errorf("a hand-made Pod carrying reserved token %q of worker ID %d copied from the status is taken for a re-invocation", next.Token, next.WorkerID)
	}
	writes := metrics.Value(a.m.Writes)
	handed, err := a.Claim(t.Context(), request(16))
	if err != nil {
		t.Fatal(err)
	}
	if metrics.Value(a.m.Writes) != writes || handed.WorkerID != next.WorkerID {
		t.Fatalf("Claim = worker ID %d with %v writes, want reserved ID %d with none", handed.WorkerID, metrics.Value(a.m.Writes)-writes, next.WorkerID)
	}
	if handed.Token == next.Token {
		t.Errorf("the Pod is handed the token the status shows, %q", handed.Token)
	}
	proof := identity.Token(podWith(handed.Token))
	if proof != next.Token {
		t.Errorf("the handed Pod's token reads as %q, want the stored %q", proof, next.Token)
	}
	reinvoked, err = a.Reinvoked(t.Context(), testNS, sliceName(0), proof, next.WorkerID)
	if err != nil {
		t.Fatal(err)
	}
	if !reinvoked {
		t.Error("the Pod the ID was handed out to is not recognized when the webhook is invoked again")
	}
}
