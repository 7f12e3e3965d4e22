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
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/lifecycle"
	"github.com/ray-tpu/tpu-slice-operator/internal/provisioning"
	"github.com/ray-tpu/tpu-slice-operator/internal/slicectrl"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
)

// Capacity for a ChosenDomain slice no domain fits (docs/spec.md §12, "Capacity"). The cluster
// autoscaler scales up only for Pods the scheduler marked Unschedulable, and the slice's Pods wait
// behind the operator's gate, so the operator asks for the capacity itself: by a
// ProvisioningRequest where the cluster serves the API, else by capacity Pods
// (internal/provisioning). A new domain's Nodes wake the slice (handlers.go), which chooses it
// and releases its Pods there as for any domain; then the capacity objects are deleted.

// +kubebuilder:rbac:groups=autoscaling.x-k8s.io,resources=provisioningrequests,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=podtemplates,verbs=get;list;create;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=create

// CapacityMode is how a slice no domain fits asks for capacity.
type CapacityMode string

const (
	// CapacityAuto is CapacityProvisioningRequest where the cluster serves the API when the
	// operator starts, else CapacityPods.
	CapacityAuto CapacityMode = "auto"
	// CapacityProvisioningRequest creates one ProvisioningRequest per slice.
	CapacityProvisioningRequest CapacityMode = "provisioning-request"
	// CapacityPods creates the slice's capacity Pods after CapacityOptions.Wait.
	CapacityPods CapacityMode = "pods"
	// CapacityNone asks for nothing: the slice waits gated for a domain to free up.
	CapacityNone CapacityMode = "none"
)

// Defaults of CapacityOptions.
const (
	// DefaultCapacityWait is long enough for a domain that a finished or replaced slice frees (its
	// Pods' 30 s default grace period, a reconcile) to be taken without creating a pool, and short
	// beside the minutes a multi-host TPU pool takes to come up.
	DefaultCapacityWait = time.Minute
	// DefaultCapacityTimeout is longer than GKE takes to create a multi-host TPU pool, so that a
	// request is withdrawn only when it will not be served; queued provisioning may need more.
	DefaultCapacityTimeout = 15 * time.Minute
	// DefaultCapacityPodImage runs nothing: a capacity Pod only holds resources.
	DefaultCapacityPodImage = "registry.k8s.io/pause:3.10"
)

// capacityConcurrency bounds the capacity Pods one reconcile creates or deletes at once.
const capacityConcurrency = 64

// CapacityOptions configure how a slice no domain fits asks for capacity.
type CapacityOptions struct {
	// Mode is how; "" (a reconciler built without flags) is CapacityNone.
	Mode CapacityMode
	// Class is the ProvisioningRequests' class.
	Class string
	// Wait is how long a slice's gated Pods wait with no domain fitting before capacity Pods are
	// created (a ProvisioningRequest is created at once: it only books what is missing).
	Wait time.Duration
	// Timeout is how long a request may go without bringing a domain that fits the slice before
	// it is withdrawn and, after a backoff, asked again; 0 never.
	Timeout time.Duration
	// PodImage is the capacity Pods' image.
	PodImage string
}

// BindFlags registers the options' flags.
func (o *CapacityOptions) BindFlags(fs *flag.FlagSet) {
	fs.Var(newModeFlag(&o.Mode, CapacityAuto), "capacity-request",
		"How a ChosenDomain slice that no domain fits asks the cluster autoscaler for capacity, which it never adds for gated Pods: provisioning-request (one ProvisioningRequest per slice, autoscaling.x-k8s.io/v1), pods (after --capacity-wait, one ungated capacity Pod per host, kept in one new domain by pod affinity), auto (provisioning-request where the cluster serves the API when the operator starts, else pods) or none (the slice waits for a domain to free up).")
	fs.StringVar(&o.Class, "provisioning-class", provisioning.ClassBestEffortAtomicScaleUp,
		"The class of the ProvisioningRequests the operator creates, such as "+provisioning.ClassQueuedProvisioning+" on GKE.")
	fs.DurationVar(&o.Wait, "capacity-wait", DefaultCapacityWait,
		"How long a slice's gated Pods wait with no domain fitting before its capacity Pods are created (--capacity-request=pods): a domain another slice gives back within it is taken without a new pool.")
	fs.DurationVar(&o.Timeout, "capacity-timeout", DefaultCapacityTimeout,
		"How long a ProvisioningRequest or a slice's capacity Pods may go without bringing a domain that fits the slice before they are withdrawn and asked again, after a backoff of 1 minute doubled per attempt up to 30 minutes (0: never).")
	fs.StringVar(&o.PodImage, "capacity-pod-image", DefaultCapacityPodImage, "The image of capacity Pods: it only has to run and hold the Pod's resources.")
}

