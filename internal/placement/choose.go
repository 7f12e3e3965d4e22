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
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
)

// ErrInvalidRequest means a Request that no domain could answer: no key, fewer than one host or
// fewer than one chip per host.
var ErrInvalidRequest = errors.New("invalid domain request")

// Candidate is what Choose reads of one TPU Node.
type Candidate struct {
	Name   string
	Labels map[string]string
	// Ready is the Node's Ready condition being True.
	Ready bool
	// Unschedulable is spec.unschedulable (cordoned).
	Unschedulable bool
	// Deleting is a deletion timestamp being set.
	Deleting bool
	Taints   []corev1.Taint
	// AllocatableChips is the Node's allocatable google.com/tpu.
	AllocatableChips int64
	// RequestedChips is the google.com/tpu requested by the Pods bound to the Node, other than the
	// slice's own.
	RequestedChips int64
	// Allocatable is the Node's allocatable resources, and Requested what the Pods bound to it
	// (whatever created them) or pinned to it by the operator request, other than the slice's own,
	// with Pods the number of those Pods: kube-scheduler's NodeResourcesFit reads the same. With a
	// nil Allocatable only the TPU chips above are checked (a Candidate built by hand).
	Allocatable corev1.ResourceList
	Requested   corev1.ResourceList
	Pods        int64
	// ExcludedBy names the bound Pod ("namespace/name") whose required pod anti-affinity keeps the
	// slice's Pods off the Node (gate.Excluded); "" for none.
	ExcludedBy string
}

// Hold is a domain that a slice holds or has chosen.
type Hold struct {
	// Domain is the value of the Request's key.
	Domain string
	// Slice names the slice as namespace/name, for messages.
	Slice string
	// UID is the slice's TPUSliceAssignment UID; the requesting slice's own holds are skipped.
	UID types.UID
}

// KeyHold is a domain of a key other than the Request's that a slice holds.
type KeyHold struct {
	Key string
	Hold
}

// Request is what Choose reads about one slice and the cluster.
type Request struct {
	// UID is the slice's TPUSliceAssignment UID.
	UID types.UID
	// Key is the slice's affinity key: cloud.google.com/gke-nodepool, or the GCE sub-block or
	// block label of a subslice.
	Key string
	// Hosts is the slice's host count H; ChipsPerHost the google.com/tpu each of its Pods requests.
	Hosts        int32
	ChipsPerHost int64
	// NodeSelector is the nodeSelector the slice's Pods carry (accelerator, topology, ...).
	NodeSelector map[string]string
	// Tolerations are the Pods' tolerations. GKE's google.com/tpu taint is tolerated whatever
	// they say: the API server's ExtendedResourceToleration gives it to every Pod asking for TPU.
	Tolerations []corev1.Toleration
	// NodeAffinity is the Pods' own required node affinity (nil for none): a Node its terms do
	// not match is not a candidate, as for kube-scheduler's NodeAffinity filter.
	NodeAffinity *corev1.NodeSelector
	// Requests are one Pod's effective requests (k8s.io/component-helpers' PodRequests: its
	// containers, init containers and overhead), every resource of which a usable Node must have
	// free, as for kube-scheduler's NodeResourcesFit filter. The google.com/tpu request is
	// ChipsPerHost's.
	Requests corev1.ResourceList
	// Nodes are the candidate Nodes, in any order; they are read, never modified.
	Nodes []Candidate
	// Holds are the domains of Key that slices hold or have chosen, in any order.
	Holds []Hold
	// OtherHolds are the domains of other keys that slices hold (a node pool's, a sub-block's,
	// a block's): a Node in one of them, whatever its value of Key, is another slice's, so that
	// slices of two keys over the same Nodes never take one Node twice or wait for each other.
	OtherHolds []KeyHold
	// Previous is the domain the slice chose before, "" for none.
	Previous string
	// PodsBound says a Pod of the slice carries Previous already (in its nodeSelector, or bound
	// to a Node of it), so Previous cannot change any more: a nodeSelector entry never changes.
	PodsBound bool
}

// Outcome is what Choose decided.
type Outcome int

