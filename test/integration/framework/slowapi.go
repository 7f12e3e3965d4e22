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

package framework

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// SlowAPI makes an operator instance see a slow API server, as through a delaying proxy: while
// it is on, every GET of the chosen resources (live reads, lists) waits Delay before it is sent,
// and the watches already open deliver nothing, so that the instance's cache falls behind and its
// reads go live. Off, it is transparent. Use it as InstanceOptions.Config (Config).
type SlowAPI struct {
	// Resources are the resource names (as in the URL path, e.g. "rayclusters") made slow.
	Resources []string
	// Delay is how long a GET waits.
	Delay time.Duration

	on atomic.Bool
}

// Set turns the slowness on or off. Turning it off releases the stalled watches.
func (s *SlowAPI) Set(on bool) { s.on.Store(on) }

// Config returns cfg with its transport wrapped by s.
func (s *SlowAPI) Config(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.WrapTransport = func(next http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodGet || !s.chosen(req.URL.Path) {
				return next.RoundTrip(req)
			}
			if req.URL.Query().Get("watch") == "true" {
				resp, err := next.RoundTrip(req)
				if err == nil {
					resp.Body = &stalledBody{ReadCloser: resp.Body, slow: &s.on, ctx: req.Context()}
				}
				return resp, err
			}
			if s.on.Load() {
				select {
				case <-time.After(s.Delay):
				case <-req.Context().Done():
					return nil, req.Context().Err()
				}
			}
			return next.RoundTrip(req)
		})
	}
	return out
}

func (s *SlowAPI) chosen(path string) bool {
	for _, r := range s.Resources {
		if strings.Contains(path, "/"+r) {
			return true
		}
	}
	return false
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// stalledBody holds back a watch's events while slow is on.
type stalledBody struct {
	io.ReadCloser
	slow *atomic.Bool
	ctx  context.Context
}

// Read returns what the watch sent only once slow is off: an event that arrives while it is on
// (the informer is always waiting in Read) is held back too.
func (b *stalledBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	for b.slow.Load() {
		select {
		case <-b.ctx.Done():
			return 0, b.ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return n, err
}
