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

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"

	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

type scenario struct {
	name        string
	description string
	clients     int
	slices      int32
	hosts       int32
	topology    string
	// accelerator is the GKE accelerator of the TPU group; empty means tpu-v6e-slice.
	accelerator string
	// floor is the same-run floor that bounds the scenario's targets.
	floor floorKind
}

func (s scenario) pods() int { return int(s.slices * s.hosts) }

func (s scenario) acceleratorType() string {
	if s.accelerator == "" {
		return "tpu-v6e-slice"
	}
	return s.accelerator
}

type floorKind int

const (
	// writeFloor: one claim write per Pod, no webhook (sequential scenarios).
	writeFloor floorKind = iota
	// groupCommitFloor: one in-process allocator shared by every client, no webhook.
	groupCommitFloor
	// noFloor: the targets are absolute.
	noFloor
)

type result struct {
	pods     int
	wall     time.Duration
	p50, p99 time.Duration
	denials  int
	allocStats
	duplicates     int
	baselineWall   time.Duration
	baselineP50    time.Duration
	baselineP99    time.Duration
	baselineErrors int
	// lat is the latency of every admitted create of the webhook run, in the order they were started.
	lat []time.Duration
	// namespace holds the webhook run's RayCluster and Pods.
	namespace string
	// firstServer and lastServer are where the first and the last flatWindow creates of one big
	// slice (S5) spent their time.
	firstServer, lastServer serverTimes
}

// scenario measures the baseline and then the same creations through three webhook instances.
func (b *bench) scenario(ctx context.Context, s scenario) (result, error) {
	var r result
	saved, err := b.unregisterPodWebhook(ctx)
	if err != nil {
		return r, err
	}
	floors, err := b.baseline(ctx, s, &r)
	if err != nil {
		return r, err
	}
	registered := false
	if s.clients == 1 {
		// The floor of a webhook that only injects: sequential scenarios only, before the
		// instances start.
		if err := b.registerPodWebhook(ctx, saved); err != nil {
			return r, err
		}
		registered = true
		f, err := b.injectionFloor(ctx, s)
		if err != nil {
			return r, err
		}
		floors = append(floors, f)
	}
	// Three fresh instances, each with its own client and cache, started after the baseline so that
	// the reconciler does not act on its Pods.
	instances, err := b.startInstances(ctx, forwarding)
	if err != nil {
		return r, err
	}
	defer stopAll(instances)
	if s.floor == groupCommitFloor {
		// The floor of group commit with a single writer: the same creates by the same clients, each
		// followed by a claim through one in-process allocator, no webhook.
		f, err := b.singleWriterFloor(ctx, instances[0], s)
		if err != nil {
			return r, err
		}
		floors = append(floors, f)
	}
	if !registered {
		if err := b.registerPodWebhook(ctx, saved); err != nil {
			return r, err
		}
	}
	b.env.ServeWebhooksFrom(instances...)
	f, err := b.admissionFloor(ctx, s)
	if err != nil {
		return r, err
	}
	floors = append(floors, f)
	if err := b.webhookRun(ctx, s, instances, &r); err != nil {
		return r, err
	}
	if err := b.comparisonRuns(ctx, s, instances, &r); err != nil {
		return r, err
	}
	b.env.ServeWebhooksFrom(b.validator)
	b.reportFloors(s, &r, floors)
	return r, nil
}

// baseline creates the scenario's Pods with no webhook registered into r's baseline fields and, for
// sequential scenarios, measures the floor of one claim write per Pod.
func (b *bench) baseline(ctx context.Context, s scenario, r *result) ([]floor, error) {
	rc, err := b.rayCluster(ctx, "base", s)
	if err != nil {
		return nil, err
	}
	lat, wall, errs := b.create(ctx, rc, s.pods(), s.clients)
	r.baselineWall, r.baselineErrors = wall, errs
	r.baselineP50, r.baselineP99 = percentile(lat, 50), percentile(lat, 99)
	payload, err := b.payloadFloor(ctx, s)
	if err != nil {
		return nil, err
	}
	floors := []floor{payload}
	if s.floor != writeFloor {
		return floors, nil
	}
	// The floor of a design with one claim write per Pod: the same creates, each followed by a
	// direct claim write (no webhook, no conflicts) into slices as large as the real ones; and the
	// same with a status that always holds one claim, the cheapest status write there is.
	for _, grow := range []bool{true, false} {
		f, err := b.claimWriteFloor(ctx, rc, s, grow)
		if err != nil {
			return nil, err
		}
		floors = append(floors, f)
	}
	return floors, nil
}

