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
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
)

// probeObject is one object the probe writes, as the API server last returned it.
type probeObject struct {
	// path is the object's path; collection its collection's (for watches).
	path, collection string
	// status: writes go to the status subresource.
	status bool
	obj    map[string]any
	claims []probeClaim
	// set puts the claims into obj, where and as its encoding keeps them.
	set func(obj map[string]any, claims []probeClaim) error
}

func (o *probeObject) resourceVersion() string {
	meta, _ := o.obj["metadata"].(map[string]any)
	rv, _ := meta["resourceVersion"].(string)
	return rv
}

func (o *probeObject) writePath() string {
	if o.status {
		return o.path + "/status"
	}
	return o.path
}

// probeOp is one kind of write: request is write's method, content type and body with o's claims
// (claim k just changed) and resourceVersion rv.
type probeOp struct {
	name    string
	request func(o *probeObject, k int, rv string) (method, contentType string, body []byte, err error)
}

func updateOp(_ representation) probeOp {
	return probeOp{name: "update", request: func(o *probeObject, _ int, rv string) (string, string, []byte, error) {
		obj := maps.Clone(o.obj)
		meta, _ := obj["metadata"].(map[string]any)
		meta = maps.Clone(meta)
		meta["resourceVersion"] = rv
		obj["metadata"] = meta
		if err := o.set(obj, o.claims); err != nil {
			return "", "", nil, err
		}
		body, err := json.Marshal(obj)
		return http.MethodPut, "application/json", body, err
	}}
}

func fullMergePatchOp(rep representation) probeOp {
	return probeOp{name: "merge patch, all claims", request: func(o *probeObject, _ int, rv string) (string, string, []byte, error) {
		body, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": rv},
			"status":   map[string]any{"claims": rep.encode(o.claims)},
		})
		return http.MethodPatch, string(types.MergePatchType), body, err
	}}
}

func onePatchOp(rep representation) probeOp {
	return probeOp{name: "patch, one claim", request: func(o *probeObject, k int, rv string) (string, string, []byte, error) {
		contentType, body := rep.onePatch(rv, k, o.claims[k])
		return http.MethodPatch, contentType, body, nil
	}}
}

// probeResult is what one kind of write cost at one size.
type probeResult struct {
	rep, title, op string
	claims         int
	watchers       int
	writes         int
	mean, p99      time.Duration
	// objectBytes is the object as returned, bodyBytes the request.
	objectBytes, bodyBytes int
	// apiserverCPU and etcdCPU are the processes' CPU time per write (user and system), watchKiB the
	// bytes each watcher received per write.
	apiserverCPU, etcdCPU time.Duration
	watchKiB              float64
	// rvChecked: the same write with a stale resourceVersion was refused with a conflict.
	rvChecked bool
	err       string
}

func (r probeResult) line() string {
	if r.err != "" {
		return fmt.Sprintf("PROBE repr=%s claims=%d op=%q error=%q", r.rep, r.claims, r.op, r.err)
	}
	return fmt.Sprintf("PROBE repr=%s claims=%d op=%q watchers=%d writes=%d mean_ms=%.1f p99_ms=%.1f object_kib=%.1f body_kib=%.1f apiserver_cpu_ms=%.1f etcd_cpu_ms=%.1f watch_kib=%.1f rv_checked=%t",
		r.rep, r.claims, r.op, r.watchers, r.writes, ms(r.mean), ms(r.p99), float64(r.objectBytes)/1024, float64(r.bodyBytes)/1024,
		ms(r.apiserverCPU), ms(r.etcdCPU), r.watchKiB, r.rvChecked)
}

func (p *probe) record(r probeResult) {
	fmt.Println(r.line())
	p.results = append(p.results, r)
}

