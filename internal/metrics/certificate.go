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

package metrics

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// certificateCollector reports, when scraped, when the webhook serving certificate this replica
// presents expires: the alert on certificate expiry reads it, whichever mode issued the
// certificate (the built-in rotator or cert-manager).
type certificateCollector struct {
	serving func() (*x509.Certificate, error)
	desc    *prometheus.Desc
}

// RegisterServingCertificate registers the gauge
// tpu_slice_operator_webhook_certificate_expiry_timestamp_seconds, the NotAfter of the certificate
// serving returns (nothing while there is none).
func RegisterServingCertificate(serving func() (*x509.Certificate, error)) error {
	return crmetrics.Registry.Register(newCertificateCollector(serving))
}

func newCertificateCollector(serving func() (*x509.Certificate, error)) *certificateCollector {
	return &certificateCollector{
		serving: serving,
		desc: prometheus.NewDesc(namespace+"_webhook_certificate_expiry_timestamp_seconds",
			"When the webhook serving certificate this replica presents expires (its NotAfter), in seconds since the epoch.", nil, nil),
	}
}

func (c *certificateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *certificateCollector) Collect(ch chan<- prometheus.Metric) {
	cert, err := c.serving()
	if err != nil || cert == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(cert.NotAfter.Unix()))
}

// LeafOf returns the leaf of a TLS certificate source, such as the rotator's GetCertificate.
func LeafOf(get func(*tls.ClientHelloInfo) (*tls.Certificate, error)) func() (*x509.Certificate, error) {
	return func() (*x509.Certificate, error) {
		pair, err := get(nil)
		if err != nil {
			return nil, err
		}
		if pair.Leaf != nil {
			return pair.Leaf, nil
		}
		if len(pair.Certificate) == 0 {
			return nil, errors.New("an empty certificate")
		}
		return x509.ParseCertificate(pair.Certificate[0])
	}
}

// LeafInFile returns the first certificate of a PEM file, such as tls.crt in --webhook-cert-path,
// read at each call (cert-manager renews it in place).
func LeafInFile(path string) func() (*x509.Certificate, error) {
	return func() (*x509.Certificate, error) {
		b, err := os.ReadFile(path) //nolint:gosec // the path is the manager's own certificate flag.
		if err != nil {
			return nil, err
		}
		block, _ := pem.Decode(b)
		if block == nil {
			return nil, errors.New(path + " holds no PEM block")
		}
		return x509.ParseCertificate(block.Bytes)
	}
}