const (
	// OutcomeChosen is a domain that fits: the gates can come off with a nodeSelector on it.
	OutcomeChosen Outcome = iota + 1
	// OutcomeBound is Previous kept, though it no longer fits, because the Pods are bound to it.
	OutcomeBound
	// OutcomeNoFit is no domain fitting now: the Pods stay gated, Scheduled=False (NoFitMessage).
	OutcomeNoFit
	// OutcomeFallback is no Node matching the nodeSelector with the key's label: the slice keeps
	// today's inter-pod affinity and anti-affinity, with a Warning.
	OutcomeFallback
)

// String returns a short name of the outcome, for logs and metrics.
func (o Outcome) String() string {
	switch o {
	case OutcomeChosen:
		return "chosen"
	case OutcomeBound:
		return "bound"
	case OutcomeNoFit:
		return "no-fit"
	case OutcomeFallback:
		return "fallback"
	default:
		return "unknown"
	}
}

// Lack is what a domain that does not fit lacks, the first of these that applies.
type Lack int

const (
	// LackHeld is a domain that another slice holds or has chosen.
	LackHeld Lack = iota + 1
	// LackNodes is fewer Nodes matching the nodeSelector than the slice has hosts.
	LackNodes
	// LackUsable is enough matching Nodes, but fewer usable ones than the slice has hosts.
	LackUsable
)

// String returns a short name of the lack, for logs and metrics.
func (l Lack) String() string {
	switch l {
	case LackHeld:
		return "held"
	case LackNodes:
		return "nodes"
	case LackUsable:
		return "usable"
	default:
		return "unknown"
	}
}

// Rejection is a domain that does not fit, and why.
type Rejection struct {
	Domain string
	Lack   Lack
	// Usable is the domain's usable Nodes: matching the nodeSelector and the Pods' node affinity,
	// Ready, not being deleted, not cordoned, no taint the Pods do not tolerate, not excluded by
	// a bound Pod's anti-affinity, ChipsPerHost chips and every other resource a Pod requests free,
	// and room for one more Pod.
	Usable int32
	// Reason says what the domain lacks, without its name.
	Reason string
}

// String returns "domain: reason".
func (r Rejection) String() string { return r.Domain + ": " + r.Reason }

// Choice is the domain Choose chose for a slice, or why none.
type Choice struct {
	Outcome Outcome
	// Key and Domain are the chosen domain (OutcomeChosen, OutcomeBound); Domain is "" otherwise.
	Key    string
	Domain string
	// Kept says Domain is the Request's Previous.
	Kept bool
	// Reason is a short sentence saying why, for logs, Events and the Warning of a fallback.
	Reason string
	// Rejected is every candidate domain that does not fit (and Previous when it has no Node
	// left), sorted by domain. A domain is a candidate when a Node matching the nodeSelector
	// carries it as its value of the key.
	Rejected []Rejection
}

// NodeSelector returns the term the slice's Pods get, {Key: Domain}, or nil without a Domain.
func (c Choice) NodeSelector() map[string]string {
	if c.Domain == "" {
		return nil
	}
	return map[string]string{c.Key: c.Domain}
}

// domainTally is what one pass over the Nodes learns about one domain.
type domainTally struct {
	name     string
	nodes    int32
	usable   int32
	unusable int32
	// worst is the index in Request.Nodes of the unusable Node with the smallest name, -1 for
	// none: the one a reason names, whatever the order of the Nodes.
	worst  int
	holder string
}

func (d *domainTally) fits(hosts int32) bool { return d.holder == "" && d.usable >= hosts }

