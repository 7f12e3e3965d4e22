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

package tombstones

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

func deleted(ns, name, token string) *corev1.Pod {
	p := testutil.MakePod(name, ns).UID(types.UID("uid-" + name))
	if token != "" {
		p.Annotation(tpuv1alpha1.ClaimTokenAnnotation, token)
	}
	return p.Obj()
}

func TestTombstones(t *testing.T) {
	fake := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	g := New(time.Minute)
	g.clock = fake
	h := g.Handler()
	h.OnDelete(deleted("a", "p1", "t1"))
	h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "a/p2", Obj: deleted("a", "p2", "t2")})
	h.OnDelete(deleted("a", "p3", "")) // no token: nothing to remember
	h.OnAdd(deleted("a", "p4", "t4"), false)
	h.OnUpdate(deleted("a", "p5", "t5"), deleted("a", "p5", "t5"))

	cases := map[string]struct {
		ns, token string
		want      Pod
		wantOK    bool
	}{
		"a deleted Pod's token":                       {ns: "a", token: "t1", want: Pod{Name: "p1", UID: "uid-p1"}, wantOK: true},
		"a deletion whose final state was missed":     {ns: "a", token: "t2", want: Pod{Name: "p2", UID: "uid-p2"}, wantOK: true},
		"the same token in another namespace":         {ns: "b", token: "t1"},
		"a Pod created or updated is not a tombstone": {ns: "a", token: "t4"},
		"an updated Pod is not a tombstone":           {ns: "a", token: "t5"},
		"no token":                                    {ns: "a", token: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := g.Lookup(tc.ns, tc.token)
			if ok != tc.wantOK || got != tc.want {
				t.Errorf("Lookup() = %+v, %t; want %+v, %t", got, ok, tc.want, tc.wantOK)
			}
		})
	}
	fake.SetTime(fake.Now().Add(2 * time.Minute))
	if _, ok := g.Lookup("a", "t1"); ok {
		t.Error("a tombstone past its retention is still found")
	}
	for i := range expireEvery {
		g.Record(deleted("c", "x", "fresh-"+string(rune('a'+i%26))+string(rune('a'+i/26))))
	}
	if n := g.Len(); n > expireEvery {
		t.Errorf("Len() = %d after a sweep, want the expired ones dropped", n)
	}
	var nilSet *Tombstones
	if _, ok := nilSet.Lookup("a", "t1"); ok {
		t.Error("a nil set finds a tombstone")
	}
}
