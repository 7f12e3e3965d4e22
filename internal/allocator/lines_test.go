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
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/claims"
)

// malformedLine is what the status decode records of a stored line that does not parse.
const malformedLine = `claims line 3: "2 a b": want "<workerID> <token>" or "<workerID> <token> <podName> <podUID>"`

// withMalformedLines makes every TPUSliceAssignment the client reads carry a malformed line, as
// the lenient decode leaves one whose stored status.workers has a line that does not parse.
func withMalformedLines() interceptor.Funcs {
	mark := func(obj any) {
		switch o := obj.(type) {
		case *tpuv1alpha1.TPUSliceAssignment:
			o.Status.MalformedLines = []string{malformedLine}
		case *tpuv1alpha1.TPUSliceAssignmentList:
			for i := range o.Items {
				o.Items[i].Status.MalformedLines = []string{malformedLine}
			}
		}
	}
	return interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			err := c.Get(ctx, key, obj, opts...)
			mark(obj)
			return err
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			err := c.List(ctx, list, opts...)
			mark(list)
			return err
		},
	}
}

// TestClaimRefusesASliceWithMalformedLines: no worker ID of a group is handed out while one of
// its slices holds stored lines that do not parse (an ID named only by such a line may be held),
// and no write drops them: the denial is transient, the reconciler repairs the slice.
func TestClaimRefusesASliceWithMalformedLines(t *testing.T) {
	slice := existingSlice(0, clusterUID).Claim(0, "t0", "w0", "uid-w0").Obj()
	writes := 0
	funcs := withMalformedLines()
	funcs.SubResourceUpdate = func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
		writes++
		return c.SubResource(sub).Update(ctx, obj, opts...)
	}
	c := newClient(t, funcs, slice)
	a := newAllocator(c, c, timeout)
	_, err := a.Claim(t.Context(), request(4))
	var denied *DeniedError
	if !errors.As(err, &denied) || !denied.Transient || !strings.Contains(denied.Message, "slice "+sliceName(0)+" has malformed claims being repaired by the operator") ||
		!strings.Contains(denied.Message, `"2 a b"`) {
		t.Fatalf("Claim() error = %v, want a transient denial naming the slice and its malformed line", err)
	}
	if writes != 0 {
		t.Errorf("Claim() wrote the slice's status %d times, want none", writes)
	}
	if _, err := a.Plan(t.Context(), request(4)); !errors.As(err, &denied) || !denied.Transient {
		t.Errorf("Plan() (dry run) error = %v, want a transient denial", err)
	}
}

// TestWriteSliceRefusesClaimsThatCannotBeStored: a claim list a door let through by mistake is
// refused before anything is written, as a denial, not retried until the deadline.
func TestWriteSliceRefusesClaimsThatCannotBeStored(t *testing.T) {
	c := newClient(t, interceptor.Funcs{})
	a := newAllocator(c, c, timeout)
	_, _, err := a.writeSlice(t.Context(), request(4), 0, nil, claims.Write{Claims: []tpuv1alpha1.WorkerClaim{{WorkerID: 0, Token: "x\n1 y\n2 z"}}})
	var denied *DeniedError
	if !errors.As(err, &denied) || denied.Transient || !strings.Contains(denied.Message, `invalid token "x\n1 y\n2 z"`) {
		t.Fatalf("writeSlice() error = %v, want a permanent denial naming the token", err)
	}
	if diff := cmp.Diff(0, len(storedSlices(t, c))); diff != "" {
		t.Errorf("slices created (-want,+got):\n%s", diff)
	}
}

// TestClaimAdoptsAPodWhoseTokenCannotBeStored: adoption records a Pod whose claim-token annotation
// could not be stored in a line (one that would inject claims of IDs 1 and 2) by its spec's
// worker ID, with its UID as the token, as a Pod without one; no other ID is claimed for it.
func TestClaimAdoptsAPodWhoseTokenCannotBeStored(t *testing.T) {
	c := newClient(t, interceptor.Funcs{}, identityPod("hand-0", 0, 0).Annotation(tpuv1alpha1.ClaimTokenAnnotation, "x\n1 y\n2 z").Obj())
	a := newAllocator(c, c, timeout)
	got, err := a.Claim(t.Context(), request(4))
	if err != nil || got.WorkerID != 1 {
		t.Fatalf("Claim() = ID %d, %v; want ID 1", got.WorkerID, err)
	}
	want := []tpuv1alpha1.TPUSliceAssignment{createdSlice(0, "", adopted(0, "hand-0"), claim(1, got.Token))}
	if diff := cmp.Diff(want, storedSlices(t, c), cmpSlices); diff != "" {
		t.Errorf("stored slices (-want,+got):\n%s", diff)
	}
}