// modeFlag is a flag.Value that accepts the CapacityModes.
type modeFlag struct{ m *CapacityMode }

func newModeFlag(m *CapacityMode, def CapacityMode) *modeFlag {
	*m = def
	return &modeFlag{m}
}

func (f *modeFlag) String() string {
	if f.m == nil {
		return ""
	}
	return string(*f.m)
}

func (f *modeFlag) Set(s string) error {
	switch m := CapacityMode(s); m {
	case CapacityAuto, CapacityProvisioningRequest, CapacityPods, CapacityNone:
		*f.m = m
		return nil
	}
	return fmt.Errorf("must be one of %s, %s, %s, %s", CapacityAuto, CapacityProvisioningRequest, CapacityPods, CapacityNone)
}

// withDefaults fills what is unset.
func (o CapacityOptions) withDefaults() CapacityOptions {
	o.Mode = cmp.Or(o.Mode, CapacityNone)
	o.Class = cmp.Or(o.Class, provisioning.ClassBestEffortAtomicScaleUp)
	if o.Wait <= 0 {
		o.Wait = DefaultCapacityWait
	}
	o.Timeout = max(o.Timeout, 0)
	o.PodImage = cmp.Or(o.PodImage, DefaultCapacityPodImage)
	return o
}

// resolve decides CapacityAuto by whether the API server serves ProvisioningRequests, and refuses
// CapacityProvisioningRequest where it does not.
func (o CapacityOptions) resolve(mapper apimeta.RESTMapper) (CapacityOptions, error) {
	o = o.withDefaults()
	if o.Mode != CapacityAuto && o.Mode != CapacityProvisioningRequest {
		return o, nil
	}
	_, err := mapper.RESTMapping(schema.GroupKind{Group: provisioning.GroupVersion.Group, Kind: "ProvisioningRequest"}, provisioning.GroupVersion.Version)
	switch {
	case err == nil:
		o.Mode = CapacityProvisioningRequest
	case !apimeta.IsNoMatchError(err):
		return o, fmt.Errorf("looking up the ProvisioningRequest API: %w", err)
	case o.Mode == CapacityProvisioningRequest:
		return o, fmt.Errorf("--capacity-request=%s: the API server does not serve %s ProvisioningRequests", CapacityProvisioningRequest, provisioning.GroupVersion)
	default:
		o.Mode = CapacityPods
	}
	return o, nil
}

// capacityAsk is what a slice's capacity request stands at: the Capacity condition (nil: none
// yet), a note for DomainChosen's message, the Event to record when the condition changes, and
// when to look again.
type capacityAsk struct {
	cond    *metav1.Condition
	note    string
	warning bool
	requeue time.Duration
}

