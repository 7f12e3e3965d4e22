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

package forward

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
)

const serviceName = "tpu-slice-operator-webhook-service.tpu-slice-operator-system.svc"

// newCert returns a self-signed serving certificate for the webhook Service's name, as every
// replica of one install serves.
func newCert(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: serviceName},
		DNSNames:     []string{serviceName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// forwards is how many claims of the given result r's metrics counted.
func forwards(r *Router, result string) int {
	return int(metrics.Value(r.m.Forwards.WithLabelValues(result)))
}

// fakeClaimer records the requests it is asked and answers with assignment or err.
type fakeClaimer struct {
	mu         sync.Mutex
	requests   []allocator.Request
	assignment allocator.Assignment
	err        error
}

func (f *fakeClaimer) Claim(_ context.Context, req allocator.Request) (allocator.Assignment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req)
	return f.assignment, f.err
}

func (f *fakeClaimer) tokens() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, len(f.requests))
	for i, r := range f.requests {
		out[i] = r.Claim.Token
	}
	return out
}

func request() allocator.Request {
	return allocator.Request{
		Namespace: "team-a", ClusterName: "rc", ClusterUID: "uid-1", GroupName: "tpu",
		Hosts: 4, Topology: "4x4", Accelerator: "tpu-v6e-slice",
	}
}

// owner is a replica that serves forwarded claims with cert, answering through local; wrap, when
// set, sees each request first.
type owner struct {
	router *Router
	local  *fakeClaimer
	server *httptest.Server
	auth   []string
}

func startOwner(t *testing.T, cert tls.Certificate, local *fakeClaimer) *owner {
	t.Helper()
	o := &owner{local: local}
	o.router = NewRouter(local, NewPeers("owner"), Options{Timeout: 5 * time.Second, Log: logr.Discard(), Metrics: metrics.New()})
	var mu sync.Mutex
	o.server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		o.auth = append(o.auth, r.Header.Get("Authorization"))
		mu.Unlock()
		if r.URL.Path != Path {
			http.NotFound(w, r)
			return
		}
		o.router.ServeHTTP(w, r)
	}))
	o.server.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	o.server.StartTLS()
	t.Cleanup(o.server.Close)
	return o
}

func (o *owner) addr() string { return strings.TrimPrefix(o.server.URL, "https://") }

func newCaller(cert tls.Certificate, local Local, members ...string) *Router {
	peers := NewPeers("caller:9443")
	peers.Set(members)
	return NewRouter(local, peers, Options{
		Metrics:            metrics.New(),
		Timeout:            5 * time.Second,
		ServingCertificate: func() (*tls.Certificate, error) { return &cert, nil },
		Token:              StaticToken("caller-token"),
		Log:                logr.Discard(),
	})
}

func TestRouterClaimsLocally(t *testing.T) {
	cert := newCert(t)
	cases := []struct {
		name    string
		members []string
	}{
		{name: "no replica is ready", members: nil},
		{name: "this replica is the only one", members: []string{"caller:9443"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			local := &fakeClaimer{assignment: allocator.Assignment{SliceName: "s", WorkerID: 3}}
			r := newCaller(cert, local, tc.members...)
			got, err := r.Claim(context.Background(), request())
			if err != nil {
				t.Fatalf("Claim() error = %v", err)
			}
			if diff := cmp.Diff(local.assignment, got); diff != "" {
				t.Errorf("Claim() mismatch (-want +got):\n%s", diff)
			}
			if tokens := local.tokens(); len(tokens) != 1 || tokens[0] == "" {
				t.Errorf("local claims = %q, want one with a token", tokens)
			}
			if forwards(r, metrics.ForwardAnswered) != 0 || forwards(r, metrics.ForwardFallback) != 0 {
				t.Errorf("forwarded %d, fallbacks %d; want none", forwards(r, metrics.ForwardAnswered), forwards(r, metrics.ForwardFallback))
			}
		})
	}
}

