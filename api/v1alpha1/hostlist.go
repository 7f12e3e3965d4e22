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
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
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

// MarshalJSON encodes the hosts as one string, one line per host, sorted by worker ID. It refuses
// a list that would not parse back (Format).
func (l HostList) MarshalJSON() ([]byte, error) {
	text, err := l.Format()
	if err != nil {
		return nil, err
	}
	return json.Marshal(text)
}

// Format returns the hosts as stored: one line per host, sorted by worker ID, an empty node or
// domain written as NoDomain. It refuses, with an error naming the host, a list that ParseHosts
// would not read back: a worker ID named twice or negative, or a node or domain that is not 1 to
// 253 printable ASCII characters without a space.
func (l HostList) Format() (string, error) {
	return formatLines(l, hostLines.what, hostLines.twice, func(h HostFact) int32 { return h.WorkerID }, HostFact.validate,
		64, func(b *strings.Builder, h HostFact) {
			b.WriteByte(' ')
			b.WriteString(cmp.Or(h.Node, NoDomain)) // never an empty field: the line must parse back
			b.WriteByte(' ')
			b.WriteString(cmp.Or(h.Domain, NoDomain))
			b.WriteByte(' ')
			b.WriteString(h.readiness())
		})
}

// String is the hosts as stored (Format), for logs and comparisons; a list that cannot be stored
// is shown quoted, with why.
func (l HostList) String() string {
	text, err := l.Format()
	if err != nil {
		return displayInvalid(l, err, func(h HostFact) string {
			return fmt.Sprintf("%d %s %s %s", h.WorkerID, h.Node, h.Domain, h.readiness())
		})
	}
	return text
}

func (h HostFact) readiness() string {
	if h.Ready {
		return hostReady
	}
	return hostNotReady
}

// validate reports why the host cannot be stored, nil when it can.
func (h HostFact) validate() error {
	if !plainField(cmp.Or(h.Node, NoDomain)) || !plainField(cmp.Or(h.Domain, NoDomain)) {
		return fmt.Errorf("node %q or domain %q is not 1 to 253 printable characters without a space", h.Node, h.Domain)
	}
	return nil
}

// UnmarshalJSON decodes the string form.
func (l *HostList) UnmarshalJSON(data []byte) error {
	parsed, err := unmarshalLines(data, "hosts", ParseHosts)
	if err != nil {
		return err
	}
	*l = parsed
	return nil
}

// hostLines is the line format of a HostList.
var hostLines = lineFormat[HostFact]{
	what: "hosts", twice: "named twice",
	fields: []int{4}, want: `"<workerID> <node> <domain> Ready|NotReady"`,
	item: func(id int32, fields []string) (HostFact, error) {
		if !plainField(fields[1]) || !plainField(fields[2]) {
			return HostFact{}, errors.New("a host needs its node and domain")
		}
		h := HostFact{WorkerID: id, Node: fields[1], Domain: fields[2]}
		switch fields[3] {
		case hostReady:
			h.Ready = true
		case hostNotReady:
		default:
			return HostFact{}, fmt.Errorf("readiness %q is not %s or %s", fields[3], hostReady, hostNotReady)
		}
		return h, nil
	},
}

// ParseHosts parses the string form of a HostList. It refuses a line that is not four fields, a
// worker ID that is not a non-negative integer, an empty node or domain, a readiness other than
// Ready or NotReady, and a worker ID named twice.
func ParseHosts(text string) (HostList, error) {
	return parseLines(text, hostLines)
}
