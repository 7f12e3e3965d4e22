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
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/ray-tpu/tpu-slice-operator/internal/localenv"
	"github.com/ray-tpu/tpu-slice-operator/internal/managerflags"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// memoryLoad is what S4 fills the API server with.
type memoryLoad struct {
	tpuPods, otherPods int
	// tpuNodes Nodes carry GKE's TPU labels; a fifth as many more carry none.
	tpuNodes int
}

// memory runs the manager binary as its own process, fills the API server with Nodes, non-TPU Pods
// and TPU worker Pods, and reads the manager's RSS and Go heap.
func (b *bench) memory(ctx context.Context, load memoryLoad) (string, error) {
	mgr, metricsPort, _, err := b.startManager(ctx)
	if err != nil {
		return "", err
	}
	defer func() { _ = mgr.Process.Kill(); _ = mgr.Wait(); b.env.ServeWebhooksFrom(b.validator) }()
	time.Sleep(2 * time.Second)
	rssIdle, _ := rssMiB(mgr.Process.Pid)

	ns, err := b.namespace(ctx, "s4")
	if err != nil {
		return "", err
	}
	fmt.Printf("\nS4: creating %d TPU Nodes and %d other Nodes, %d non-TPU Pods and %d TPU worker Pods\n",
		load.tpuNodes, load.tpuNodes/5, load.otherPods, load.tpuPods)
	if err := b.fillNodes(ctx, load.tpuNodes); err != nil {
		return "", err
	}
	time.Sleep(2 * time.Second)
	rssNodes, _ := rssMiB(mgr.Process.Pid)
	if err := b.fillOther(ctx, ns, load.otherPods); err != nil {
		return "", err
	}
	time.Sleep(2 * time.Second)
	rssOther, _ := rssMiB(mgr.Process.Pid)

	if err := b.fillTPU(ctx, ns, load.tpuPods); err != nil {
		return "", err
	}
	time.Sleep(3 * time.Second)
	rss, err := rssMiB(mgr.Process.Pid)
	if err != nil {
		return "", err
	}
	heap, err := heapMiB(ctx, metricsPort)
	if err != nil {
		return "", err
	}
	fmt.Printf("S4: manager RSS %.1f MiB idle, %.1f MiB with the Nodes (%+.1f MiB), %.1f MiB with %d non-TPU Pods more (%+.1f MiB), %.1f MiB with %d TPU Pods more; Go heap %.1f MiB\n",
		rssIdle, rssNodes, rssNodes-rssIdle, rssOther, load.otherPods, rssOther-rssNodes, rss, load.tpuPods, heap)
	return fmt.Sprintf("BENCH S4 pods=%d nodes=%d rss_mib=%.1f heap_mib=%.1f", load.otherPods+load.tpuPods, load.tpuNodes+load.tpuNodes/5, rss, heap), nil
}

// fillNodes creates n TPU Nodes, 16-host v6e node pools with GKE's labels, and n/5 Nodes without
// TPUs. Each has a status as large as a GKE Node's (images, conditions, addresses), which the
// manager's Node cache must not keep: it holds TPU Nodes only, trimmed (internal/nodes).
func (b *bench) fillNodes(ctx context.Context, n int) error {
	const poolHosts = 16
	return b.fillObjects(ctx, n+n/5, func(i int) client.Object {
		node := testutil.MakeNode(fmt.Sprintf("gke-bench-%05d", i))
		if i < n {
			node.TPU("tpu-v6e-slice", "8x8", fmt.Sprintf("pool-%d", i/poolHosts)).
				GCE(fmt.Sprintf("block-%d", i/(poolHosts*8)), fmt.Sprintf("sb-%d", i/poolHosts))
		}
		return node.GKEStatus().Obj()
	})
}

// startManager builds the manager binary, starts it against the control plane with the
// Deployment's memory limit (as the kubelet passes it, docs/install.md) and makes the webhook
// endpoint send admissions to it. It returns the process, its metrics port and its probe port.
func (b *bench) startManager(ctx context.Context) (*exec.Cmd, int, int, error) {
	root := localenv.RootDir()
	bin := filepath.Join(root, "bin", "manager")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return nil, 0, 0, fmt.Errorf("building the manager: %w", err)
	}
	kubeconfig, err := b.kubeconfig()
	if err != nil {
		return nil, 0, 0, err
	}
	limit, err := deploymentMemoryLimit(root)
	if err != nil {
		return nil, 0, 0, err
	}
	webhookPort, metricsPort, probePort := freePort(), freePort(), freePort()
	wio := &b.env.Env.WebhookInstallOptions
	mgr := exec.CommandContext(ctx, bin, "--kubeconfig", kubeconfig,
		"--metrics-bind-address", "127.0.0.1:"+strconv.Itoa(metricsPort), "--metrics-secure=false",
		"--health-probe-bind-address", "127.0.0.1:"+strconv.Itoa(probePort),
		"--webhook-port", strconv.Itoa(webhookPort), "--webhook-cert-path", wio.LocalServingCertDir)
	mgr.Env = append(os.Environ(), managerflags.MemoryLimitEnv+"="+strconv.FormatInt(limit, 10))
	mgr.Stderr = io.Discard
	if err := mgr.Start(); err != nil {
		return nil, 0, 0, err
	}
	if err := waitHTTP(ctx, "http://127.0.0.1:"+strconv.Itoa(metricsPort)+"/metrics"); err != nil {
		_ = mgr.Process.Kill()
		_ = mgr.Wait()
		return nil, 0, 0, err
	}
	b.env.ServeWebhooksFrom(&framework.Instance{Addr: "127.0.0.1:" + strconv.Itoa(webhookPort)})
	return mgr, metricsPort, probePort, nil
}

