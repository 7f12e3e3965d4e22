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

// Package chaos runs a seeded random mix of Pod deletions, replica changes, RayCluster delete and
// re-create, webhook instance restarts and injected API faults against real KubeRay and three
// operator instances, together with what users and other requests do to running slices: label and
// claim-token edits, Pods created from copied manifests, Pods with a hand-set TPU identity created
// with the webhook out of the way, deletes right after creates, Pods of another host count or of a
// deleted RayCluster generation, and AdmissionReviews forged straight to a webhook instance; and
// what issue 20 found nothing a Pod carries or a label hides may do (hostile_test.go): KubeRay
// labels removed from Pods during bursts, other host counts in one batch, malformed claim tokens,
// absurd topologies and forged replica indexes. It checks docs/spec.md §9 after every step (I6 on
// every Pod deletion, see audit.go; every stored slice version, see stored.go). Each gate setting
// ends with one line:
//
//	CHAOS seed=<n> duration=<s> gate=<on|off> ops=<n> admitted=<n> denials=<n> retries=<n> violations=<n> forwarded=<n> fallbacks=<n> adopted=<n> max_replace_s=<x> forged=<n> pods_deleted=<n> unlabeled=<n> mixed_denials=<n> max_mixed_denial_s=<x> malformed_tokens=<n> stored_versions=<n> absurd_denials=<n> max_absurd_s=<x> absurd_heap_mib=<n> forged_indexes=<n> hostlists_refs=<n> hostlists_deleted=<n> reserved=<n> renewals=<n>
//
// adopted counts the claims recorded for Pods that carried an identity but no claim (by the
// allocators at admission and by the reconcilers), max_replace_s is the slowest admission of a
// replacement of a Pod deleted right after its create (from the deletion being visible), forged
// the AdmissionReviews posted straight to an instance, pods_deleted the Pods the operator deleted
// (each one judged a true docs/spec.md §8 repair, or the run fails); unlabeled the Pods whose
// KubeRay labels were removed right after their create, mixed_denials and max_mixed_denial_s the
// denials of other host counts in one batch and the slowest, malformed_tokens the Pods created with
// a malformed claim token, stored_versions the stored slice versions checked, absurd_denials,
// max_absurd_s and absurd_heap_mib the absurd topologies denied, the slowest denial and the
// largest heap growth meanwhile, forged_indexes the reviews with forged replica indexes,
// hostlists_refs the most live Pods seen at once taking their host lists from a ConfigMap and
// hostlists_deleted the host lists ConfigMaps the run deleted under them (issue 22), reserved the
// worker IDs handed out from reservations with no write of their own (docs/spec.md §3.5; a run
// with none fails, as the restarts would then never kill a holder with IDs in hand), renewals the
// reservation renewals written beside hand-outs (§3.5). A
// CHAOS-OPS line follows with the count of each operation and of the operator deletions judged
// repairs, settle_s, how long after the chaos ended every RayCluster had its Pods, and
// settle_refills, the Pods the settle re-created for the RayClusters without KubeRay after its
// first refill.
//
// With -chaos.cluster one or both gate settings run on the local cluster (kube-scheduler,
// kube-controller-manager, kwok TPU Nodes), where Nodes and Pods also fail through kwok and
// RayClusters and namespaces are deleted and left to the garbage collector and the namespace
// controller (cluster_test.go); such a run adds a CHAOS-cluster line. There a stand-in cluster
// autoscaler adds pools for the slices' capacity Pods and removes idle ones, Pods of no slice take
// TPU chips, one RayCluster's workers carry node affinity, and node-pool slices and sub-block
// subslices share pools (capacity_test.go, issue 43); the run adds a CHAOS-capacity line.
//
// `make test` runs it for about two minutes; `make test-chaos SEED=... DURATION=...` runs longer.
package chaos

import (
	"flag"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/ray-tpu/tpu-slice-operator/internal/localcluster"
	"github.com/ray-tpu/tpu-slice-operator/internal/localenv"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// ctx lives as long as the suite.
var ctx = framework.SuiteContext()

var (
	seed      = flag.Uint64("chaos.seed", 0, "Seed of the random run (0: derived from the time, and printed).")
	duration  = flag.Duration("chaos.duration", 2*time.Minute, "Total chaos time, split evenly between the two KubeRay gate settings.")
	onCluster = flag.String("chaos.cluster", clusterNone, "Which KubeRay gate settings run on the local cluster (kube-scheduler, kube-controller-manager, kwok TPU Nodes; "+
		"needs CLUSTER_ASSETS): "+clusterNone+" (both on the bare API server), "+clusterGateOn+" (RayMultiHostIndexing=false on the bare API server, then true on the cluster) or "+
		clusterAll+".")
)

// Values of -chaos.cluster. The gate-off half runs first: a bare run after the cluster started
// would have its Pods scheduled and its stand-in Nodes judged by the real components.
const (
	clusterNone   = "none"
	clusterGateOn = "gate-on"
	clusterAll    = "all"
)

// runsOnCluster reports whether the run of a gate setting is on the local cluster.
func runsOnCluster(gate bool) bool {
	return *onCluster == clusterAll || (*onCluster == clusterGateOn && gate)
}

var (
	env *framework.Env
	// k8sClient is the runner's client: its Pod deletions are audited as the runner's (the
	// garbage-collection stand-in's included).
	k8sClient client.Client
	// watchClient watches Pods, through no audit.
	watchClient client.WithWatch
	// audit records and judges every Pod deletion (I6).
	audit *auditor
	// localCluster is the local cluster, once a run started it (startCluster).
	localCluster *localcluster.Cluster
)

func TestChaos(t *testing.T) {
	framework.RunSuite(t, "Chaos suite")
}

var _ = BeforeSuite(func() {
	env = framework.StartSuite(zap.UseDevMode(false))
	audit = newAuditor(env.Client)
	audit.logf = GinkgoWriter.Printf
	var err error
	k8sClient, err = client.New(audit.wrap(env.Config, actorRunner), client.Options{Scheme: env.Client.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	watchClient, err = client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	// KubeRay's deletions (scale-downs, replaced replicas) are audited as its own.
	stopKubeRay, err := localenv.StartKubeRay(ctx, audit.wrap(env.Config, actorKubeRay))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(stopKubeRay)
	Expect([]string{clusterNone, clusterGateOn, clusterAll}).To(ContainElement(*onCluster), "-chaos.cluster")
})

// startCluster starts the local cluster with clusterPools, once; Env.Stop stops it.
func startCluster() {
	GinkgoHelper()
	if localCluster != nil {
		return
	}
	start := time.Now()
	var err error
	localCluster, err = env.StartCluster(ctx, localcluster.Options{Pools: clusterPools()})
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("local cluster: %d Nodes Ready in %v\n", len(localCluster.Nodes), time.Since(start).Round(10*time.Millisecond))
}
