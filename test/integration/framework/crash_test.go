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
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// recordingServer is a webhook.Server that keeps the handler registered last.
type recordingServer struct {
	webhook.Server
	hook http.Handler
}

func (s *recordingServer) Register(_ string, hook http.Handler) { s.hook = hook }

// TestSeverableServerAnswersNothingOnceCrashed checks that a crashed instance's webhook server
// answers no request, an admission or a forwarded claim: the connection closes with no response,
// as at a killed process's socket, while before the crash the hook answers.
func TestSeverableServerAnswersNothingOnceCrashed(t *testing.T) {
	var severed atomic.Bool
	inner := &recordingServer{}
	severableServer{Server: inner, severed: &severed}.Register("/mutate", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "answered")
	}))
	srv := httptest.NewServer(inner.hook)
	defer srv.Close()

	resp, err := srv.Client().Get(srv.URL + "/mutate")
	if err != nil {
		t.Fatalf("before the crash: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || string(body) != "answered" {
		t.Fatalf("before the crash: got %q, %v; want the hook's answer", body, err)
	}

	severed.Store(true)
	resp, err = srv.Client().Get(srv.URL + "/mutate")
	if err == nil {
		_ = resp.Body.Close()
		t.Fatalf("after the crash: got an answer, %s; want the connection closed with none", resp.Status)
	}
}
