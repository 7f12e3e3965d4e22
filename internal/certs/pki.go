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
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Keys of the certificate Secret. tls.crt and tls.key are the serving pair, as in a
// kubernetes.io/tls Secret; the CA's key never leaves the Secret.
const (
	// CACertKey holds the CA that signs new serving certificates.
	CACertKey = "ca.crt"
	// CAKeyKey holds the CA's private key (PKCS #8).
	CAKeyKey = "ca.key"
	// CABundleKey holds every CA the webhook configurations must trust: the signing CA first, then
	// earlier CAs that are still valid, so that certificates they signed stay trusted during a rotation.
	CABundleKey = "ca-bundle.crt"
	// CertKey holds the serving certificate.
	CertKey = corev1.TLSCertKey
	// KeyKey holds the serving certificate's private key (PKCS #8).
	KeyKey = corev1.TLSPrivateKeyKey
)

// Defaults of Policy.
const (
	// DefaultCAValidity is how long a CA is valid. It is renewed after two thirds of that.
	DefaultCAValidity = 365 * 24 * time.Hour
	// DefaultCertValidity is how long a serving certificate is valid. It is renewed after two thirds
	// of that.
	DefaultCertValidity = 90 * 24 * time.Hour
	// DefaultTrustDelay is how long a new CA sits in the CA bundle before serving certificates
	// signed by it are used: long enough for every replica to have injected the new bundle into the
	// webhook configurations and for every API server to have seen it.
	DefaultTrustDelay = 10 * time.Minute
	// Backdate is subtracted from NotBefore, so that a peer whose clock is a little behind ours
	// accepts a fresh certificate.
	Backdate = time.Hour
)

// Material is the content of the certificate Secret.
type Material struct {
	CACert, CAKey, CABundle, Cert, Key []byte
}

// MaterialFromData reads the Material from a Secret's data.
func MaterialFromData(data map[string][]byte) Material {
	return Material{
		CACert:   data[CACertKey],
		CAKey:    data[CAKeyKey],
		CABundle: data[CABundleKey],
		Cert:     data[CertKey],
		Key:      data[KeyKey],
	}
}

// Into writes m into a Secret's data, keeping keys it does not own, and returns data.
func (m Material) Into(data map[string][]byte) map[string][]byte {
	if data == nil {
		data = make(map[string][]byte, 5)
	}
	data[CACertKey] = m.CACert
	data[CAKeyKey] = m.CAKey
	data[CABundleKey] = m.CABundle
	data[CertKey] = m.Cert
	data[KeyKey] = m.Key
	return data
}

// Equal reports whether two Materials hold the same bytes.
func (m Material) Equal(o Material) bool {
	return bytes.Equal(m.CACert, o.CACert) && bytes.Equal(m.CAKey, o.CAKey) &&
		bytes.Equal(m.CABundle, o.CABundle) && bytes.Equal(m.Cert, o.Cert) && bytes.Equal(m.Key, o.Key)
}

// Policy says what the serving certificate is for, how long certificates live and when they are
// renewed.
type Policy struct {
	// DNSNames of the serving certificate: the webhook Service's names.
	DNSNames []string
	// CAValidity and CertValidity are the lifetimes of a new CA and serving certificate.
	CAValidity, CertValidity time.Duration
	// TrustDelay is how long a new CA is trusted (in the bundle) before it signs the serving
	// certificate.
	TrustDelay time.Duration
}

// Plan is the outcome of checking the Material at one instant.
type Plan struct {
	// Material is what the Secret must hold from now on.
	Material Material
	// Reasons says what was renewed and why; empty when Material is unchanged.
	Reasons []string
	// NextCheck is when something next needs renewing or pruning.
	NextCheck time.Time
}

// Changed reports whether the Secret must be written.
func (p Plan) Changed() bool { return len(p.Reasons) > 0 }

// issuedAt is when a certificate from this package was issued (its NotBefore is backdated).
func issuedAt(c *x509.Certificate) time.Time { return c.NotBefore.Add(Backdate) }

