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
	"flag"
	"io"
	"testing"
	"time"

	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
)

// TestParseReservationWindow: reservations need one holder per worker group, which only claim
// forwarding gives several replicas, so without it they are off unless the flag is given
// (docs/spec.md §3.5).
func TestParseReservationWindow(t *testing.T) {
	cases := map[string]struct {
		args        []string
		want        time.Duration
		wantReserve bool // reserving without forwarding
	}{
		"forwarding, the default window":         {args: []string{"--claim-forwarding"}, want: allocator.DefaultReservationWindow},
		"forwarding, a window given":             {args: []string{"--claim-forwarding", "--claim-reservation-window=1s"}, want: time.Second},
		"forwarding, reservations turned off":    {args: []string{"--claim-forwarding", "--claim-reservation-window=0"}, want: -1},
		"no forwarding: off by default":          {args: nil, want: -1},
		"no forwarding, forwarding set false":    {args: []string{"--claim-forwarding=false"}, want: -1},
		"no forwarding, a window given":          {args: []string{"--claim-reservation-window=2s"}, want: 2 * time.Second, wantReserve: true},
		"no forwarding, the window given before": {args: []string{"--claim-reservation-window=500ms", "--leader-elect"}, want: 500 * time.Millisecond, wantReserve: true},
		"no forwarding, reservations turned off": {args: []string{"--claim-reservation-window=0"}, want: -1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f, err := parse(tc.args)
			if err != nil {
				t.Fatalf("Parse(%q) error = %v", tc.args, err)
			}
			if got := f.Operator.ReservationWindow; got != tc.want {
				t.Errorf("Parse(%q): ReservationWindow = %v, want %v", tc.args, got, tc.want)
			}
			if got := f.ReservingAlone(); got != tc.wantReserve {
				t.Errorf("Parse(%q): ReservingAlone() = %v, want %v", tc.args, got, tc.wantReserve)
			}
		})
	}
}

func TestParseRefusesABadWindow(t *testing.T) {
	for _, arg := range []string{"--claim-reservation-window=-1s", "--claim-reservation-window=soon"} {
		if _, err := parse([]string{arg}); err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", arg)
		}
	}
}

// parse binds the manager's flags on a fresh flag set and parses args with them.
func parse(args []string) (*Flags, error) {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := &Flags{}
	f.Bind(fs)
	return f, f.Parse(fs, args)
}
