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
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	tpuclaims "github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
	"github.com/ray-tpu/tpu-slice-operator/internal/tpuenv"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// floor is a same-run measurement that bounds what the webhook run can reach.
type floor struct {
	name      string
	wall, p99 time.Duration
	extra     string
	// stored is what the floor's first slice takes as stored (the payload floor's Pods).
	stored storedBytes
	// flatness is the mean create of the last flatWindow Pods over that of the first (the
	// injection floor's).
	flatness float64
}

// admissionFloor creates as many worker Pods without TPUs as the scenario has, through the webhook
// instances registered now: the webhook is called for each and answers without an API call. No
// webhook design can cost less per Pod.
func (b *bench) admissionFloor(ctx context.Context, s scenario) (floor, error) {
	ns, err := b.namespace(ctx, "floor-"+strings.ToLower(s.name))
	if err != nil {
		return floor{}, err
	}
	n := s.pods()
	cpu := testutil.MakeRayCluster("bench", ns).CPUGroup("cpu", int32(n)).ManagedByMultiKueue().Obj()
	if err := b.c.Create(ctx, cpu); err != nil {
		return floor{}, err
	}
	lat, wall, _ := b.createGroup(ctx, cpu, "cpu", n, s.clients)
	return floor{name: "admission floor (webhook called, no claim)", wall: wall, p99: percentile(lat, 99)}, nil
}

// payloadFloor creates the scenario's worker Pods with no webhook registered, each already carrying
// what the webhook injects into it (tpuenv.Apply of the identity of worker i: env, hostname,
// labels, affinity): what storing and watching Pods of that size costs without any admission or
// claim. A multi-host Pod carries TPU_WORKER_HOSTNAMES and TORCH_TPU_SLICEBUILDER_ADDRESSES, both
// of a length proportional to the slice's hosts, so no design that injects them can cost less.
func (b *bench) payloadFloor(ctx context.Context, s scenario) (floor, error) {
	rc, err := b.rayCluster(ctx, "payload", s)
	if err != nil {
		return floor{}, err
	}
	lat, wall, failed := b.createPods(ctx, s.pods(), s.clients, func(i int) *corev1.Pod {
		pod := testutil.WorkerPodFor(rc, "tpu").Obj()
		worker, replica := int32(i)%s.hosts, int32(i)/s.hosts //nolint:gosec // at most a few thousand.
		if err := injectPayload(pod, rc.Name, replica, worker); err != nil {
			panic(err) // the tests' builder makes a valid TPU worker Pod
		}
		return pod
	})
	if failed > 0 {
		return floor{}, fmt.Errorf("payload floor: %d creates failed", failed)
	}
	f := floor{name: "payload floor (the injected identity in the Pod, no webhook, no claim)", wall: wall, p99: percentile(lat, 99)}
	var pods corev1.PodList
	if err := b.c.List(ctx, &pods, client.InNamespace(rc.Namespace), client.Limit(1)); err == nil && len(pods.Items) > 0 {
		if data, err := json.Marshal(&pods.Items[0]); err == nil {
			f.extra = fmt.Sprintf(", %.1f KiB per Pod as JSON", float64(len(data))/1024)
		}
	}
	if f.stored, err = b.sliceStored(ctx, rc.Namespace, naming.SliceName(rc.Name, "tpu", 0)); err != nil {
		return f, err
	}
	f.extra += fmt.Sprintf(", %.1f KiB per Pod as stored (protobuf)", float64(f.stored.perPod())/1024)
	// Gone before the webhook run: the Pods carry slice labels and tokens of slices that do not
	// exist, which the instances' reconciler would otherwise adopt.
	return f, b.c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(rc.Namespace))
}

