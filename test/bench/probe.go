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

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// The representation probe (-probe-representations) measures, on this run's API server, what one
// resourceVersion-checked write of a slice's claims costs in each encoding of the claims, with the
// CEL rules a CRD could carry, by registering one throwaway CRD per encoding.

var (
	probeReps    bool
	probeSizes   string
	probeBudget  time.Duration
	probeProfile time.Duration
)

// probe is the state of one probe run.
type probe struct {
	b         *bench
	rc        *rest.RESTClient
	namespace string
	cpu       cpuMeter
	results   []probeResult
}

// probeRepresentations runs the probe, printing a PROBE line per result; it writes the table to
// <out-dir>/representations.md and the API server's CPU profiles next to it.
func (b *bench) probeRepresentations(ctx context.Context) error {
	sizes, err := parseSizes(probeSizes)
	if err != nil {
		return err
	}
	rc, err := rest.RESTClientFor(restConfigForRaw(b.env.Config))
	if err != nil {
		return err
	}
	ns, err := b.namespace(ctx, "probe-reps")
	if err != nil {
		return err
	}
	p := &probe{b: b, rc: rc, namespace: ns, cpu: newCPUMeter(b)}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	for _, rep := range representations() {
		if err := p.representation(ctx, rep, sizes); err != nil {
			return fmt.Errorf("%s: %w", rep.key, err)
		}
	}
	for _, n := range sizes {
		if err := p.configMap(ctx, n); err != nil {
			return fmt.Errorf("configmap: %w", err)
		}
		if err := p.sliceAssignment(ctx, n); err != nil {
			return fmt.Errorf("TPUSliceAssignment: %w", err)
		}
	}
	if err := p.fanOutAndProfiles(ctx, sizes[len(sizes)-1]); err != nil {
		return err
	}
	return p.summary(sizes)
}

func parseSizes(s string) ([]int, error) {
	var sizes []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-probe-sizes: %q is not a positive number", f)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

// representation registers rep's CRD and measures its writes at each size. A CRD the API server
// refuses (e.g. a CEL rule over its cost budget) is recorded as such.
func (p *probe) representation(ctx context.Context, rep representation, sizes []int) error {
	plural, err := p.registerCRD(ctx, rep)
	if err != nil {
		var status apierrors.APIStatus
		if !errors.As(err, &status) {
			return err
		}
		fmt.Printf("PROBE repr=%s rejected: %v\n", rep.key, err)
		p.results = append(p.results, probeResult{rep: rep.key, title: rep.title, op: "update", err: "CRD rejected: " + err.Error()})
		return nil
	}
	for _, n := range sizes {
		obj, err := p.newObject(ctx, rep, plural, n)
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			// A write the API server refuses, e.g. a CEL rule over its runtime cost budget.
			p.record(probeResult{rep: rep.key, title: rep.title, op: "update", claims: n, err: err.Error()})
			continue
		}
		if err != nil {
			return err
		}
		if err := p.measureOps(ctx, rep, obj); err != nil {
			return err
		}
	}
	return nil
}

// measureOps measures each write rep supports on obj: a status update, a merge patch carrying every
// claim, a patch of one claim.
func (p *probe) measureOps(ctx context.Context, rep representation, obj *probeObject) error {
	ops := []probeOp{updateOp(rep)}
	if rep.fullMergePatch {
		ops = append(ops, fullMergePatchOp(rep))
	}
	if rep.onePatch != nil {
		ops = append(ops, onePatchOp(rep))
	}
	for _, op := range ops {
		r, err := p.measure(ctx, obj, op, probeBudget, 0)
		if err != nil {
			return err
		}
		r.rep, r.title = rep.key, rep.title
		p.record(r)
	}
	return nil
}

