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

package webhooks

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	podidentity "github.com/ray-tpu/tpu-slice-operator/internal/identity"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// admitted admits a multislice worker Pod of a 2 × 4-host group and returns it as mutated.
func admitted(t *testing.T, w *podWebhook, dryRun bool) *corev1.Pod {
	t.Helper()
	pod := testutil.WorkerPodFor(copiesCluster().Obj(), group).Env(0, constants.EnvMegascaleNumSlices, "2").Obj()
	if err := w.Default(admissionContext(t, admissionv1.Create, dryRun), pod); err != nil {
		t.Fatalf("Default() = %v", err)
	}
	return pod
}

func copiesCluster() *testutil.RayClusterWrapper {
	return cluster().TPUGroup(group, v6e, "4x4", 4, 4, 2)
}

// created stores pod in c as the API server would create it, named name, and binds its claim as
// the reconciler would.
func created(t *testing.T, c client.Client, pod *corev1.Pod, name string) *corev1.Pod {
	t.Helper()
	p := pod.DeepCopy()
	p.Name, p.GenerateName, p.UID = name, "", types.UID("uid-"+name)
	if err := c.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	id, _ := podidentity.FromPod(p)
	var slice tpuv1alpha1.TPUSliceAssignment
	if err := c.Get(t.Context(), types.NamespacedName{Namespace: testNS, Name: id.SliceName()}, &slice); err != nil {
		t.Fatal(err)
	}
	for i := range slice.Status.Claims {
		if slice.Status.Claims[i].Token == podidentity.Token(p) {
			slice.Status.Claims[i].PodName, slice.Status.Claims[i].PodUID = p.Name, p.UID
		}
	}
	if err := c.Status().Update(t.Context(), &slice); err != nil {
		t.Fatal(err)
	}
	return p
}

// copyOf is a manifest copied from a Pod (kubectl get -o yaml, then created again): everything but
// the name, UID and status.
func copyOf(p *corev1.Pod) *corev1.Pod {
	c := p.DeepCopy()
	c.Name, c.UID, c.ResourceVersion, c.GenerateName = "", "", "", p.GenerateName
	c.Status = corev1.PodStatus{}
	return c
}

func envOf(p *corev1.Pod, name string) []string {
	var out []string
	for _, e := range p.Spec.Containers[0].Env {
		if e.Name == name {
			out = append(out, e.Value)
		}
	}
	return out
}

// TestPodWebhookReinvocationReturnsThePodUnchanged: the same admission coming back (a later webhook
// changed the Pod) keeps the claim it made: no second claim, no change.
func TestPodWebhookReinvocationReturnsThePodUnchanged(t *testing.T) {
	c := newClient(t, &apiCalls{}, nil, copiesCluster().Obj())
	w := newPodWebhook(c)
	first := admitted(t, w, false)
	again := first.DeepCopy()
	before := admissionCounts(t)
	if err := w.Default(admissionContext(t, admissionv1.Create, false), again); err != nil {
		t.Fatalf("re-invoked Default() = %v", err)
	}
	checkAdmissionCounted(t, before, metrics.ResultAlreadyAssigned)
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("re-invocation changed the Pod (-want +got):\n%s", diff)
	}
	if n := len(listSlices(t, c)[0].Status.Claims); n != 1 {
		t.Errorf("slice holds %d claims, want 1", n)
	}
}

