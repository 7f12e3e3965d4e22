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

package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const day = 24 * time.Hour

var (
	t0         = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	testPolicy = Policy{
		DNSNames:     []string{"svc.ns.svc", "svc.ns.svc.cluster.local"},
		CAValidity:   30 * day,
		CertValidity: 9 * day,
		TrustDelay:   10 * time.Minute,
	}
)

// outcome summarizes one Plan for comparison.
type outcome struct {
	Reasons   []string // Prefixes of the plan's reasons.
	NewCA     bool
	NewCert   bool
	BundleCAs int
	NextCheck time.Duration // From t0.
}

func summarize(t *testing.T, before Material, plan Plan) outcome {
	t.Helper()
	reasons := make([]string, 0, len(plan.Reasons))
	for _, r := range plan.Reasons {
		// Drop the parenthesised detail of parse and verification errors.
		reasons = append(reasons, strings.TrimSpace(strings.SplitN(r, "(", 2)[0]))
	}
	return outcome{
		Reasons:   reasons,
		NewCA:     !bytes.Equal(before.CACert, plan.Material.CACert),
		NewCert:   !bytes.Equal(before.Cert, plan.Material.Cert),
		BundleCAs: len(parseCertificates(plan.Material.CABundle)),
		NextCheck: plan.NextCheck.Sub(t0),
	}
}

// checkConsistent checks what every Secret written must satisfy: a signing CA with its key, first
// in the bundle, and a serving certificate for the DNS names that the bundle trusts at now.
func checkConsistent(t *testing.T, p Policy, now time.Time, m Material) {
	t.Helper()
	ca, _, err := parseCA(m.CACert, m.CAKey)
	if err != nil {
		t.Fatalf("CA: %v", err)
	}
	bundle := parseCertificates(m.CABundle)
	if len(bundle) == 0 || !bundle[0].Equal(ca) {
		t.Fatalf("the bundle does not start with the signing CA")
	}
	leaf, problem := p.checkServing(now, m.Cert, m.Key, bundle)
	if problem != "" {
		t.Fatalf("serving certificate: %s", problem)
	}
	if leaf.NotAfter.After(ca.NotAfter) && leaf.CheckSignatureFrom(ca) == nil {
		t.Errorf("the serving certificate outlives its CA: %s > %s", leaf.NotAfter, ca.NotAfter)
	}
}

