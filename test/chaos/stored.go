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
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
)

// What the API server stores (docs/spec.md §3.3, issue 20): the TPUSliceAssignments are read here
// as the API server holds them, unstructured, never through the typed decoder, which a malformed
// stored line would fail (and with it every typed List of the namespace, the checks' included).
// A watch checks every version of every slice of the run: its status.workers must parse with
// tpuv1alpha1.ParseClaims (no malformed line is ever stored), and no claim may carry a token
// fragment the run injected through a Pod's claim-token annotation.

// storedSlice is one TPUSliceAssignment as stored.
type storedSlice struct {
	name       string
	clusterUID types.UID
	replica    int32
	hosts      int32
	claims     tpuv1alpha1.ClaimList
	// parseErr is why status.workers does not parse (claims is then empty).
	parseErr error
	// workers is status.workers as stored.
	workers string
}

// sliceListGVK is the kind of a raw list of TPUSliceAssignments.
var sliceListGVK = tpuv1alpha1.GroupVersion.WithKind("TPUSliceAssignmentList")

// decodeStored reads a raw TPUSliceAssignment.
func decodeStored(u *unstructured.Unstructured) storedSlice {
	s := storedSlice{name: u.GetName()}
	uid, _, _ := unstructured.NestedString(u.Object, "spec", "rayClusterUID")
	s.clusterUID = types.UID(uid)
	replica, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicaIndex")
	hosts, _, _ := unstructured.NestedInt64(u.Object, "spec", "hosts")
	s.replica, s.hosts = int32(replica), int32(hosts) //nolint:gosec // the schema bounds both.
	workers, found, err := unstructured.NestedFieldNoCopy(u.Object, "status", "workers")
	switch text, ok := workers.(string); {
	case err != nil || (found && !ok):
		s.parseErr = fmt.Errorf("status.workers is not a string: %T", workers)
	case found:
		s.workers = text
		s.claims, s.parseErr = tpuv1alpha1.ParseClaims(text)
	}
	return s
}

// listStored lists the namespace's TPUSliceAssignments as stored.
func listStored(ctx context.Context, c client.Reader, ns string) ([]storedSlice, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(sliceListGVK)
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	out := make([]storedSlice, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, decodeStored(&list.Items[i]))
	}
	return out, nil
}

// storedWatch checks every stored version of a run's slices.
type storedWatch struct {
	mu sync.Mutex
	// injected are the token fragments the run put into claim-token annotations, with the
	// annotation each came from: a claim carrying one was injected through a stored line.
	injected map[string]string
	// reported keeps each finding to one violation.
	reported   map[string]bool
	violations []string
	// versions counts the stored versions checked.
	versions int
}

// watchStored starts checking the stored versions of namespace ns's slices until ctx ends.
func watchStored(ctx context.Context, wc client.WithWatch, ns string) (*storedWatch, error) {
	sw := &storedWatch{injected: map[string]string{}, reported: map[string]bool{}}
	newList := func() *unstructured.UnstructuredList {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(sliceListGVK)
		return list
	}
	w, err := wc.Watch(ctx, newList(), client.InNamespace(ns))
	if err != nil {
		return nil, err
	}
	go func() {
		rv := ""
		for {
			for ev := range w.ResultChan() {
				u, ok := ev.Object.(*unstructured.Unstructured)
				if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
					continue
				}
				rv = u.GetResourceVersion()
				sw.check(decodeStored(u))
			}
			if ctx.Err() != nil {
				return
			}
			// The server ended the watch: resume where it stopped, or from a fresh list (every
			// object again, as ADDED) when that version is gone.
			for attempt := 0; ; attempt++ {
				opts := []client.ListOption{client.InNamespace(ns)}
				if rv != "" && attempt < 3 {
					opts = append(opts, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
				}
				if w, err = wc.Watch(ctx, newList(), opts...); err == nil || ctx.Err() != nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if ctx.Err() != nil {
				return
			}
		}
	}()
	return sw, nil
}

// inject records the fragments of a claim-token payload: from now on a claim carrying one was
// injected.
func (sw *storedWatch) inject(payload string, fragments ...string) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	for _, f := range fragments {
		sw.injected[f] = payload
	}
}

// check checks one stored version of a slice.
func (sw *storedWatch) check(s storedSlice) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.versions++
	if s.parseErr != nil {
		sw.reportf("parse/"+s.name+"/"+s.parseErr.Error(), "stored lines: TPUSliceAssignment %s holds a status.workers that does not parse (%v): %q",
			s.name, s.parseErr, s.workers)
	}
	for _, c := range s.claims {
		if payload, ok := sw.injected[c.Token]; ok {
			sw.reportf(fmt.Sprintf("inject/%s/%d/%s", s.name, c.WorkerID, c.Token),
				"stored lines: TPUSliceAssignment %s holds a claim on worker ID %d with token %q, a fragment of the claim-token annotation %q a Pod carried (an injected claim)",
				s.name, c.WorkerID, c.Token, payload)
		}
	}
}

func (sw *storedWatch) reportf(key, format string, args ...any) {
	if sw.reported[key] {
		return
	}
	sw.reported[key] = true
	sw.violations = append(sw.violations, fmt.Sprintf(format, args...))
}

// take returns the violations found since the last call, and how many versions were checked.
func (sw *storedWatch) take() ([]string, int) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	out := sw.violations
	sw.violations = nil
	return out, sw.versions
}