func TestRouterForwardsToTheOwner(t *testing.T) {
	cert := newCert(t)
	cases := []struct {
		name       string
		ownerLocal *fakeClaimer
		want       allocator.Assignment
		wantErr    *allocator.DeniedError
	}{
		{
			name:       "the owner commits",
			ownerLocal: &fakeClaimer{assignment: allocator.Assignment{SliceName: "rc-tpu-0", Replica: 0, WorkerID: 2, Token: "from-owner"}},
			want:       allocator.Assignment{SliceName: "rc-tpu-0", Replica: 0, WorkerID: 2, Token: "from-owner"},
		},
		{
			name:       "the owner's transient denial is the answer",
			ownerLocal: &fakeClaimer{err: &allocator.DeniedError{Transient: true, Message: "all 2 slices are fully claimed"}},
			wantErr:    &allocator.DeniedError{Transient: true, Message: "all 2 slices are fully claimed"},
		},
		{
			name:       "the owner's permanent denial is the answer",
			ownerLocal: &fakeClaimer{err: &allocator.DeniedError{Message: "outside a slice of 4 hosts"}},
			wantErr:    &allocator.DeniedError{Message: "outside a slice of 4 hosts"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := startOwner(t, cert, tc.ownerLocal)
			local := &fakeClaimer{}
			r := newCaller(cert, local, o.addr())
			req := request()
			req.Claim.Token = "tok-1"
			got, err := r.Claim(context.Background(), req)
			var denied *allocator.DeniedError
			if tc.wantErr != nil {
				if !errors.As(err, &denied) {
					t.Fatalf("Claim() error = %v, want a denial", err)
				}
				if diff := cmp.Diff(tc.wantErr, denied); diff != "" {
					t.Errorf("denial mismatch (-want +got):\n%s", diff)
				}
			} else if err != nil {
				t.Fatalf("Claim() error = %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Claim() mismatch (-want +got):\n%s", diff)
			}
			if len(local.requests) != 0 {
				t.Errorf("the caller claimed locally %d times; the owner answered", len(local.requests))
			}
			if diff := cmp.Diff([]allocator.Request{req}, tc.ownerLocal.requests); diff != "" {
				t.Errorf("the owner's claims mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"Bearer caller-token"}, o.auth); diff != "" {
				t.Errorf("Authorization headers mismatch (-want +got):\n%s", diff)
			}
			if forwards(r, metrics.ForwardAnswered) != 1 || forwards(o.router, metrics.ForwardServed) != 1 {
				t.Errorf("forwarded %d, served %d; want 1, 1", forwards(r, metrics.ForwardAnswered), forwards(o.router, metrics.ForwardServed))
			}
		})
	}
}

// TestRouterFallsBack: whatever goes wrong between the replicas, the claim is made locally with
// the token the owner may already have committed, so that the allocator finds that claim again.
func TestRouterFallsBack(t *testing.T) {
	cert := newCert(t)
	cases := []struct {
		name string
		// setup returns the owner's address and, if the request reaches it, its claimer.
		setup func(t *testing.T) (string, *fakeClaimer)
		// reaches: the owner receives the claim (and must see the caller's token).
		reaches bool
	}{
		{
			name: "the owner is gone",
			setup: func(t *testing.T) (string, *fakeClaimer) {
				o := startOwner(t, cert, &fakeClaimer{})
				o.server.Close()
				return o.addr(), o.local
			},
		},
		{
			name: "the owner serves another key (not one of us)",
			setup: func(t *testing.T) (string, *fakeClaimer) {
				o := startOwner(t, newCert(t), &fakeClaimer{})
				return o.addr(), o.local
			},
		},
		{
			name: "the owner fails the claim with an error that is not a denial",
			setup: func(t *testing.T) (string, *fakeClaimer) {
				o := startOwner(t, cert, &fakeClaimer{err: errors.New("boom")})
				return o.addr(), o.local
			},
			reaches: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr, ownerLocal := tc.setup(t)
			local := &fakeClaimer{assignment: allocator.Assignment{SliceName: "rc-tpu-0", WorkerID: 1}}
			r := newCaller(cert, local, addr)
			got, err := r.Claim(context.Background(), request())
			if err != nil {
				t.Fatalf("Claim() error = %v", err)
			}
			if diff := cmp.Diff(local.assignment, got); diff != "" {
				t.Errorf("Claim() mismatch (-want +got):\n%s", diff)
			}
			tokens := local.tokens()
			if len(tokens) != 1 || tokens[0] == "" {
				t.Fatalf("local claims = %q, want one with a token", tokens)
			}
			if tc.reaches {
				if diff := cmp.Diff(tokens, ownerLocal.tokens()); diff != "" {
					t.Errorf("the fallback's token differs from the forwarded one (-owner +local):\n%s", diff)
				}
			} else if n := len(ownerLocal.tokens()); n != 0 {
				t.Errorf("the owner claimed %d times, want 0", n)
			}
			if forwards(r, metrics.ForwardFallback) != 1 || forwards(r, metrics.ForwardAnswered) != 0 {
				t.Errorf("fallbacks %d, forwarded %d; want 1, 0", forwards(r, metrics.ForwardFallback), forwards(r, metrics.ForwardAnswered))
			}
			// Every replica may be claiming the group locally: the fallback reserves nothing
			// (docs/spec.md §3.5), and the owner was never asked not to.
			if !local.requests[0].NoReservation {
				t.Error("the local fallback claim may reserve IDs, want NoReservation")
			}
			if tc.reaches && ownerLocal.requests[0].NoReservation {
				t.Error("the owner was told not to reserve")
			}
		})
	}
}