// injectionFloor creates the scenario's worker Pods, one at a time, through a stand-in for the
// webhook (framework.Env.ServeStandIn: a webhook server behind the same proxy as the operator's
// instances) that injects into each the identity the operator would (injectPayload, worker IDs in
// creation order), with no claim and no API call: the API server's webhook call through the
// bench's Service, the patch and the Pods' size, which no webhook that injects this identity at
// admission avoids. It runs before the scenario's instances start, so that no reconciler sees its
// Pods, and deletes them.
func (b *bench) injectionFloor(ctx context.Context, s scenario) (floor, error) {
	rc, err := b.rayCluster(ctx, "inject", s)
	if err != nil {
		return floor{}, err
	}
	var next, failed atomic.Int64
	stop, err := b.env.ServeStandIn(func(pod *corev1.Pod) {
		i := int32(next.Add(1) - 1) //nolint:gosec // at most a few thousand.
		if injectPayload(pod, rc.Name, i/s.hosts, i%s.hosts) != nil {
			failed.Add(1)
		}
	})
	if err != nil {
		return floor{}, err
	}
	lat, wall, denied := b.create(ctx, rc, s.pods(), 1)
	if err := stop(); err != nil {
		return floor{}, err
	}
	if n := failed.Load(); denied > 0 || n > 0 {
		return floor{}, fmt.Errorf("injection floor: %d creates failed, %d Pods without a TPU topology", denied, n)
	}
	first, last := lat[:min(flatWindow, len(lat))], lat[max(len(lat)-flatWindow, 0):]
	f := floor{name: "injection floor (a stand-in webhook injects the identity, no claim)", wall: wall, p99: percentile(lat, 99),
		flatness: ratio(mean(last), mean(first))}
	f.extra = fmt.Sprintf(", flatness %.2f, mean create %.1f ms", f.flatness, ms(mean(lat)))
	return f, b.c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(rc.Namespace))
}

// injectPayload applies to pod, a TPU worker Pod of group "tpu" of the RayCluster named cluster,
// what the webhook injects into the Pod of that replica and worker ID (tpuenv.Apply: env,
// hostname, labels, affinity), with a claim token that names no claim.
func injectPayload(pod *corev1.Pod, cluster string, replica, worker int32) error {
	slice, err := topology.FromPod(pod.Annotations, &pod.Spec)
	if err != nil {
		return err
	}
	tpuenv.Apply(pod, tpuenv.Values{
		GroupName: "tpu", ReplicaIndex: replica, WorkerID: worker, Hosts: slice.Hosts,
		Subdomain: naming.HeadlessServiceName(cluster), SliceName: naming.SliceName(cluster, "tpu", replica),
		ClaimToken: "payload-floor", Topology: slice.Topology.Dims, ChipsPerHost: slice.ChipsPerPod,
		// The Pods the operator's instances make: host lists in the slice's ConfigMap above
		// -host-lists-configmap-above (no ConfigMap is written: nothing here starts containers).
		HostListsInConfigMap: tpuenv.HostListsInConfigMap(slice.Hosts, hostListsAbove),
	}, slice.TPUContainers)
	return nil
}

// writeStats are the mean and p99 of a series of writes.
type writeStats struct{ mean, p99 time.Duration }

// statusWriteFloor creates a slice of s's size, owned by rc, whose status holds claims pending
// claims (as during a burst of admissions), and times writes resourceVersion-checked status updates
// of it with no webhook, each giving one claim a new token: what one claim write costs at that size
// and nothing else. The status is built with the operator's API types and the tests' slice builder,
// so the floor follows the representation they use.
func (b *bench) statusWriteFloor(ctx context.Context, rc *rayv1.RayCluster, s scenario, claims int32, writes int) (writeStats, error) {
	slice := tpuclaims.NewSlice(rc.Namespace, tpuv1alpha1.TPUSliceAssignmentSpec{
		RayClusterName: fmt.Sprintf("%s-floor-%d", rc.Name, claims), RayClusterUID: rc.UID,
		GroupName: "tpu", Hosts: s.hosts, Topology: s.topology, Accelerator: s.acceleratorType(),
	})
	if err := b.c.Create(ctx, slice); err != nil {
		return writeStats{}, err
	}
	tokens := make([]string, claims)
	for i := range tokens {
		tokens[i] = allocator.NewToken()
	}
	const warmup = 3 // the first write fills the status
	lat := make([]time.Duration, 0, writes)
	for i := range writes + warmup {
		tokens[i%len(tokens)] = allocator.NewToken()
		w := &testutil.SliceWrapper{TPUSliceAssignment: *slice}
		w.Status = tpuv1alpha1.TPUSliceAssignmentStatus{}
		for id := range claims {
			w.Claim(id, tokens[id], "", "")
		}
		t := time.Now()
		if err := b.c.Status().Update(ctx, &w.TPUSliceAssignment); err != nil {
			return writeStats{}, err
		}
		if i >= warmup {
			lat = append(lat, time.Since(t))
		}
		slice = &w.TPUSliceAssignment
	}
	// Gone before the webhook run, so that its instances' reconciler has nothing to do with it.
	return writeStats{mean: mean(lat), p99: percentile(lat, 99)}, b.c.Delete(ctx, slice)
}

