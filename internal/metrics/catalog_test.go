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

// The metrics catalog: docs/operations.md lists every metric the operator registers, one table
// row each under "## Metrics", as `name{label,...}`. TestOperationsDocumentsEveryMetric compares
// that table with what the operator registers with controller-runtime's registry (the served
// set), names and labels, so that neither can change without the other.

import (
	"bufio"
	"crypto/x509"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
)

// catalogFile is the document whose "## Metrics" table is the catalog.
const catalogFile = "../../docs/operations.md"

// catalogRow matches a row of the table: | `name{labels}` | type | what |.
var catalogRow = regexp.MustCompile("^\\| `(" + namespace + `_[a-z0-9_]+)(?:\{([a-z_,]*)\})?` + "` \\| (counter|gauge|histogram) \\|")

// readMetricsCatalog returns the documented metrics: name -> "type labels".
func readMetricsCatalog(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(catalogFile)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	out := map[string]string{}
	in := false
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		line := scanner.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## Metrics"
			continue
		}
		if !in || !strings.HasPrefix(line, "| `"+namespace) {
			continue
		}
		m := catalogRow.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("%s: metric row %q is not | `name{label,...}` | counter, gauge or histogram | ... |", catalogFile, line)
			continue
		}
		if _, dup := out[m[1]]; dup {
			t.Errorf("%s lists %s twice", catalogFile, m[1])
		}
		out[m[1]] = m[3] + " " + m[2]
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("%s has no metric rows under ## Metrics", catalogFile)
	}
	return out
}

// TestOperationsDocumentsEveryMetric registers what the manager registers (the package's metrics,
// the slice collector the reconciler's setup adds, the certificate collector cmd/main.go adds),
// gathers controller-runtime's registry, and compares every tpu_slice_operator_ family, with its
// type and labels, to the catalog.
func TestOperationsDocumentsEveryMetric(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := tpuv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	elected := make(chan struct{})
	close(elected)
	if err := RegisterSliceCollector(fake.NewClientBuilder().WithScheme(scheme).Build(), elected); err != nil {
		t.Fatal(err)
	}
	if err := RegisterServingCertificate(func() (*x509.Certificate, error) {
		return &x509.Certificate{NotAfter: time.Now().Add(time.Hour)}, nil
	}); err != nil {
		t.Fatal(err)
	}
	// A vector has no sample, so is not gathered, until it has a child: give each one.
	for _, c := range Default.collectors() {
		switch v := c.(type) {
		case *prometheus.CounterVec:
			v.WithLabelValues("x").Add(0)
		case *prometheus.HistogramVec:
			v.WithLabelValues("x").Observe(0)
		}
	}

	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, mf := range families {
		name := mf.GetName()
		if !strings.HasPrefix(name, namespace+"_") {
			continue
		}
		var labels []string
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		got[name] = strings.ToLower(mf.GetType().String()) + " " + strings.Join(labels, ",")
	}
	want := readMetricsCatalog(t)
	// The catalog writes labels in their declaration order; the registry sorts them.
	for name, v := range want {
		typ, labels, _ := strings.Cut(v, " ")
		l := strings.Split(labels, ",")
		slices.Sort(l)
		want[name] = typ + " " + strings.Join(l, ",")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the metrics of %s (-documented +registered):\n%s", catalogFile, diff)
	}
}

// metricReference matches a use of one of the operator's metrics in a query.
var metricReference = regexp.MustCompile(namespace + `_[a-z0-9_]+`)

// TestAlertsAndDashboardUseDocumentedMetrics: every metric of the operator the alert rules and the
// dashboard query (a histogram through its _bucket, _sum or _count series) is in the catalog.
func TestAlertsAndDashboardUseDocumentedMetrics(t *testing.T) {
	documented := readMetricsCatalog(t)
	for _, path := range []string{"../../config/prometheus/rules.yaml", "../../config/grafana/tpu-slice-operator.json"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		refs := metricReference.FindAllString(string(b), -1)
		if len(refs) == 0 {
			t.Errorf("%s queries none of the operator's metrics", path)
		}
		for _, ref := range refs {
			name := ref
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(ref, suffix); ok && strings.HasPrefix(documented[base], "histogram") {
					name = base
				}
			}
			if _, ok := documented[name]; !ok {
				t.Errorf("%s queries %s, which %s does not list", path, ref, catalogFile)
			}
		}
	}
}