func TestServeHTTPRefusesBadClaims(t *testing.T) {
	local := &fakeClaimer{}
	r := NewRouter(local, NewPeers("owner"), Options{Timeout: time.Second, Log: logr.Discard(), Metrics: metrics.New()})
	cases := []struct {
		name, method, body string
		want               int
	}{
		{name: "not a POST", method: http.MethodGet, want: http.StatusMethodNotAllowed},
		{name: "not JSON", method: http.MethodPost, body: "{", want: http.StatusBadRequest},
		{name: "unknown field", method: http.MethodPost, body: `{"request":{},"timeoutMillis":1,"extra":1}`, want: http.StatusBadRequest},
		{name: "no group", method: http.MethodPost, body: `{"request":{"Namespace":"ns","ClusterName":"rc","ClusterUID":"u","Hosts":4,"Claim":{"Token":"t"}},"timeoutMillis":100}`, want: http.StatusBadRequest},
		{name: "no hosts", method: http.MethodPost, body: `{"request":{"Namespace":"ns","ClusterName":"rc","ClusterUID":"u","GroupName":"g","Claim":{"Token":"t"}},"timeoutMillis":100}`, want: http.StatusBadRequest},
		{name: "no token", method: http.MethodPost, body: `{"request":{"Namespace":"ns","ClusterName":"rc","ClusterUID":"u","GroupName":"g","Hosts":4},"timeoutMillis":100}`, want: http.StatusBadRequest},
		{name: "a token that would inject claims", method: http.MethodPost, body: `{"request":{"Namespace":"ns","ClusterName":"rc","ClusterUID":"u","GroupName":"g","Hosts":4,"Claim":{"Token":"x\n1 y\n2 z"}},"timeoutMillis":100}`, want: http.StatusBadRequest},
		{name: "a token that is not ASCII", method: http.MethodPost, body: `{"request":{"Namespace":"ns","ClusterName":"rc","ClusterUID":"u","GroupName":"g","Hosts":4,"Claim":{"Token":"jeton-\u00e9"}},"timeoutMillis":100}`, want: http.StatusBadRequest},
		{name: "no timeout", method: http.MethodPost, body: `{"request":{"Namespace":"ns","ClusterName":"rc","ClusterUID":"u","GroupName":"g","Hosts":4,"Claim":{"Token":"t"}}}`, want: http.StatusBadRequest},
		{name: "too large", method: http.MethodPost, body: `{"request":{"Namespace":"` + strings.Repeat("n", maxBody) + `"}}`, want: http.StatusBadRequest},
		{name: "valid", method: http.MethodPost, body: `{"request":{"Namespace":"ns","ClusterName":"rc","ClusterUID":"u","GroupName":"g","Hosts":4,"Claim":{"Token":"t"}},"timeoutMillis":100}`, want: http.StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(local.tokens())
			w := httptest.NewRecorder()
			r.ServeHTTP(w, httptest.NewRequest(tc.method, Path, strings.NewReader(tc.body)))
			if w.Code != tc.want {
				t.Fatalf("status = %d (%s), want %d", w.Code, strings.TrimSpace(w.Body.String()), tc.want)
			}
			claimed := len(local.tokens()) - before
			if want := map[bool]int{true: 1, false: 0}[tc.want == http.StatusOK]; claimed != want {
				t.Errorf("claims made = %d, want %d", claimed, want)
			}
		})
	}
}

func TestFileToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("projected-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := FileToken(path)()
	if err != nil || got != "projected-token" {
		t.Errorf("FileToken() = %q, %v; want %q", got, err, "projected-token")
	}
	if _, err := FileToken(filepath.Join(t.TempDir(), "missing"))(); err == nil {
		t.Error("FileToken() of a missing file: no error")
	}
}

// slowClaimer answers after delay, or when its context ends.
type slowClaimer struct {
	fakeClaimer
	delay time.Duration
}

func (s *slowClaimer) Claim(ctx context.Context, req allocator.Request) (allocator.Assignment, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return allocator.Assignment{}, ctx.Err()
	}
	return s.fakeClaimer.Claim(ctx, req)
}

// localDeadline records how much of its deadline the local claim was given.
type localDeadline struct {
	fakeClaimer
	left time.Duration
}

func (l *localDeadline) Claim(ctx context.Context, req allocator.Request) (allocator.Assignment, error) {
	if d, ok := ctx.Deadline(); ok {
		l.left = time.Until(d)
	}
	return l.fakeClaimer.Claim(ctx, req)
}

// TestRouterLeavesTheFallbackItsTime: a late admission (most of its claim timeout already spent)
// forwarded to an owner that does not answer still has a third of what was left for its local
// fallback, instead of a fallback that starts expired; an admission with too little left for any
// fallback is denied as transient with a message that says why (docs/spec.md §5).
func TestRouterLeavesTheFallbackItsTime(t *testing.T) {
	cert := newCert(t)
	cases := map[string]struct {
		left          time.Duration
		wantFallback  bool
		wantMinLocal  time.Duration
		wantDenialHas string
	}{
		"3 s of a 5 s timeout left: the forward gets 2 s, the fallback at least 1 s": {
			left: 3 * time.Second, wantFallback: true, wantMinLocal: 900 * time.Millisecond,
		},
		"600 ms left: the forward gets 400 ms, and what is left is too little for a fallback": {
			left: 600 * time.Millisecond, wantDenialHas: "less than the 500ms a local claim needs",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := startOwner(t, cert, &fakeClaimer{})
			o.router.local = &slowClaimer{delay: time.Minute}
			local := &localDeadline{fakeClaimer: fakeClaimer{assignment: allocator.Assignment{SliceName: "rc-tpu-0", WorkerID: 1}}}
			r := newCaller(cert, local, o.addr())
			ctx, cancel := context.WithTimeout(t.Context(), tc.left)
			defer cancel()
			_, err := r.Claim(ctx, request())
			if !tc.wantFallback {
				var denied *allocator.DeniedError
				if !errors.As(err, &denied) || !denied.Transient || !strings.Contains(err.Error(), tc.wantDenialHas) {
					t.Fatalf("Claim() error = %v, want a transient denial saying %q", err, tc.wantDenialHas)
				}
				if n := len(local.tokens()); n != 0 {
					t.Errorf("claimed locally %d times, want 0", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("Claim() error = %v, want the local fallback's assignment", err)
			}
			if local.left < tc.wantMinLocal {
				t.Errorf("the local fallback had %s of its deadline, want at least %s", local.left, tc.wantMinLocal)
			}
		})
	}
}