// Choose chooses one domain of req.Key for a whole slice: the first rule that applies wins.
// It is the domain chooser of a ChosenDomain slice (docs/spec.md §12): the operator picks the
// domain, the scheduler only filters on a nodeSelector.
//
//  1. Previous, when it fits: a domain fits when no other slice holds it and it has at least
//     Hosts usable Nodes (Rejection.Usable); a Node counts as one host whatever its chips.
//  2. Previous, when PodsBound, whatever it lacks (OutcomeBound): bound Pods cannot move. But
//     not into a domain another slice holds: then OutcomeNoFit, saying so, and the Pods wait
//     for the domain to be given back (Pods that bypassed admission, docs/spec.md §12).
//  3. No Node matching the nodeSelector with a value of the key (none matches yet, or none has
//     the label): OutcomeFallback, to today's inter-pod terms.
//  4. The fitting domain with the fewest spare usable Nodes, then the smallest name. Best fit
//     leaves the larger domains whole for larger slices; the name makes the choice the same in
//     every replica and after a restart, so a replica that loses a write conflict chooses again
//     what the winner chose.
//  5. OutcomeNoFit.
//
// Rejected lists every candidate domain that does not fit, in every outcome. The cost is one
// pass over the Nodes and the Holds, and allocations per domain, not per Node.
func Choose(req Request) (Choice, error) {
	switch {
	case req.Key == "":
		return Choice{}, fmt.Errorf("%w: no key", ErrInvalidRequest)
	case req.Hosts < 1:
		return Choice{}, fmt.Errorf("%w: %d hosts", ErrInvalidRequest, req.Hosts)
	case req.ChipsPerHost < 1:
		return Choice{}, fmt.Errorf("%w: %d chips per host", ErrInvalidRequest, req.ChipsPerHost)
	}
	domains, matching := tally(&req)
	for _, h := range req.Holds {
		if h.UID == req.UID {
			continue
		}
		if i, ok := slices.BinarySearchFunc(domains, h.Domain, byName); ok {
			if d := &domains[i]; d.holder == "" || h.Slice < d.holder {
				d.holder = h.Slice
			}
		}
	}

	choice := Choice{Key: req.Key}
	best, prev, fitting := -1, -1, 0
	for i := range domains {
		d := &domains[i]
		if d.name == req.Previous {
			prev = i
		}
		if !d.fits(req.Hosts) {
			choice.Rejected = append(choice.Rejected, req.reject(d))
			continue
		}
		fitting++
		if best < 0 || d.usable < domains[best].usable { // names ascend: a tie keeps the first
			best = i
		}
	}
	if req.Previous != "" && prev < 0 {
		r := Rejection{Domain: req.Previous, Lack: LackNodes,
			Reason: fmt.Sprintf("no Node matching the nodeSelector left, %d needed", req.Hosts)}
		at, _ := slices.BinarySearchFunc(choice.Rejected, req.Previous, func(r Rejection, name string) int { return cmp.Compare(r.Domain, name) })
		choice.Rejected = slices.Insert(choice.Rejected, at, r)
	}

	switch {
	case prev >= 0 && domains[prev].fits(req.Hosts):
		choice.Outcome, choice.Domain, choice.Kept = OutcomeChosen, req.Previous, true
		choice.Reason = fmt.Sprintf("%s=%s still fits the slice's %d hosts", req.Key, req.Previous, req.Hosts)
	case req.Previous != "" && req.PodsBound && prev >= 0 && domains[prev].holder != "":
		// Releasing the gated Pods there would share another slice's domain, and anywhere
		// else split this one: they stay gated until the holder gives the domain back.
		choice.Outcome = OutcomeNoFit
		choice.Reason = fmt.Sprintf("the slice's Pods are bound to %s=%s, which slice %s holds: its gated Pods wait for the domain",
			req.Key, req.Previous, domains[prev].holder)
	case req.Previous != "" && req.PodsBound:
		choice.Outcome, choice.Domain, choice.Kept = OutcomeBound, req.Previous, true
		choice.Reason = fmt.Sprintf("the slice's Pods are bound to %s=%s, which no longer fits: %s",
			req.Key, req.Previous, choice.Rejected[rejectionOf(choice.Rejected, req.Previous)].Reason)
	case len(domains) == 0 && matching == 0:
		choice.Outcome = OutcomeFallback
		choice.Reason = fmt.Sprintf("no TPU Node matches the nodeSelector (%s) yet: the slice is kept together with inter-pod affinity, so that the Pods are not gated while a node pool scales up",
			FormatSelector(req.NodeSelector))
	case len(domains) == 0:
		choice.Outcome = OutcomeFallback
		choice.Reason = fmt.Sprintf("none of the %d TPU Nodes matching the nodeSelector has label %s: the slice is kept together with inter-pod affinity",
			matching, req.Key)
	case best >= 0:
		d := &domains[best]
		choice.Outcome, choice.Domain = OutcomeChosen, d.name
		choice.Reason = fmt.Sprintf("%s=%s has %d usable Nodes for the slice's %d hosts, the fewest spare of %d fitting domains",
			req.Key, d.name, d.usable, req.Hosts, fitting)
	default:
		choice.Outcome = OutcomeNoFit
		choice.Reason = NoFitMessage(choice, req.Hosts, MaxDomainsNamed)
	}
	return choice, nil
}

