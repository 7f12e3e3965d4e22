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

package main

import (
	"fmt"
	"strings"
)

// probeRow is one kind of write of one encoding: its results by size.
type probeRow struct {
	title, op string
	watchers  int
	bySize    map[int]probeResult
	err       string
}

// markdownTable lays the results out with one row per encoding and write, one column per size
// (mean / p99 ms), and at the largest size the object and request sizes, the API server's and
// etcd's CPU per write and whether a stale resourceVersion conflicted.
func markdownTable(results []probeResult, sizes []int) string {
	var rows []*probeRow
	index := map[string]*probeRow{}
	seen := map[string]int{}
	for _, r := range results {
		// A write measured again at the same size (the fan-out runs) gets a row of its own.
		run := fmt.Sprintf("%s|%s|%d|%d", r.rep, r.op, r.watchers, r.claims)
		seen[run]++
		key := fmt.Sprintf("%s|%s|%d|%d", r.rep, r.op, r.watchers, seen[run])
		row := index[key]
		if row == nil {
			row = &probeRow{title: r.title, op: r.op, watchers: r.watchers, bySize: map[int]probeResult{}}
			index[key] = row
			rows = append(rows, row)
		}
		if r.claims == 0 {
			row.err = r.err
			continue
		}
		row.bySize[r.claims] = r
	}
	largest := sizes[len(sizes)-1]
	var b strings.Builder
	b.WriteString("| encoding | write |")
	for _, n := range sizes {
		fmt.Fprintf(&b, " %d claims |", n)
	}
	fmt.Fprintf(&b, " object at %d | request at %d | API server CPU / write at %d | etcd CPU / write at %d | stale RV → 409 |\n|---|---|", largest, largest, largest, largest)
	b.WriteString(strings.Repeat("---|", len(sizes)+5) + "\n")
	for _, row := range rows {
		writeRow(&b, row, sizes, largest)
	}
	b.WriteString("\nCells: mean / p99 of the write's round trip in ms (p99 of 20–400 writes: the slowest few).\n")
	return b.String()
}

func writeRow(b *strings.Builder, row *probeRow, sizes []int, largest int) {
	op := row.op
	if row.watchers > 0 {
		op += fmt.Sprintf(", %d watchers", row.watchers)
	}
	fmt.Fprintf(b, "| %s | %s |", row.title, op)
	if row.err != "" {
		fmt.Fprintf(b, " %s |%s\n", strings.ReplaceAll(row.err, "|", `\|`), strings.Repeat(" |", len(sizes)+4))
		return
	}
	for _, n := range sizes {
		r, ok := row.bySize[n]
		switch {
		case !ok:
			b.WriteString(" |")
		case r.err != "":
			fmt.Fprintf(b, " error: %s |", strings.ReplaceAll(r.err, "|", `\|`))
		default:
			fmt.Fprintf(b, " %.1f / %.1f |", ms(r.mean), ms(r.p99))
		}
	}
	r, ok := row.bySize[largest]
	if !ok || r.err != "" {
		b.WriteString(strings.Repeat(" |", 5) + "\n")
		return
	}
	fmt.Fprintf(b, " %.0f KiB | %.1f KiB | %.1f ms | %.1f ms | %s |\n",
		float64(r.objectBytes)/1024, float64(r.bodyBytes)/1024, ms(r.apiserverCPU), ms(r.etcdCPU), yesNo(r.rvChecked))
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}