// askCapacity makes sure the slice, which no domain fits, has asked for capacity as the operator
// is configured to, and says where that stands.
func (r *Reconciler) askCapacity(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment, pods []corev1.Pod,
	nodes []corev1.Node) (capacityAsk, error) {
	var shape *corev1.Pod
	for i := range pods {
		if lifecycle.PodLive(&pods[i]) && tpuenv.HasGate(&pods[i]) {
			shape = &pods[i]
			break
		}
	}
	if shape == nil {
		return capacityAsk{requeue: noFitRecheck}, nil
	}
	s := provisioning.Slice{Namespace: slice.Namespace, Name: slice.Name, UID: slice.UID, Hosts: slice.Spec.Hosts,
		Key: slice.Spec.AffinityTopologyKey, Pod: shape}
	switch r.capacity.Mode {
	case CapacityProvisioningRequest:
		return r.askProvisioning(ctx, s)
	case CapacityPods:
		return r.askCapacityPods(ctx, s, pods, nodes)
	}
	return capacityAsk{requeue: noFitRecheck}, nil
}

// askProvisioning keeps one ProvisioningRequest for the slice: it creates the first, reads where
// the newest stands, and replaces one that ended without capacity (failed, lost its booking or
// capacity, or brought no domain within the timeout) once its backoff has passed.
func (r *Reconciler) askProvisioning(ctx context.Context, s provisioning.Slice) (capacityAsk, error) {
	prs, err := r.provisioningRequests(ctx, s)
	if err != nil {
		return capacityAsk{}, err
	}
	if len(prs) == 0 {
		return r.requestProvisioning(ctx, s, 1)
	}
	latest := &prs[len(prs)-1]
	for i := range prs[:len(prs)-1] {
		if err := r.deleteProvisioning(ctx, &prs[i]); err != nil {
			return capacityAsk{}, err
		}
	}
	now, n := r.clock.Now(), provisioning.Attempt(latest)
	st := provisioning.StateOf(latest)
	what := provisioning.Describe(latest)
	switch st.Phase {
	case provisioning.Pending:
		deadline := latest.CreationTimestamp.Add(r.capacity.Timeout)
		if r.capacity.Timeout == 0 || now.Before(deadline) {
			msg := what + " waits for the cluster autoscaler"
			return capacityAsk{cond: capacityCondition(metav1.ConditionFalse, tpuv1alpha1.ReasonProvisioningRequested, msg),
				note: msg, requeue: untilOrRecheck(now, deadline, r.capacity.Timeout)}, nil
		}
		st = provisioning.State{Phase: provisioning.Ended, Reason: "Timeout",
			Message: fmt.Sprintf("not Provisioned within %s", r.capacity.Timeout), Since: deadline}
	case provisioning.Provisioned:
		deadline := st.Since.Add(r.capacity.Timeout)
		if r.capacity.Timeout == 0 || now.Before(deadline) {
			msg := what + " is Provisioned; the slice takes a domain of its Nodes once one fits"
			return capacityAsk{cond: capacityCondition(metav1.ConditionTrue, tpuv1alpha1.ReasonProvisioned, msg),
				note: msg, requeue: untilOrRecheck(now, deadline, r.capacity.Timeout)}, nil
		}
		st = provisioning.State{Phase: provisioning.Ended, Reason: "NoDomainFits",
			Message: fmt.Sprintf("Provisioned, but no domain fitted the slice within %s", r.capacity.Timeout), Since: deadline}
	}
	retry := st.Since.Add(provisioning.Backoff(n))
	if now.Before(retry) {
		msg := fmt.Sprintf("%s ended (%s: %s); asked again at %s", what, st.Reason, st.Message, retry.UTC().Format(time.RFC3339))
		return capacityAsk{cond: capacityCondition(metav1.ConditionFalse, tpuv1alpha1.ReasonProvisioningFailed, msg),
			note: msg, warning: true, requeue: retry.Sub(now)}, nil
	}
	if err := r.deleteProvisioning(ctx, latest); err != nil {
		return capacityAsk{}, err
	}
	return r.requestProvisioning(ctx, s, n+1)
}

// untilOrRecheck is how soon to look again: at deadline when a timeout is set and it comes before
// the next recheck.
func untilOrRecheck(now, deadline time.Time, timeout time.Duration) time.Duration {
	if timeout == 0 {
		return noFitRecheck
	}
	return min(noFitRecheck, max(deadline.Sub(now), time.Second))
}