// claimWriteFloor creates the scenario's Pods one at a time with no webhook and, after each, writes one
// claim to its slice's status with a resourceVersion-checked update, as a claim does. The first Pod
// of each slice also creates the slice, as the webhook does, and its latency includes that. With
// grow, the status accumulates the slice's claims as in the real run; without, it always holds one.
func (b *bench) claimWriteFloor(ctx context.Context, rc *rayv1.RayCluster, s scenario, grow bool) (floor, error) {
	f := floor{name: "floor of one claim write per Pod (no webhook)"}
	if !grow {
		f.name = "floor of one claim write per Pod with a one-claim status (no webhook)"
	}
	cluster := rc.Name + "-floor"
	if !grow {
		cluster += "-one"
	}
	var lat []time.Duration
	start := time.Now()
	for r := range s.slices {
		var slice *tpuv1alpha1.TPUSliceAssignment
		for id := range s.hosts {
			t := time.Now()
			if slice == nil {
				slice = tpuclaims.NewSlice(rc.Namespace, tpuv1alpha1.TPUSliceAssignmentSpec{
					RayClusterName: cluster, RayClusterUID: rc.UID, GroupName: "tpu", ReplicaIndex: r,
					Hosts: s.hosts, Topology: s.topology,
				})
				if err := b.c.Create(ctx, slice); err != nil {
					return f, err
				}
			}
			if err := b.c.Create(ctx, testutil.WorkerPodFor(rc, "tpu").Obj()); err != nil {
				return f, err
			}
			c := tpuv1alpha1.WorkerClaim{WorkerID: id, Token: allocator.NewToken()}
			if grow {
				slice.Status.Claims = append(slice.Status.Claims, c)
			} else {
				slice.Status.Claims = []tpuv1alpha1.WorkerClaim{c}
			}
			slice.Status.Claimed = int32(len(slice.Status.Claims)) //nolint:gosec // at most 64.
			if err := b.c.Status().Update(ctx, slice); err != nil {
				return f, err
			}
			lat = append(lat, time.Since(t))
		}
	}
	f.wall, f.p99 = time.Since(start), percentile(lat, 99)
	return f, nil
}

// singleWriterFloor creates the scenario's Pods with its clients and no webhook registered: each
// client claims a worker ID through alloc, one allocator shared by every client, applies it to the
// Pod as the webhook would and creates the Pod. That is group commit with a single writer, without
// the admission round trip and without other writers to conflict with.
func (b *bench) singleWriterFloor(ctx context.Context, inst *framework.Instance, s scenario) (floor, error) {
	alloc := inst.Allocator
	f := floor{name: "group-commit floor (one in-process allocator, no webhook)"}
	rc, err := b.rayCluster(ctx, "gc", s)
	if err != nil {
		return f, err
	}
	n := s.pods()
	req := allocator.Request{
		Namespace: rc.Namespace, ClusterName: rc.Name, ClusterUID: rc.UID, GroupName: "tpu",
		Hosts: s.hosts, Topology: s.topology, Accelerator: s.acceleratorType(),
	}
	before := inst.Counts().Writes
	var next, failures atomic.Int64
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	for range s.clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				t := time.Now()
				if err := b.claimAndCreate(ctx, alloc, req, testutil.WorkerPodFor(rc, "tpu").Obj()); err != nil {
					failures.Add(1)
					continue
				}
				lat[i] = time.Since(t)
			}
		})
	}
	wg.Wait()
	f.wall = time.Since(start)
	if failed := failures.Load(); failed > 0 {
		return f, fmt.Errorf("group-commit floor: %d creates or claims failed", failed)
	}
	f.p99 = percentile(lat, 99)
	f.extra = fmt.Sprintf(", writes per Pod %.2f", float64(inst.Counts().Writes-before)/float64(n))
	return f, nil
}

// claimAndCreate does in process what the webhook does in admission: it claims a worker ID for pod,
// applies the identity, and then creates the Pod.
func (b *bench) claimAndCreate(ctx context.Context, alloc *allocator.Allocator, req allocator.Request, pod *corev1.Pod) error {
	slice, err := topology.FromPod(pod.Annotations, &pod.Spec)
	if err != nil {
		return err
	}
	a, err := alloc.Claim(ctx, req)
	if err != nil {
		return err
	}
	tpuenv.Apply(pod, tpuenv.Values{
		GroupName: req.GroupName, ReplicaIndex: a.Replica, WorkerID: a.WorkerID, Hosts: slice.Hosts,
		Subdomain: naming.HeadlessServiceName(req.ClusterName), SliceName: a.SliceName, Namespace: req.Namespace, ClaimToken: a.Token,
	}, slice.TPUContainers)
	return b.c.Create(ctx, pod)
}
