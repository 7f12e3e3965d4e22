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

package version

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestGet(t *testing.T) {
	buildInfo := func(v string) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) { return &debug.BuildInfo{Main: debug.Module{Version: v}}, true }
	}
	noBuildInfo := func() (*debug.BuildInfo, bool) { return nil, false }
	for _, tc := range []struct {
		name            string
		stamped, commit string
		read            func() (*debug.BuildInfo, bool)
		want            Info
	}{
		{"stamped by the linker", "v0.1.0", "abc123", buildInfo("(devel)"), Info{"v0.1.0", "abc123", runtime.Version()}},
		{"go install ...@v0.2.0", "", "", buildInfo("v0.2.0"), Info{"v0.2.0", "unknown", runtime.Version()}},
		{"no build information", "", "", noBuildInfo, Info{"(devel)", "unknown", runtime.Version()}},
		{"empty module version", "", "", buildInfo(""), Info{"(devel)", "unknown", runtime.Version()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, get(tc.stamped, tc.commit, tc.read)); diff != "" {
				t.Errorf("get (-want,+got):\n%s", diff)
			}
		})
	}
}