func capacityCondition(status metav1.ConditionStatus, reason, msg string) *metav1.Condition {
	return &metav1.Condition{Type: tpuv1alpha1.ConditionCapacity, Status: status, Reason: reason, Message: slicectrl.BoundedMessage(msg)}
}

// requestProvisioning creates attempt n of the slice's PodTemplate and ProvisioningRequest (one
// left by an interrupted reconcile is kept).
func (r *Reconciler) requestProvisioning(ctx context.Context, s provisioning.Slice, n int) (capacityAsk, error) {
	s, err := r.withFullPod(ctx, s)
	if err != nil {
		return capacityAsk{}, err
	}
	tmpl := provisioning.NewPodTemplate(s, n)
	if err := r.client.Create(ctx, tmpl, client.FieldOwner(constants.FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
		return capacityAsk{}, fmt.Errorf("creating PodTemplate %s for slice %s: %w", tmpl.Name, s.Name, err)
	}
	pr := provisioning.NewRequest(s, n, r.capacity.Class)
	if err := r.client.Create(ctx, pr, client.FieldOwner(constants.FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
		return capacityAsk{}, fmt.Errorf("creating ProvisioningRequest %s for slice %s: %w", pr.Name, s.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Asked the cluster autoscaler for the capacity of a slice no domain fits",
		"slice", klog.KRef(s.Namespace, s.Name), "provisioningRequest", pr.Name, "class", pr.Spec.ProvisioningClassName, "attempt", n)
	msg := provisioning.Describe(pr) + " waits for the cluster autoscaler"
	return capacityAsk{cond: capacityCondition(metav1.ConditionFalse, tpuv1alpha1.ReasonProvisioningRequested, msg),
		note: msg, requeue: untilOrRecheck(r.clock.Now(), r.clock.Now().Add(r.capacity.Timeout), r.capacity.Timeout)}, nil
}

// provisioningRequests lists, live, the slice's ProvisioningRequests (owned by its UID), oldest
// attempt first.
func (r *Reconciler) provisioningRequests(ctx context.Context, s provisioning.Slice) ([]provisioning.ProvisioningRequest, error) {
	return requestsOf(ctx, r.reader, s)
}

// cachedRequests is provisioningRequests from the cache, which holds every ProvisioningRequest
// when the operator uses them (they are watched).
func (r *Reconciler) cachedRequests(ctx context.Context, s provisioning.Slice) ([]provisioning.ProvisioningRequest, error) {
	return requestsOf(ctx, r.client, s)
}

// requestsOf lists from reader the slice's ProvisioningRequests (owned by its UID), oldest
// attempt first.
func requestsOf(ctx context.Context, reader client.Reader, s provisioning.Slice) ([]provisioning.ProvisioningRequest, error) {
	var list provisioning.ProvisioningRequestList
	if err := reader.List(ctx, &list, client.InNamespace(s.Namespace), client.MatchingLabels{tpuv1alpha1.CapacityForLabel: s.Name}); err != nil {
		return nil, fmt.Errorf("listing the ProvisioningRequests of slice %s: %w", s.Name, err)
	}
	out := slices.DeleteFunc(list.Items, func(pr provisioning.ProvisioningRequest) bool { return !ownedBy(&pr, s) })
	slices.SortFunc(out, func(a, b provisioning.ProvisioningRequest) int {
		return cmp.Or(cmp.Compare(provisioning.Attempt(&a), provisioning.Attempt(&b)), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

// ownedBy reports whether obj is controlled by the slice (its UID: a slice re-created under the
// same name does not inherit them; the garbage collector deletes those).
func ownedBy(obj metav1.Object, s provisioning.Slice) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == s.UID
}

// deleteProvisioning deletes a ProvisioningRequest and its PodTemplate.
func (r *Reconciler) deleteProvisioning(ctx context.Context, pr *provisioning.ProvisioningRequest) error {
	var errs []error
	if err := r.client.Delete(ctx, pr); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("deleting ProvisioningRequest %s: %w", pr.Name, err))
	}
	for _, ps := range pr.Spec.PodSets {
		tmpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: pr.Namespace, Name: ps.PodTemplateRef.Name}}
		if err := r.client.Delete(ctx, tmpl); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting PodTemplate %s: %w", tmpl.Name, err))
		}
	}
	return errors.Join(errs...)
}

// askCapacityPods keeps the slice's capacity Pods: none before its oldest gated Pod is
// CapacityOptions.Wait old; then one per host; replaced, after the backoff, when they brought no
// domain within the timeout.
func (r *Reconciler) askCapacityPods(ctx context.Context, s provisioning.Slice, pods []corev1.Pod,
	nodes []corev1.Node) (capacityAsk, error) {
	now := r.clock.Now()
	cps, err := r.capacityPods(ctx, s)
	if err != nil {
		return capacityAsk{}, err
	}
	if len(cps) == 0 {
		start := oldestGated(pods).Add(r.capacity.Wait)
		if now.Before(start) {
			return capacityAsk{note: fmt.Sprintf("capacity Pods are created at %s if no domain fits by then", start.UTC().Format(time.RFC3339)),
				requeue: min(noFitRecheck, start.Sub(now))}, nil
		}
		return r.createCapacityPods(ctx, s, nodes, 1)
	}
	n, created := 0, cps[0].CreationTimestamp.Time
	for i := range cps {
		n = max(n, provisioning.AttemptOf(&cps[i]))
		if cps[i].CreationTimestamp.Before(&metav1.Time{Time: created}) {
			created = cps[i].CreationTimestamp.Time
		}
	}
	bound := 0
	for i := range cps {
		if cps[i].Spec.NodeName != "" {
			bound++
		}
	}
	deadline := created.Add(r.capacity.Timeout)
	if r.capacity.Timeout == 0 || now.Before(deadline) {
		reason, status := tpuv1alpha1.ReasonCapacityPodsPending, metav1.ConditionFalse
		if int32(bound) >= s.Hosts {
			reason, status = tpuv1alpha1.ReasonCapacityPodsBound, metav1.ConditionTrue
		}
		msg := fmt.Sprintf("%d of %d capacity Pods (%s) bound: they ask the cluster autoscaler for a new %s domain", bound, s.Hosts,
			provisioning.Name(s.Name, n)+"-…", s.Key)
		return capacityAsk{cond: capacityCondition(status, reason, msg), note: msg, requeue: untilOrRecheck(now, deadline, r.capacity.Timeout)}, nil
	}
	retry := deadline.Add(provisioning.Backoff(n))
	if now.Before(retry) {
		msg := fmt.Sprintf("the capacity Pods of attempt %d brought no %s domain that fits the slice within %s (%d of %d bound); asked again at %s",
			n, s.Key, r.capacity.Timeout, bound, s.Hosts, retry.UTC().Format(time.RFC3339))
		return capacityAsk{cond: capacityCondition(metav1.ConditionFalse, tpuv1alpha1.ReasonProvisioningFailed, msg),
			note: msg, warning: true, requeue: retry.Sub(now)}, nil
	}
	if err := r.deleteCapacityPods(ctx, cps); err != nil {
		return capacityAsk{}, err
	}
	return r.createCapacityPods(ctx, s, nodes, n+1)
}

// oldestGated is the creation time of the slice's oldest live gated Pod.
func oldestGated(pods []corev1.Pod) time.Time {
	var t time.Time
	for i := range pods {
		if p := &pods[i]; lifecycle.PodLive(p) && tpuenv.HasGate(p) && (t.IsZero() || p.CreationTimestamp.Time.Before(t)) {
			t = p.CreationTimestamp.Time
		}
	}
	return t
}

// createCapacityPods creates attempt n of the slice's capacity Pods, out of every domain of the
// key that the Nodes matching its Pods' nodeSelector have now: none of them fits the slice.
func (r *Reconciler) createCapacityPods(ctx context.Context, s provisioning.Slice, nodes []corev1.Node, n int) (capacityAsk, error) {
	s, err := r.withFullPod(ctx, s)
	if err != nil {
		return capacityAsk{}, err
	}
	existing := map[string]bool{}
	shape := labels.SelectorFromSet(s.Pod.Spec.NodeSelector)
	for i := range nodes {
		l := nodes[i].Labels
		if v, ok := l[s.Key]; ok && shape.Matches(labels.Set(l)) {
			existing[v] = true
		}
	}
	domains := make([]string, 0, len(existing))
	for d := range existing {
		domains = append(domains, d)
	}
	cps := provisioning.NewCapacityPods(s, n, domains, r.capacity.PodImage)
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, capacityConcurrency)
	)
	for _, p := range cps {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := r.client.Create(ctx, p, client.FieldOwner(constants.FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
				mu.Lock()
				errs = append(errs, fmt.Errorf("creating capacity Pod %s: %w", p.Name, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return capacityAsk{}, err
	}
	ctrl.LoggerFrom(ctx).Info("Created capacity Pods for a slice no domain fits", "slice", klog.KRef(s.Namespace, s.Name),
		"pods", len(cps), "attempt", n, "excludedDomains", len(domains))
	msg := fmt.Sprintf("0 of %d capacity Pods (%s) bound: they ask the cluster autoscaler for a new %s domain", s.Hosts,
		provisioning.Name(s.Name, n)+"-…", s.Key)
	return capacityAsk{cond: capacityCondition(metav1.ConditionFalse, tpuv1alpha1.ReasonCapacityPodsPending, msg), note: msg,
		requeue: untilOrRecheck(r.clock.Now(), r.clock.Now().Add(r.capacity.Timeout), r.capacity.Timeout)}, nil
}

// withFullPod reads the slice's shape Pod live: the cache keeps of a Pod only what the claim and
// placement rules read (no image, priority class or volumes), and the capacity objects copy its
// whole shape.
func (r *Reconciler) withFullPod(ctx context.Context, s provisioning.Slice) (provisioning.Slice, error) {
	full := &corev1.Pod{}
	if err := r.reader.Get(ctx, client.ObjectKeyFromObject(s.Pod), full); err != nil {
		return s, fmt.Errorf("reading Pod %s, the shape of slice %s's capacity: %w", s.Pod.Name, s.Name, err)
	}
	if full.UID != s.Pod.UID {
		return s, fmt.Errorf("pod %s of slice %s was replaced since it was read", s.Pod.Name, s.Name)
	}
	s.Pod = full
	return s, nil
}

// capacityPods lists, live, the slice's capacity Pods (controlled by its UID) that are not being
// deleted.
func (r *Reconciler) capacityPods(ctx context.Context, s provisioning.Slice) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := r.reader.List(ctx, &list, client.InNamespace(s.Namespace), client.MatchingLabels{tpuv1alpha1.CapacityForLabel: s.Name}); err != nil {
		return nil, fmt.Errorf("listing the capacity Pods of slice %s: %w", s.Name, err)
	}
	return slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return !ownedBy(&p, s) || p.DeletionTimestamp != nil }), nil
}

