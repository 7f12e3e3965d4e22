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
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ray-tpu/tpu-slice-operator/internal/health"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
)

// What the suites on a real local cluster (Env.StartCluster) read back: where the scheduler put
// each slice's Pods, and why it did not.

// SlicePlacement is where the live TPU worker Pods of one slice run.
type SlicePlacement struct {
	// Pods are the slice's live Pods (by the identity their spec carries).
	Pods []corev1.Pod
	// Unbound are the names of the Pods no Node holds yet.
	Unbound []string
	// Domains counts the bound Pods by their Node's value of the placement key ("" for a Node
	// without it or not found).
	Domains map[string]int
	// Nodes are the Nodes of the bound Pods.
	Nodes []string
	// RunningReady counts the Pods bound to a Node, Running and Ready.
	RunningReady int
}

// Domain returns the one domain every Pod of the slice runs in, Running and Ready, and whether
// there is one: all its Pods bound to Nodes with the same value of the key, none unbound.
func (p *SlicePlacement) Domain() (string, bool) {
	if len(p.Unbound) > 0 || len(p.Domains) != 1 || p.RunningReady != len(p.Pods) {
		return "", false
	}
	for d := range p.Domains {
		return d, d != ""
	}
	return "", false
}

// String is the placement in a line, for failure messages.
func (p *SlicePlacement) String() string {
	return fmt.Sprintf("%d Pods, %d Running and Ready, unbound %v, domains %v", len(p.Pods), p.RunningReady, p.Unbound, p.Domains)
}

// SlicePlacements returns, for each slice of namespace ns that has live TPU worker Pods, where
// they run, the domain of a Pod being its Node's value of key (a topology label such as
// cloud.google.com/gke-nodepool).
func SlicePlacements(ctx context.Context, c client.Reader, ns, key string) (map[string]*SlicePlacement, error) {
	pods, _, err := liveState(ctx, c, ns, nil)
	if err != nil {
		return nil, err
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, err
	}
	domainOf := make(map[string]string, len(nodes.Items))
	for i := range nodes.Items {
		domainOf[nodes.Items[i].Name] = nodes.Items[i].Labels[key]
	}
	out := map[string]*SlicePlacement{}
	for i := range pods {
		pod := &pods[i]
		id, ok := identity.FromPod(pod)
		if !ok {
			continue
		}
		p := out[id.SliceName()]
		if p == nil {
			p = &SlicePlacement{Domains: map[string]int{}}
			out[id.SliceName()] = p
		}
		p.Pods = append(p.Pods, *pod)
		if pod.Spec.NodeName == "" {
			p.Unbound = append(p.Unbound, pod.Name)
			continue
		}
		p.Nodes = append(p.Nodes, pod.Spec.NodeName)
		p.Domains[domainOf[pod.Spec.NodeName]]++
		if pod.Status.Phase == corev1.PodRunning && health.PodReady(pod) {
			p.RunningReady++
		}
	}
	return out, nil
}

// CheckSlicesApart checks that the slices of placements that run whole in one domain (Domain)
// are in different domains, and returns each such slice's domain.
func CheckSlicesApart(placements map[string]*SlicePlacement) (map[string]string, error) {
	domains := map[string]string{}
	bySlice := map[string]string{}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(placements)) {
		d, ok := placements[name].Domain()
		if !ok {
			continue
		}
		if other, taken := domains[d]; taken {
			errs = append(errs, fmt.Errorf("slices %s and %s share domain %s", other, name, d))
		}
		domains[d] = name
		bySlice[name] = d
	}
	return bySlice, errors.Join(errs...)
}

// FailedScheduling returns the message of the scheduler's latest FailedScheduling Event about
// the Pod, or "" when there is none.
func FailedScheduling(ctx context.Context, c client.Reader, pod *corev1.Pod) (string, error) {
	var events corev1.EventList
	if err := c.List(ctx, &events, client.InNamespace(pod.Namespace),
		client.MatchingFields{"involvedObject.uid": string(pod.UID), "reason": "FailedScheduling"}); err != nil {
		return "", err
	}
	var latest *corev1.Event
	for i := range events.Items {
		e := &events.Items[i]
		if latest == nil || eventTime(e).After(eventTime(latest)) {
			latest = e
		}
	}
	if latest == nil {
		return "", nil
	}
	return strings.TrimSpace(latest.Message), nil
}

// eventTime is when an Event last happened, whichever API wrote it.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case e.Series != nil:
		return e.Series.LastObservedTime.Time
	}
	return e.EventTime.Time
}
