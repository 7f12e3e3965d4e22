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

	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// allocStats is a snapshot of the instances' claim metrics.
type allocStats struct {
	attempts, conflicts, writes, lostWrites, claimNanos int64
	// forwarded and fallbacks count claim forwarding (instances that forward); forwardNanos and
	// serveNanos are the time forwarded claims took at the caller and at the owner.
	forwarded, fallbacks, forwardNanos, serveNanos int64
}

// stats reads the instances' claim metrics.
func stats(instances []*framework.Instance) allocStats {
	c := framework.TotalCounts(instances)
	return allocStats{
		attempts: c.Attempts, conflicts: c.Conflicts, writes: c.Writes, lostWrites: c.LostWrites, claimNanos: int64(c.ClaimTime),
		forwarded: c.Forwarded, fallbacks: c.Fallbacks, forwardNanos: int64(c.ForwardTime), serveNanos: int64(c.ServeTime),
	}
}

// startInstances starts the scenario's webhook instances (the first runs the reconciler, if asked),
// forwarding claims or not; configure, if any, changes every instance's operator options.
func (b *bench) startInstances(ctx context.Context, forward bool, configure ...func(*operator.Options)) ([]*framework.Instance, error) {
	instances, err := b.env.StartInstances(ctx, instanceCount, func(i int) framework.InstanceOptions {
		return instanceOptions(i, forward, configure...)
	})
	if err != nil {
		return nil, err
	}
	return instances, nil
}

// instanceOptions are the options of the scenario's instance i.
func instanceOptions(i int, forward bool, configure ...func(*operator.Options)) framework.InstanceOptions {
	opts := operator.Options{DisableControllers: i > 0 || !withReconciler}
	opts.Webhooks.HostListsConfigMapAbove = hostListsAbove
	opts.ReservationWindow = reservationWindow
	if !forward && reservationWindow == 0 {
		// As the manager's flags (managerflags.Flags.Parse): without forwarding, no reservations
		// unless -claim-reservation-window says so.
		opts.ReservationWindow = -1
	}
	opts.Controllers.PendingTTL = pendingTTL
	for _, f := range configure {
		f(&opts)
	}
	return framework.InstanceOptions{Operator: opts, Forward: forward}
}

func stopAll(instances []*framework.Instance) {
	for _, inst := range instances {
		_ = inst.Stop()
	}
}

func (s allocStats) minus(o allocStats) allocStats {
	return allocStats{
		attempts: s.attempts - o.attempts, conflicts: s.conflicts - o.conflicts, writes: s.writes - o.writes,
		lostWrites: s.lostWrites - o.lostWrites, claimNanos: s.claimNanos - o.claimNanos,
		forwarded: s.forwarded - o.forwarded, fallbacks: s.fallbacks - o.fallbacks,
		forwardNanos: s.forwardNanos - o.forwardNanos, serveNanos: s.serveNanos - o.serveNanos,
	}
}

func (allocStats) perPod(v int64, pods int) float64 { return float64(v) / float64(max(pods, 1)) }
