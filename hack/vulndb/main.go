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

// Command vulndb builds a local Go vulnerability database for `govulncheck -db file://<dir>` from
// the golang.org/x/vulndb module, which the Go module proxy serves (vuln.go.dev is unreachable
// here). The module ships every OSV entry under data/osv; this writes them in the layout of
// https://go.dev/security/vuln/database#api, as golang.org/x/vuln/internal/client reads it:
//
//	index/db.json       {"modified": <time>}
//	index/modules.json  [{"path": <module>, "vulns": [{"id": <id>, "modified": <time>}]}], sorted
//	index/vulns.json    [{"id": <id>, "modified": <time>, "aliases": [...]}], sorted
//	ID/<id>.json        the OSV entry, byte for byte
//
// The index leaves out each vuln's optional "fixed" version: govulncheck uses it only to skip
// fetching entries already fixed in the version it checks, and filters every fetched entry by its
// affected ranges anyway, so the findings are the same.
//
// Usage: go run ./hack/vulndb -version <golang.org/x/vulndb version> -out <dir>
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

const vulndbModule = "golang.org/x/vulndb"

// entry is the part of an OSV entry the index needs.
type entry struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Aliases  []string  `json:"aliases,omitempty"`
	Affected []struct {
		Package struct {
			Name string `json:"name"`
		} `json:"package"`
	} `json:"affected"`
}

type moduleVuln struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
}

type moduleMeta struct {
	Path  string       `json:"path"`
	Vulns []moduleVuln `json:"vulns"`
}

type vulnMeta struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Aliases  []string  `json:"aliases,omitempty"`
}

func main() {
	version := flag.String("version", "", "version of "+vulndbModule+" to build the database from")
	out := flag.String("out", "", "directory to write the database to (created atomically; a complete database there is kept)")
	flag.Parse()
	if *version == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*version, *out); err != nil {
		fmt.Fprintln(os.Stderr, "vulndb:", err)
		os.Exit(1)
	}
}

func run(version, out string) error {
	dir, modified, err := download(version)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".vulndb-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	n, err := build(filepath.Join(dir, "data", "osv"), tmp, modified)
	if err != nil {
		return err
	}
	if complete(out) {
		// Another run built the same version meanwhile: keep it, readers may be using it.
		return nil
	}
	if err := os.RemoveAll(out); err != nil { // an incomplete leftover
		return err
	}
	if err := os.Rename(tmp, out); err != nil && !complete(out) {
		return err
	}
	fmt.Fprintf(os.Stderr, "vulndb: %d entries of %s@%s (modified %s) in %s\n", n, vulndbModule, version, modified.Format(time.RFC3339), out)
	return nil
}

// complete reports whether dir holds a database: the index is written last.
func complete(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "index", "modules.json"))
	return err == nil
}

// download fetches the module through the Go module proxy (into the module cache) and returns its
// directory and its commit time. Downloading a module by version does not touch go.mod or go.sum.
func download(version string) (string, time.Time, error) {
	cmd := exec.Command("go", "mod", "download", "-json", vulndbModule+"@"+version)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	var res struct{ Dir, Info, Error string }
	if jsonErr := json.Unmarshal(stdout, &res); jsonErr != nil || res.Error != "" || err != nil {
		return "", time.Time{}, fmt.Errorf("go mod download %s@%s: %s%s: %w", vulndbModule, version, res.Error, strings.TrimSpace(stderr.String()), errors.Join(err, jsonErr))
	}
	b, err := os.ReadFile(res.Info)
	if err != nil {
		return "", time.Time{}, err
	}
	var info struct{ Time time.Time }
	if err := json.Unmarshal(b, &info); err != nil {
		return "", time.Time{}, fmt.Errorf("reading %s: %w", res.Info, err)
	}
	return res.Dir, info.Time, nil
}

// build writes the database of the OSV entries in src into dst and returns the number of entries.
// The entries of data/osv carry no modification time (the Go team's deployment sets it from git
// history), so modified (the module's commit time) stands in when an entry has none.
func build(src, dst string, modified time.Time) (int, error) {
	files, err := filepath.Glob(filepath.Join(src, "*.json"))
	if err != nil {
		return 0, err
	}
	if len(files) == 0 {
		return 0, fmt.Errorf("no OSV entries in %s", src)
	}
	for _, d := range []string{"ID", "index"} {
		if err := os.MkdirAll(filepath.Join(dst, d), 0o755); err != nil {
			return 0, err
		}
	}
	modules := map[string]*moduleMeta{}
	vulns := make([]vulnMeta, 0, len(files))
	dbModified := modified
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, err
		}
		var e entry
		if err := json.Unmarshal(b, &e); err != nil {
			return 0, fmt.Errorf("%s: %w", f, err)
		}
		if filepath.Base(f) != e.ID+".json" {
			return 0, fmt.Errorf("%s holds entry %q: OSV entries must be named <id>.json", f, e.ID)
		}
		if e.Modified.IsZero() {
			e.Modified = modified
		}
		if e.Modified.After(dbModified) {
			dbModified = e.Modified
		}
		if err := os.WriteFile(filepath.Join(dst, "ID", e.ID+".json"), b, 0o644); err != nil { //nolint:gosec // public data.
			return 0, err
		}
		vulns = append(vulns, vulnMeta{ID: e.ID, Modified: e.Modified, Aliases: e.Aliases})
		seen := map[string]bool{}
		for _, a := range e.Affected {
			path := a.Package.Name
			if path == "" || seen[path] {
				continue
			}
			seen[path] = true
			if modules[path] == nil {
				modules[path] = &moduleMeta{Path: path}
			}
			modules[path].Vulns = append(modules[path].Vulns, moduleVuln{ID: e.ID, Modified: e.Modified})
		}
	}
	mods := make([]*moduleMeta, 0, len(modules))
	for _, m := range modules {
		slices.SortFunc(m.Vulns, func(a, b moduleVuln) int { return strings.Compare(a.ID, b.ID) })
		mods = append(mods, m)
	}
	slices.SortFunc(mods, func(a, b *moduleMeta) int { return strings.Compare(a.Path, b.Path) })
	slices.SortFunc(vulns, func(a, b vulnMeta) int { return strings.Compare(a.ID, b.ID) })
	// modules.json last: its presence marks a complete database (see complete).
	for _, f := range []struct {
		name string
		v    any
	}{
		{"db.json", map[string]time.Time{"modified": dbModified}},
		{"vulns.json", vulns},
		{"modules.json", mods},
	} {
		b, err := json.Marshal(f.v)
		if err != nil {
			return 0, err
		}
		if err := os.WriteFile(filepath.Join(dst, "index", f.name), b, 0o644); err != nil { //nolint:gosec // public data.
			return 0, err
		}
	}
	return len(files), nil
}