// fanOutAndProfiles measures (a) and (c) at n claims without and with three watchers of the
// resource (as three operator instances watch TPUSliceAssignments), twice each, alternating, and
// takes the API server's CPU profile of each without and with the watchers.
func (p *probe) fanOutAndProfiles(ctx context.Context, n int) error {
	for _, rep := range representations() {
		if rep.key != "a" && rep.key != "c" {
			continue
		}
		plural := strings.ToLower(rep.kind) + "s"
		obj, err := p.newObject(ctx, rep, plural, n)
		if err != nil {
			return err
		}
		for _, watchers := range []int{0, 3, 0, 3} {
			r, err := p.measure(ctx, obj, updateOp(rep), probeBudget, watchers)
			if err != nil {
				return err
			}
			r.rep, r.title, r.op = rep.key, rep.title, "update (fan-out runs)"
			p.record(r)
		}
		for _, watchers := range []int{0, 3} {
			if err := p.profile(ctx, obj, updateOp(rep), watchers); err != nil {
				return err
			}
		}
	}
	return nil
}

// registerCRD creates rep's CRD and waits until it is established; it returns the resource's plural.
func (p *probe) registerCRD(ctx context.Context, rep representation) (string, error) {
	crd, err := probeCRD(rep)
	if err != nil {
		return "", err
	}
	c, err := apiextensionsClient(p.b)
	if err != nil {
		return "", err
	}
	if err := c.Create(ctx, crd); err != nil {
		return "", err
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(crd), crd); err != nil {
			return "", err
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return crd.Spec.Names.Plural, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "", fmt.Errorf("CRD %s not established within 30s", crd.Name)
}

func apiextensionsClient(b *bench) (client.Client, error) {
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return client.New(b.env.Config, client.Options{Scheme: s})
}

// probeCRD is rep's CustomResourceDefinition: namespaced, one version, a status subresource.
func probeCRD(rep representation) (*apiextensionsv1.CustomResourceDefinition, error) {
	var spec, status, root apiextensionsv1.JSONSchemaProps
	for _, part := range []struct {
		yaml string
		into *apiextensionsv1.JSONSchemaProps
	}{{rep.spec, &spec}, {rep.status, &status}, {rep.rootRules, &root}} {
		if err := yaml.Unmarshal([]byte(part.yaml), part.into); err != nil {
			return nil, fmt.Errorf("schema of %s: %w", rep.key, err)
		}
	}
	root.Type = "object"
	root.Properties = map[string]apiextensionsv1.JSONSchemaProps{
		"apiVersion": {Type: "string"}, "kind": {Type: "string"}, "metadata": {Type: "object"},
		"spec": spec, "status": status,
	}
	plural := strings.ToLower(rep.kind) + "s"
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + probeGroup},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: probeGroup, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: strings.ToLower(rep.kind), Kind: rep.kind, ListKind: rep.kind + "List"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema:       &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &root},
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
			}},
		},
	}, nil
}

// summary writes the results as a markdown table into <out-dir>/representations.md.
func (p *probe) summary(sizes []int) error {
	path := filepath.Join(outDir, "representations.md")
	if err := os.WriteFile(path, []byte(markdownTable(p.results, sizes)), 0o600); err != nil {
		return err
	}
	fmt.Printf("representation probe: %s\n", path)
	return nil
}

// raw sends one request and returns the response body.
func (p *probe) raw(ctx context.Context, method, path, contentType string, body []byte) ([]byte, error) {
	var req *rest.Request
	switch method {
	case http.MethodPost:
		req = p.rc.Post()
	case http.MethodPut:
		req = p.rc.Put()
	case http.MethodPatch:
		req = p.rc.Verb(http.MethodPatch)
	default:
		req = p.rc.Get()
	}
	req = req.AbsPath(path).SetHeader("Accept", "application/json")
	if body != nil {
		req = req.SetHeader("Content-Type", contentType).Body(body)
	}
	return req.DoRaw(ctx)
}

// decode reads a response body into a generic object.
func decode(data []byte) (map[string]any, error) {
	var obj map[string]any
	return obj, json.Unmarshal(data, &obj)
}
