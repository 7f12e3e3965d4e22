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
	"sync"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// CreateRetrying creates a copy of pod, retrying denials and failures every 50 ms as a Pod's
// creator (KubeRay) does, for at most timeout. It returns the stored Pod (nil when every attempt
// failed), the last error, and how long it took from the first attempt to the admission.
func CreateRetrying(ctx context.Context, c client.Client, pod *corev1.Pod, timeout time.Duration) (*corev1.Pod, time.Duration, error) {
	start := time.Now()
	for {
		p := pod.DeepCopy() // a failed attempt must not leave a half-mutated Pod for the next
		err := c.Create(ctx, p)
		if err == nil {
			return p, time.Since(start), nil
		}
		if time.Since(start) > timeout || ctx.Err() != nil {
			return nil, time.Since(start), err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// MustCreate creates a Pod, retrying as KubeRay would, and returns the stored Pod.
func MustCreate(ctx context.Context, c client.Client, pod *corev1.Pod) *corev1.Pod {
	ginkgo.GinkgoHelper()
	created, _, err := CreateRetrying(ctx, c, pod, testutil.Timeout)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return created
}

// CreatePods creates n worker Pods of rc's group concurrently, each retrying as KubeRay would.
func CreatePods(ctx context.Context, c client.Client, rc *rayv1.RayCluster, group string, n int) []*corev1.Pod {
	ginkgo.GinkgoHelper()
	out := make([]*corev1.Pod, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			out[i], _, errs[i] = CreateRetrying(ctx, c, testutil.WorkerPodFor(rc, group).Obj(), testutil.Timeout)
		})
	}
	wg.Wait()
	for _, err := range errs {
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
	}
	return out
}

// WorkerID is the TPU_WORKER_ID of the Pod's first TPU container.
func WorkerID(p *corev1.Pod) string {
	v, _ := WorkerEnv(p, constants.EnvWorkerID)
	return v
}

// Seq returns 0..n-1.
func Seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// SetReplicas sets the replica count of rc's first worker group.
func SetReplicas(ctx context.Context, c client.Client, rc *rayv1.RayCluster, n int32) {
	ginkgo.GinkgoHelper()
	gomega.Eventually(func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(rc), rc); err != nil {
			return err
		}
		rc.Spec.WorkerGroupSpecs[0].Replicas = ptr.To(n)
		return c.Update(ctx, rc)
	}, testutil.Timeout, testutil.Interval).Should(gomega.Succeed())
}

// ExpectIDs checks I1/I2 and that each replica's live Pods have exactly the wanted IDs.
func ExpectIDs(ctx context.Context, c client.Reader, ns string, want map[int32][]int) {
	ginkgo.GinkgoHelper()
	gomega.Eventually(func(g gomega.Gomega) {
		report, err := CheckAdmitted(ctx, c, ns)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		var list tpuv1alpha1.TPUSliceAssignmentList
		g.Expect(c.List(ctx, &list, client.InNamespace(ns))).To(gomega.Succeed())
		got := map[int32][]int{}
		for _, s := range list.Items {
			if ids := report.IDs[s.Name]; len(ids) > 0 {
				got[s.Spec.ReplicaIndex] = ids
			}
		}
		g.Expect(got).To(gomega.Equal(want))
	}, testutil.Timeout, testutil.Interval).Should(gomega.Succeed())
}

// ExpectBound waits until the namespace's slices hold n claims bound to Pods.
func ExpectBound(ctx context.Context, c client.Reader, ns string, n int) {
	ginkgo.GinkgoHelper()
	gomega.Eventually(func() int { return BoundClaims(ctx, c, ns) }, testutil.Timeout, testutil.Interval).Should(gomega.Equal(n))
}

// BoundClaims counts the namespace's claims bound to a Pod.
func BoundClaims(ctx context.Context, c client.Reader, ns string) int {
	var list tpuv1alpha1.TPUSliceAssignmentList
	gomega.Expect(c.List(ctx, &list, client.InNamespace(ns))).To(gomega.Succeed())
	bound := 0
	for _, s := range list.Items {
		for _, cl := range s.Status.Claims {
			if cl.PodUID != "" {
				bound++
			}
		}
	}
	return bound
}

// ClaimCount counts the namespace's claims.
func ClaimCount(ctx context.Context, c client.Reader, ns string) int {
	var list tpuv1alpha1.TPUSliceAssignmentList
	gomega.Expect(c.List(ctx, &list, client.InNamespace(ns))).To(gomega.Succeed())
	n := 0
	for _, s := range list.Items {
		n += len(s.Status.Claims)
	}
	return n
}

// SliceCount counts the namespace's slices.
func SliceCount(ctx context.Context, c client.Reader, ns string) int {
	var list tpuv1alpha1.TPUSliceAssignmentList
	gomega.Expect(c.List(ctx, &list, client.InNamespace(ns))).To(gomega.Succeed())
	return len(list.Items)
}

// CreateNamespace creates a namespace named <prefix>-<random> and returns its name.
func CreateNamespace(ctx context.Context, c client.Client, prefix string) string {
	ginkgo.GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	gomega.Expect(c.Create(ctx, ns)).To(gomega.Succeed())
	return ns.Name
}