// deploymentMemoryLimit reads the manager container's memory limit, in bytes, from the
// Deployment in config/manager.
func deploymentMemoryLimit(root string) (int64, error) {
	data, err := os.ReadFile(filepath.Join(root, "config", "manager", "manager.yaml"))
	if err != nil {
		return 0, err
	}
	for doc := range strings.SplitSeq(string(data), "\n---") {
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil || d.Kind != "Deployment" || len(d.Spec.Template.Spec.Containers) == 0 {
			continue
		}
		if q := d.Spec.Template.Spec.Containers[0].Resources.Limits.Memory(); !q.IsZero() {
			return q.Value(), nil
		}
	}
	return 0, errors.New("config/manager/manager.yaml: no Deployment with a memory limit")
}

// restartMemory starts a fresh manager next to what the API server holds (S5's slices: thousands
// of Pods of 60-150 KiB each, bound to their Nodes), as a replica restarting in a cluster that
// runs the largest slices, and reads its RSS: the highest while its caches fill and until 5 s
// after it is ready, and then.
//
//	BENCH S5-restart pods=<n> rss_peak_mib=<x> rss_mib=<x> heap_mib=<x> ready_s=<x>
func (b *bench) restartMemory(ctx context.Context, pods int) (string, error) {
	start := time.Now()
	mgr, metricsPort, probePort, err := b.startManager(ctx)
	if err != nil {
		return "", err
	}
	defer func() { _ = mgr.Process.Kill(); _ = mgr.Wait(); b.env.ServeWebhooksFrom(b.validator) }()
	var peak float64
	sample := func() {
		if rss, err := rssMiB(mgr.Process.Pid); err == nil {
			peak = max(peak, rss)
		}
	}
	readyz := "http://127.0.0.1:" + strconv.Itoa(probePort) + "/readyz"
	var ready time.Duration
	for deadline := time.Now().Add(5 * time.Minute); ready == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return "", errors.New("S5-restart: the manager did not become ready within 5 minutes")
		}
		sample()
		if ok, _ := httpOK(ctx, readyz); ok {
			ready = time.Since(start)
		}
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		sample()
	}
	rss, err := rssMiB(mgr.Process.Pid)
	if err != nil {
		return "", err
	}
	heap, err := heapMiB(ctx, metricsPort)
	if err != nil {
		return "", err
	}
	fmt.Printf("\nS5-restart: a fresh manager next to %d worker Pods: RSS %.1f MiB at most while its caches filled, %.1f MiB 5 s after ready (%.1f s); Go heap %.1f MiB\n",
		pods, peak, rss, ready.Seconds(), heap)
	return fmt.Sprintf("BENCH S5-restart pods=%d rss_peak_mib=%.1f rss_mib=%.1f heap_mib=%.1f ready_s=%.1f", pods, peak, rss, heap, ready.Seconds()), nil
}

// httpOK reports whether a GET of url answers 200.
func httpOK(ctx context.Context, url string) (bool, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}

// fillOther creates n Pods of another workload in ns, next to a RayCluster with a CPU group.
func (b *bench) fillOther(ctx context.Context, ns string, n int) error {
	other := testutil.MakeRayCluster("cpu", ns).CPUGroup("cpu", 1).ManagedByMultiKueue().Obj()
	if err := b.c.Create(ctx, other); err != nil {
		return err
	}
	return b.fill(ctx, n, func(int) *corev1.Pod {
		// Plain Pods of another workload, and CPU workers of a RayCluster.
		p := testutil.MakePod("", ns).GenerateName("web-").Label("app", "web").Obj()
		return p
	})
}

// fillTPU creates n TPU worker Pods in ns, in 16-host slices of one RayCluster.
func (b *bench) fillTPU(ctx context.Context, ns string, n int) error {
	const hosts = 16
	rc := testutil.MakeRayCluster("tpu", ns).TPUGroup("tpu", "tpu-v6e-slice", "8x8", 4, hosts, int32((n+hosts-1)/hosts)).ManagedByMultiKueue().Obj()
	if err := b.c.Create(ctx, rc); err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond)
	return b.fill(ctx, n, func(int) *corev1.Pod { return testutil.WorkerPodFor(rc, "tpu").Obj() })
}

// fill creates n Pods with 16 concurrent clients.
func (b *bench) fill(ctx context.Context, n int, pod func(int) *corev1.Pod) error {
	return b.fillObjects(ctx, n, func(i int) client.Object { return pod(i) })
}

// fillObjects creates the n objects obj returns for 0..n-1 with 16 concurrent clients.
func (b *bench) fillObjects(ctx context.Context, n int, obj func(int) client.Object) error {
	var next atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := b.c.Create(ctx, obj(i)); err != nil {
					firstErr.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (b *bench) kubeconfig() (string, error) {
	user, err := b.env.Env.AddUser(envtest.User{Name: "bench-manager", Groups: []string{"system:masters"}}, rest.CopyConfig(b.env.Config))
	if err != nil {
		return "", err
	}
	data, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp("", "bench-kubeconfig-")
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	_, err = f.Write(data)
	return f.Name(), err
}

func rssMiB(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kb / 1024, err
		}
	}
	return 0, errors.New("no VmRSS")
}

func heapMiB(ctx context.Context, port int) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(port)+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_alloc_bytes "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f / (1 << 20), err
		}
	}
	return 0, errors.New("no go_memstats_heap_alloc_bytes in the manager's metrics")
}

func waitHTTP(ctx context.Context, url string) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer within 60s", url)
}

func freePort() int {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}
