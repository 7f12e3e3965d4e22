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

// Package forward makes one webhook replica commit all the claims of a worker group. Each replica
// sees roughly a third of a slice's admissions when three serve the webhook; if each committed its
// own, the three would race for the same TPUSliceAssignment and lose conflicts. Instead, the owner
// of a group (rendezvous hashing over the ready endpoints of the webhook Service) commits them, so
// the group commit of the allocator batches all of them, and the others forward the claim to it.
//
// Forwarding only saves writes and conflicts; it is never trusted for uniqueness, which the
// resourceVersion-checked status update guarantees. Replicas that disagree about the owner (during a
// rollout) both commit, and one of them loses a conflict and retries. A forward that fails for any
// reason other than the owner's answer (connection refused, timeout, TLS or authorization failure)
// is claimed locally with the same claim token, so a claim the owner committed but could not report
// is found again rather than made twice.
package forward

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/transport"
	"k8s.io/utils/clock"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
)

// Path is where a replica serves the claims other replicas forward to it, on the webhook server.
// Callers need the RBAC verb "post" on this non-resource URL.
const Path = "/tpu-claims/v1"

// maxBody bounds a forwarded request's body: a claim request is a few hundred bytes.
const maxBody = 64 << 10

// Local commits claims in this process: the allocator.
type Local interface {
	Claim(ctx context.Context, req allocator.Request) (allocator.Assignment, error)
}

// Options configure a Router.
type Options struct {
	// Timeout bounds one claim, forwarded or not: the allocator's (allocator.DefaultTimeout when
	// zero).
	Timeout time.Duration
	// ServingCertificate returns the certificate this replica serves. A peer must present the same
	// public key: every replica serves the certificate of the one webhook Service, so a peer that
	// proves it holds the key is one of us, and the bearer token goes nowhere else.
	ServingCertificate func() (*tls.Certificate, error)
	// Token returns the bearer token that authenticates this replica to its peers.
	Token func() (string, error)
	// Log receives forwarding failures.
	Log logr.Logger
	// Metrics receive the forwarding counts and times (metrics.Default, the served set, when nil).
	Metrics *metrics.Metrics
	// DialContext, when set, opens the TCP connections to peers (default: net.Dialer). The
	// integration tests map their instances' names to the loopback address with it.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// Clock times forwarded claims for the metrics (clock.RealClock when nil).
	Clock clock.PassiveClock
}

// Router sends each claim to the replica that owns its worker group and serves the claims peers
// send to it. It implements Claimer and http.Handler.
type Router struct {
	local  Local
	peers  *Peers
	opts   Options
	client *http.Client
	m      *metrics.Metrics
}

