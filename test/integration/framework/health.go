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

package framework

import (
	"context"
	"errors"
	"fmt"
	"sync"

	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/health"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// What envtest lacks for slice health: no scheduler binds Pods, no kubelet reports Nodes and Pods.
// These helpers do what those would, through the same API calls.

// CreateNode creates a Node and then, as its kubelet would, writes its status (the Ready condition
// the builder gave it); for a Ready Node it then removes the node.kubernetes.io/not-ready taint the
// API server's TaintNodesByCondition admission puts on every new Node, as the node lifecycle
// controller envtest lacks does once the Node reports Ready.
func CreateNode(ctx context.Context, c client.Client, node *corev1.Node) error {
	status := node.Status
	if err := c.Create(ctx, node); err != nil {
		return err
	}
	node.Status = status
	if err := c.Status().Update(ctx, node); err != nil {
		return err
	}
	if !nodeReady(node) {
		return nil
	}
	return UpdateNode(ctx, c, node.Name, func(n *corev1.Node) { n.Spec.Taints = notReadyTaint(n.Spec.Taints, false) }, false)
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// notReadyTaint returns taints with the node lifecycle controller's not-ready NoSchedule taint
// added (on) or removed.
func notReadyTaint(taints []corev1.Taint, on bool) []corev1.Taint {
	out := make([]corev1.Taint, 0, len(taints)+1)
	for _, t := range taints {
		if t.Key != corev1.TaintNodeNotReady {
			out = append(out, t)
		}
	}
	if on {
		out = append(out, corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule})
	}
	return out
}

// BindPod binds a Pod to a node through the binding subresource, as the scheduler does.
func BindPod(ctx context.Context, c client.Client, pod *corev1.Pod, node string) error {
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	return c.SubResource("binding").Create(ctx, pod, binding)
}

// SetPodReady sets a Pod Running and its Ready condition, as its kubelet does.
func SetPodReady(ctx context.Context, c client.Client, pod *corev1.Pod, ready bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), cur); err != nil {
			return err
		}
		cur.Status.Phase = corev1.PodRunning
		cur.Status.Conditions = testutil.SetPodReady(cur.Status.Conditions, ready)
		return c.Status().Update(ctx, cur)
	})
}

// SetNodeReady sets a Node's Ready condition, as its kubelet (or the node lifecycle controller)
// does, then its not-ready taint as the node lifecycle controller does.
func SetNodeReady(ctx context.Context, c client.Client, name string, ready bool) error {
	if err := UpdateNode(ctx, c, name, func(n *corev1.Node) { n.Status.Conditions = testutil.SetNodeReady(n.Status.Conditions, ready) }, true); err != nil {
		return err
	}
	return UpdateNode(ctx, c, name, func(n *corev1.Node) { n.Spec.Taints = notReadyTaint(n.Spec.Taints, !ready) }, false)
}

// UpdateNode applies mutate to the Node's spec and metadata (status when status is true).
func UpdateNode(ctx context.Context, c client.Client, name string, mutate func(*corev1.Node), status bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			return err
		}
		mutate(n)
		if status {
			return c.Status().Update(ctx, n)
		}
		return c.Update(ctx, n)
	})
}

// Parallel runs do(i) for i in [0, n), at most width at once, and returns the errors joined.
func Parallel(n, width int, do func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		errs  []error
		slots = make(chan struct{}, width)
	)
	for i := range n {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := do(i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// SliceWrites counts the writes of one slice as a watch sees them: every new resourceVersion.
type SliceWrites struct {
	mu sync.Mutex
	// Total counts every write; Claims those that changed the claims (the webhook's and the
	// reconciler's binds and releases); Health those that changed only the hosts or conditions.
	Total, Claims, Health int
	last                  *tpuv1alpha1.TPUSliceAssignment
	stop                  func()
}

// WatchSliceWrites starts counting the writes of the slice name in namespace ns. Start it before
// the slice exists to count its whole life.
func WatchSliceWrites(ctx context.Context, cfg *rest.Config, ns, name string) (*SliceWrites, error) {
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: operator.Scheme})
	if err != nil {
		return nil, err
	}
	w, err := wc.Watch(ctx, &tpuv1alpha1.TPUSliceAssignmentList{}, client.InNamespace(ns))
	if err != nil {
		return nil, err
	}
	sw := &SliceWrites{stop: w.Stop}
	go func() {
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*tpuv1alpha1.TPUSliceAssignment)
			if !ok || s.Name != name || (ev.Type != watch.Added && ev.Type != watch.Modified) {
				continue
			}
			sw.count(s)
		}
	}()
	return sw, nil
}

func (sw *SliceWrites) count(s *tpuv1alpha1.TPUSliceAssignment) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.Total++
	switch {
	case sw.last == nil || sw.last.Status.Claims.String() != s.Status.Claims.String():
		sw.Claims++
	case sw.last.Status.Hosts.String() != s.Status.Hosts.String() || !equalConditions(sw.last.Status.Conditions, s.Status.Conditions):
		sw.Health++
	}
	sw.last = s
}

func equalConditions(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for _, c := range a {
		d := apimeta.FindStatusCondition(b, c.Type)
		if d == nil || d.Status != c.Status || d.Reason != c.Reason || d.Message != c.Message {
			return false
		}
	}
	return true
}

// Counts returns the writes counted so far: total, claims, health only.
func (sw *SliceWrites) Counts() (total, claims, healthOnly int) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.Total, sw.Claims, sw.Health
}

// Stop stops the watch.
func (sw *SliceWrites) Stop() { sw.stop() }

// CheckHealthConverged checks I8 (docs/spec.md §9) for every slice of namespace ns: its stored
// hosts and health conditions are what slice health evaluates from the live Pods and Nodes, with
// the slice's own stored conditions as the memory of having been Ready (a fixed point: the
// reconciler would write nothing new).
func CheckHealthConverged(ctx context.Context, c client.Reader, ns string) error {
	var slices tpuv1alpha1.TPUSliceAssignmentList
	if err := c.List(ctx, &slices, client.InNamespace(ns)); err != nil {
		return err
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return err
	}
	byName := make(map[string]*corev1.Node, len(nodes.Items))
	for i := range nodes.Items {
		byName[nodes.Items[i].Name] = &nodes.Items[i]
	}
	var errs []error
	for i := range slices.Items {
		s := &slices.Items[i]
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{
			rayutils.RayClusterLabelKey: s.Spec.RayClusterName, rayutils.RayNodeGroupLabelKey: s.Spec.GroupName,
		}); err != nil {
			return err
		}
		want := health.Evaluate(health.Input{Slice: s, Claims: s.Status.Claims, Pods: pods.Items, Node: func(name string) (*corev1.Node, bool) {
			n, ok := byName[name]
			return n, ok
		}})
		if got := s.Status.Hosts.String(); got != want.Hosts.String() {
			errs = append(errs, fmt.Errorf("slice %s: stored hosts\n%s\nwant\n%s", s.Name, got, want.Hosts.String()))
		}
		for _, w := range []metav1.Condition{want.Scheduled, want.Placed, want.Ready, want.Degraded} {
			got := apimeta.FindStatusCondition(s.Status.Conditions, w.Type)
			if got == nil || got.Status != w.Status || got.Reason != w.Reason || got.Message != w.Message {
				errs = append(errs, fmt.Errorf("slice %s: condition %s is %+v, want %s %s %q", s.Name, w.Type, got, w.Status, w.Reason, w.Message))
			}
		}
	}
	return errors.Join(errs...)
}