// UsableNodes returns, sorted by name, the Nodes of domain (their value of req.Key) that match
// req.NodeSelector and that Choose counts as usable: Ready, not being deleted, not cordoned, no
// taint the Pods do not tolerate, and req.ChipsPerHost chips free. The reconciler pins each
// released Pod to one of them (docs/spec.md §12, "Pinning"). One pass over the Nodes.
func UsableNodes(req Request, domain string) []string {
	if req.Key == "" || domain == "" {
		return nil
	}
	match := req.matcher()
	var out []string
	for i := range req.Nodes {
		n := &req.Nodes[i]
		if n.Labels[req.Key] != domain || !match(n) {
			continue
		}
		if p, _ := req.problem(n); p == problemNone {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}

// tally groups the Nodes matching req.NodeSelector by their value of req.Key, sorted by value,
// and returns them with the number of matching Nodes (those without the label included).
func tally(req *Request) (domains []domainTally, matching int) {
	match := req.matcher()
	index := make(map[string]int)
	last := -1 // the domain of the Node before: Nodes listed pool by pool skip the index
	for i := range req.Nodes {
		n := &req.Nodes[i]
		if !match(n) {
			continue
		}
		matching++
		v := n.Labels[req.Key]
		if v == "" {
			continue
		}
		if last < 0 || domains[last].name != v {
			j, ok := index[v]
			if !ok {
				j = len(domains)
				index[v] = j
				domains = append(domains, domainTally{name: v, worst: -1})
			}
			last = j
		}
		d := &domains[last]
		d.nodes++
		if p, _ := req.problem(n); p == problemNone {
			d.usable++
		} else {
			d.unusable++
			if d.worst < 0 || n.Name < req.Nodes[d.worst].Name {
				d.worst = i
			}
		}
	}
	slices.SortFunc(domains, func(a, b domainTally) int { return cmp.Compare(a.name, b.name) })
	return domains, matching
}

// matcher returns whether a Node is a candidate for the slice's Pods (NodeMatcher).
func (req *Request) matcher() func(*Candidate) bool {
	match := NodeMatcher(req.NodeSelector, req.NodeAffinity)
	return func(n *Candidate) bool { return match(n.Name, n.Labels) }
}

// NodeMatcher returns whether a Node, by its name and labels, is a candidate for Pods with the
// given nodeSelector and required node affinity (nil for none): its labels hold every
// key and value of selector and, with affinity, one of its terms matches it (k8s.io/component-
// helpers' node affinity, kube-scheduler's own). A term that does not parse matches no Node, as
// for the scheduler. Choose counts only such Nodes; a Node event wakes only the waiting slices
// whose Pods it is a candidate for (controllers/placement).
func NodeMatcher(selector map[string]string, affinity *corev1.NodeSelector) func(name string, labels map[string]string) bool {
	pairs := make([][2]string, 0, len(selector))
	for k, v := range selector {
		pairs = append(pairs, [2]string{k, v})
	}
	if affinity == nil {
		return func(_ string, labels map[string]string) bool { return matchesPairs(labels, pairs) }
	}
	terms := nodeaffinity.NewLazyErrorNodeSelector(affinity)
	return func(name string, labels map[string]string) bool {
		if !matchesPairs(labels, pairs) {
			return false
		}
		ok, err := terms.Match(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
		return ok && err == nil
	}
}

// matchesPairs reports whether labels hold every key and value of selector.
func matchesPairs(labels map[string]string, selector [][2]string) bool {
	for _, kv := range selector {
		if got, ok := labels[kv[0]]; !ok || got != kv[1] {
			return false
		}
	}
	return true
}

func byName(d domainTally, name string) int { return cmp.Compare(d.name, name) }

func rejectionOf(rs []Rejection, domain string) int {
	return slices.IndexFunc(rs, func(r Rejection) bool { return r.Domain == domain })
}

// problem is why a Node matching the nodeSelector is not usable, the first that applies.
type problem int

const (
	problemNone problem = iota
	problemDeleting
	problemNotReady
	problemCordoned
	problemTainted
	problemAntiAffinity
	problemHeldOtherKey
	problemChips
	problemPods
	problemResources
)

// problem returns the first problem of n and, for problemTainted, the index of the taint, for
// problemHeldOtherKey that of the hold (for problemResources, see shortResource).
func (req *Request) problem(n *Candidate) (problem, int) {
	switch {
	case n.Deleting:
		return problemDeleting, 0
	case !n.Ready:
		return problemNotReady, 0
	case n.Unschedulable:
		return problemCordoned, 0
	}
	for i := range n.Taints {
		if !req.tolerates(&n.Taints[i]) {
			return problemTainted, i
		}
	}
	if n.ExcludedBy != "" {
		return problemAntiAffinity, 0
	}
	if i := req.heldOtherKey(n); i >= 0 {
		return problemHeldOtherKey, i
	}
	if n.AllocatableChips-n.RequestedChips < req.ChipsPerHost {
		return problemChips, 0
	}
	if n.Allocatable == nil {
		return problemNone, 0
	}
	if n.Pods+1 > n.Allocatable.Pods().Value() {
		return problemPods, 0
	}
	if _, short := req.shortResource(n); short {
		return problemResources, 0
	}
	return problemNone, 0
}

// heldOtherKey returns the index in req.OtherHolds of the first hold of another slice whose domain
// n is in, -1 for none.
func (req *Request) heldOtherKey(n *Candidate) int {
	for i := range req.OtherHolds {
		h := &req.OtherHolds[i]
		if h.UID != req.UID && h.Key != req.Key && n.Labels[h.Key] == h.Domain && h.Domain != "" {
			return i
		}
	}
	return -1
}

// shortResource returns the first resource (by name) of req.Requests, other than the TPU chips,
// of which n has less free than one Pod requests, as kube-scheduler's NodeResourcesFit judges it:
// a zero request needs nothing, and a resource the Node does not list has nothing free.
func (req *Request) shortResource(n *Candidate) (corev1.ResourceName, bool) {
	for _, name := range slices.Sorted(maps.Keys(req.Requests)) {
		want := req.Requests[name]
		if name == constants.TPUResourceName || name == corev1.ResourcePods || want.IsZero() {
			continue
		}
		free := n.Allocatable[name].DeepCopy()
		free.Sub(n.Requested[name])
		if free.Cmp(want) < 0 {
			return name, true
		}
	}
	return "", false
}

// tolerates reports whether the slice's Pods can be scheduled on a Node with taint t.
func (req *Request) tolerates(t *corev1.Taint) bool {
	if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
		return true
	}
	if t.Key == string(constants.TPUResourceName) {
		return true
	}
	return corev1helpers.TolerationsTolerateTaint(logr.Discard(), req.Tolerations, t, false)
}

// describe says what is wrong with n, as "<name> is not Ready".
func (req *Request) describe(n *Candidate) string {
	p, taint := req.problem(n)
	switch p {
	case problemDeleting:
		return n.Name + " is being deleted"
	case problemNotReady:
		return n.Name + " is not Ready"
	case problemCordoned:
		return n.Name + " is cordoned"
	case problemTainted:
		return fmt.Sprintf("%s is tainted %s:%s", n.Name, n.Taints[taint].Key, n.Taints[taint].Effect)
	case problemAntiAffinity:
		return fmt.Sprintf("%s is in the domain of Pod %s, whose required pod anti-affinity excludes the slice's Pods", n.Name, n.ExcludedBy)
	case problemHeldOtherKey:
		h := req.OtherHolds[taint]
		return fmt.Sprintf("%s is in %s=%s, which slice %s holds", n.Name, h.Key, h.Domain, h.Slice)
	case problemChips:
		if n.AllocatableChips <= 0 {
			return n.Name + " has no allocatable TPU chips"
		}
		return fmt.Sprintf("%s has %d of %d TPU chips free, %d needed", n.Name,
			max(n.AllocatableChips-n.RequestedChips, 0), n.AllocatableChips, req.ChipsPerHost)
	case problemPods:
		return fmt.Sprintf("%s has %d Pods, as many as it allows", n.Name, n.Pods)
	case problemResources:
		name, _ := req.shortResource(n)
		free := n.Allocatable[name].DeepCopy()
		free.Sub(n.Requested[name])
		if free.Sign() < 0 {
			free = resource.Quantity{}
		}
		alloc, want := n.Allocatable[name], req.Requests[name]
		return fmt.Sprintf("%s has %s of %s %s free, %s needed", n.Name, free.String(), alloc.String(), name, want.String())
	default:
		return n.Name + " is usable"
	}
}

// reject says what d, which does not fit, lacks.
func (req *Request) reject(d *domainTally) Rejection {
	r := Rejection{Domain: d.name, Usable: d.usable}
	switch {
	case d.holder != "":
		r.Lack, r.Reason = LackHeld, "held by slice "+d.holder
	case d.nodes < req.Hosts:
		r.Lack, r.Reason = LackNodes, fmt.Sprintf("%s matching the nodeSelector, %d needed", nodesText(d.nodes), req.Hosts)
	default:
		r.Lack = LackUsable
		r.Reason = fmt.Sprintf("%d of %d needed Nodes usable (%s", d.usable, req.Hosts, req.describe(&req.Nodes[d.worst]))
		if d.unusable > 1 {
			r.Reason += fmt.Sprintf(", %d more unusable", d.unusable-1)
		}
		r.Reason += ")"
	}
	return r
}

func heldLast(r Rejection) int {
	if r.Lack == LackHeld {
		return 1
	}
	return 0
}

func nodesText(n int32) string {
	if n == 1 {
		return "1 Node"
	}
	return strconv.Itoa(int(n)) + " Nodes"
}

// MaxDomainsNamed is how many domains NoFitMessage names by default.
const MaxDomainsNamed = 5

// NoFitMessage returns the Scheduled=False message of a slice that no domain fits: the domains
// closest to fitting first (fewest usable Nodes missing, held ones last, then by name), at most
// limit of them (MaxDomainsNamed when limit < 1), then "and N more". Its length is bounded by
// limit and the lengths of Kubernetes names, whatever the number of domains and Nodes.
func NoFitMessage(c Choice, hosts int32, limit int) string {
	if limit < 1 {
		limit = MaxDomainsNamed
	}
	var b strings.Builder
	fmt.Fprintf(&b, "no %s domain has %d usable Nodes free of other slices", c.Key, hosts)
	if len(c.Rejected) == 0 {
		b.WriteString(": no domain")
		return b.String()
	}
	closest := slices.Clone(c.Rejected)
	slices.SortStableFunc(closest, func(a, b Rejection) int {
		return cmp.Or(cmp.Compare(heldLast(a), heldLast(b)), cmp.Compare(b.Usable, a.Usable))
	})
	for i, r := range closest[:min(limit, len(closest))] {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(r.String())
	}
	if more := len(closest) - limit; more > 0 {
		fmt.Fprintf(&b, "; and %d more", more)
	}
	return b.String()
}

// CandidateFromNode returns what Choose reads of node, with requested what the Pods bound to it
// (or pinned to it by the operator) other than the slice's own request, and pods how many they
// are. A Node trimmed for a cache must keep its labels, taints, unschedulable, deletion timestamp,
// Ready condition and allocatable resources.
func CandidateFromNode(node *corev1.Node, requested corev1.ResourceList, pods int64) Candidate {
	c := Candidate{
		Name: node.Name, Labels: node.Labels, Unschedulable: node.Spec.Unschedulable,
		Deleting: node.DeletionTimestamp != nil, Taints: node.Spec.Taints,
		Allocatable: node.Status.Allocatable, Requested: requested, Pods: pods,
	}
	if c.Allocatable == nil {
		c.Allocatable = corev1.ResourceList{}
	}
	if q, ok := requested[constants.TPUResourceName]; ok {
		c.RequestedChips = q.Value()
	}
	if q, ok := node.Status.Allocatable[constants.TPUResourceName]; ok {
		c.AllocatableChips = q.Value()
	}
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			c.Ready = node.Status.Conditions[i].Status == corev1.ConditionTrue
		}
	}
	return c
}