// NewRouter returns a Router that claims through local what this replica owns or serves.
func NewRouter(local Local, peers *Peers, opts Options) *Router {
	if opts.Timeout <= 0 {
		opts.Timeout = allocator.DefaultTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	r := &Router{local: local, peers: peers, opts: opts, m: opts.Metrics}
	if r.m == nil {
		r.m = metrics.Default
	}
	r.client = &http.Client{Transport: &http.Transport{
		DialTLSContext:      r.dialPeer,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}}
	return r
}

// Peers returns the replicas the Router forwards to.
func (r *Router) Peers() *Peers { return r.peers }

// MinFallback is the least of its deadline a claim must have left to be tried locally after its
// forward failed: about two claim writes on a loaded API server (docs/performance.md measured
// one at about 70 ms; the allocator hands no reserved ID to a call with less than 1 s left).
const MinFallback = 500 * time.Millisecond

// GroupKey is the key a worker group's owner is chosen by.
func GroupKey(req allocator.Request) string {
	return req.Namespace + "/" + string(req.ClusterUID) + "/" + req.GroupName
}

// Claim claims through the owner of req's group, or locally when this replica owns it, no owner is
// known, or the owner cannot be reached.
func (r *Router) Claim(ctx context.Context, req allocator.Request) (allocator.Assignment, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	// The token is chosen here, so that a local retry of a forward presents the same one.
	if req.Claim.Token == "" {
		req.Claim.Token = allocator.NewToken()
	}
	owner, ok := r.peers.Owner(GroupKey(req))
	if !ok || owner == r.peers.Self() {
		return r.local.Claim(ctx, req)
	}
	// The owner gets two thirds of what is left of the admission's deadline (at most two thirds
	// of the claim timeout): the rest is for claiming locally if it fails (docs/spec.md §5). An
	// admission that comes late (its deadline started before the webhook was called, or its
	// earlier reads took long) would otherwise leave its fallback nothing.
	budget := r.opts.Timeout * 2 / 3
	if d, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(d)*2/3) // a context's deadline is on the real clock
	}
	fctx, fcancel := context.WithTimeout(ctx, budget)
	start := r.opts.Clock.Now()
	assignment, err := r.forward(fctx, owner, req)
	fcancel()
	var denied *allocator.DeniedError
	if err == nil || errors.As(err, &denied) {
		r.count(metrics.ForwardAnswered, start)
		if denied != nil {
			return allocator.Assignment{}, denied
		}
		return assignment, nil
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < MinFallback {
		// Too little is left for a local claim to be worth its writes: deny, saying why.
		r.count(metrics.ForwardFallback, start)
		return allocator.Assignment{}, &allocator.DeniedError{Transient: true, Message: fmt.Sprintf(
			"forwarding the claim to the worker group's owner %s failed (%v) and %s of the admission's deadline is left, less than the %s a local claim needs",
			owner, err, max(time.Until(d), 0).Round(time.Millisecond), MinFallback)}
	}
	r.count(metrics.ForwardFallback, start)
	r.opts.Log.Info("Forwarding a claim to its owner failed, claiming locally", "owner", owner,
		"namespace", req.Namespace, "rayCluster", req.ClusterName, "group", req.GroupName, "err", err)
	// Every replica may be claiming this group locally now: a block reserved here would only make
	// the others' claims wait (docs/spec.md §3.5).
	req.NoReservation = true
	return r.local.Claim(ctx, req)
}

// count records a forwarded claim of the given result that started at start.
func (r *Router) count(result string, start time.Time) {
	r.m.Forwards.WithLabelValues(result).Inc()
	r.m.ForwardDuration.WithLabelValues(result).Observe(r.opts.Clock.Since(start).Seconds())
}

// wireRequest and wireResponse are the forwarded claim and its answer: an assignment or a denial.
type wireRequest struct {
	Request allocator.Request `json:"request"`
	// TimeoutMillis is how long the owner may take.
	TimeoutMillis int64 `json:"timeoutMillis"`
}

type wireResponse struct {
	Assignment *allocator.Assignment  `json:"assignment,omitempty"`
	Denied     *allocator.DeniedError `json:"denied,omitempty"`
}

