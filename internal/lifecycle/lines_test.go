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

package lifecycle_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
)

// TestDecideRepairsMalformedLinesFromTheLivePods: a slice whose stored lines did not all parse is
// rewritten, on a live read, with its valid claims and the live Pods its spec identity places in
// it; the bad lines are dropped, named by the Malformed condition, and the status encodes again.
func TestDecideRepairsMalformedLinesFromTheLivePods(t *testing.T) {
	bad := []string{`claims line 1: "0 a b w0 uid-w0": want "<workerID> <token>" or "<workerID> <token> <podName> <podUID>"`,
		`claims line 3: "2 a b": want "<workerID> <token>" or "<workerID> <token> <podName> <podUID>"`}
	slice := makeSlice().Claim(1, "t1", "w1", "uid-w1").Obj()
	slice.Status.MalformedLines = bad
	d := lifecycle.Decide(view(slice, pods(workerPod("w0", "t0", 0).Obj(), workerPod("w1", "t1", 1).Obj()), nil), ttl)
	if !d.Changed || !d.Destructive {
		t.Errorf("Decide() Changed, Destructive = %t, %t; want the repair written at once, on a live read", d.Changed, d.Destructive)
	}
	wantClaims := []tpuv1alpha1.WorkerClaim{claim(0, "t0", "w0"), claim(1, "t1", "w1")}
	if diff := cmp.Diff(wantClaims, d.Claims); diff != "" {
		t.Errorf("Decide() claims (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff(bad, d.MalformedLines); diff != "" {
		t.Errorf("Decide() malformed lines (-want,+got):\n%s", diff)
	}
	status := slice.Status.DeepCopy()
	if _, err := json.Marshal(status); err == nil {
		t.Fatal("a status with malformed lines encodes; a write would drop them silently")
	}
	if !lifecycle.ApplyStatus(status, d) {
		t.Fatal("ApplyStatus() reports no change")
	}
	if len(status.MalformedLines) > 0 {
		t.Errorf("ApplyStatus() kept the malformed lines %q", status.MalformedLines)
	}
	cond := findCondition(status.Conditions, tpuv1alpha1.ConditionMalformed)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != tpuv1alpha1.ReasonMalformedLinesDropped ||
		!strings.Contains(cond.Message, `"2 a b"`) || !strings.Contains(cond.Message, `"0 a b w0 uid-w0"`) {
		t.Errorf("Malformed condition = %+v, want False, MalformedLinesDropped, naming both lines", cond)
	}
	data, err := json.Marshal(status)
	if err != nil {
		t.Fatalf("the repaired status does not encode: %v", err)
	}
	if !strings.Contains(string(data), `"workers":"0 t0 w0 uid-w0\n1 t1 w1 uid-w1"`) {
		t.Errorf("repaired status = %s", data)
	}
	again := lifecycle.Decide(view(&tpuv1alpha1.TPUSliceAssignment{ObjectMeta: slice.ObjectMeta, Spec: slice.Spec, Status: *status},
		pods(workerPod("w0", "t0", 0).Obj(), workerPod("w1", "t1", 1).Obj()), nil), ttl)
	if again.Changed || again.Malformed.Type != "" {
		t.Errorf("Decide() after the repair changes %+v again", again)
	}
}

// TestDecideIgnoresAClaimTokenThatCannotBeStored: a Pod whose claim-token annotation could not be
// stored in a line (here one that would inject claims of IDs 1 and 2) counts as having none: its
// spec's worker ID is recorded with its UID as the token, as for any Pod the operator did not admit.
func TestDecideIgnoresAClaimTokenThatCannotBeStored(t *testing.T) {
	for name, token := range map[string]string{"injects claims": "x\n1 y\n2 z", "holds a space": "a b", "is too long": strings.Repeat("x", 65)} {
		t.Run(name, func(t *testing.T) {
			d := lifecycle.Decide(view(makeSlice().Obj(), pods(workerPod("w0", token, 0).Obj()), nil), ttl)
			want := []tpuv1alpha1.WorkerClaim{claim(0, "uid-w0", "w0")}
			if diff := cmp.Diff(want, d.Claims); diff != "" {
				t.Errorf("Decide() claims (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(want, d.Adopted); diff != "" {
				t.Errorf("Decide() adopted (-want,+got):\n%s", diff)
			}
			if _, err := tpuv1alpha1.ClaimList(d.Claims).Format(); err != nil {
				t.Errorf("the decided claims cannot be stored: %v", err)
			}
		})
	}
}

func findCondition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}