func TestPlanSequences(t *testing.T) {
	bootstrap := outcome{
		Reasons: []string{"no usable CA", "no serving certificate"},
		NewCA:   true, NewCert: true, BundleCAs: 1, NextCheck: 6 * day,
	}
	type step struct {
		at   time.Duration // From t0.
		want outcome
	}
	cases := map[string]struct {
		policy Policy
		steps  []step
	}{
		"bootstrap then nothing to do before two thirds of the certificate": {
			policy: testPolicy,
			steps: []step{
				{0, bootstrap},
				{day, outcome{Reasons: []string{}, BundleCAs: 1, NextCheck: 6 * day}},
				{6*day - time.Second, outcome{Reasons: []string{}, BundleCAs: 1, NextCheck: 6 * day}},
			},
		},
		"the serving certificate is renewed from the same CA": {
			policy: testPolicy,
			steps: []step{
				{0, bootstrap},
				{6 * day, outcome{
					Reasons: []string{"the serving certificate is two thirds into its validity"},
					NewCert: true, BundleCAs: 1, NextCheck: 12 * day,
				}},
			},
		},
		"a CA rotation keeps the old CA trusted, switches the certificate after the trust delay, prunes the old CA when it expires": {
			policy: testPolicy,
			steps: []step{
				{0, bootstrap},
				{6 * day, outcome{
					Reasons: []string{"the serving certificate is two thirds into its validity"},
					NewCert: true, BundleCAs: 1, NextCheck: 12 * day,
				}},
				{12 * day, outcome{
					Reasons: []string{"the serving certificate is two thirds into its validity"},
					NewCert: true, BundleCAs: 1, NextCheck: 18 * day,
				}},
				{18 * day, outcome{
					Reasons: []string{"the serving certificate is two thirds into its validity"},
					NewCert: true, BundleCAs: 1, NextCheck: 20 * day,
				}},
				{20 * day, outcome{
					Reasons: []string{"the CA is two thirds into its validity"},
					NewCA:   true, BundleCAs: 2, NextCheck: 20*day + 10*time.Minute,
				}},
				{20*day + 5*time.Minute, outcome{Reasons: []string{}, BundleCAs: 2, NextCheck: 20*day + 10*time.Minute}},
				{20*day + 10*time.Minute, outcome{
					Reasons: []string{"the serving certificate is signed by an earlier CA"},
					NewCert: true, BundleCAs: 2, NextCheck: 26*day + 10*time.Minute,
				}},
				{26*day + 10*time.Minute, outcome{
					Reasons: []string{"the serving certificate is two thirds into its validity"},
					NewCert: true, BundleCAs: 2, NextCheck: 30 * day,
				}},
				{30 * day, outcome{
					Reasons: []string{"the CA bundle is out of date"}, BundleCAs: 1, NextCheck: 32*day + 10*time.Minute,
				}},
			},
		},
		"a certificate that would expire before the trust delay is replaced at once": {
			policy: Policy{DNSNames: testPolicy.DNSNames, CAValidity: 30 * day, CertValidity: 9 * day, TrustDelay: 10 * day},
			steps: []step{
				{0, bootstrap},
				{6 * day, outcome{
					Reasons: []string{"the serving certificate is two thirds into its validity"},
					NewCert: true, BundleCAs: 1, NextCheck: 12 * day,
				}},
				{12 * day, outcome{
					Reasons: []string{"the serving certificate is two thirds into its validity"},
					NewCert: true, BundleCAs: 1, NextCheck: 18 * day,
				}},
				{18 * day, outcome{
					Reasons: []string{"the serving certificate is two thirds into its validity"},
					NewCert: true, BundleCAs: 1, NextCheck: 20 * day,
				}},
				{20 * day, outcome{
					Reasons: []string{"the CA is two thirds into its validity", "the serving certificate is signed by an earlier CA"},
					NewCA:   true, NewCert: true, BundleCAs: 2, NextCheck: 26 * day,
				}},
			},
		},
		"an operator down past every expiry starts over": {
			policy: testPolicy,
			steps: []step{
				{0, bootstrap},
				{100 * day, outcome{
					Reasons: []string{"the CA has expired", "the serving certificate is not trusted now"},
					NewCA:   true, NewCert: true, BundleCAs: 1, NextCheck: 106 * day,
				}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var m Material
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				plan, err := tc.policy.Plan(now, m)
				if err != nil {
					t.Fatalf("step %d: Plan: %v", i, err)
				}
				if diff := cmp.Diff(s.want, summarize(t, m, plan)); diff != "" {
					t.Errorf("step %d (t0+%s): outcome (-want +got):\n%s", i, s.at, diff)
				}
				if plan.Changed() != !plan.Material.Equal(m) {
					t.Errorf("step %d: Changed() = %t, but the material changed: %t", i, plan.Changed(), !plan.Material.Equal(m))
				}
				checkConsistent(t, tc.policy, now, plan.Material)
				m = plan.Material
			}
		})
	}
}

