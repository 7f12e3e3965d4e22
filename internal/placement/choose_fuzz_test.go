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

package placement

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
)

// randomRequest returns a small random cluster of TPU Nodes in up to 6 domains, with every
// problem a Node can have, random holds, a random previous choice and a random slice.
func randomRequest(r *rand.Rand) Request {
	one := func(n int) bool { return r.IntN(n) == 0 }
	req := Request{UID: selfUID, Key: poolKey, Hosts: int32(1 + r.IntN(5)), ChipsPerHost: 4, NodeSelector: v6e4x4}
	values := []string{"d0", "d1", "d2", "d3", "d4", "d5"}[:r.IntN(7)]
	if one(2) {
		req.Key = subblockKey
	}
	if one(4) {
		req.Tolerations = []corev1.Toleration{{Key: "example.com/team", Operator: corev1.TolerationOpExists}}
	}
	for i := range r.IntN(40) {
		c := candidates("pool", 1)[0]
		c.Name = fmt.Sprintf("n%02d", i)
		c.Labels = map[string]string{constants.AcceleratorNodeSelectorKey: v6e, constants.TopologyNodeSelectorKey: "4x4"}
		if len(values) > 0 && !one(12) {
			c.Labels[req.Key] = values[r.IntN(len(values))]
		}
		if one(10) {
			c.Labels[constants.AcceleratorNodeSelectorKey] = v5e
		}
		c.Ready, c.Unschedulable, c.Deleting = !one(8), one(15), one(20)
		switch r.IntN(12) {
		case 0:
			c.Taints = append(slices.Clone(c.Taints), corev1.Taint{Key: "example.com/team", Effect: corev1.TaintEffectNoSchedule})
		case 1:
			c.Taints = append(slices.Clone(c.Taints), corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute})
		case 2:
			c.Taints = append(slices.Clone(c.Taints), corev1.Taint{Key: "example.com/soon", Effect: corev1.TaintEffectPreferNoSchedule})
		}
		c.AllocatableChips = []int64{4, 4, 4, 8, 0}[r.IntN(5)]
		c.RequestedChips = []int64{0, 0, 0, 4, 2}[r.IntN(5)]
		if one(8) {
			c.ExcludedBy = "old/o-0"
		}
		req.Nodes = append(req.Nodes, c)
	}
	domainOrMissing := func() string {
		if len(values) == 0 || one(6) {
			return "gone"
		}
		return values[r.IntN(len(values))]
	}
	for i := range r.IntN(4) {
		uid := []types.UID{selfUID, "a", "b"}[r.IntN(3)]
		req.Holds = append(req.Holds, Hold{Domain: domainOrMissing(), Slice: fmt.Sprintf("ns/%s-%d", uid, i), UID: uid})
	}
	if !one(3) {
		req.Previous = domainOrMissing()
	}
	req.PodsBound = one(2)
	return req
}

// oracleDomain is what the contract says of one domain, computed apart from Choose.
type oracleDomain struct{ nodes, usable int32 }

func oracle(req Request) (domains map[string]oracleDomain, held map[string]string) {
	domains, held = map[string]oracleDomain{}, map[string]string{}
	for _, n := range req.Nodes {
		v := n.Labels[req.Key]
		if v == "" || n.Labels[constants.AcceleratorNodeSelectorKey] != v6e || n.Labels[constants.TopologyNodeSelectorKey] != "4x4" {
			continue
		}
		d := domains[v]
		d.nodes++
		usable := n.Ready && !n.Unschedulable && !n.Deleting && n.ExcludedBy == "" && n.AllocatableChips-n.RequestedChips >= req.ChipsPerHost
		for _, t := range n.Taints {
			tolerated := t.Key == "google.com/tpu" || t.Effect == corev1.TaintEffectPreferNoSchedule ||
				slices.ContainsFunc(req.Tolerations, func(tol corev1.Toleration) bool { return tol.Key == t.Key })
			usable = usable && tolerated
		}
		if usable {
			d.usable++
		}
		domains[v] = d
	}
	for _, h := range req.Holds {
		if h.UID != req.UID && (held[h.Domain] == "" || h.Slice < held[h.Domain]) {
			held[h.Domain] = h.Slice
		}
	}
	return domains, held
}

