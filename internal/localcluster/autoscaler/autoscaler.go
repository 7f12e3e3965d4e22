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

// Package autoscaler is a stand-in for the cluster autoscaler (with GKE's node auto-provisioning
// of TPU pools) on the local cluster (internal/localcluster), whose Go modules are not available
// here. It plays the autoscaler's documented contract, from test code:
//
//   - Scale-up for Pods the scheduler marked Unschedulable (PodScheduled False, reason
//     Unschedulable), never for gated Pods (SchedulingGated) nor bound or deleted ones: for each it
//     simulates whether a new pool of one of its node groups would take it (nodeSelector and
//     required node affinity, taints and tolerations, effective requests against allocatable, with
//     the scheduler's own helpers), and creates, after a provisioning delay, whole pools of kwok
//     Nodes shaped like the local cluster's others. Pods with required pod affinity among
//     themselves on the pool key (a gang, such as a slice's capacity Pods) get one pool for all.
//     A pool is counted as upcoming for the Pods it was created for until the scheduler has had
//     time to bind them, so one set of Pods never gets two pools.
//   - ProvisioningRequests (autoscaling.x-k8s.io/v1) of the atomic classes: Accepted, then whole
//     pools for the pod sets' templates, then Provisioned (or Failed when no group fits, for an
//     unknown or refused class, or when a fault is injected); check-capacity requests are answered
//     from the free capacity of Ready Nodes.
//   - Optionally, scale-down of its own pools idle for a while: tainted
//     ToBeDeletedByClusterAutoscaler, then their Nodes deleted.
//
// It polls the API server (every 250 ms by default) rather than watching: a test cluster is small.
package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
	"github.com/ray-tpu/tpu-slice-operator/internal/provisioning"
)

// NodeGroupLabel is set on every Node the stand-in creates to the name of its node group.
const NodeGroupLabel = "autoscaler.localcluster.tpu.ray.io/node-group"

// ForAnnotation on a created Node says what its pool was created for: "pods" or
// "provisioningrequest/<namespace>/<name>".
const ForAnnotation = "autoscaler.localcluster.tpu.ray.io/for"

// ToBeDeletedTaint is the taint the cluster autoscaler puts on a Node it is about to delete.
const ToBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// Options configure the stand-in.
type Options struct {
	// NodeGroups are the pool shapes it can create, in the order they are preferred.
	NodeGroups []NodeGroup
	// ProvisioningDelay is how long after a scale-up decision a pool's Nodes appear (default
	// 2 s, as a fast real provisioning would look; negative: at once).
	ProvisioningDelay time.Duration
	// MaxPools bounds the pools it has alive at once (default 8).
	MaxPools int
	// ScanInterval is how often it looks at the cluster (default 250 ms; the real one's is 10 s).
	ScanInterval time.Duration
	// BindGrace is how long after a pool's Nodes are Ready the Pods it was created for still
	// count it as theirs (default 30 s): the scale-up is in progress until the scheduler had time
	// to bind them, after which Pods still pending may get another pool.
	BindGrace time.Duration
	// RefusedClasses are provisioning classes whose requests fail (Failed=True).
	RefusedClasses []string
	// IgnoreUnknownClasses leaves requests of a class it does not know alone, as the real
	// autoscaler does, instead of failing them.
	IgnoreUnknownClasses bool
	// FailProvisioningRequests makes the next that many requests it sees fail (Failed=True).
	FailProvisioningRequests int
	// ProvisionedOnReady holds Provisioned=True of best-effort-atomic-scale-up requests until the
	// pools' Nodes are Ready, as GKE's queued provisioning always does; by default it is set
	// when the scale-up is decided, as the cluster autoscaler does, before any Node exists.
	ProvisionedOnReady bool
	// ScaleDownUnneededTime, when positive, deletes a pool it created once none of its Nodes has
	// held a Pod other than a DaemonSet's for that long (default 0: never).
	ScaleDownUnneededTime time.Duration
	// BookingTime is how long a provisioned request's pools count as used without Pods
	// (default 10 minutes, the autoscaler's booking of provisioned capacity).
	BookingTime time.Duration
	// Logger defaults to controller-runtime's, named "stand-in-autoscaler".
	Logger *logr.Logger
}

