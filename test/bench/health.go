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
	"fmt"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// healthWidth is how many Pods S5-health binds and readies at once.
const healthWidth = 16

// healthResult is what S5-health measured: the slice's status writes from the end of the webhook
// run until it is Ready, how long Ready took from the first binding, and the object's size then.
type healthResult struct {
	hosts      int32
	writes     int
	claimWrite int64
	pods       int
	ready      time.Duration
	bytes      int
}

// healthNodePrefix begins the names of the Nodes sliceHealth binds the Pods of namespace ns to.
func healthNodePrefix(ns string) string { return ns + "-" }

// sliceHealth binds every Pod of the S5 slice to its own TPU Node through the binding subresource
// and reports it Ready as a kubelet would, 16 at a time, and measures the writes slice health
// costs and how soon the slice turns Ready. claimWrites are the webhook's writes of the run.
func (b *bench) sliceHealth(ctx context.Context, ns, name string, s scenario, claimWrites int64, writes *framework.SliceWrites) (healthResult, error) {
	r := healthResult{hosts: s.hosts, claimWrite: claimWrites}
	var pods corev1.PodList
	if err := b.c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		return r, err
	}
	r.pods = len(pods.Items)
	nodes := make([]string, len(pods.Items))
	if err := framework.Parallel(len(pods.Items), healthWidth, func(i int) error {
		nodes[i] = healthNodePrefix(ns) + strconv.Itoa(i)
		return framework.CreateNode(ctx, b.c, testutil.MakeNode(nodes[i]).TPU(s.acceleratorType(), s.topology, "bench-pool").Ready(true).Obj())
	}); err != nil {
		return r, err
	}
	start := time.Now()
	if err := framework.Parallel(len(pods.Items), healthWidth, func(i int) error {
		if err := framework.BindPod(ctx, b.c, &pods.Items[i], nodes[i]); err != nil {
			return err
		}
		return framework.SetPodReady(ctx, b.c, &pods.Items[i], true)
	}); err != nil {
		return r, err
	}
	for {
		var slice tpuv1alpha1.TPUSliceAssignment
		if err := b.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &slice); err != nil {
			return r, err
		}
		if apimeta.IsStatusConditionTrue(slice.Status.Conditions, tpuv1alpha1.ConditionReady) {
			break
		}
		if time.Since(start) > 5*time.Minute {
			return r, fmt.Errorf("slice %s/%s not Ready 5 minutes after its Pods were", ns, name)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.ready = time.Since(start)
	time.Sleep(3 * time.Second) // writes still coming after Ready would count too
	r.writes, _, _ = writes.Counts()
	var err error
	r.bytes, err = b.objectSize(ctx, ns, name)
	return r, err
}

// report prints S5-health's line: the slice's status writes per Pod over its life (the webhook's
// claim writes, then every write a watch saw from the end of the webhook run until Ready and
// 3 s after: binds and health), and seconds from the first binding to Ready.
func (r healthResult) report() string {
	fmt.Fprintf(os.Stderr, "S5-health-%d: %d committed claim writes during admission, %d writes after (binds, hosts, conditions) until Ready; stored object %.1f KiB when Ready\n",
		r.hosts, r.claimWrite, r.writes, float64(r.bytes)/1024)
	return r.line()
}

// line is S5-health's BENCH line.
func (r healthResult) line() string {
	n := float64(max(r.pods, 1))
	return fmt.Sprintf("BENCH S5-health hosts=%d writes_per_pod=%.2f ready_s=%.1f", r.hosts, (float64(r.claimWrite)+float64(r.writes))/n, r.ready.Seconds())
}
