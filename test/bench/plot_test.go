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
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSamplesCSVRoundTripAndPlot(t *testing.T) {
	lat := make([]time.Duration, 0, 2*64+128)
	for i := range 2 * 64 {
		lat = append(lat, time.Duration(10+i%64)*time.Millisecond)
	}
	now := samplesOf(64, lat)
	if got := now[65]; got.slice != 1 || got.position != 1 || got.ms != 11 {
		t.Fatalf("sample 65 = %+v, want slice 1, position 1, 11 ms", got)
	}
	big := make([]time.Duration, 128)
	for i := range big {
		big[i] = 20 * time.Millisecond
	}
	now = append(now, samplesOf(128, big)...)

	dir := t.TempDir()
	if err := writePlot(dir, now, ""); err != nil {
		t.Fatal(err)
	}
	back, err := readCSV(filepath.Join(dir, "latency.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back, now) {
		t.Fatalf("CSV round trip changed the samples: %d read, %d written", len(back), len(now))
	}
	if got := sizes(back); !slices.Equal(got, []int32{64, 128}) {
		t.Fatalf("sizes = %v", got)
	}
	// The 64-host curve is the mean of both slices per position, unsmoothed (window 1).
	if c := curve(back, 64); len(c) != 64 || c[0].X != 1 || c[0].Y != 10 || c[63].Y != 73 {
		t.Fatalf("64-host curve: %d points, first %+v, last %+v", len(c), c[0], c[len(c)-1])
	}

	// Overlaying the run on itself as "before" draws dashed curves too.
	if err := writePlot(dir, now, filepath.Join(dir, "latency.csv")); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "latency.svg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"64 hosts (before)", "128 hosts", "stroke-dasharray"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("plot has no %q", want)
		}
	}
}