func (r *Router) forward(ctx context.Context, owner string, req allocator.Request) (allocator.Assignment, error) {
	timeout := r.opts.Timeout
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d) // a context's deadline is on the real clock
	}
	body, err := json.Marshal(wireRequest{Request: req, TimeoutMillis: timeout.Milliseconds()})
	if err != nil {
		return allocator.Assignment{}, err
	}
	token, err := r.opts.Token()
	if err != nil {
		return allocator.Assignment{}, fmt.Errorf("reading the bearer token: %w", err)
	}
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+owner+Path, bytes.NewReader(body))
	if err != nil {
		return allocator.Assignment{}, err
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set("Authorization", "Bearer "+token)
	resp, err := r.client.Do(httpReq)
	if err != nil {
		return allocator.Assignment{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return allocator.Assignment{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return allocator.Assignment{}, fmt.Errorf("owner answered %s: %s", resp.Status, strings.TrimSpace(string(data)))
	}
	var out wireResponse
	if err := json.Unmarshal(data, &out); err != nil {
		return allocator.Assignment{}, fmt.Errorf("decoding the owner's answer: %w", err)
	}
	switch {
	case out.Denied != nil:
		return allocator.Assignment{}, out.Denied
	case out.Assignment != nil:
		return *out.Assignment, nil
	}
	return allocator.Assignment{}, errors.New("the owner's answer holds neither an assignment nor a denial")
}

// ServeHTTP commits a claim a peer forwarded. It never forwards again: whoever receives a
// forwarded claim commits it, so replicas that disagree about the owner cannot bounce a claim.
// Authentication and authorization are the caller's (Setup wraps the Router).
func (r *Router) ServeHTTP(w http.ResponseWriter, httpReq *http.Request) {
	if httpReq.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "only POST", http.StatusMethodNotAllowed)
		return
	}
	var in wireRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, httpReq.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		http.Error(w, "decoding the claim: "+err.Error(), http.StatusBadRequest)
		return
	}
	if msg := validate(&in); msg != "" {
		http.Error(w, msg, http.StatusBadRequest)
		return
	}
	timeout := min(time.Duration(in.TimeoutMillis)*time.Millisecond, r.opts.Timeout)
	ctx, cancel := context.WithTimeout(httpReq.Context(), timeout)
	defer cancel()
	start := r.opts.Clock.Now()
	assignment, err := r.local.Claim(ctx, in.Request)
	r.count(metrics.ForwardServed, start)
	var out wireResponse
	var denied *allocator.DeniedError
	switch {
	case err == nil:
		out.Assignment = &assignment
	case errors.As(err, &denied):
		out.Denied = denied
	default:
		http.Error(w, "claiming: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&out) // the caller falls back on a broken answer.
}

// validate returns what makes a forwarded claim unusable, or "".
func validate(in *wireRequest) string {
	req := &in.Request
	switch {
	case req.Namespace == "" || req.ClusterName == "" || req.GroupName == "":
		return "the claim must name the namespace, RayCluster and worker group"
	case req.Hosts < 1:
		return "the claim's slice must have at least one host"
	case !tpuv1alpha1.ValidToken(req.Claim.Token):
		return "the claim must carry its token: 1 to 64 characters without spaces"
	case in.TimeoutMillis <= 0:
		return "the claim's timeout must be positive"
	}
	return ""
}

// dialPeer dials a peer's webhook server and accepts it only if it presents the public key of this
// replica's own serving certificate, for the name that certificate is for.
func (r *Router) dialPeer(ctx context.Context, network, addr string) (net.Conn, error) {
	own, err := r.opts.ServingCertificate()
	if err != nil {
		return nil, fmt.Errorf("reading this replica's serving certificate: %w", err)
	}
	if own == nil || len(own.Certificate) == 0 {
		return nil, errors.New("this replica serves no certificate yet")
	}
	leaf, err := x509.ParseCertificate(own.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("parsing this replica's serving certificate: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	config := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName(leaf),
		// The pinned certificate itself is the only root, so a peer must present our own
		// certificate; checking the public key as well keeps the pin if only the chain differs.
		RootCAs: roots,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].RawSubjectPublicKeyInfo, leaf.RawSubjectPublicKeyInfo) {
				return errors.New("the peer does not serve this replica's certificate")
			}
			return nil
		},
		NextProtos: []string{"http/1.1"},
	}
	dial := r.opts.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	raw, err := dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	conn := tls.Client(raw, config)
	if err := conn.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		return nil, err
	}
	return conn, nil
}

// serverName is the first name the certificate is for: a peer is dialed by address, but its
// certificate is for the webhook Service's DNS names.
func serverName(leaf *x509.Certificate) string {
	if len(leaf.DNSNames) > 0 {
		return leaf.DNSNames[0]
	}
	if len(leaf.IPAddresses) > 0 {
		return leaf.IPAddresses[0].String()
	}
	return leaf.Subject.CommonName
}

// FileToken returns a token source that reads path, again at most once a minute (client-go's
// cached file token source, as a rest.Config with BearerTokenFile uses): the kubelet rotates the
// projected ServiceAccount token.
func FileToken(path string) func() (string, error) {
	source := transport.NewCachedFileTokenSource(path)
	return func() (string, error) {
		token, err := source.Token()
		if err != nil {
			return "", err
		}
		return token.AccessToken, nil
	}
}

// StaticToken returns a token source that always returns token.
func StaticToken(token string) func() (string, error) {
	return func() (string, error) { return token, nil }
}