// TestPlanNeverServesUntrusted runs the rotation for years, checking at every NextCheck (and just
// before it) that a replica still serving the previous certificate is trusted by the new bundle,
// and that a new certificate's CA was already in the bundle written at least TrustDelay before.
func TestPlanNeverServesUntrusted(t *testing.T) {
	p := testPolicy
	plan, err := p.Plan(t0, Material{})
	if err != nil {
		t.Fatal(err)
	}
	m := plan.Material
	trustedSince := map[string]time.Time{} // CA subject → when it entered the bundle.
	for _, c := range parseCertificates(m.CABundle) {
		trustedSince[c.Subject.CommonName] = t0
	}
	caRotations, certRenewals := 0, 0
	now := plan.NextCheck
	for now.Before(t0.Add(3 * 365 * day)) {
		// Nothing to do just before the announced check.
		if early, err := p.Plan(now.Add(-time.Second), m); err != nil || early.Changed() {
			t.Fatalf("at %s: a change before NextCheck: %v %v", now.Sub(t0), early.Reasons, err)
		}
		plan, err := p.Plan(now, m)
		if err != nil {
			t.Fatal(err)
		}
		if !plan.Changed() {
			t.Fatalf("at %s: NextCheck came with nothing to do", now.Sub(t0))
		}
		checkConsistent(t, p, now, plan.Material)
		next := plan.Material
		bundle := x509.NewCertPool()
		for _, c := range parseCertificates(next.CABundle) {
			bundle.AddCert(c)
			if _, ok := trustedSince[c.Subject.CommonName]; !ok {
				trustedSince[c.Subject.CommonName] = now
				caRotations++
			}
		}
		old, err := tls.X509KeyPair(m.Cert, m.Key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := old.Leaf.Verify(x509.VerifyOptions{Roots: bundle, CurrentTime: now, DNSName: p.DNSNames[0]}); err != nil {
			t.Errorf("at %s: the certificate a lagging replica serves is not trusted by the new bundle: %v", now.Sub(t0), err)
		}
		if !bytes.Equal(next.Cert, m.Cert) {
			certRenewals++
			fresh, err := tls.X509KeyPair(next.Cert, next.Key)
			if err != nil {
				t.Fatal(err)
			}
			since := trustedSince[fresh.Leaf.Issuer.CommonName]
			if now.Sub(since) < p.TrustDelay {
				t.Errorf("at %s: a certificate from CA %s, trusted only since %s", now.Sub(t0), fresh.Leaf.Issuer.CommonName, since.Sub(t0))
			}
		}
		m, now = next, plan.NextCheck
	}
	// 3 years of 30-day CAs renewed at 20 days, 9-day certificates renewed at 6 days.
	if caRotations < 50 || certRenewals < 150 {
		t.Errorf("too few renewals to mean anything: %d CA rotations, %d certificate renewals", caRotations, certRenewals)
	}
}

func TestPlanRepairs(t *testing.T) {
	good, err := testPolicy.Plan(t0, Material{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := Policy{DNSNames: []string{"other.ns.svc"}, CAValidity: 30 * day, CertValidity: 9 * day}.Plan(t0, Material{})
	if err != nil {
		t.Fatal(err)
	}
	with := func(f func(*Material)) Material {
		m := good.Material
		f(&m)
		return m
	}
	cases := map[string]struct {
		in   Material
		want outcome
	}{
		"garbage everywhere": {
			in: Material{CACert: []byte("x"), CAKey: []byte("y"), CABundle: []byte("z"), Cert: []byte("c"), Key: []byte("k")},
			want: outcome{
				Reasons: []string{"no usable CA", "the serving certificate is unusable"},
				NewCA:   true, NewCert: true, BundleCAs: 1, NextCheck: 6 * day,
			},
		},
		"a CA key that does not match keeps no CA": {
			in: with(func(m *Material) { m.CAKey = other.Material.CAKey }),
			want: outcome{
				// The new CA is first in the bundle, the old one stays: the old certificate is still
				// trusted, and is replaced once the new CA has been trusted for the trust delay.
				Reasons: []string{"no usable CA"}, NewCA: true, BundleCAs: 2, NextCheck: 10 * time.Minute,
			},
		},
		"a serving certificate used as the CA": {
			in: with(func(m *Material) { m.CACert, m.CAKey = m.Cert, m.Key }),
			want: outcome{
				Reasons: []string{"no usable CA"}, NewCA: true, BundleCAs: 2, NextCheck: 10 * time.Minute,
			},
		},
		"a serving certificate for other DNS names": {
			in: with(func(m *Material) { m.Cert, m.Key = other.Material.Cert, other.Material.Key }),
			want: outcome{
				Reasons: []string{"the serving certificate is for other DNS names"}, NewCert: true, BundleCAs: 1, NextCheck: 6 * day,
			},
		},
		"a serving certificate from an unknown CA": {
			in: with(func(m *Material) {
				p := testPolicy
				foreign, err := p.Plan(t0, Material{})
				if err != nil {
					t.Fatal(err)
				}
				m.Cert, m.Key = foreign.Material.Cert, foreign.Material.Key
			}),
			want: outcome{
				Reasons: []string{"the serving certificate is not trusted now"}, NewCert: true, BundleCAs: 1, NextCheck: 6 * day,
			},
		},
		"a serving key that does not match": {
			in: with(func(m *Material) { m.Key = other.Material.Key }),
			want: outcome{
				Reasons: []string{"the serving certificate is unusable"}, NewCert: true, BundleCAs: 1, NextCheck: 6 * day,
			},
		},
		"a lost bundle is rebuilt": {
			in:   with(func(m *Material) { m.CABundle = nil }),
			want: outcome{Reasons: []string{"the CA bundle is out of date"}, BundleCAs: 1, NextCheck: 6 * day},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			plan, err := testPolicy.Plan(t0, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, summarize(t, tc.in, plan)); diff != "" {
				t.Errorf("outcome (-want +got):\n%s", diff)
			}
			checkConsistent(t, testPolicy, t0, plan.Material)
		})
	}
}

func TestMaterialData(t *testing.T) {
	m := Material{CACert: []byte("a"), CAKey: []byte("b"), CABundle: []byte("c"), Cert: []byte("d"), Key: []byte("e")}
	data := m.Into(map[string][]byte{"other": []byte("kept")})
	want := map[string][]byte{
		"ca.crt": []byte("a"), "ca.key": []byte("b"), "ca-bundle.crt": []byte("c"),
		"tls.crt": []byte("d"), "tls.key": []byte("e"), "other": []byte("kept"),
	}
	if diff := cmp.Diff(want, data); diff != "" {
		t.Errorf("Into (-want +got):\n%s", diff)
	}
	if got := MaterialFromData(data); !got.Equal(m) {
		t.Errorf("MaterialFromData(Into(m)) = %+v, want %+v", got, m)
	}
}