// measure writes o with op for at least budget (at least 20 and at most 400 writes, after 3
// warm-up writes), each giving one claim a new token, with watchers watching o's collection, and
// then checks that a write with a stale resourceVersion conflicts.
func (p *probe) measure(ctx context.Context, o *probeObject, op probeOp, budget time.Duration, watchers int) (probeResult, error) {
	r := probeResult{op: op.name, claims: len(o.claims), watchers: watchers}
	received, stopWatch := p.watch(ctx, o, watchers)
	defer stopWatch()
	const warmup = 3
	var lat []time.Duration
	var apiStart, etcdStart time.Duration
	var watchStart int64
	start := time.Now()
	for i := 0; i < warmup+400 && (i < warmup+20 || time.Since(start) < budget); i++ {
		if i == warmup {
			apiStart, etcdStart = p.cpu.read()
			watchStart, start = received.Load(), time.Now()
		}
		d, err := p.write(ctx, o, op, i%len(o.claims), &r)
		if err != nil {
			r.err = err.Error()
			return r, nil
		}
		if i >= warmup {
			lat = append(lat, d)
		}
	}
	api, etcd := p.cpu.read()
	r.writes, r.mean, r.p99 = len(lat), mean(lat), percentile(lat, 99)
	r.apiserverCPU, r.etcdCPU = (api-apiStart)/time.Duration(len(lat)), (etcd-etcdStart)/time.Duration(len(lat))
	if watchers > 0 {
		r.watchKiB = float64(received.Load()-watchStart) / float64(watchers) / float64(len(lat)) / 1024
	}
	r.rvChecked = p.staleWriteConflicts(ctx, o, op)
	return r, nil
}

// write changes claim k's token and writes o with op, timing the request alone; o becomes the
// object the API server returned.
func (p *probe) write(ctx context.Context, o *probeObject, op probeOp, k int, r *probeResult) (time.Duration, error) {
	o.claims[k].token = allocator.NewToken()
	method, contentType, body, err := op.request(o, k, o.resourceVersion())
	if err != nil {
		return 0, err
	}
	t := time.Now()
	data, err := p.raw(ctx, method, o.writePath(), contentType, body)
	d := time.Since(t)
	if err != nil {
		return 0, err
	}
	r.objectBytes, r.bodyBytes = len(data), len(body)
	o.obj, err = decode(data)
	return d, err
}

// staleWriteConflicts sends op's write with a resourceVersion older than the object's and reports
// whether the API server refused it with a conflict.
func (p *probe) staleWriteConflicts(ctx context.Context, o *probeObject, op probeOp) bool {
	rv, err := strconv.ParseInt(o.resourceVersion(), 10, 64)
	if err != nil {
		return false
	}
	o.claims[0].token = allocator.NewToken()
	method, contentType, body, err := op.request(o, 0, strconv.FormatInt(rv-1, 10))
	if err != nil {
		return false
	}
	_, err = p.raw(ctx, method, o.writePath(), contentType, body)
	return apierrors.IsConflict(err)
}

// watch starts n watches of o's collection from its current resourceVersion, reading and
// discarding every event; it returns the bytes received so far and the function that stops them.
func (p *probe) watch(ctx context.Context, o *probeObject, n int) (*atomic.Int64, func()) {
	var received atomic.Int64
	if n == 0 {
		return &received, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	for range n {
		go func() {
			s, err := p.rc.Get().AbsPath(o.collection).Param("watch", "true").Param("resourceVersion", o.resourceVersion()).Stream(ctx)
			if err != nil {
				fmt.Fprintln(os.Stderr, "probe watch:", err)
				return
			}
			defer func() { _ = s.Close() }()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				received.Add(int64(n))
				if err != nil {
					return
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	return &received, cancel
}

// profile writes o with op for probeProfile, with watchers watching, while the API server's CPU
// profile is taken, and saves it as <out-dir>/probe-<repr>-<claims>[-watched]-apiserver.pprof.
func (p *probe) profile(ctx context.Context, o *probeObject, op probeOp, watchers int) error {
	if probeProfile <= 0 {
		return nil
	}
	meta, _ := o.obj["metadata"].(map[string]any)
	name, _ := meta["generateName"].(string) // <repr>-<claims>-
	if watchers > 0 {
		name += "watched-"
	}
	path := filepath.Join(outDir, "probe-"+name+"apiserver.pprof")
	_, stopWatch := p.watch(ctx, o, watchers)
	defer stopWatch()
	done := make(chan error, 1)
	go func() {
		data, err := p.rc.Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(int(probeProfile.Seconds()))).DoRaw(ctx)
		if err == nil {
			err = os.WriteFile(path, data, 0o600)
		}
		done <- err
	}()
	var r probeResult
	for i := 0; ; i++ {
		select {
		case err := <-done:
			fmt.Printf("PROBE profile %s: %d writes with %d watchers (go tool pprof -top -cum %s)\n", path, i, watchers, path)
			return err
		default:
		}
		if _, err := p.write(ctx, o, op, i%len(o.claims), &r); err != nil {
			return err
		}
	}
}