// webhookRun creates the scenario's Pods through instances and fills r from it: wall time,
// latencies, denials, the instances' counters and the duplicates among the live Pods.
func (b *bench) webhookRun(ctx context.Context, s scenario, instances []*framework.Instance, r *result) error {
	rc, err := b.rayCluster(ctx, "", s)
	if err != nil {
		return err
	}
	n := s.pods()
	r.namespace = rc.Namespace
	stopProfile := b.profile(ctx, s.name)
	before := stats(instances)
	if s.clients == 1 && s.slices == 1 && n > 2*flatWindow {
		// One big slice (S5): where the first and the last flatWindow creates spent their time.
		var samples []serverTimes
		var sampleErr error
		r.lat, r.wall, r.denials = b.createSampled(ctx, rc, n, []int{0, flatWindow, n - flatWindow, n}, func() {
			t, err := sampleServerTimes(ctx, b.env.Config, instances)
			sampleErr = errors.Join(sampleErr, err)
			samples = append(samples, t)
		})
		if sampleErr != nil {
			return sampleErr
		}
		r.firstServer, r.lastServer = samples[1].minus(samples[0]), samples[3].minus(samples[2])
	} else {
		r.lat, r.wall, r.denials = b.create(ctx, rc, n, s.clients)
	}
	if showSlowest > 0 {
		fmt.Fprintf(os.Stderr, "%s: slowest creates (position: ms): %s\n", s.name, slowest(r.lat, showSlowest))
	}
	stopProfile()
	r.pods = n - r.denials
	r.p50, r.p99 = percentile(r.lat, 50), percentile(r.lat, 99)
	r.allocStats = stats(instances).minus(before)
	if forwarding && len(instances) > 1 {
		fmt.Fprintf(os.Stderr, "%s: claims forwarded to their group's owner %.2f per Pod, claimed locally after a failed forward %.2f per Pod; a forwarded claim took %.1f ms, %.1f ms of them at the owner\n",
			s.name, r.perPod(r.forwarded, r.pods), r.perPod(r.fallbacks, r.pods),
			float64(r.forwardNanos)/float64(max(r.forwarded, 1))/1e6, float64(r.serveNanos)/float64(max(r.forwarded, 1))/1e6)
	}
	return b.check(ctx, rc.Namespace, r.pods, r)
}

// comparisonRuns runs a concurrent scenario's creates once more: through the first instance alone
// without forwarding, or through as many fresh instances that do not forward.
func (b *bench) comparisonRuns(ctx context.Context, s scenario, instances []*framework.Instance, r *result) error {
	if len(instances) < 2 || s.clients < 2 {
		return nil
	}
	if !forwarding {
		// The same creates through one instance: what group commit gives when every claim of a
		// slice arrives at the same process, and so what the other instances' races cost.
		return b.comparisonRun(ctx, s, "one", "through one instance", instances[:1], r)
	}
	// The same creates through as many instances that do not forward: each commits the claims it
	// receives, and they race for the same slices.
	stopAll(instances) // not to compete for the CPU
	plain, err := b.startInstances(ctx, false)
	if err != nil {
		return err
	}
	defer stopAll(plain)
	return b.comparisonRun(ctx, s, "plain", fmt.Sprintf("through %d instances without forwarding", len(plain)), plain, r)
}

// comparisonRun creates the scenario's Pods through instances, prints what they cost as what, and
// adds their duplicates to r's.
func (b *bench) comparisonRun(ctx context.Context, s scenario, prefix, what string, instances []*framework.Instance, r *result) error {
	b.env.ServeWebhooksFrom(instances...)
	rc, err := b.rayCluster(ctx, prefix, s)
	if err != nil {
		return err
	}
	n := s.pods()
	before := stats(instances)
	lat, wall, denials := b.create(ctx, rc, n, s.clients)
	st := stats(instances).minus(before)
	var check result
	if err := b.check(ctx, rc.Namespace, n-denials, &check); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%s: %s: ratio %.2f, p99 ratio %.2f, writes per Pod %.2f (lost to a conflict %.2f), attempts per Pod %.2f, denials %d, duplicates %d\n",
		s.name, what, ratio(wall, r.baselineWall), ratio(percentile(lat, 99), r.baselineP99),
		st.perPod(st.writes, n-denials), st.perPod(st.lostWrites, n-denials), st.perPod(st.attempts, n-denials), denials, check.duplicates)
	r.duplicates += check.duplicates
	return nil
}

// reportFloors prints the floors against the scenario's baseline, and the mean create and claim.
func (b *bench) reportFloors(s scenario, r *result, floors []floor) {
	for _, f := range floors {
		fmt.Fprintf(os.Stderr, "%s: %s: ratio %.2f, p99 ratio %.2f%s\n", s.name, f.name,
			ratio(f.wall, r.baselineWall), ratio(f.p99, r.baselineP99), f.extra)
	}
	fmt.Fprintf(os.Stderr, "%s: mean create %.1f ms, mean claim inside the webhook %.1f ms\n", s.name,
		ms(mean(r.lat)), float64(r.claimNanos)/float64(max(r.pods, 1))/1e6)
}

// rayCluster creates the scenario's RayCluster in a fresh namespace and lets the instances' caches
// see it, as they would in a running cluster.
func (b *bench) rayCluster(ctx context.Context, prefix string, s scenario) (*rayv1.RayCluster, error) {
	name := strings.ToLower(s.name)
	if prefix != "" {
		name = prefix + "-" + name
	}
	ns, err := b.namespace(ctx, name)
	if err != nil {
		return nil, err
	}
	rc := testutil.MakeRayCluster("bench", ns).TPUGroup("tpu", s.acceleratorType(), s.topology, 4, s.hosts, s.slices).ManagedByMultiKueue().Obj()
	if err := b.c.Create(ctx, rc); err != nil {
		return nil, err
	}
	time.Sleep(200 * time.Millisecond)
	return rc, nil
}

// check counts duplicate IDs among the live TPU worker Pods of namespace into r and requires as
// many of them as were admitted.
func (b *bench) check(ctx context.Context, namespace string, admitted int, r *result) error {
	report, err := framework.CheckAdmitted(ctx, b.c, namespace)
	if err != nil {
		r.duplicates = strings.Count(err.Error(), "I1:")
		fmt.Fprintln(os.Stderr, err)
	}
	if report.LivePods != admitted {
		return fmt.Errorf("%d Pods admitted but %d live TPU worker Pods found", admitted, report.LivePods)
	}
	return nil
}
