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
	"encoding/csv"
	"errors"
	"fmt"
	"image/color"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// sample is the latency of one create at its Pod's position in its slice.
type sample struct {
	hosts    int32
	slice    int
	position int
	ms       float64
}

// samplesOf returns the samples of a sequential run of slices of hosts Pods each: the i-th create
// is Pod i%hosts of slice i/hosts, as the claims fill the lowest slice first.
func samplesOf(hosts int32, lat []time.Duration) []sample {
	out := make([]sample, len(lat))
	for i, d := range lat {
		out[i] = sample{hosts: hosts, slice: i / int(hosts), position: i % int(hosts), ms: ms(d)}
	}
	return out
}

var csvHeader = []string{"hosts", "slice", "position", "latency_ms"}

// writeCSV writes the samples to path, one row per create.
func writeCSV(path string, samples []sample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(csvHeader)
	for _, s := range samples {
		_ = w.Write([]string{strconv.Itoa(int(s.hosts)), strconv.Itoa(s.slice), strconv.Itoa(s.position), strconv.FormatFloat(s.ms, 'f', 3, 64)})
	}
	w.Flush()
	return errors.Join(w.Error(), f.Close())
}

// readCSV reads samples that writeCSV wrote.
func readCSV(path string) ([]sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	r := csv.NewReader(f)
	r.FieldsPerRecord = len(csvHeader)
	var out []sample
	for line := 1; ; line++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if line == 1 && slices.Equal(rec, csvHeader) {
			continue
		}
		s, err := parseSample(rec)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out = append(out, s)
	}
}

func parseSample(rec []string) (sample, error) {
	hosts, err1 := strconv.ParseInt(rec[0], 10, 32)
	slice, err2 := strconv.Atoi(rec[1])
	pos, err3 := strconv.Atoi(rec[2])
	v, err4 := strconv.ParseFloat(rec[3], 64)
	return sample{hosts: int32(hosts), slice: slice, position: pos, ms: v}, errors.Join(err1, err2, err3, err4)
}

// curve is the latency by position in the slice (from 1, for the log scale) for one slice size: per
// position the mean over the slices of the run, smoothed by a centered moving mean over hosts/64
// positions.
func curve(samples []sample, hosts int32) plotter.XYs {
	sum, count := make([]float64, hosts), make([]int, hosts)
	for _, s := range samples {
		if s.hosts == hosts && s.position < int(hosts) {
			sum[s.position] += s.ms
			count[s.position]++
		}
	}
	window := max(1, int(hosts)/64)
	var xys plotter.XYs
	for p := range int(hosts) {
		var total float64
		var n int
		for q := max(0, p-window/2); q <= min(int(hosts)-1, p+window/2); q++ {
			total += sum[q]
			n += count[q]
		}
		if n > 0 {
			xys = append(xys, plotter.XY{X: float64(p + 1), Y: total / float64(n)})
		}
	}
	return xys
}

// sizes returns the slice sizes the samples cover, ascending.
func sizes(samples ...[]sample) []int32 {
	set := map[int32]bool{}
	for _, ss := range samples {
		for _, s := range ss {
			set[s.hosts] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// plotLatency draws create latency against the Pod's position in its slice, one color per slice
// size: this run's creates as dots and their smoothed curve as a solid line, before's curve dashed.
func plotLatency(path string, now, before []sample) error {
	p := plot.New()
	p.Title.Text = "Pod create latency by the Pod's position in its slice"
	p.X.Label.Text = "position of the Pod in its slice, in the order of creation (1 = first; log scale)"
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	p.Y.Label.Text = "create latency (ms)"
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	top := yTop(now, before)
	p.Y.Min, p.Y.Max = 0, top
	for i, hosts := range sizes(now, before) {
		c := palette[i%len(palette)]
		if err := addRun(p, now, hosts, c, top, false); err != nil {
			return err
		}
		if err := addRun(p, before, hosts, c, top, true); err != nil {
			return err
		}
	}
	return p.Save(10*vg.Inch, 6*vg.Inch, path)
}

// addRun adds one run's samples of one slice size to p: the curve, and for this run the dots below
// top (the ones above are counted in the legend).
func addRun(p *plot.Plot, samples []sample, hosts int32, c color.Color, top float64, dashed bool) error {
	xys := curve(samples, hosts)
	if len(xys) == 0 {
		return nil
	}
	line, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	line.Color, line.Width = c, vg.Points(1.5)
	label := fmt.Sprintf("%d hosts", hosts)
	if dashed {
		line.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
		p.Add(line)
		p.Legend.Add(label+" (before)", line)
		return nil
	}
	var dots plotter.XYs
	above := 0
	for _, s := range samples {
		switch {
		case s.hosts != hosts:
		case s.ms > top:
			above++
		default:
			dots = append(dots, plotter.XY{X: float64(s.position + 1), Y: s.ms})
		}
	}
	scatter, err := plotter.NewScatter(dots)
	if err != nil {
		return err
	}
	faint := color.NRGBAModel.Convert(c).(color.NRGBA)
	faint.A = 0x60
	scatter.GlyphStyle = draw.GlyphStyle{Color: faint, Radius: vg.Points(1), Shape: draw.CircleGlyph{}}
	p.Add(scatter, line)
	if above > 0 {
		label += fmt.Sprintf(" (%d creates above %.0f ms not shown)", above, top)
	}
	p.Legend.Add(label, line)
	return nil
}

// yTop is the top of the latency axis: above every curve and the 99.5th percentile of the creates,
// so that a few outliers do not flatten the picture.
func yTop(runs ...[]sample) float64 {
	var all []float64
	var top float64
	for _, run := range runs {
		for _, hosts := range sizes(run) {
			for _, xy := range curve(run, hosts) {
				top = math.Max(top, xy.Y)
			}
		}
		for _, s := range run {
			all = append(all, s.ms)
		}
	}
	if len(all) > 0 {
		slices.Sort(all)
		top = math.Max(top, all[int(float64(len(all)-1)*0.995)])
	}
	return math.Max(1, top*1.1)
}

// writePlot writes this run's samples as CSV and the plot (with before's curves, if any) as SVG into
// dir, and prints their paths.
func writePlot(dir string, now []sample, beforePath string) error {
	var before []sample
	if beforePath != "" {
		var err error
		if before, err = readCSV(beforePath); err != nil {
			return fmt.Errorf("reading -plot-before: %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	csvPath, svgPath := filepath.Join(dir, "latency.csv"), filepath.Join(dir, "latency.svg")
	if err := writeCSV(csvPath, now); err != nil {
		return err
	}
	if err := plotLatency(svgPath, now, before); err != nil {
		return err
	}
	fmt.Printf("latency by position: %s (per-Pod CSV %s)\n", svgPath, csvPath)
	return nil
}
