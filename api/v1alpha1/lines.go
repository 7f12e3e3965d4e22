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

// The stored form that ClaimList and HostList share: one JSON string, one line per worker ID,
// sorted by it, the line's fields separated by single spaces, the worker ID first.

// formatLines returns the lines of items sorted by workerID, each written by write (which writes
// the fields after the worker ID, each preceded by a space); perLine sizes the buffer. It refuses,
// naming the entry, a list that would not parse back to itself: a negative worker ID, one named
// twice, or an entry that check refuses (a field that is empty or holds a separator).
func formatLines[T any](items []T, what, twice string, workerID func(T) int32, check func(T) error,
	perLine int, write func(*strings.Builder, T)) (string, error) {
	sorted := slices.Clone(items)
	slices.SortStableFunc(sorted, func(a, b T) int { return cmp.Compare(workerID(a), workerID(b)) })
	var b strings.Builder
	b.Grow(len(sorted) * perLine)
	for i, item := range sorted {
		id := workerID(item)
		switch {
		case id < 0:
			return "", fmt.Errorf("%s: worker ID %d is negative", what, id)
		case i > 0 && workerID(sorted[i-1]) == id:
			return "", fmt.Errorf("%s: worker ID %d is %s", what, id, twice)
		}
		if err := check(item); err != nil {
			return "", fmt.Errorf("%s: worker ID %d: %w", what, id, err)
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(strconv.FormatInt(int64(id), 10))
		write(&b, item)
	}
	return b.String(), nil
}

// displayInvalid is the String form of a list that cannot be stored: its entries, each written by
// line, quoted on one line (so that a value holding a line break never reads as lines of its own
// in a log), and why.
func displayInvalid[T any](items []T, err error, line func(T) string) string {
	lines := make([]string, 0, len(items))
	for _, item := range items {
		lines = append(lines, line(item))
	}
	return fmt.Sprintf("%q (cannot be stored: %v)", strings.Join(lines, "\n"), err)
}

// lineFormat describes the lines of one list for parseLines.
type lineFormat[T any] struct {
	// what names the list in errors ("claims", "hosts"); twice says what a repeated worker ID is.
	what, twice string
	// fields are the numbers of fields a line may have, and want shows them in an error.
	fields []int
	want   string
	// item builds the entry of a line whose worker ID (fields[0]) is valid and new.
	item func(id int32, fields []string) (T, error)
}

// parseLines parses text, refusing a line with another number of fields, a worker ID that is not
// a non-negative integer in its shortest form, and a worker ID named twice. An error names the line.
func parseLines[T any](text string, f lineFormat[T]) ([]T, error) {
	out, bad := parseLinesLenient(text, f)
	if len(bad) > 0 {
		return nil, bad[0]
	}
	return out, nil
}

// parseLinesLenient parses text as parseLines does, but keeps every line that parses and returns
// an error, naming the line, for each that does not. A line naming a worker ID an earlier line
// named is refused; the earlier line is kept.
func parseLinesLenient[T any](text string, f lineFormat[T]) ([]T, []error) {
	if text == "" {
		return nil, nil
	}
	lines := strings.Split(text, "\n")
	out := make([]T, 0, len(lines))
	var bad []error
	seen := make(map[int32]bool, len(lines))
	for n, line := range lines {
		item, id, err := parseLine(line, f, seen)
		if err != nil {
			bad = append(bad, fmt.Errorf("%s line %d: %w", f.what, n+1, err))
			continue
		}
		seen[id] = true
		out = append(out, item)
	}
	return out, bad
}

// parseLine parses one line of f whose worker ID seen does not hold.
func parseLine[T any](line string, f lineFormat[T], seen map[int32]bool) (T, int32, error) {
	var none T
	fields := strings.Split(line, " ")
	if !slices.Contains(f.fields, len(fields)) {
		return none, 0, fmt.Errorf("%q: want %s", line, f.want)
	}
	id, err := strconv.ParseInt(fields[0], 10, 32)
	if err != nil || id < 0 || fields[0] != strconv.FormatInt(id, 10) {
		return none, 0, fmt.Errorf("%q: worker ID %q is not a non-negative integer", line, fields[0])
	}
	if seen[int32(id)] {
		return none, 0, fmt.Errorf("%q: worker ID %d is %s", line, id, f.twice)
	}
	item, err := f.item(int32(id), fields)
	if err != nil {
		return none, 0, fmt.Errorf("%q: %w", line, err)
	}
	return item, int32(id), nil
}

// unmarshalLines decodes the JSON string (or null) of a list and parses it with parse.
func unmarshalLines[L any](data []byte, what string, parse func(string) (L, error)) (L, error) {
	var none L
	text, err := unmarshalText(data, what)
	if err != nil {
		return none, err
	}
	return parse(text)
}

// unmarshalText decodes the JSON string (or null, as "") of a list.
func unmarshalText(data []byte, what string) (string, error) {
	if len(data) == 0 || bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return "", nil
	}
	var text string
	if err := json.Unmarshal(data, &text); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	return text, nil
}

// plainField reports whether a Pod name or UID, a node or a domain can be stored in a line: 1 to
// 253 printable ASCII characters, none of them a space. Anything else could not be parsed back
// (a space or line break splits the line, and JSON does not keep bytes that are not UTF-8).
func plainField(s string) bool {
	return s != "" && len(s) <= 253 && printable(s)
}

// printable reports whether every byte of s is printable ASCII other than a space.
func printable(s string) bool {
	for i := range len(s) {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
