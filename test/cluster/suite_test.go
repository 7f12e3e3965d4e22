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

// Package cluster runs the operator end to end on a real local cluster (internal/localcluster):
// kube-scheduler, kube-controller-manager (garbage collector, namespace and node lifecycle
// controllers) and kwok Nodes shaped like GKE TPU node pools, with KubeRay's RayCluster controller
// in-process and the operator's three webhook replicas. It checks the bare cluster (a TPU Pod
// placed in its pool and run, garbage collection, namespace deletion, a Node failed on demand), then,
// with KubeRay's RayMultiHostIndexing gate off and on, what users depend on (docs/spec.md §4, §8,
// §11 and I1, I3, I8 of §9): slices placed as units in a domain the operator chose (contended
// pools: each slice in one pool, the one that does not fit gated with no Pod bound, reported
// NoDomainFits, landing once a pool is freed), subslices kept in one GCE sub-block, a failed Node
// turning its slice Degraded within 5 s and KubeRay's replacement placed in a healthy domain and
// Ready, and a deleted RayCluster or namespace cleaned up by the real garbage collector and
// namespace controller. With the gate on it also checks a pool lacking a Ready Node avoided, the
// operator down while Pods wait gated, and Kueue's and dynamic slicing's slices left alone. A
// framework.PlacementWatcher checks one domain per slice, one slice per domain and whole releases
// at every Pod event. It needs `make envtest` and `make cluster-tools`.
package cluster

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/controllers"
	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// webhookInstances is the operator's webhook replicas, as the production install runs them.
const webhookInstances = 3

// ctx lives as long as the suite.
var ctx = framework.SuiteContext()

// suite is the cluster, KubeRay's RayCluster controller and the operator the specs run against.
var suite framework.Suite

// The pools: three v6e 4x4 pools of 4 hosts (4 chips each) that slices contend for, a v5e 4x4
// pool of 4 hosts split into two 2x4 sub-blocks of 2 hosts for subslices (another accelerator, so
// that the contending slices cannot use it), and a CPU pool for Ray heads.
const (
	subslicePool        = "pool-sub"
	subsliceAccelerator = "tpu-v5-lite-podslice"
	cpuPool             = "default-pool"
)

var contendedPools = []string{"pool-a", "pool-b", "pool-c"}

// latePool is a v5p node pool of 4 hosts that no slice but one spec's uses, and that exists only
// while that spec runs: created after its slice, as GKE's node auto-provisioning creates a pool.
var latePool = localcluster.Pool{Name: "pool-late", Accelerator: "tpu-v5p-slice", Topology: "2x2x4"}

func pools() []localcluster.Pool {
	var out []localcluster.Pool
	for _, name := range contendedPools {
		out = append(out, localcluster.Pool{Name: name, Accelerator: "tpu-v6e-slice", Topology: "4x4"})
	}
	return append(out,
		localcluster.Pool{Name: subslicePool, Accelerator: subsliceAccelerator, Topology: "4x4", SubBlocks: 2},
		localcluster.CPUPool(1))
}

// operatorOptions are the options of the operator's replicas, at the start and when a spec restarts
// them (restartOperator): the default slice placement, ChosenDomain.
func operatorOptions() operator.Options {
	return operator.Options{Controllers: controllers.Options{PendingTTL: pendingTTL}}
}

// restartOperator stops the operator's replicas still running and starts webhookInstances new ones
// with operatorOptions, the first running the reconciler, as a rollout or a crash of every replica
// would.
func restartOperator() {
	GinkgoHelper()
	restart(operatorOptions())
}

// restartOperatorWith is restartOperator with --slice-placement=placement.
func restartOperatorWith(placement tpuv1alpha1.SlicePlacement) {
	GinkgoHelper()
	opts := operatorOptions()
	opts.SlicePlacement = placement
	restart(opts)
}

func restart(opts operator.Options) {
	GinkgoHelper()
	for _, inst := range suite.Instances {
		Expect(inst.Stop()).To(Succeed())
	}
	suite.StartReplicas(webhookInstances, opts)
}

func TestCluster(t *testing.T) {
	suite.Run(t, "Local cluster suite", func() {
		// The cluster first, so that the operator's Node caches hold the pools from its start.
		suite.StartCluster(localcluster.Options{Pools: pools()})
		suite.StartReplicas(webhookInstances, operatorOptions())
		stopKubeRay, err := suite.StartKubeRay(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(stopKubeRay)
	})
}