// FuzzChoose checks Choose against its contract on random clusters, one per seed: a chosen
// domain has at least Hosts usable Nodes matching the nodeSelector and no other slice's hold; it
// is the previous choice or the best fit; every domain that does not fit has a reason, and the
// choice does not depend on the order of the Nodes or the Holds.
func FuzzChoose(f *testing.F) {
	for seed := range uint64(500) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 0x5eed))
		req := randomRequest(r)
		got, err := Choose(req)
		if err != nil {
			t.Fatalf("Choose: %v", err)
		}
		domains, held := oracle(req)
		fits := func(d string) bool { return held[d] == "" && domains[d].usable >= req.Hosts }
		matching := slices.ContainsFunc(req.Nodes, func(n Candidate) bool {
			return n.Labels[req.Key] != "" && matches(n.Labels, req.NodeSelector)
		})

		_, previousMatches := domains[req.Previous]
		// heldBound: the Pods are bound to a domain another slice holds, where they may neither
		// go on landing nor leave.
		heldBound := req.Previous != "" && req.PodsBound && previousMatches && held[req.Previous] != ""
		if heldBound && got.Outcome != OutcomeNoFit {
			t.Errorf("Pods bound to %q, held by %q: outcome %v (domain %q), want no fit", req.Previous, held[req.Previous], got.Outcome, got.Domain)
		}

		switch got.Outcome {
		case OutcomeChosen:
			if !fits(got.Domain) {
				t.Errorf("chose %q, which does not fit: %+v, held by %q, %d hosts", got.Domain, domains[got.Domain], held[got.Domain], req.Hosts)
			}
			if got.Kept != (got.Domain == req.Previous) {
				t.Errorf("Kept = %v choosing %q after %q", got.Kept, got.Domain, req.Previous)
			}
			if !got.Kept {
				if req.Previous != "" && fits(req.Previous) {
					t.Errorf("left %q, which still fits, for %q", req.Previous, got.Domain)
				}
				spare := func(d string) int32 { return domains[d].usable - req.Hosts }
				for d := range domains {
					if fits(d) && cmp.Or(cmp.Compare(spare(d), spare(got.Domain)), cmp.Compare(d, got.Domain)) < 0 {
						t.Errorf("chose %q (%d spare), but %q (%d spare) fits better", got.Domain, spare(got.Domain), d, spare(d))
					}
				}
			}
		case OutcomeBound:
			if !req.PodsBound || got.Domain != req.Previous || !got.Kept || fits(req.Previous) {
				t.Errorf("bound to %q (kept %v), with Pods bound %v to previous %q which fits: %v",
					got.Domain, got.Kept, req.PodsBound, req.Previous, fits(req.Previous))
			}
		case OutcomeNoFit:
			if heldBound {
				if want := "which slice " + held[req.Previous] + " holds"; got.Domain != "" || !strings.Contains(got.Reason, want) {
					t.Errorf("no fit for Pods bound to a held domain: domain %q, reason %q lacks %q", got.Domain, got.Reason, want)
				}
				break
			}
			if !matching || got.Domain != "" || (req.PodsBound && req.Previous != "") {
				t.Errorf("no fit with domain %q, matching Nodes %v, previous %q bound %v", got.Domain, matching, req.Previous, req.PodsBound)
			}
			for d := range domains {
				if fits(d) {
					t.Errorf("no fit, but %q fits: %+v", d, domains[d])
				}
			}
			if got.Reason != NoFitMessage(got, req.Hosts, MaxDomainsNamed) {
				t.Errorf("no-fit reason %q is not the Scheduled=False message", got.Reason)
			}
		case OutcomeFallback:
			if matching || got.Domain != "" {
				t.Errorf("fell back with domain %q while Nodes matching the nodeSelector carry %s", got.Domain, req.Key)
			}
		default:
			t.Errorf("outcome %v", got.Outcome)
		}

		wantRejected := make([]string, 0, len(domains)+1)
		for d := range domains {
			if !fits(d) {
				wantRejected = append(wantRejected, d)
			}
		}
		if _, ok := domains[req.Previous]; req.Previous != "" && !ok {
			wantRejected = append(wantRejected, req.Previous)
		}
		slices.Sort(wantRejected)
		gotRejected := make([]string, 0, len(got.Rejected))
		for _, rej := range got.Rejected {
			gotRejected = append(gotRejected, rej.Domain)
			d := domains[rej.Domain]
			wantLack := LackUsable
			switch {
			case held[rej.Domain] != "" && d.nodes > 0:
				wantLack = LackHeld
			case d.nodes < req.Hosts:
				wantLack = LackNodes
			}
			if rej.Lack != wantLack || rej.Usable != d.usable || rej.Reason == "" {
				t.Errorf("rejection %+v, want lack %v and %d usable of %+v", rej, wantLack, d.usable, d)
			}
		}
		if diff := gocmp.Diff(wantRejected, gotRejected); diff != "" {
			t.Errorf("rejected domains (-want +got):\n%s", diff)
		}

		shuffled := req
		shuffled.Nodes, shuffled.Holds = slices.Clone(req.Nodes), slices.Clone(req.Holds)
		r.Shuffle(len(shuffled.Nodes), func(i, j int) { shuffled.Nodes[i], shuffled.Nodes[j] = shuffled.Nodes[j], shuffled.Nodes[i] })
		r.Shuffle(len(shuffled.Holds), func(i, j int) { shuffled.Holds[i], shuffled.Holds[j] = shuffled.Holds[j], shuffled.Holds[i] })
		again, err := Choose(shuffled)
		if err != nil {
			t.Fatalf("Choose shuffled: %v", err)
		}
		if diff := gocmp.Diff(got, again); diff != "" {
			t.Errorf("Choose depends on the order of the Nodes or Holds (-in order +shuffled):\n%s", diff)
		}
	})
}

// TestFuzzChooseCoversEveryOutcome keeps the generator of FuzzChoose honest: its seeds reach every
// outcome and every lack.
func TestFuzzChooseCoversEveryOutcome(t *testing.T) {
	outcomes, lacks := map[Outcome]int{}, map[Lack]int{}
	for seed := range uint64(500) {
		got, err := Choose(randomRequest(rand.New(rand.NewPCG(seed, 0x5eed))))
		if err != nil {
			t.Fatalf("Choose: %v", err)
		}
		outcomes[got.Outcome]++
		for _, rej := range got.Rejected {
			lacks[rej.Lack]++
		}
	}
	t.Logf("outcomes %v, lacks %v", outcomes, lacks)
	for _, o := range []Outcome{OutcomeChosen, OutcomeBound, OutcomeNoFit, OutcomeFallback} {
		if outcomes[o] < 10 {
			t.Errorf("%d seeds of 500 reach outcome %v, want at least 10", outcomes[o], o)
		}
	}
	for _, l := range []Lack{LackHeld, LackNodes, LackUsable} {
		if lacks[l] < 10 {
			t.Errorf("%d rejections of 500 seeds lack %v, want at least 10", lacks[l], l)
		}
	}
}