// renewAt is two thirds into a certificate's validity, counted from its issue.
func renewAt(c *x509.Certificate) time.Time {
	start := issuedAt(c)
	if start.After(c.NotAfter) {
		start = c.NotBefore
	}
	return start.Add(c.NotAfter.Sub(start) * 2 / 3)
}

// Plan checks cur at now and returns what the Secret must hold. It is deterministic in its inputs
// except for the keys and serial numbers of what it issues, so replicas that plan from the same
// Secret agree on whether to write; the optimistic concurrency of the write picks one.
//
//   - A CA that is missing, unusable or expired is replaced at once; a CA two thirds into its
//     validity is replaced too, and stays in the bundle until it expires.
//   - A serving certificate that is missing, unusable, for other DNS names or not trusted by the
//     bundle is issued again at once. One two thirds into its validity is issued again. One signed
//     by an earlier CA is replaced by one from the current CA TrustDelay after that CA was issued,
//     so the bundle that trusts it has reached every webhook configuration first.
func (p Policy) Plan(now time.Time, cur Material) (Plan, error) {
	plan := Plan{Material: cur}
	ca, caKey, previous, err := p.planCA(now, &plan)
	if err != nil {
		return Plan{}, err
	}
	trusted := planBundle(now, ca, previous, &plan)
	if err := p.planServing(now, ca, caKey, trusted, &plan); err != nil {
		return Plan{}, err
	}
	return plan, nil
}

// planCA returns the CA that signs from now on, issuing a new one into plan when the current one
// is unusable, expired or two thirds into its validity; previous is the CA it replaces, if any.
func (p Policy) planCA(now time.Time, plan *Plan) (ca *x509.Certificate, caKey crypto.Signer, previous *x509.Certificate, err error) {
	ca, caKey, err = parseCA(plan.Material.CACert, plan.Material.CAKey)
	switch {
	case err != nil:
		plan.Reasons = append(plan.Reasons, "no usable CA ("+err.Error()+")")
	case !now.Before(ca.NotAfter):
		// Only expiry counts: a NotBefore ahead of now comes from a replica whose clock is ahead.
		plan.Reasons = append(plan.Reasons, "the CA has expired")
		previous, ca = ca, nil
	case !now.Before(renewAt(ca)):
		plan.Reasons = append(plan.Reasons, "the CA is two thirds into its validity")
		previous, ca = ca, nil
	}
	if ca == nil {
		ca, caKey, plan.Material.CACert, plan.Material.CAKey, err = p.newCA(now)
	}
	return ca, caKey, previous, err
}

// planBundle sets plan's CA bundle (the signing CA first, then earlier CAs that have not expired)
// and its next check, and returns the trusted CAs.
func planBundle(now time.Time, ca, previous *x509.Certificate, plan *Plan) []*x509.Certificate {
	cur := plan.Material.CABundle
	trusted := []*x509.Certificate{ca}
	candidates := parseCertificates(cur)
	if previous != nil {
		candidates = append(candidates, previous)
	}
	for _, c := range candidates {
		if c.IsCA && now.Before(c.NotAfter) && !slices.ContainsFunc(trusted, c.Equal) {
			trusted = append(trusted, c)
		}
	}
	plan.Material.CABundle = encodeCertificates(trusted)
	if !bytes.Equal(plan.Material.CABundle, cur) && len(plan.Reasons) == 0 {
		plan.Reasons = append(plan.Reasons, "the CA bundle is out of date")
	}
	plan.NextCheck = renewAt(ca)
	for _, c := range trusted[1:] {
		plan.NextCheck = earliest(plan.NextCheck, c.NotAfter) // Pruned when it expires.
	}
	return trusted
}

