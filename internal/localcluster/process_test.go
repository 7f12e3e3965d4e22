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

package localcluster

import (
	"runtime"
	"testing"
	"time"
)

func TestParseStatCPUTime(t *testing.T) {
	testCases := map[string]struct {
		stat    string
		want    time.Duration
		wantErr bool
	}{
		"utime and stime add up, in hundredths of a second": {
			stat: "4242 (kube-scheduler) S 1 4242 4242 0 -1 4194560 9387 0 0 0 1234 56 0 0 20 0 14 0 123 0 0",
			want: 12900 * time.Millisecond,
		},
		"a command name with spaces and parentheses does not shift the fields": {
			stat: "7 (a) b (c) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 1 0 0",
			want: 70 * time.Millisecond,
		},
		"no command name is an error": {
			stat:    "7 a R 1",
			wantErr: true,
		},
		"too few fields is an error": {
			stat:    "7 (a) R 1 7 7 0 -1 0 0 0 0 0 3",
			wantErr: true,
		},
		"a field that is not a number is an error": {
			stat:    "7 (a) R 1 7 7 0 -1 0 0 0 0 0 x 4 0 0 20",
			wantErr: true,
		},
	}
	for name, tc := range testCases {
		t.Run(name, func(t *testing.T) {
			got, err := parseStatCPUTime(tc.stat)
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("parseStatCPUTime() error = %v, want error %t", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("parseStatCPUTime() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCPUTime reads the CPU time of a component that spins for a while: it grows, and it is read
// for the named component only.
func TestCPUTime(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("CPU time is read from /proc")
	}
	dir := t.TempDir()
	p, err := startProcess(dir, "spinner", "/bin/sh", "-c", `i=0; while [ $i -lt 2000000 ]; do i=$((i+1)); done; exec sleep 60`)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{processes: []*process{p}}
	t.Cleanup(func() { _ = c.Stop() })
	var got time.Duration
	deadline := time.Now().Add(20 * time.Second)
	for got < 100*time.Millisecond && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if got, err = c.CPUTime("spinner"); err != nil {
			t.Fatalf("CPUTime(spinner): %v", err)
		}
	}
	if got < 100*time.Millisecond {
		t.Errorf("CPUTime(spinner) = %v after spinning, want at least 100ms", got)
	}
	if _, err := c.CPUTime("kube-scheduler"); err == nil {
		t.Error("CPUTime(kube-scheduler) of a cluster without it: want an error")
	}
}