// deleteCapacityPods deletes pods, capacityConcurrency at once. A conflict is an error like any
// other: the caller removes the Capacity condition, the slice's only memory of its capacity Pods,
// once this returns nil, so a Pod whose deletion was refused would hold its Node for good; the
// retry lists the capacity Pods live again (a Pod of that name with another UID is deleted then).
func (r *Reconciler) deleteCapacityPods(ctx context.Context, pods []corev1.Pod) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, capacityConcurrency)
	)
	for i := range pods {
		p := &pods[i]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			uid := p.UID
			if err := r.client.Delete(ctx, p, client.Preconditions{UID: &uid}, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
				mu.Lock()
				errs = append(errs, fmt.Errorf("deleting capacity Pod %s: %w", p.Name, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// sliceOf is the provisioning.Slice of a slice, without a Pod shape.
func sliceOf(slice *tpuv1alpha1.TPUSliceAssignment) provisioning.Slice {
	return provisioning.Slice{Namespace: slice.Namespace, Name: slice.Name, UID: slice.UID, Hosts: slice.Spec.Hosts, Key: slice.Spec.AffinityTopologyKey}
}

// hasCapacity reports whether the slice recorded a capacity request (condition Capacity).
func hasCapacity(slice *tpuv1alpha1.TPUSliceAssignment) bool {
	return apimeta.FindStatusCondition(slice.Status.Conditions, tpuv1alpha1.ConditionCapacity) != nil
}

// ownCapacityPods are the slice's live capacity Pods when it has asked for them: the choice takes
// them off the Nodes they hold, since they are deleted once the slice's Pods are released there.
func (r *Reconciler) ownCapacityPods(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment) ([]corev1.Pod, error) {
	if r.capacity.Mode != CapacityPods || !hasCapacity(slice) {
		return nil, nil
	}
	return r.capacityPods(ctx, sliceOf(slice))
}

// consumeAnnotations are the annotations the slice's released Pods carry when it has a
// Provisioned ProvisioningRequest: the autoscaler stops booking its capacity for them.
func (r *Reconciler) consumeAnnotations(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment) (map[string]string, error) {
	if r.capacity.Mode != CapacityProvisioningRequest {
		return nil, nil
	}
	prs, err := r.cachedRequests(ctx, sliceOf(slice))
	if err != nil {
		return nil, err
	}
	for i := len(prs) - 1; i >= 0; i-- {
		if provisioning.StateOf(&prs[i]).Phase == provisioning.Provisioned {
			return map[string]string{provisioning.ConsumeAnnotation: prs[i].Name, provisioning.ClassAnnotation: prs[i].Spec.ProvisioningClassName}, nil
		}
	}
	return nil, nil
}

// withdrawCapacity deletes the slice's capacity objects once its Pods were released onto a
// domain (or it has none left): the capacity Pods at once, since the released Pods are pinned to
// the Nodes they hold; the ProvisioningRequests once no Pod of the slice is gated, so that the
// autoscaler keeps the booking until every Pod consuming it has been released. At a release
// (requests false) the capacity Pods are listed live whether or not the slice recorded them: a
// reconcile that created some and failed before recording the condition (a create refused, a
// crash, a lost status write) must not leak them onto the Nodes the slice's Pods are pinned to.
// The requests are listed from the cache (they are watched), also without the condition.
func (r *Reconciler) withdrawCapacity(ctx context.Context, slice *tpuv1alpha1.TPUSliceAssignment, requests bool) error {
	s := sliceOf(slice)
	switch r.capacity.Mode {
	case CapacityPods:
		if requests && !hasCapacity(slice) {
			return nil // released before: withdrawn then.
		}
		cps, err := r.capacityPods(ctx, s)
		if err != nil {
			return err
		}
		if len(cps) > 0 {
			ctrl.LoggerFrom(ctx).Info("Deleting the capacity Pods of a slice released onto a domain", "slice", klog.KObj(slice), "pods", len(cps))
			if err := r.deleteCapacityPods(ctx, cps); err != nil {
				return err
			}
		}
	case CapacityProvisioningRequest:
		if !requests {
			return nil
		}
		prs, err := r.cachedRequests(ctx, s)
		if err != nil {
			return err
		}
		var errs []error
		for i := range prs {
			errs = append(errs, r.deleteProvisioning(ctx, &prs[i]))
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	if !hasCapacity(slice) {
		return nil
	}
	// Withdrawn: the condition goes, so that later reconciles of the slice read no capacity
	// objects; the Event TPUSliceCapacityRequested and the log keep the path it took.
	updated := slice.DeepCopy()
	apimeta.RemoveStatusCondition(&updated.Status.Conditions, tpuv1alpha1.ConditionCapacity)
	if err := r.updatePlacement(ctx, updated); err != nil {
		return err
	}
	*slice = *updated
	return nil
}