// TestPodWebhookCopiedManifests: docs/spec.md §8, a token is not a claim. A Pod created from a copy of
// a running worker, from one manifest several times, or from a dry run's output, is a new Pod and
// gets its own ID, with nothing of the copied identity left.
func TestPodWebhookCopiedManifests(t *testing.T) {
	c := newClient(t, &apiCalls{}, nil, copiesCluster().Obj())
	w := newPodWebhook(c)
	// Fill replica 0, so that a copy of its first Pod must move to replica 1.
	running := make([]*corev1.Pod, 0, 4)
	for i := range 4 {
		running = append(running, created(t, c, admitted(t, w, false), "w"+string(rune('0'+i))))
	}
	manifest := copyOf(running[0])

	ids := map[string]bool{}
	for i := range 4 {
		pod := manifest.DeepCopy()
		before := admissionCounts(t)
		if err := w.Default(admissionContext(t, admissionv1.Create, false), pod); err != nil {
			t.Fatalf("copy %d: Default() = %v", i, err)
		}
		checkAdmissionCounted(t, before, metrics.ResultAssigned)
		id, ok := podidentity.FromPod(pod)
		if !ok {
			t.Fatalf("copy %d carries no identity", i)
		}
		key := id.SliceName() + "/" + envOf(pod, constants.EnvWorkerID)[0]
		if ids[key] {
			t.Errorf("copy %d got %s, already given", i, key)
		}
		ids[key] = true
		if id.Replica != 1 || podidentity.Token(pod) == podidentity.Token(running[0]) {
			t.Errorf("copy %d: replica %d token %s; want replica 1 and a new token", i, id.Replica, podidentity.Token(pod))
		}
		// The copied replica-0 values are gone, each variable set once, for replica 1.
		for name, want := range map[string]string{
			constants.EnvName: "tpu-1", constants.EnvMegascaleSliceID: "1",
			constants.EnvWorkerHostnames: hostnames(group, 1, headless),
		} {
			if diff := cmp.Diff([]string{want}, envOf(pod, name)); diff != "" {
				t.Errorf("copy %d: %s (-want +got):\n%s", i, name, diff)
			}
		}
		if got := pod.Labels[tpuv1alpha1.SliceLabel]; got != naming.SliceName(clusterName, group, 1) {
			t.Errorf("copy %d: slice label %q", i, got)
		}
		terms := pod.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		if len(terms) != 1 || terms[0].LabelSelector.MatchLabels[tpuv1alpha1.SliceLabel] != naming.SliceName(clusterName, group, 1) {
			t.Errorf("copy %d: slice affinity %+v, want only replica 1's", i, terms)
		}
	}

	t.Run("a dry run's output created for real gets its own claim", func(t *testing.T) {
		c := newClient(t, &apiCalls{}, nil, copiesCluster().Obj())
		w := newPodWebhook(c)
		dry := admitted(t, w, true)
		if got := podidentity.Token(dry); got != dryRunToken {
			t.Fatalf("dry run token %q", got)
		}
		created := dry.DeepCopy()
		if err := w.Default(admissionContext(t, admissionv1.Create, false), created); err != nil {
			t.Fatalf("Default() = %v", err)
		}
		if podidentity.Token(created) == dryRunToken {
			t.Error("the real create kept the dry run's token")
		}
		slices := listSlices(t, c)
		if len(slices) != 1 || len(slices[0].Status.Claims) != 1 || slices[0].Status.Claims[0].Token != podidentity.Token(created) {
			t.Errorf("slices %+v, want one claim with the real Pod's token", slices)
		}
	})

	t.Run("a copy of a Pod whose claim is still pending, made while the Pod runs, gets its own ID", func(t *testing.T) {
		c := newClient(t, &apiCalls{}, nil, copiesCluster().Obj())
		w := newPodWebhook(c)
		first := admitted(t, w, false)
		p := first.DeepCopy()
		p.Name, p.UID = "w0", "uid-w0"
		if err := c.Create(t.Context(), p); err != nil { // created, not bound yet
			t.Fatal(err)
		}
		dup := copyOf(p)
		if err := w.Default(admissionContext(t, admissionv1.Create, false), dup); err != nil {
			t.Fatalf("Default() = %v", err)
		}
		if podidentity.Token(dup) == podidentity.Token(first) || envOf(dup, constants.EnvWorkerID)[0] == envOf(first, constants.EnvWorkerID)[0] {
			t.Errorf("the copy got token %s ID %v, the original's are %s %v", podidentity.Token(dup), envOf(dup, constants.EnvWorkerID),
				podidentity.Token(first), envOf(first, constants.EnvWorkerID))
		}
	})
}