func (o Options) withDefaults() Options {
	switch {
	case o.ProvisioningDelay == 0:
		o.ProvisioningDelay = 2 * time.Second
	case o.ProvisioningDelay < 0:
		o.ProvisioningDelay = 0
	}
	if o.MaxPools == 0 {
		o.MaxPools = 8
	}
	if o.ScanInterval == 0 {
		o.ScanInterval = 250 * time.Millisecond
	}
	if o.BindGrace == 0 {
		o.BindGrace = 30 * time.Second
	}
	if o.BookingTime == 0 {
		o.BookingTime = 10 * time.Minute
	}
	if o.Logger == nil {
		l := ctrllog.Log.WithName("stand-in-autoscaler")
		o.Logger = &l
	}
	return o
}

// Pool is a pool the stand-in decided to create.
type Pool struct {
	// Name is the pool (cloud.google.com/gke-nodepool); Group its node group.
	Name, Group string
	// For is "pods" or "provisioningrequest/<namespace>/<name>".
	For string
	// Pods are the Pods a scale-up for Pods was for.
	Pods []types.UID
	// Nodes are the pool's Nodes, once created.
	Nodes []string
	// Decided, Created, Ready and Deleted are when the scale-up was decided, the Nodes created,
	// all of them Ready, and the Nodes deleted (zero until then).
	Decided, Created, Ready, Deleted time.Time

	gang     string
	lastBusy time.Time
}

// request is what the stand-in remembers of a ProvisioningRequest it provisions.
type request struct {
	pools []string
}

// Autoscaler is a running stand-in.
type Autoscaler struct {
	opts      Options
	c         client.Client
	log       logr.Logger
	templates []template
	cancel    context.CancelFunc
	done      chan struct{}

	mu       sync.Mutex
	pools    []*Pool
	serial   map[string]int
	requests map[types.UID]*request
	failNext int
	// injected are the requests the fault knob failed, failed again should the write be lost.
	injected map[types.UID]bool
	refused  map[string]bool
	// rejected remembers the last reason logged for a Pod, to log each once.
	rejected map[types.UID]string
}

// Scheme holds the types the stand-in reads and writes.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := provisioning.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// Start starts the stand-in against the cluster of cfg; Stop stops it. It fails on a node group
// it cannot build. Run one at a time on a cluster: two would each scale up for the same Pods. What
// one remembers (the pools it created, the requests it provisions) goes with it; a request it
// accepted and had not yet marked Provisioned is provisioned again by the next.
func Start(ctx context.Context, cfg *rest.Config, opts Options) (*Autoscaler, error) {
	opts = opts.withDefaults()
	a := &Autoscaler{
		opts: opts, log: *opts.Logger, done: make(chan struct{}),
		serial: map[string]int{}, requests: map[types.UID]*request{}, failNext: opts.FailProvisioningRequests,
		injected: map[types.UID]bool{},
		refused:  map[string]bool{}, rejected: map[types.UID]string{},
	}
	for _, class := range opts.RefusedClasses {
		a.refused[class] = true
	}
	seen := map[string]bool{}
	for _, g := range opts.NodeGroups {
		t, err := newTemplate(g)
		if err != nil {
			return nil, err
		}
		if seen[g.name()] {
			return nil, fmt.Errorf("node group %s listed twice", g.name())
		}
		seen[g.name()] = true
		a.templates = append(a.templates, t)
	}
	c, err := client.New(rest.CopyConfig(cfg), client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, err
	}
	a.c = c
	ctx, a.cancel = context.WithCancel(ctx)
	go a.run(ctx)
	return a, nil
}

// Stop stops the stand-in and waits for its last scan to end. The pools it created stay.
func (a *Autoscaler) Stop() {
	a.cancel()
	<-a.done
}

// Pools returns the pools the stand-in decided to create so far, in order.
func (a *Autoscaler) Pools() []Pool {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Pool, 0, len(a.pools))
	for _, p := range a.pools {
		c := *p
		c.Pods, c.Nodes = slices.Clone(p.Pods), slices.Clone(p.Nodes)
		out = append(out, c)
	}
	return out
}

// PoolsCreated counts the pools whose Nodes the stand-in has created.
func (a *Autoscaler) PoolsCreated() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, p := range a.pools {
		if !p.Created.IsZero() {
			n++
		}
	}
	return n
}

