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

package managerflags

import (
	"fmt"
	"strconv"
	"strings"
)

// MemoryLimitEnv holds the container's memory limit in bytes (downward API, resourceFieldRef
// limits.memory); empty or absent when the container has none.
const MemoryLimitEnv = "MEMORY_LIMIT"

// memoryLimitShare is the part of the container's memory limit the Go heap may use before the
// garbage collector works harder: the rest is for stacks, buffers and the runtime.
const memoryLimitShare = 0.9

// SoftMemoryLimit returns the soft memory limit of the Go runtime (runtime/debug.SetMemoryLimit)
// for a container whose limit getenv(MemoryLimitEnv) names, and whether to set one. An explicit
// GOMEMLIMIT wins: the runtime already applies it. Without a limit the runtime's default (none)
// stays.
//
// Without a soft limit the collector lets the heap grow to twice what is live before it runs. A
// replica that starts next to the largest slices decodes thousands of Pods of 60-150 KiB each
// (their env lists every host) while its caches fill, and can reach the container's limit on
// garbage alone (docs/performance.md, S5-restart).
func SoftMemoryLimit(getenv func(string) string) (int64, bool, error) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, false, nil
	}
	v := strings.TrimSpace(getenv(MemoryLimitEnv))
	if v == "" {
		return 0, false, nil
	}
	limit, err := strconv.ParseInt(v, 10, 64)
	if err != nil || limit <= 0 {
		return 0, false, fmt.Errorf("$%s=%q is not a positive number of bytes", MemoryLimitEnv, v)
	}
	return int64(float64(limit) * memoryLimitShare), true, nil
}
