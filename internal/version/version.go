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

// Package version is the operator's release version and the commit it was built from, stamped at
// build time (`make build`, `make release`, the Dockerfile):
//
//	go build -ldflags "-X github.com/ray-tpu/tpu-slice-operator/internal/version.version=v0.1.0 \
//	  -X github.com/ray-tpu/tpu-slice-operator/internal/version.commit=<sha>"
//
// A binary built without them (go run, go test) reports the main module's version from its build
// information: "(devel)" in a clone, the tag with `go install ...@v0.1.0`.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by the linker (-X); empty when not stamped.
var (
	version string
	commit  string
)

// Info is what a binary reports about its build.
type Info struct {
	// Version is the release (v0.1.0), or the main module's version when not stamped.
	Version string
	// Commit is the git commit the binary was built from, "unknown" when not stamped.
	Commit string
	// GoVersion is the Go toolchain that built it.
	GoVersion string
}

// Get returns the running binary's Info.
func Get() Info {
	return get(version, commit, debug.ReadBuildInfo)
}

func get(stamped, stampedCommit string, read func() (*debug.BuildInfo, bool)) Info {
	info := Info{Version: stamped, Commit: stampedCommit, GoVersion: runtime.Version()}
	if info.Version == "" {
		info.Version = "(devel)"
		if bi, ok := read(); ok && bi.Main.Version != "" {
			info.Version = bi.Main.Version
		}
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
}

// String is the line `manager --version` prints.
func (i Info) String() string {
	return fmt.Sprintf("tpu-slice-operator %s (commit %s, %s)", i.Version, i.Commit, i.GoVersion)
}
