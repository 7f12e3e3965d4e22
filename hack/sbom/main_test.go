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
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestBuild: the SBOM lists the main module at the release version, each other module once (its
// replacement when replaced), the standard library at the toolchain's version, and nothing the
// binary does not link.
func TestBuild(t *testing.T) {
	listed := `
{"ImportPath": "errors", "Standard": true}
{"ImportPath": "k8s.io/api/core/v1", "Module": {"Path": "k8s.io/api", "Version": "v0.37.2"}}
{"ImportPath": "k8s.io/api/apps/v1", "Module": {"Path": "k8s.io/api", "Version": "v0.37.2"}}
{"ImportPath": "example.com/old", "Module": {"Path": "example.com/old", "Version": "v1.0.0", "Replace": {"Path": "example.com/new", "Version": "v1.1.0"}}}
{"ImportPath": "github.com/ray-tpu/tpu-slice-operator/cmd", "Module": {"Path": "github.com/ray-tpu/tpu-slice-operator", "Main": true}}
`
	created := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	doc, err := build(strings.NewReader(listed), "v0.1.0", "go1.27.3", created)
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ Name, Version, PURL string }
	got := make([]row, 0, len(doc.Packages))
	for _, p := range doc.Packages {
		got = append(got, row{p.Name, p.VersionInfo, p.ExternalRefs[0].ReferenceLocator})
	}
	want := []row{
		{"github.com/ray-tpu/tpu-slice-operator", "v0.1.0", "pkg:golang/github.com/ray-tpu/tpu-slice-operator@v0.1.0"},
		{"example.com/new", "v1.1.0", "pkg:golang/example.com/new@v1.1.0"},
		{"k8s.io/api", "v0.37.2", "pkg:golang/k8s.io/api@v0.37.2"},
		{"stdlib", "v1.27.3", "pkg:golang/stdlib@v1.27.3"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("packages (-want,+got):\n%s", diff)
	}
	if n := len(doc.Relationships); n != len(want) {
		t.Errorf("%d relationships, want DESCRIBES and %d DEPENDS_ON", n, len(want)-1)
	}
	if doc.CreationInfo.Created != "2026-12-06T07:00:00Z" {
		t.Errorf("created = %q", doc.CreationInfo.Created)
	}
	if _, err := build(strings.NewReader(`{"ImportPath": "errors", "Standard": true}`), "v0.1.0", "go1.27.3", created); err == nil {
		t.Error("no main module: want an error")
	}
}
