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
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/controllers"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// S8 measures the failover bound at the operator's defaults (issue 22, docs/spec.md §3.5): a
// 64-host replica's Pods, created one after another with KubeRay's RayMultiHostIndexing labels
// (each Pod names its worker ID, so a Pod whose ID the holder reserved can take no other), through
// three forwarding instances; after failoverCrashAfter Pods the instance that owns the group (the
// holder of its reservations, not the reconciler's instance) crashes and a new one starts in its
// place, while the other Pods go on being created, each retried every 50 ms as KubeRay does. The
// longest wait of one create is the failover bound; the pending TTL (38 s) bounds it.
const (
	failoverHosts      = 64
	failoverCrashAfter = 20
	// failoverReplicaName is the replica's KubeRay name label.
	failoverReplicaName = "tpu-s8"
)

// failover runs S8 and returns its BENCH line.
func (b *bench) failover(ctx context.Context) (string, error) {
	ns, err := b.namespace(ctx, "s8")
	if err != nil {
		return "", err
	}
	instances, err := b.startInstances(ctx, true)
	if err != nil {
		return "", err
	}
	defer func() { stopAll(instances) }()
	b.env.ServeWebhooksFrom(instances...)
	defer b.env.ServeWebhooksFrom(b.validator)
	rc, holder, err := b.failoverCluster(ctx, ns, instances)
	if err != nil {
		return "", err
	}
	pod := func(i int) *corev1.Pod {
		return testutil.WorkerPodFor(rc, "tpu").KubeRayIndexes(0, failoverReplicaName, int32(i)).Obj() //nolint:gosec // i < 64.
	}
	for i := range failoverCrashAfter {
		if _, _, err := framework.CreateRetrying(ctx, b.c, pod(i), time.Minute); err != nil {
			return "", fmt.Errorf("pod %d before the crash: %w", i, err)
		}
	}
	var list tpuv1alpha1.TPUSliceAssignmentList
	if err := b.c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return "", err
	}
	claimed := 0
	for _, s := range list.Items {
		claimed += len(s.Status.Claims)
	}

	// The creates go on while the holder crashes and its replacement starts.
	type wait struct {
		took time.Duration
		err  error
	}
	waits := make(chan wait, failoverHosts-failoverCrashAfter)
	crashed := time.Now()
	go func() {
		defer close(waits)
		for i := failoverCrashAfter; i < failoverHosts; i++ {
			_, took, err := framework.CreateRetrying(ctx, b.c, pod(i), 2*controllers.DefaultPendingTTL)
			waits <- wait{took, err}
			if err != nil {
				return
			}
		}
	}()
	if err := instances[holder].Crash(); err != nil {
		return "", err
	}
	replacement, err := b.env.StartInstance(ctx, instanceOptions(holder, true))
	if err != nil {
		return "", err
	}
	instances[holder] = replacement
	b.env.ServeWebhooksFrom(instances...)
	var longest time.Duration
	waited := 0
	for w := range waits {
		if w.err != nil {
			return "", fmt.Errorf("a create after the crash: %w", w.err)
		}
		longest = max(longest, w.took)
		if w.took > time.Second {
			waited++
		}
	}
	total := time.Since(crashed)
	var r result
	if err := b.check(ctx, ns, failoverHosts, &r); err != nil {
		return "", err
	}
	fmt.Printf("S8  failover at the defaults: %d claims held when the holder (instance %d) crashed after %d Pods; "+
		"the longest wait of a create %.2f s (%d waited over 1 s), the slice complete %.2f s after the crash; pending TTL %s, window %s, duplicates %d\n",
		claimed, holder, failoverCrashAfter, longest.Seconds(), waited, total.Seconds(),
		controllers.DefaultPendingTTL, allocator.DefaultReservationWindow, r.duplicates)
	return fmt.Sprintf("BENCH S8 hosts=%d longest_wait_s=%.2f complete_after_crash_s=%.2f waited=%d claims_at_crash=%d pending_ttl_s=%.0f window_s=%.0f duplicates=%d",
		failoverHosts, longest.Seconds(), total.Seconds(), waited, claimed,
		controllers.DefaultPendingTTL.Seconds(), allocator.DefaultReservationWindow.Seconds(), r.duplicates), nil
}

// failoverCluster creates RayClusters in ns until one's group is owned by an instance other than
// the reconciler's (the first): the owner follows the RayCluster's UID, which the API server picks.
// It returns that RayCluster and its owner's index.
func (b *bench) failoverCluster(ctx context.Context, ns string, instances []*framework.Instance) (*rayv1.RayCluster, int, error) {
	for i := range 32 {
		rc := testutil.MakeRayCluster(fmt.Sprintf("failover-%d", i), ns).
			TPUGroup("tpu", "tpu-v6e-slice", "16x16", 4, failoverHosts, 1).ManagedByMultiKueue().Obj()
		if err := b.c.Create(ctx, rc); err != nil {
			return nil, 0, err
		}
		holder, err := framework.GroupOwner(instances, ns, rc.UID, "tpu")
		if err != nil {
			return nil, 0, err
		}
		if holder > 0 {
			time.Sleep(200 * time.Millisecond) // the instances' caches see the RayCluster
			return rc, holder, nil
		}
	}
	return nil, 0, errors.New("no RayCluster of 32 has its group owned by an instance other than the reconciler's")
}
