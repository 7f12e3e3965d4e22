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
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	tpuclaims "github.com/ray-tpu/tpu-slice-operator/internal/claims"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// probeSpec is the spec of every probe object: a slice of n hosts.
func probeSpec(n int) map[string]any {
	return map[string]any{
		"rayClusterName": "bench", "rayClusterUID": string(uuid.NewUUID()), "groupName": "tpu",
		"replicaIndex": 0, "hosts": n, "topology": "16x20x28", "accelerator": s5Accelerator,
	}
}

// readyCondition is the condition a full slice carries.
func readyCondition(n int) []any {
	return []any{map[string]any{
		"type": "Ready", "status": "True", "reason": "AllBound", "message": fmt.Sprintf("%d of %d hosts bound", n, n),
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	}}
}

// newObject creates an object of rep's CRD holding n bound claims (the create, then one status
// write that fills it).
func (p *probe) newObject(ctx context.Context, rep representation, plural string, n int) (*probeObject, error) {
	collection := fmt.Sprintf("/apis/%s/v1/namespaces/%s/%s", probeGroup, p.namespace, plural)
	o := &probeObject{collection: collection, status: true, claims: newProbeClaims(n), set: func(obj map[string]any, claims []probeClaim) error {
		obj["status"] = map[string]any{"claims": rep.encode(claims), "claimed": len(claims), "conditions": readyCondition(len(claims))}
		return nil
	}}
	body, _ := json.Marshal(map[string]any{
		"apiVersion": probeGroup + "/v1", "kind": rep.kind,
		"metadata": map[string]any{"generateName": rep.key + "-" + strconv.Itoa(n) + "-"}, "spec": probeSpec(n),
	})
	// A CRD just established may not be served by every handler yet.
	var data []byte
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if data, err = p.raw(ctx, http.MethodPost, collection, "application/json", body); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return o, p.fill(ctx, o, data)
}

// fill makes o the object the API server returned in data and writes its claims once.
func (p *probe) fill(ctx context.Context, o *probeObject, data []byte) error {
	var err error
	if o.obj, err = decode(data); err != nil {
		return err
	}
	meta, _ := o.obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	o.path = o.collection + "/" + name
	var r probeResult
	if _, err := p.write(ctx, o, updateOp(representation{}), 0, &r); err != nil {
		return fmt.Errorf("filling %s: %w", o.path, err)
	}
	return nil
}

// configMap measures, for reference, an update of a ConfigMap carrying the claims as one string.
func (p *probe) configMap(ctx context.Context, n int) error {
	collection := "/api/v1/namespaces/" + p.namespace + "/configmaps"
	o := &probeObject{collection: collection, claims: newProbeClaims(n), set: func(obj map[string]any, claims []probeClaim) error {
		obj["data"] = map[string]any{"claims": encodeText(claims)}
		return nil
	}}
	body, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"generateName": "claims-"}})
	data, err := p.raw(ctx, http.MethodPost, collection, "application/json", body)
	if err != nil {
		return err
	}
	if err := p.fill(ctx, o, data); err != nil {
		return err
	}
	r, err := p.measure(ctx, o, updateOp(representation{}), probeBudget, 0)
	r.rep, r.title = "configmap", "reference: ConfigMap, the claims as one string in data"
	p.record(r)
	return err
}

// sliceAssignment measures a status update of the operator's own TPUSliceAssignment as installed,
// built with its API types and the tests' slice builder: it follows whatever main's CRD is.
func (p *probe) sliceAssignment(ctx context.Context, n int) error {
	slice := tpuclaims.NewSlice(p.namespace, tpuv1alpha1.TPUSliceAssignmentSpec{
		RayClusterName: "probe-" + strconv.Itoa(n), RayClusterUID: uuid.NewUUID(), GroupName: "tpu",
		Hosts: int32(n), Topology: "16x20x28", Accelerator: s5Accelerator, //nolint:gosec // a few thousand hosts.
	})
	if err := p.b.c.Create(ctx, slice); err != nil {
		return err
	}
	gv := tpuv1alpha1.GroupVersion
	collection := fmt.Sprintf("/apis/%s/%s/namespaces/%s/tpusliceassignments", gv.Group, gv.Version, p.namespace)
	o := &probeObject{collection: collection, status: true, claims: newProbeClaims(n), set: setSliceClaims}
	data, err := p.raw(ctx, http.MethodGet, collection+"/"+slice.Name, "", nil)
	if err != nil {
		return err
	}
	if err := p.fill(ctx, o, data); err != nil {
		return err
	}
	r, err := p.measure(ctx, o, updateOp(representation{}), probeBudget, 0)
	r.rep, r.title = "tsa", "TPUSliceAssignment as installed (API types of this tree)"
	p.record(r)
	return err
}

// setSliceClaims sets obj's status to a TPUSliceAssignment status holding the claims, bound.
func setSliceClaims(obj map[string]any, claims []probeClaim) error {
	w := &testutil.SliceWrapper{}
	for _, c := range claims {
		w.Claim(int32(c.id), c.token, c.pod, types.UID(c.uid)) //nolint:gosec // a few thousand hosts.
	}
	data, err := json.Marshal(w.Status)
	if err != nil {
		return err
	}
	var status map[string]any
	if err := json.Unmarshal(data, &status); err != nil {
		return err
	}
	status["conditions"] = readyCondition(len(claims))
	obj["status"] = status
	return nil
}

// cpuMeter reads the CPU time of this run's kube-apiserver and etcd processes.
type cpuMeter struct{ apiserver, etcd int }

// newCPUMeter finds the processes by their command lines: the API server's secure port, etcd's
// client URL.
func newCPUMeter(b *bench) cpuMeter {
	cp := &b.env.Env.ControlPlane
	var m cpuMeter
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(data), "\x00")
		switch filepath.Base(args[0]) {
		case "kube-apiserver":
			if cp.APIServer != nil && cp.APIServer.Port != "" && strings.Contains(string(data), "--secure-port="+cp.APIServer.Port) {
				m.apiserver = pid
			}
		case "etcd":
			if cp.Etcd != nil && cp.Etcd.URL != nil && strings.Contains(string(data), cp.Etcd.URL.Host) {
				m.etcd = pid
			}
		}
	}
	if m.apiserver == 0 || m.etcd == 0 {
		fmt.Fprintf(os.Stderr, "probe: found kube-apiserver pid %d and etcd pid %d (0: not found, its CPU reads 0)\n", m.apiserver, m.etcd)
	}
	return m
}

func (m cpuMeter) read() (apiserver, etcd time.Duration) {
	return cpuTime(m.apiserver), cpuTime(m.etcd)
}

// cpuTime is a process's user and system CPU time, from /proc/<pid>/stat (clock ticks of 10 ms).
func cpuTime(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if errors.Join(err1, err2) != nil {
		return 0
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