// FailNextProvisioningRequests makes the next n requests the stand-in sees fail (Failed=True,
// InjectedFailure), replacing what is left of an earlier count.
func (a *Autoscaler) FailNextProvisioningRequests(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failNext = n
}

// RefuseClass makes requests of class fail from now on (refuse) or be served again.
func (a *Autoscaler) RefuseClass(class string, refuse bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if refuse {
		a.refused[class] = true
	} else {
		delete(a.refused, class)
	}
}

// InstallCRD installs the ProvisioningRequest CRD (test/crds) into the cluster of cfg and waits
// until it is served.
func InstallCRD(cfg *rest.Config) error {
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "..", "..", "test", "crds", "autoscaling.x-k8s.io_provisioningrequests.yaml")
	_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{path}, ErrorIfPathMissing: true, MaxTime: time.Minute})
	return err
}

func (a *Autoscaler) run(ctx context.Context) {
	defer close(a.done)
	t := time.NewTicker(a.opts.ScanInterval)
	defer t.Stop()
	for {
		if err := a.scan(ctx); err != nil && ctx.Err() == nil {
			a.log.Error(err, "Scan failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// cluster is what one scan reads.
type cluster struct {
	nodes   []*corev1.Node
	pods    []*corev1.Pod
	byNode  map[string][]*corev1.Pod
	pending map[types.UID]*corev1.Pod
	// pools are the pool names the Nodes carry.
	pools map[string]bool
}

func (a *Autoscaler) read(ctx context.Context) (*cluster, error) {
	var nodes corev1.NodeList
	if err := a.c.List(ctx, &nodes); err != nil {
		return nil, err
	}
	var pods corev1.PodList
	if err := a.c.List(ctx, &pods); err != nil {
		return nil, err
	}
	cl := &cluster{byNode: map[string][]*corev1.Pod{}, pending: map[types.UID]*corev1.Pod{}, pools: map[string]bool{}}
	for i := range nodes.Items {
		cl.nodes = append(cl.nodes, &nodes.Items[i])
		if v, ok := nodes.Items[i].Labels[PoolKey]; ok {
			cl.pools[v] = true
		}
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		cl.pods = append(cl.pods, p)
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			cl.byNode[p.Spec.NodeName] = append(cl.byNode[p.Spec.NodeName], p)
		}
		if Unschedulable(p) {
			cl.pending[p.UID] = p
		}
	}
	return cl, nil
}

// scan is one loop of the stand-in: Nodes of due pools, then requests, then Pods, then scale-down.
func (a *Autoscaler) scan(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	cl, err := a.read(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	errs := []error{a.materialize(ctx, cl, now)}
	booked, err := a.serveRequests(ctx, cl, now)
	errs = append(errs, err)
	a.scaleUp(cl, booked, now)
	if a.opts.ScaleDownUnneededTime > 0 {
		errs = append(errs, a.scaleDown(ctx, cl, now))
	}
	return errors.Join(errs...)
}

// alive counts the pools decided and not deleted.
func (a *Autoscaler) alive() int {
	n := 0
	for _, p := range a.pools {
		if p.Deleted.IsZero() {
			n++
		}
	}
	return n
}

// decide records a pool of group to create ProvisioningDelay from now, named after no pool of the
// cluster's: a stand-in started again on the same cluster never takes another's pool for its own.
func (a *Autoscaler) decide(cl *cluster, group, gang, forWhat string, pods []types.UID, now time.Time) *Pool {
	name := ""
	for name == "" || cl.pools[name] || a.pool(name) != nil {
		a.serial[group]++
		name = group + "-" + strconv.Itoa(a.serial[group])
	}
	p := &Pool{Name: name, Group: group, For: forWhat, Pods: pods, gang: gang, Decided: now}
	a.pools = append(a.pools, p)
	a.log.Info("Scale-up decided", "pool", p.Name, "nodeGroup", group, "for", forWhat, "pods", len(pods),
		"delay", a.opts.ProvisioningDelay)
	return p
}

// materialize creates the Nodes of the pools whose delay is over, and notes pools turning Ready.
func (a *Autoscaler) materialize(ctx context.Context, cl *cluster, now time.Time) error {
	byName := map[string]*corev1.Node{}
	for _, n := range cl.nodes {
		byName[n.Name] = n
	}
	var errs []error
	for _, p := range a.pools {
		if !p.Deleted.IsZero() {
			continue
		}
		if p.Created.IsZero() && now.Sub(p.Decided) >= a.opts.ProvisioningDelay {
			errs = append(errs, a.createNodes(ctx, p, now))
			continue
		}
		if p.Created.IsZero() || !p.Ready.IsZero() {
			continue
		}
		ready := true
		for _, name := range p.Nodes {
			if n := byName[name]; n == nil || !localcluster.Ready(n) {
				ready = false
			}
		}
		if ready {
			p.Ready = now
			a.log.Info("Pool Ready", "pool", p.Name, "nodes", len(p.Nodes), "sinceDecided", now.Sub(p.Decided).Round(time.Millisecond))
		}
	}
	return errors.Join(errs...)
}

func (a *Autoscaler) createNodes(ctx context.Context, p *Pool, now time.Time) error {
	var group NodeGroup
	for _, t := range a.templates {
		if t.group.name() == p.Group {
			group = t.group
		}
	}
	nodes, err := localcluster.Nodes([]localcluster.Pool{group.pool(p.Name)})
	if err != nil {
		return err
	}
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		n.Labels[NodeGroupLabel] = p.Group
		n.Annotations[ForAnnotation] = p.For
		if err := a.c.Create(ctx, n); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating Node %s of pool %s: %w", n.Name, p.Name, err)
		}
		names = append(names, n.Name)
	}
	p.Nodes, p.Created = names, now
	a.log.Info("Pool created", "pool", p.Name, "nodes", len(names))
	return nil
}

// scaleUp decides pools for the Pods pending Unschedulable, except those whose capacity a
// provisioned request booked.
func (a *Autoscaler) scaleUp(cl *cluster, booked map[string]bool, now time.Time) {
	var pending []*corev1.Pod
	for _, p := range cl.pods {
		if cl.pending[p.UID] == nil {
			continue
		}
		if name, ok := p.Annotations[provisioning.ConsumeAnnotation]; ok && booked[p.Namespace+"/"+name] {
			continue
		}
		pending = append(pending, p)
	}
	var bound []*corev1.Pod
	for _, ps := range cl.byNode {
		bound = append(bound, ps...)
	}
	var flying []inFlight
	for _, p := range a.pools {
		if p.For != forPods || !p.Deleted.IsZero() || (!p.Ready.IsZero() && now.Sub(p.Ready) > a.opts.BindGrace) {
			continue
		}
		if slices.ContainsFunc(p.Pods, func(uid types.UID) bool { return cl.pending[uid] != nil }) {
			flying = append(flying, inFlight{Group: p.Group, Gang: p.gang, Pods: p.Pods})
		}
	}
	ups, rejected := plan(pending, a.templates, flying, bound)
	for _, r := range rejected {
		if a.rejected[r.Pod] != r.Reason {
			a.rejected[r.Pod] = r.Reason
			a.log.Info("Pod didn't trigger scale-up", "pod", klog.KObj(cl.pending[r.Pod]), "reason", r.Reason)
		}
	}
	for _, up := range ups {
		if a.alive() >= a.opts.MaxPools {
			a.log.Info("Scale-up refused: max pools reached", "nodeGroup", up.Group, "maxPools", a.opts.MaxPools, "pods", len(up.Pods))
			continue
		}
		a.decide(cl, up.Group, up.Gang, forPods, up.Pods, now)
	}
}

// forPods is Pool.For of a scale-up for Pods.
const forPods = "pods"

func forRequest(pr *provisioning.ProvisioningRequest) string {
	return "provisioningrequest/" + pr.Namespace + "/" + pr.Name
}

// serveRequests handles the ProvisioningRequests without a terminal condition, and returns the
// requests (namespace/name) whose capacity is booked: provisioned, within BookingTime.
func (a *Autoscaler) serveRequests(ctx context.Context, cl *cluster, now time.Time) (map[string]bool, error) {
	var prs provisioning.ProvisioningRequestList
	if err := a.c.List(ctx, &prs); err != nil {
		if apimeta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return nil, nil // the cluster does not serve the API
		}
		return nil, err
	}
	booked := map[string]bool{}
	var templates map[string]map[string]*corev1.PodTemplate
	var errs []error
	for i := range prs.Items {
		pr := &prs.Items[i]
		if c := apimeta.FindStatusCondition(pr.Status.Conditions, provisioning.ConditionProvisioned); c != nil &&
			c.Status == metav1.ConditionTrue && now.Sub(c.LastTransitionTime.Time) < a.opts.BookingTime {
			booked[pr.Namespace+"/"+pr.Name] = true
		}
		if Terminal(pr) || pr.DeletionTimestamp != nil {
			continue
		}
		if templates == nil {
			var err error
			if templates, err = a.podTemplates(ctx); err != nil {
				return booked, err
			}
		}
		errs = append(errs, a.serveRequest(ctx, cl, pr, templates[pr.Namespace], now))
	}
	return booked, errors.Join(errs...)
}

func (a *Autoscaler) podTemplates(ctx context.Context) (map[string]map[string]*corev1.PodTemplate, error) {
	var list corev1.PodTemplateList
	if err := a.c.List(ctx, &list); err != nil {
		return nil, err
	}
	out := map[string]map[string]*corev1.PodTemplate{}
	for i := range list.Items {
		pt := &list.Items[i]
		if out[pt.Namespace] == nil {
			out[pt.Namespace] = map[string]*corev1.PodTemplate{}
		}
		out[pt.Namespace][pt.Name] = pt
	}
	return out, nil
}

func (a *Autoscaler) serveRequest(ctx context.Context, cl *cluster, pr *provisioning.ProvisioningRequest,
	templates map[string]*corev1.PodTemplate, now time.Time) error {
	log := a.log.WithValues("provisioningRequest", klog.KObj(pr), "class", pr.Spec.ProvisioningClassName)
	if st := a.requests[pr.UID]; st != nil {
		// Provisioned when the pools are Ready (queued provisioning, ProvisionedOnReady).
		for _, name := range st.pools {
			if p := a.pool(name); p == nil || p.Ready.IsZero() {
				return nil
			}
		}
		log.Info("ProvisioningRequest provisioned", "pools", st.pools)
		return a.setConditions(ctx, pr, now, accepted(),
			metav1.Condition{Type: provisioning.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: ReasonCapacityIsProvisioned, Message: MessageCapacityProvisioned})
	}
	if a.failNext > 0 || a.injected[pr.UID] {
		if !a.injected[pr.UID] {
			a.failNext--
			a.injected[pr.UID] = true
		}
		log.Info("ProvisioningRequest failed by the fault knob", "left", a.failNext)
		return a.setConditions(ctx, pr, now, accepted(),
			metav1.Condition{Type: provisioning.ConditionFailed, Status: metav1.ConditionTrue, Reason: ReasonInjectedFailure, Message: "the stand-in autoscaler was told to fail this request"})
	}
	d := decideRequest(pr, templates, a.templates, a.refused, a.opts.IgnoreUnknownClasses)
	switch d.Action {
	case skipRequest:
		return nil
	case failRequest:
		log.Info("ProvisioningRequest failed", "reason", d.Reason, "message", d.Message)
		conds := []metav1.Condition{{Type: provisioning.ConditionFailed, Status: metav1.ConditionTrue, Reason: d.Reason, Message: d.Message}}
		if d.Reason != ReasonClassRefused {
			conds = append([]metav1.Condition{accepted()}, conds...)
		}
		return a.setConditions(ctx, pr, now, conds...)
	case checkRequest:
		var free []*corev1.Node
		for _, n := range cl.nodes {
			if localcluster.Ready(n) && !n.Spec.Unschedulable {
				free = append(free, freeNode(n, cl.byNode[n.Name]))
			}
		}
		c := metav1.Condition{Type: provisioning.ConditionProvisioned, Status: metav1.ConditionFalse, Reason: ReasonCapacityIsNotFound,
			Message: "Capacity is not found, CA will try to find it later."}
		if capacityFor(d.Pods, free) {
			c = metav1.Condition{Type: provisioning.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: ReasonCapacityIsFound, Message: "Capacity is found in the cluster"}
		}
		return a.setConditions(ctx, pr, now, accepted(), c)
	case provisionRequest:
	}
	if a.alive()+len(d.Pools) > a.opts.MaxPools {
		return a.setConditions(ctx, pr, now, accepted(), metav1.Condition{Type: provisioning.ConditionProvisioned, Status: metav1.ConditionFalse,
			Reason: ReasonCapacityIsNotFound, Message: fmt.Sprintf("Capacity is not found: %d more pools would exceed the limit of %d, CA will try to find it later.", len(d.Pools), a.opts.MaxPools)})
	}
	st := &request{}
	for _, group := range d.Pools {
		st.pools = append(st.pools, a.decide(cl, group, "", forRequest(pr), nil, now).Name)
	}
	a.requests[pr.UID] = st
	if pr.Spec.ProvisioningClassName == provisioning.ClassQueuedProvisioning || a.opts.ProvisionedOnReady {
		log.Info("ProvisioningRequest accepted; Provisioned once its pools are Ready", "pools", st.pools)
		return a.setConditions(ctx, pr, now, accepted())
	}
	log.Info("ProvisioningRequest provisioned", "pools", st.pools)
	return a.setConditions(ctx, pr, now, accepted(),
		metav1.Condition{Type: provisioning.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: ReasonCapacityIsProvisioned, Message: MessageCapacityProvisioned})
}

func accepted() metav1.Condition {
	return metav1.Condition{Type: provisioning.ConditionAccepted, Status: metav1.ConditionTrue, Reason: ReasonAccepted, Message: MessageAccepted}
}

func (a *Autoscaler) pool(name string) *Pool {
	for _, p := range a.pools {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// setConditions writes conds on the request's status (lastTransitionTime now where one changes),
// unless none changes.
func (a *Autoscaler) setConditions(ctx context.Context, pr *provisioning.ProvisioningRequest, now time.Time, conds ...metav1.Condition) error {
	changed := false
	for _, c := range conds {
		c.ObservedGeneration = pr.Generation
		c.LastTransitionTime = metav1.NewTime(now)
		if old := apimeta.FindStatusCondition(pr.Status.Conditions, c.Type); old != nil &&
			old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
			continue
		}
		apimeta.SetStatusCondition(&pr.Status.Conditions, c)
		changed = true
	}
	if !changed {
		return nil
	}
	if err := a.c.Status().Update(ctx, pr); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return fmt.Errorf("updating the status of ProvisioningRequest %s/%s: %w", pr.Namespace, pr.Name, err)
	}
	return nil
}

// scaleDown deletes the Nodes of the pools it created that no Pod but a DaemonSet's has used for
// ScaleDownUnneededTime, tainting them first as the autoscaler does, so that nothing new lands.
// A pool of a request counts as used for BookingTime after it is Ready, as booked capacity.
func (a *Autoscaler) scaleDown(ctx context.Context, cl *cluster, now time.Time) error {
	var errs []error
	for _, p := range a.pools {
		if p.Ready.IsZero() || !p.Deleted.IsZero() {
			continue
		}
		busy := p.For != forPods && now.Sub(p.Ready) < a.opts.BookingTime
		for _, name := range p.Nodes {
			for _, pod := range cl.byNode[name] {
				if !ownedByDaemonSet(pod) {
					busy = true
				}
			}
		}
		if busy || p.lastBusy.IsZero() {
			p.lastBusy = now
		}
		if now.Sub(p.lastBusy) < a.opts.ScaleDownUnneededTime {
			continue
		}
		a.log.Info("Scaling down an unneeded pool", "pool", p.Name, "unneededFor", now.Sub(p.lastBusy).Round(time.Second))
		errs = append(errs, a.deletePool(ctx, p))
		p.Deleted = now
	}
	return errors.Join(errs...)
}

func (a *Autoscaler) deletePool(ctx context.Context, p *Pool) error {
	var errs []error
	for _, name := range p.Nodes {
		var n corev1.Node
		if err := a.c.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			errs = append(errs, client.IgnoreNotFound(err))
			continue
		}
		base := n.DeepCopy()
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: ToBeDeletedTaint, Value: strconv.FormatInt(time.Now().Unix(), 10), Effect: corev1.TaintEffectNoSchedule})
		if err := a.c.Patch(ctx, &n, client.MergeFrom(base)); err != nil {
			errs = append(errs, client.IgnoreNotFound(err))
			continue
		}
		errs = append(errs, client.IgnoreNotFound(a.c.Delete(ctx, &n)))
	}
	return errors.Join(errs...)
}

func ownedByDaemonSet(pod *corev1.Pod) bool {
	ref := metav1.GetControllerOf(pod)
	return ref != nil && ref.Kind == "DaemonSet"
}
