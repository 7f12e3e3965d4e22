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

package v1alpha1

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The words of a host line's readiness field.
const (
	hostReady    = "Ready"
	hostNotReady = "NotReady"
	// NoDomain stands, in a host line, for a node that has no value of the slice's placement key
	// (the label is missing, or the Node is not known). A label value never is "-": it must begin
	// and end with a letter or digit.
	NoDomain = "-"
)

// HostFact is what the reconciler observed of one scheduled host of a slice (docs/spec.md §11).
type HostFact struct {
	// WorkerID is the host's TPU_WORKER_ID; its Pod is the claim of that ID in status.workers.
	WorkerID int32
	// Node is the name of the Node the host's Pod is bound to (spec.nodeName).
	Node string
	// Domain is the value of the slice's placement key on that Node, NoDomain when it has none.
	Domain string
	// Ready reports whether the Pod's Ready condition is True.
	Ready bool
}

// HostList is the per-host facts of a slice, one per worker ID whose Pod is bound to a node. It is
// stored as one string with one line per host, sorted by worker ID:
//
//	<workerID> <node> <domain> Ready|NotReady
//
// One string for the reason status.workers is one (docs/design.md, "How claims are stored"): the
// API server's work on a status update grows with its number of fields. Only the reconciler writes
// it; the allocator's writes carry it over unchanged.
type HostList []HostFact

// MarshalJSON encodes the hosts as one string, one line per host, sorted by worker ID.
func (l HostList) MarshalJSON() ([]byte, error) {
	return json.Marshal(l.String())
}

// String is the hosts as stored: one line per host, sorted by worker ID.
func (l HostList) String() string {
	sorted := slices.Clone(l)
	slices.SortStableFunc(sorted, func(a, b HostFact) int { return cmp.Compare(a.WorkerID, b.WorkerID) })
	var b strings.Builder
	b.Grow(len(sorted) * 64)
	for i, h := range sorted {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(strconv.FormatInt(int64(h.WorkerID), 10))
		b.WriteByte(' ')
		b.WriteString(cmp.Or(h.Node, NoDomain)) // never an empty field: the line must parse back
		b.WriteByte(' ')
		b.WriteString(cmp.Or(h.Domain, NoDomain))
		b.WriteByte(' ')
		if h.Ready {
			b.WriteString(hostReady)
		} else {
			b.WriteString(hostNotReady)
		}
	}
	return b.String()
}

// UnmarshalJSON decodes the string form.
func (l *HostList) UnmarshalJSON(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		*l = nil
		return nil
	}
	var text string
	if err := json.Unmarshal(data, &text); err != nil {
		return fmt.Errorf("hosts: %w", err)
	}
	parsed, err := ParseHosts(text)
	if err != nil {
		return err
	}
	*l = parsed
	return nil
}

// ParseHosts parses the string form of a HostList. It refuses a line that is not four fields, a
// worker ID that is not a non-negative integer, an empty node or domain, a readiness other than
// Ready or NotReady, and a worker ID named twice.
func ParseHosts(text string) (HostList, error) {
	if text == "" {
		return nil, nil
	}
	lines := strings.Split(text, "\n")
	out := make(HostList, 0, len(lines))
	seen := make(map[int32]bool, len(lines))
	for n, line := range lines {
		fields := strings.Split(line, " ")
		if len(fields) != 4 {
			return nil, fmt.Errorf("hosts line %d: %q: want \"<workerID> <node> <domain> Ready|NotReady\"", n+1, line)
		}
		id, err := strconv.ParseInt(fields[0], 10, 32)
		if err != nil || id < 0 || fields[0] != strconv.FormatInt(id, 10) {
			return nil, fmt.Errorf("hosts line %d: worker ID %q is not a non-negative integer", n+1, fields[0])
		}
		if seen[int32(id)] {
			return nil, fmt.Errorf("hosts line %d: worker ID %d is named twice", n+1, id)
		}
		seen[int32(id)] = true
		if !plainField(fields[1]) || !plainField(fields[2]) {
			return nil, fmt.Errorf("hosts line %d: a host needs its node and domain", n+1)
		}
		h := HostFact{WorkerID: int32(id), Node: fields[1], Domain: fields[2]}
		switch fields[3] {
		case hostReady:
			h.Ready = true
		case hostNotReady:
		default:
			return nil, fmt.Errorf("hosts line %d: readiness %q is not %s or %s", n+1, fields[3], hostReady, hostNotReady)
		}
		out = append(out, h)
	}
	return out, nil
}