// planServing issues the serving certificate again into plan when it is missing, unusable, not
// trusted, two thirds into its validity, or signed by an earlier CA for TrustDelay.
func (p Policy) planServing(now time.Time, ca *x509.Certificate, caKey crypto.Signer, trusted []*x509.Certificate, plan *Plan) error {
	leaf, problem := p.checkServing(now, plan.Material.Cert, plan.Material.Key, trusted)
	reissue := ""
	switch {
	case problem != "":
		reissue = problem
	case leaf.CheckSignatureFrom(ca) != nil:
		switchAt := issuedAt(ca).Add(p.TrustDelay)
		if !now.Before(switchAt) || !leaf.NotAfter.After(switchAt) {
			reissue = "the serving certificate is signed by an earlier CA"
		} else {
			plan.NextCheck = earliest(plan.NextCheck, switchAt)
		}
	case !now.Before(renewAt(leaf)):
		reissue = "the serving certificate is two thirds into its validity"
	default:
		plan.NextCheck = earliest(plan.NextCheck, renewAt(leaf))
	}
	if reissue == "" {
		return nil
	}
	plan.Reasons = append(plan.Reasons, reissue)
	leaf, cert, key, err := p.newServing(now, ca, caKey)
	if err != nil {
		return err
	}
	plan.Material.Cert, plan.Material.Key = cert, key
	plan.NextCheck = earliest(plan.NextCheck, renewAt(leaf))
	return nil
}

// checkServing returns the parsed serving certificate, or why it must be issued again.
func (p Policy) checkServing(now time.Time, certPEM, keyPEM []byte, trusted []*x509.Certificate) (*x509.Certificate, string) {
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return nil, "no serving certificate"
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, "the serving certificate is unusable (" + err.Error() + ")"
	}
	leaf := pair.Leaf
	if !slices.Equal(sortedCopy(leaf.DNSNames), sortedCopy(p.DNSNames)) {
		return nil, "the serving certificate is for other DNS names"
	}
	roots := x509.NewCertPool()
	for _, c := range trusted {
		roots.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:       roots,
		CurrentTime: now,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return nil, "the serving certificate is not trusted now (" + err.Error() + ")"
	}
	return leaf, ""
}

func (p Policy) newCA(now time.Time) (*x509.Certificate, crypto.Signer, []byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("generating the CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	template := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("tpu-slice-operator-webhook-ca@%d", now.Unix())},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(p.CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, key.Public(), key)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("signing the CA: %w", err)
	}
	return issued(der, key)
}

func (p Policy) newServing(now time.Time, ca *x509.Certificate, caKey crypto.Signer) (*x509.Certificate, []byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("generating the serving key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, nil, err
	}
	notAfter := now.Add(p.CertValidity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter // A certificate never outlives its CA.
	}
	template := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: p.DNSNames[0]},
		DNSNames:              slices.Clone(p.DNSNames),
		NotBefore:             now.Add(-Backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("signing the serving certificate: %w", err)
	}
	cert, _, certPEM, keyPEM, err := issued(der, key)
	return cert, certPEM, keyPEM, err
}

func issued(der []byte, key *ecdsa.PrivateKey) (*x509.Certificate, crypto.Signer, []byte, []byte, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("parsing a certificate just issued: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("encoding a private key: %w", err)
	}
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	return serial, nil
}

// parseCA parses the signing CA and checks that its key belongs to it.
func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer, error) {
	certs := parseCertificates(certPEM)
	if len(certs) == 0 {
		return nil, nil, errors.New("no CA certificate")
	}
	ca := certs[0]
	if !ca.IsCA {
		return nil, nil, errors.New("the CA certificate is not a CA")
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, nil, errors.New("no CA key")
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the CA key: %w", err)
	}
	key, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, nil, errors.New("the CA key cannot sign")
	}
	pub, ok := key.Public().(interface{ Equal(x crypto.PublicKey) bool })
	if !ok || !pub.Equal(ca.PublicKey) {
		return nil, nil, errors.New("the CA key does not match the CA certificate")
	}
	return ca, key, nil
}

// parseCertificates returns the certificates of a PEM bundle, skipping anything unparseable.
func parseCertificates(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return out
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

func encodeCertificates(certs []*x509.Certificate) []byte {
	var buf bytes.Buffer
	for _, c := range certs {
		buf.Write(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}))
	}
	return buf.Bytes()
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
