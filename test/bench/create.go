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
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// create makes n worker Pods of rc with the given number of concurrent clients, each one Pod at a
// time, and returns the latency of every successful create, the wall time and the failures.
func (b *bench) create(ctx context.Context, rc *rayv1.RayCluster, n, clients int) ([]time.Duration, time.Duration, int) {
	return b.createGroup(ctx, rc, rc.Spec.WorkerGroupSpecs[0].GroupName, n, clients)
}

// createGroup is create for the worker group named group.
func (b *bench) createGroup(ctx context.Context, rc *rayv1.RayCluster, group string, n, clients int) ([]time.Duration, time.Duration, int) {
	return b.createPods(ctx, n, clients, func(int) *corev1.Pod { return testutil.WorkerPodFor(rc, group).Obj() })
}

// createPods creates the n Pods build returns for 0..n-1 with the given number of concurrent
// clients, each one Pod at a time; it returns what createGroup returns.
func (b *bench) createPods(ctx context.Context, n, clients int, build func(i int) *corev1.Pod) ([]time.Duration, time.Duration, int) {
	var next atomic.Int64
	var failures atomic.Int64
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				pod := build(i)
				t := time.Now()
				if err := b.c.Create(ctx, pod); err != nil {
					failures.Add(1)
					lat[i] = -1
					continue
				}
				lat[i] = time.Since(t)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	return slices.DeleteFunc(lat, func(d time.Duration) bool { return d < 0 }), wall, int(failures.Load())
}

// createSampled creates the n worker Pods of rc one at a time, as create does with one client, and
// calls sample before the Pod at each position of at (n: after the last). The time sample takes
// is left out of the wall time it returns, not the latencies.
func (b *bench) createSampled(ctx context.Context, rc *rayv1.RayCluster, n int, at []int, sample func()) ([]time.Duration, time.Duration, int) {
	group := rc.Spec.WorkerGroupSpecs[0].GroupName
	var paused time.Duration
	// createPods builds each Pod before it times the create.
	lat, wall, failures := b.createPods(ctx, n, 1, func(i int) *corev1.Pod {
		if slices.Contains(at, i) {
			t := time.Now()
			sample()
			paused += time.Since(t)
		}
		return testutil.WorkerPodFor(rc, group).Obj()
	})
	if slices.Contains(at, n) {
		sample()
	}
	return lat, wall - paused, failures
}

// slowest lists the k longest latencies with their position in lat (the order the creates were
// started in, failures left out).
func slowest(lat []time.Duration, k int) string {
	idx := make([]int, len(lat))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(lat[b], lat[a]) })
	parts := make([]string, 0, k)
	for _, i := range idx[:min(k, len(idx))] {
		parts = append(parts, fmt.Sprintf("%d: %.1f", i, ms(lat[i])))
	}
	return strings.Join(parts, ", ")
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(float64(len(s))*float64(p)/100)) - 1
	return s[max(i, 0)]
}

// mean is the mean of d, 0 for none.
func mean(d []time.Duration) time.Duration {
	var sum time.Duration
	for _, l := range d {
		sum += l
	}
	return sum / time.Duration(max(len(d), 1))
}
