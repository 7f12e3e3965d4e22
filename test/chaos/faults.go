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

package chaos

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// faults injects API faults into one operator instance's requests, at a set rate each.
type faults struct {
	mu  sync.Mutex
	rng *rand.Rand
	// conflictRate: answer 409 without forwarding; serverErrorRate: answer 500 without forwarding;
	// ghostRate: forward, then answer 503 as if the write had failed (it committed);
	// slowRate: delay the request by slowDelay.
	conflictRate, serverErrorRate, ghostRate, slowRate float64
	slowDelay                                          time.Duration
	injected                                           atomic.Int64
}

// wrap returns cfg with the faults injected into every request except watches.
func (f *faults) wrap(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &faultyTransport{next: rt, f: f} })
	return out
}

func (f *faults) roll() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.Float64()
}

type faultyTransport struct {
	next http.RoundTripper
	f    *faults
}

func (t *faultyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// Watches and discovery pass: faults hit resource requests, as a flaky API server would.
	if req.URL.Query().Get("watch") == "true" || isDiscovery(req.URL.Path) {
		return t.next.RoundTrip(req)
	}
	write := req.Method != http.MethodGet
	p := t.f.roll()
	switch {
	case write && p < t.f.conflictRate:
		t.f.injected.Add(1)
		return statusResponse(req, http.StatusConflict, metav1.StatusReasonConflict, "injected conflict"), nil
	case p < t.f.conflictRate+t.f.serverErrorRate:
		t.f.injected.Add(1)
		return statusResponse(req, http.StatusInternalServerError, metav1.StatusReasonInternalError, "injected server error"), nil
	case write && p < t.f.conflictRate+t.f.serverErrorRate+t.f.ghostRate:
		t.f.injected.Add(1)
		resp, err := t.next.RoundTrip(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		return statusResponse(req, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "injected lost response (the request was applied)"), nil
	case p < t.f.conflictRate+t.f.serverErrorRate+t.f.ghostRate+t.f.slowRate:
		t.f.injected.Add(1)
		time.Sleep(t.f.slowDelay)
	}
	return t.next.RoundTrip(req)
}

func statusResponse(req *http.Request, code int, reason metav1.StatusReason, msg string) *http.Response {
	body, _ := json.Marshal(&metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg, //nolint:gosec // HTTP codes fit.
	})
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	return &http.Response{
		StatusCode: code,
		Status:     http.StatusText(code),
		Header:     http.Header{"Content-Type": []string{"application/json"}},
		Body:       io.NopCloser(bytes.NewReader(body)),
		Request:    req,
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		ContentLength: int64(len(body)),
	}
}

func isDiscovery(path string) bool {
	switch path {
	case "/api", "/apis", "/version":
		return true
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	// /api/v1 and /apis/<group>/<version> list resources; /openapi/... serves schemas.
	return parts[0] == "openapi" || parts[0] == "api" && len(parts) == 2 || parts[0] == "apis" && len(parts) <= 3
}
