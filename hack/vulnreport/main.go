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

// Command vulnreport reads `govulncheck -format json` from stdin, prints the vulnerabilities the
// code calls, and fails unless each is listed, with the reason it is accepted, in the allow file.
// It also fails on allow entries that no longer match a finding, so the list only ever shrinks to
// what still applies. Vulnerabilities in code that is imported or required but never called are
// counted, not listed (govulncheck's own exit status ignores them too).
//
// Allow file: one "<OSV ID> <reason>" a line; blank lines and # comments are ignored.
//
// Usage: govulncheck -format json ./... | go run ./hack/vulnreport -allow hack/govulncheck.allow
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
)

type frame struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Package  string `json:"package"`
	Function string `json:"function"`
	Receiver string `json:"receiver"`
	Position *struct {
		Filename string `json:"filename"`
		Line     int    `json:"line"`
		Column   int    `json:"column"`
	} `json:"position"`
}

type message struct {
	Config *struct {
		ScannerVersion string `json:"scanner_version"`
		DB             string `json:"db"`
		GoVersion      string `json:"go_version"`
	} `json:"config"`
	OSV *struct {
		ID      string `json:"id"`
		Summary string `json:"summary"`
	} `json:"osv"`
	Finding *struct {
		OSV          string   `json:"osv"`
		FixedVersion string   `json:"fixed_version"`
		Trace        []*frame `json:"trace"`
	} `json:"finding"`
}

// vuln is one called vulnerability: where it was found and one example path from our code.
type vuln struct {
	modules map[string]bool // "module@found (fixed in ...)"
	example string
}

func main() {
	allowPath := flag.String("allow", "", "file of accepted OSV IDs with reasons")
	flag.Parse()
	ok, err := run(os.Stdin, os.Stdout, *allowPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulnreport:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer, allowPath string) (bool, error) {
	allowed, err := readAllow(allowPath)
	if err != nil {
		return false, err
	}
	summaries := map[string]string{}
	called := map[string]*vuln{}
	notCalled := map[string]bool{}
	dec := json.NewDecoder(in)
	for {
		var m message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return false, fmt.Errorf("reading govulncheck's JSON: %w", err)
		}
		switch {
		case m.Config != nil:
			_, _ = fmt.Fprintf(out, "govulncheck %s, %s, database %s\n", m.Config.ScannerVersion, m.Config.GoVersion, m.Config.DB)
		case m.OSV != nil:
			summaries[m.OSV.ID] = m.OSV.Summary
		case m.Finding != nil && len(m.Finding.Trace) > 0:
			f := m.Finding
			if f.Trace[0].Function == "" { // imported or required, not called
				notCalled[f.OSV] = true
				continue
			}
			v := called[f.OSV]
			if v == nil {
				v = &vuln{modules: map[string]bool{}, example: example(f.Trace)}
				called[f.OSV] = v
			}
			fixed := f.FixedVersion
			if fixed == "" {
				fixed = "no fix"
			}
			v.modules[fmt.Sprintf("%s@%s (fixed in %s)", f.Trace[0].Module, f.Trace[0].Version, fixed)] = true
		}
	}
	ok := true
	ids := slices.Sorted(maps.Keys(called))
	_, _ = fmt.Fprintf(out, "%d vulnerabilities called by the code", len(ids))
	for id := range notCalled {
		if called[id] != nil {
			delete(notCalled, id)
		}
	}
	_, _ = fmt.Fprintf(out, " (%d more only in imported packages or required modules, not called)\n", len(notCalled))
	for _, id := range ids {
		v := called[id]
		status := "NOT ACCEPTED"
		if reason, found := allowed[id]; found {
			status = "accepted: " + reason
		} else {
			ok = false
		}
		_, _ = fmt.Fprintf(out, "\n%s %s\n  %s\n", id, summaries[id], status)
		for _, m := range slices.Sorted(maps.Keys(v.modules)) {
			_, _ = fmt.Fprintf(out, "  found in %s\n", m)
		}
		_, _ = fmt.Fprintf(out, "  example: %s\n", v.example)
	}
	for _, id := range slices.Sorted(maps.Keys(allowed)) {
		if called[id] == nil {
			ok = false
			_, _ = fmt.Fprintf(out, "\n%s is accepted in %s but no longer found: remove it from the list\n", id, allowPath)
		}
	}
	if !ok {
		_, _ = fmt.Fprintf(out, "\nFAIL: upgrade the module (or Go), or accept the vulnerability with a reason in %s.\n", allowPath)
	}
	return ok, nil
}

// example renders a call path from our code (the trace's last frame) to the vulnerable symbol.
func example(trace []*frame) string {
	entry, sym := trace[len(trace)-1], trace[0]
	pos := ""
	if entry.Position != nil {
		pos = fmt.Sprintf("%s:%d: ", entry.Position.Filename, entry.Position.Line)
	}
	return fmt.Sprintf("%s%s calls, via %d frames, %s", pos, symbol(entry), len(trace)-1, symbol(sym))
}

func symbol(f *frame) string {
	name := f.Function
	if f.Receiver != "" {
		name = strings.TrimPrefix(f.Receiver, "*") + "." + name
	}
	return f.Package + "." + name
}

func readAllow(path string) (map[string]string, error) {
	allowed := map[string]string{}
	if path == "" {
		return allowed, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, reason, _ := strings.Cut(line, " ")
		if reason = strings.TrimSpace(reason); reason == "" {
			return nil, fmt.Errorf("%s:%d: %s has no reason", path, n, id)
		}
		allowed[id] = reason
	}
	return allowed, sc.Err()
}
