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

// Command sbom writes an SPDX 2.3 JSON software bill of materials of the manager binary from the
// module graph: the main module, every module that provides a package linked into ./cmd (as
// `go list -deps` resolves them, replacements applied) and the Go standard library of the
// toolchain that builds it. `make release` writes it to dist/sbom.spdx.json.
//
// Usage: go run ./hack/sbom -version v0.1.0 [-created 2026-12-06T00:00:00Z] [packages] > sbom.spdx.json
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// module is what `go list -deps -json` says about a package's module.
type module struct {
	Path    string
	Version string
	Main    bool
	Replace *module
}

// listedPackage is one package of `go list -deps -json`.
type listedPackage struct {
	ImportPath string
	Standard   bool
	Module     *module
}

func main() {
	version := flag.String("version", "", "the release version of the main module (v0.1.0)")
	created := flag.String("created", "", "the document's creation time, RFC 3339 (default: now)")
	flag.Parse()
	pkgs := flag.Args()
	if len(pkgs) == 0 {
		pkgs = []string{"./cmd"}
	}
	if *version == "" {
		fail(errors.New("-version is required"))
	}
	when := time.Now().UTC()
	if *created != "" {
		t, err := time.Parse(time.RFC3339, *created)
		if err != nil {
			fail(err)
		}
		when = t.UTC()
	}
	listed, err := exec.Command("go", append([]string{"list", "-deps", "-json"}, pkgs...)...).Output()
	if err != nil {
		fail(fmt.Errorf("go list: %w", err))
	}
	goVersion, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		fail(fmt.Errorf("go env GOVERSION: %w", err))
	}
	doc, err := build(bytes.NewReader(listed), *version, strings.TrimSpace(string(goVersion)), when)
	if err != nil {
		fail(err)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "sbom:", err)
	os.Exit(1)
}

// SPDX 2.3 JSON, the fields this document uses.
type (
	document struct {
		SPDXVersion       string         `json:"spdxVersion"`
		DataLicense       string         `json:"dataLicense"`
		SPDXID            string         `json:"SPDXID"`
		Name              string         `json:"name"`
		DocumentNamespace string         `json:"documentNamespace"`
		CreationInfo      creationInfo   `json:"creationInfo"`
		Packages          []spdxPackage  `json:"packages"`
		Relationships     []relationship `json:"relationships"`
	}
	creationInfo struct {
		Created  string   `json:"created"`
		Creators []string `json:"creators"`
	}
	spdxPackage struct {
		Name             string        `json:"name"`
		SPDXID           string        `json:"SPDXID"`
		VersionInfo      string        `json:"versionInfo"`
		DownloadLocation string        `json:"downloadLocation"`
		FilesAnalyzed    bool          `json:"filesAnalyzed"`
		ExternalRefs     []externalRef `json:"externalRefs"`
	}
	externalRef struct {
		ReferenceCategory string `json:"referenceCategory"`
		ReferenceType     string `json:"referenceType"`
		ReferenceLocator  string `json:"referenceLocator"`
	}
	relationship struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	}
)

// build reads the JSON stream of `go list -deps -json` and returns the SBOM: the main module at
// version, described by the document, depending on every other module (its replacement when
// replaced) and on the standard library of goVersion (go1.27.3).
func build(listed io.Reader, version, goVersion string, created time.Time) (*document, error) {
	var main string
	deps := map[string]string{} // module path -> version
	stdlib := false
	dec := json.NewDecoder(listed)
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("reading go list's output: %w", err)
		}
		switch {
		case p.Standard:
			stdlib = true
		case p.Module == nil:
			return nil, fmt.Errorf("package %s has no module", p.ImportPath)
		case p.Module.Main:
			main = p.Module.Path
		default:
			m := p.Module
			if m.Replace != nil {
				m = m.Replace
			}
			deps[m.Path] = m.Version
		}
	}
	if main == "" {
		return nil, errors.New("no package of the main module in go list's output")
	}
	root := pkg(main, version)
	doc := &document{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              main + "@" + version,
		DocumentNamespace: "https://" + main + "/sbom/" + version,
		CreationInfo:      creationInfo{Created: created.Format(time.RFC3339), Creators: []string{"Tool: tpu-slice-operator hack/sbom"}},
		Packages:          []spdxPackage{root},
		Relationships:     []relationship{{"SPDXRef-DOCUMENT", "DESCRIBES", root.SPDXID}},
	}
	paths := make([]string, 0, len(deps))
	for p := range deps {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	if stdlib {
		paths = append(paths, "stdlib")
		deps["stdlib"] = "v" + strings.TrimPrefix(goVersion, "go")
	}
	for _, p := range paths {
		dep := pkg(p, deps[p])
		doc.Packages = append(doc.Packages, dep)
		doc.Relationships = append(doc.Relationships, relationship{root.SPDXID, "DEPENDS_ON", dep.SPDXID})
	}
	return doc, nil
}

// pkg is the SPDX package of a Go module, with its package URL (purl).
func pkg(path, version string) spdxPackage {
	id := strings.NewReplacer("/", "-", ".", "-", "~", "-", "_", "-").Replace(path)
	if version != "" {
		id += "-" + strings.NewReplacer(".", "-", "+", "-", "_", "-").Replace(version)
	}
	purl := "pkg:golang/" + path
	if version != "" {
		purl += "@" + version
	}
	return spdxPackage{
		Name: path, SPDXID: "SPDXRef-Package-" + id, VersionInfo: version,
		DownloadLocation: "NOASSERTION", FilesAnalyzed: false,
		ExternalRefs: []externalRef{{"PACKAGE-MANAGER", "purl", purl}},
	}
}
