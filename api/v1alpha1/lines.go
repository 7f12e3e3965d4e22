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
// the fields after the worker ID, each preceded by a space); perLine sizes the buffer.
func formatLines[T any](items []T, workerID func(T) int32, perLine int, write func(*strings.Builder, T)) string {
	sorted := slices.Clone(items)
	slices.SortStableFunc(sorted, func(a, b T) int { return cmp.Compare(workerID(a), workerID(b)) })
	var b strings.Builder
	b.Grow(len(sorted) * perLine)
	for i, item := range sorted {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(strconv.FormatInt(int64(workerID(item)), 10))
		write(&b, item)
	}
	return b.String()
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
	if text == "" {
		return nil, nil
	}
	lines := strings.Split(text, "\n")
	out := make([]T, 0, len(lines))
	seen := make(map[int32]bool, len(lines))
	for n, line := range lines {
		fields := strings.Split(line, " ")
		if !slices.Contains(f.fields, len(fields)) {
			return nil, fmt.Errorf("%s line %d: %q: want %s", f.what, n+1, line, f.want)
		}
		id, err := strconv.ParseInt(fields[0], 10, 32)
		if err != nil || id < 0 || fields[0] != strconv.FormatInt(id, 10) {
			return nil, fmt.Errorf("%s line %d: worker ID %q is not a non-negative integer", f.what, n+1, fields[0])
		}
		if seen[int32(id)] {
			return nil, fmt.Errorf("%s line %d: worker ID %d is %s", f.what, n+1, id, f.twice)
		}
		seen[int32(id)] = true
		item, err := f.item(int32(id), fields)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", f.what, n+1, err)
		}
		out = append(out, item)
	}
	return out, nil
}

// unmarshalLines decodes the JSON string (or null) of a list and parses it with parse.
func unmarshalLines[L any](data []byte, what string, parse func(string) (L, error)) (L, error) {
	var none L
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return none, nil
	}
	var text string
	if err := json.Unmarshal(data, &text); err != nil {
		return none, fmt.Errorf("%s: %w", what, err)
	}
	return parse(text)
}
