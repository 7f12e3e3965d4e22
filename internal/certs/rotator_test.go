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
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

const testNamespace = "op-system"

var secretKey = client.ObjectKey{Namespace: testNamespace, Name: "webhook-cert"}

func testOptions() Options {
	return Options{
		Mode:                               ModeSelfSigned,
		Namespace:                          testNamespace,
		SecretName:                         secretKey.Name,
		ServiceName:                        "webhook-service",
		MutatingWebhookConfigurationName:   "mutating",
		ValidatingWebhookConfigurationName: "validating",
		CAValidity:                         30 * day,
		CertValidity:                       9 * day,
	}
}

func webhookConfigurations() []client.Object {
	return []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "mutating"},
			Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: "mpod.tpu.ray.io"}},
		},
		&admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "validating"},
			Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "vraycluster.tpu.ray.io"}, {Name: "another.tpu.ray.io"}},
		},
		// Someone else's configuration, which the rotator must leave alone.
		&admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "unrelated"},
			Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: "other.example.com"}},
		},
	}
}

// newTestRotator returns a Rotator on a fake API server. reader, when set, stands in for its cache.
func newTestRotator(t *testing.T, c client.Client, reader client.Reader, clk *clocktesting.FakePassiveClock) *Rotator {
	t.Helper()
	r, err := New(testOptions())
	if err != nil {
		t.Fatal(err)
	}
	r.client, r.reader, r.live = c, c, c
	if reader != nil {
		r.reader = reader
	}
	r.clock = clk
	r.log = testr.New(t)
	return r
}

func newFakeClient(funcs *interceptor.Funcs, objs ...client.Object) client.WithWatch {
	b := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...)
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	return b.Build()
}

func reconcileOnce(t *testing.T, r *Rotator) reconcile.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: secretKey})
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	return res
}

// state is what the rotator left on the API server and in memory.
type state struct {
	SecretResourceVersion string
	BundleCAs             int
	// InjectedBundles holds, per webhook of the two configurations and the unrelated one, whether
	// its caBundle equals the Secret's bundle.
	InjectedBundles map[string]bool
	Ready           bool
	// ServedSerial is the serial of the certificate GetCertificate returns ("" if none).
	ServedSerial string
	// ServedIsSecrets tells whether the served certificate is the Secret's tls.crt.
	ServedIsSecrets bool
}

func observe(t *testing.T, c client.Client, r *Rotator) (state, Material) {
	t.Helper()
	ctx := context.Background()
	var s state
	secret := &corev1.Secret{}
	var m Material
	if err := c.Get(ctx, secretKey, secret); err == nil {
		s.SecretResourceVersion = secret.ResourceVersion
		m = MaterialFromData(secret.Data)
		s.BundleCAs = len(parseCertificates(m.CABundle))
	} else if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	s.InjectedBundles = map[string]bool{}
	mutating := &admissionregistrationv1.MutatingWebhookConfigurationList{}
	if err := c.List(ctx, mutating); err != nil {
		t.Fatal(err)
	}
	for _, wc := range mutating.Items {
		for _, w := range wc.Webhooks {
			s.InjectedBundles[wc.Name+"/"+w.Name] = len(m.CABundle) > 0 && bytes.Equal(w.ClientConfig.CABundle, m.CABundle)
		}
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	if err := c.List(ctx, validating); err != nil {
		t.Fatal(err)
	}
	for _, wc := range validating.Items {
		for _, w := range wc.Webhooks {
			s.InjectedBundles[wc.Name+"/"+w.Name] = len(m.CABundle) > 0 && bytes.Equal(w.ClientConfig.CABundle, m.CABundle)
		}
	}
	s.Ready = r.ReadyCheck(nil) == nil
	if cert, err := r.GetCertificate(nil); err == nil {
		s.ServedSerial = cert.Leaf.SerialNumber.Text(16)
		s.ServedIsSecrets = bytes.Equal(cert.Certificate[0], firstDER(t, m.Cert))
	}
	return s, m
}

func firstDER(t *testing.T, certPEM []byte) []byte {
	t.Helper()
	certs := parseCertificates(certPEM)
	if len(certs) == 0 {
		return nil
	}
	return certs[0].Raw
}

var allInjected = map[string]bool{
	"mutating/mpod.tpu.ray.io":          true,
	"validating/vraycluster.tpu.ray.io": true,
	"validating/another.tpu.ray.io":     true,
	"unrelated/other.example.com":       false,
}

func TestReconcileBootstrap(t *testing.T) {
	cases := map[string]struct {
		objects    []client.Object
		want       state
		wantResult reconcile.Result
	}{
		"creates the Secret, injects both configurations, serves the certificate": {
			objects:    webhookConfigurations(),
			want:       state{SecretResourceVersion: "1", BundleCAs: 1, InjectedBundles: allInjected, Ready: true, ServedIsSecrets: true},
			wantResult: reconcile.Result{RequeueAfter: time.Hour},
		},
		"without the webhook configurations it serves but is not ready": {
			want:       state{SecretResourceVersion: "1", BundleCAs: 1, InjectedBundles: map[string]bool{}, ServedIsSecrets: true},
			wantResult: reconcile.Result{RequeueAfter: time.Hour},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := newFakeClient(nil, tc.objects...)
			r := newTestRotator(t, c, nil, clocktesting.NewFakePassiveClock(t0))
			if err := r.ReadyCheck(nil); err == nil {
				t.Error("ready before the first reconcile")
			}
			if _, err := r.GetCertificate(nil); err == nil {
				t.Error("a certificate before the first reconcile")
			}
			res := reconcileOnce(t, r)
			if diff := cmp.Diff(tc.wantResult, res); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			got, _ := observe(t, c, r)
			got.ServedSerial = ""
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("state (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReconcileConfigurationsArriveLater(t *testing.T) {
	c := newFakeClient(nil)
	r := newTestRotator(t, c, nil, clocktesting.NewFakePassiveClock(t0))
	reconcileOnce(t, r)
	for _, obj := range webhookConfigurations() {
		if err := c.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	reconcileOnce(t, r)
	got, _ := observe(t, c, r)
	if diff := cmp.Diff(allInjected, got.InjectedBundles); diff != "" {
		t.Errorf("injected (-want +got):\n%s", diff)
	}
	if !got.Ready || got.SecretResourceVersion != "1" {
		t.Errorf("ready = %t, Secret resourceVersion = %s; want ready and the Secret written once", got.Ready, got.SecretResourceVersion)
	}
}

// Replicas share one CA: the second replica serves what the first wrote, without writing.
func TestReconcileReplicasShareTheSecret(t *testing.T) {
	c := newFakeClient(nil, webhookConfigurations()...)
	clk := clocktesting.NewFakePassiveClock(t0)
	first := newTestRotator(t, c, nil, clk)
	reconcileOnce(t, first)
	before, _ := observe(t, c, first)

	cases := map[string]struct {
		reader client.Reader
	}{
		"the second replica's cache has the Secret": {},
		"the second replica's cache has not seen the Secret yet: its create fails and it reads live": {
			reader: interceptor.NewClient(c, interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if _, ok := obj.(*corev1.Secret); ok {
						return apierrors.NewNotFound(corev1.Resource("secrets"), key.Name)
					}
					return c.Get(ctx, key, obj, opts...)
				},
			}),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			second := newTestRotator(t, c, tc.reader, clk)
			reconcileOnce(t, second)
			after, _ := observe(t, c, second)
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("the second replica changed something or serves another certificate (-first +second):\n%s", diff)
			}
		})
	}
}

func TestReconcileRepairsResets(t *testing.T) {
	cases := map[string]func(t *testing.T, c client.Client){
		"the caBundle of both configurations is cleared": func(t *testing.T, c client.Client) {
			ctx := context.Background()
			mutating := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := c.Get(ctx, client.ObjectKey{Name: "mutating"}, mutating); err != nil {
				t.Fatal(err)
			}
			mutating.Webhooks[0].ClientConfig.CABundle = nil
			validating := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := c.Get(ctx, client.ObjectKey{Name: "validating"}, validating); err != nil {
				t.Fatal(err)
			}
			validating.Webhooks[1].ClientConfig.CABundle = []byte("garbage")
			for _, obj := range []client.Object{mutating, validating} {
				if err := c.Update(ctx, obj); err != nil {
					t.Fatal(err)
				}
			}
		},
		"the Secret is emptied": func(t *testing.T, c client.Client) {
			secret := &corev1.Secret{}
			if err := c.Get(context.Background(), secretKey, secret); err != nil {
				t.Fatal(err)
			}
			secret.Data = nil
			if err := c.Update(context.Background(), secret); err != nil {
				t.Fatal(err)
			}
		},
		"the Secret is deleted": func(t *testing.T, c client.Client) {
			if err := c.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: secretKey.Namespace, Name: secretKey.Name}}); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, reset := range cases {
		t.Run(name, func(t *testing.T) {
			c := newFakeClient(nil, webhookConfigurations()...)
			r := newTestRotator(t, c, nil, clocktesting.NewFakePassiveClock(t0))
			reconcileOnce(t, r)
			reset(t, c)
			reconcileOnce(t, r)
			got, _ := observe(t, c, r)
			if diff := cmp.Diff(allInjected, got.InjectedBundles); diff != "" {
				t.Errorf("injected (-want +got):\n%s", diff)
			}
			if !got.Ready || !got.ServedIsSecrets {
				t.Errorf("ready = %t, serves the Secret's certificate = %t; want both", got.Ready, got.ServedIsSecrets)
			}
		})
	}
}

// TestReconcileRotation drives one replica through renewals with a clock it controls, checking
// what it writes, injects and serves at each step.
func TestReconcileRotation(t *testing.T) {
	type want struct {
		secretWritten bool
		newServed     bool // The served certificate changed.
		bundleCAs     int
		servedFromCA  int // 1 = the first CA, 2 = the second.
		requeue       time.Duration
	}
	steps := []struct {
		at   time.Duration
		want want
	}{
		{0, want{secretWritten: true, newServed: true, bundleCAs: 1, servedFromCA: 1, requeue: time.Hour}},
		{time.Hour, want{bundleCAs: 1, servedFromCA: 1, requeue: time.Hour}},
		{6 * day, want{secretWritten: true, newServed: true, bundleCAs: 1, servedFromCA: 1, requeue: time.Hour}},
		{12 * day, want{secretWritten: true, newServed: true, bundleCAs: 1, servedFromCA: 1, requeue: time.Hour}},
		{18 * day, want{secretWritten: true, newServed: true, bundleCAs: 1, servedFromCA: 1, requeue: time.Hour}},
		// The CA is renewed: the bundle trusts both, the replica keeps serving the old certificate.
		{20 * day, want{secretWritten: true, bundleCAs: 2, servedFromCA: 1, requeue: 10 * time.Minute}},
		{20*day + 9*time.Minute, want{bundleCAs: 2, servedFromCA: 1, requeue: time.Minute}},
		// Trusted for the trust delay: now the certificate comes from the new CA.
		{20*day + 10*time.Minute, want{secretWritten: true, newServed: true, bundleCAs: 2, servedFromCA: 2, requeue: time.Hour}},
		{26*day + 10*time.Minute, want{secretWritten: true, newServed: true, bundleCAs: 2, servedFromCA: 2, requeue: time.Hour}},
		// The old CA expires and leaves the bundle.
		{30 * day, want{secretWritten: true, bundleCAs: 1, servedFromCA: 2, requeue: time.Hour}},
	}
	c := newFakeClient(nil, webhookConfigurations()...)
	clk := clocktesting.NewFakePassiveClock(t0)
	r := newTestRotator(t, c, nil, clk)
	var cas []string
	prev, _ := observe(t, c, r)
	for i, s := range steps {
		clk.SetTime(t0.Add(s.at))
		res := reconcileOnce(t, r)
		got, m := observe(t, c, r)
		served, err := r.GetCertificate(nil)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		ca, _, err := parseCA(m.CACert, m.CAKey)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if len(cas) == 0 || cas[len(cas)-1] != ca.Subject.CommonName {
			cas = append(cas, ca.Subject.CommonName)
		}
		servedFrom := 0
		for j, name := range cas {
			if served.Leaf.Issuer.CommonName == name {
				servedFrom = j + 1
			}
		}
		gotWant := want{
			secretWritten: got.SecretResourceVersion != prev.SecretResourceVersion,
			newServed:     got.ServedSerial != prev.ServedSerial,
			bundleCAs:     got.BundleCAs,
			servedFromCA:  servedFrom,
			requeue:       res.RequeueAfter,
		}
		if diff := cmp.Diff(s.want, gotWant, cmp.AllowUnexported(want{})); diff != "" {
			t.Errorf("step %d (t0+%s) (-want +got):\n%s", i, s.at, diff)
		}
		if diff := cmp.Diff(allInjected, got.InjectedBundles); diff != "" {
			t.Errorf("step %d: injected (-want +got):\n%s", i, diff)
		}
		// What this replica serves is trusted by what the configurations carry.
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(m.CABundle)
		if _, err := served.Leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: clk.Now(), DNSName: "webhook-service.op-system.svc"}); err != nil {
			t.Errorf("step %d: the served certificate is not trusted by the injected bundle: %v", i, err)
		}
		prev = got
	}
}

func TestReconcileConflicts(t *testing.T) {
	conflict := func(obj client.Object) error {
		gvk := obj.GetObjectKind().GroupVersionKind()
		return apierrors.NewConflict(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, obj.GetName(), errors.New("stale"))
	}
	cases := map[string]interceptor.Funcs{
		"the Secret changed meanwhile": {
			Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
				return conflict(obj)
			},
		},
		"a webhook configuration changed meanwhile": {
			Update: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.UpdateOption) error {
				return conflict(obj)
			},
		},
	}
	for name, funcs := range cases {
		t.Run(name, func(t *testing.T) {
			c := newFakeClient(&funcs, webhookConfigurations()...)
			r := newTestRotator(t, c, nil, clocktesting.NewFakePassiveClock(t0))
			res := reconcileOnce(t, r)
			if diff := cmp.Diff(reconcile.Result{RequeueAfter: time.Second}, res); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			if r.ReadyCheck(nil) == nil {
				t.Error("ready after a conflict")
			}
		})
	}
}

func TestReconcileErrors(t *testing.T) {
	boom := errors.New("API server unreachable")
	cases := map[string]interceptor.Funcs{
		"reading the Secret fails": {
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*corev1.Secret); ok {
					return boom
				}
				return c.Get(ctx, key, obj, opts...)
			},
		},
		"creating the Secret fails": {
			Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error { return boom },
		},
		"injecting fails": {
			Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error { return boom },
		},
	}
	for name, funcs := range cases {
		t.Run(name, func(t *testing.T) {
			c := newFakeClient(&funcs, webhookConfigurations()...)
			r := newTestRotator(t, c, nil, clocktesting.NewFakePassiveClock(t0))
			if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: secretKey}); !errors.Is(err, boom) {
				t.Errorf("Reconcile error = %v, want %v", err, boom)
			}
			if r.ReadyCheck(nil) == nil {
				t.Error("ready after an error")
			}
		})
	}
}

// TestServesOverTLS checks the certificate end to end: a TLS server configured by ConfigureTLS is
// trusted by a client holding only the injected bundle and dialing the Service's DNS name.
func TestServesOverTLS(t *testing.T) {
	c := newFakeClient(nil, webhookConfigurations()...)
	r := newTestRotator(t, c, nil, clocktesting.NewFakePassiveClock(time.Now()))
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	r.ConfigureTLS(cfg)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.(*tls.Conn).Handshake()
			_, _ = io.WriteString(conn, "ok")
			_ = conn.Close()
		}
	}()
	dial := func(roots *x509.CertPool) error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(),
			&tls.Config{RootCAs: roots, ServerName: "webhook-service.op-system.svc", MinVersion: tls.VersionTLS12})
		if err != nil {
			return err
		}
		return conn.Close()
	}
	if err := dial(x509.NewCertPool()); err == nil {
		t.Fatal("a handshake succeeded before any certificate was loaded")
	}
	reconcileOnce(t, r)
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "mutating"}, mutating); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(mutating.Webhooks[0].ClientConfig.CABundle) {
		t.Fatal("no CA in the injected bundle")
	}
	if err := dial(roots); err != nil {
		t.Errorf("handshake with the injected bundle: %v", err)
	}
}

func TestRequeueAfter(t *testing.T) {
	r := &Rotator{opts: Options{CheckInterval: time.Hour}}
	cases := map[string]struct {
		next time.Duration
		want time.Duration
	}{
		"due soon":             {next: 10 * time.Minute, want: 10 * time.Minute},
		"due later than check": {next: 5 * day, want: time.Hour},
		"overdue":              {next: -time.Minute, want: time.Second},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := r.requeueAfter(t0, t0.Add(tc.next)); got != tc.want {
				t.Errorf("requeueAfter = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestOptions(t *testing.T) {
	cases := map[string]struct {
		edit    func(*Options)
		env     string
		wantErr []string
	}{
		"self-signed with everything set": {edit: func(*Options) {}},
		"external needs nothing": {
			edit: func(o *Options) { *o = Options{Mode: ModeExternal} },
		},
		"an unknown mode": {
			edit:    func(o *Options) { o.Mode = "cert-manager" },
			wantErr: []string{`--cert-mode must be self-signed or external, got "cert-manager"`},
		},
		"the namespace comes from POD_NAMESPACE": {
			edit: func(o *Options) { o.Namespace = "" },
			env:  "from-env",
		},
		"missing names": {
			edit: func(o *Options) {
				o.SecretName, o.MutatingWebhookConfigurationName, o.ValidatingWebhookConfigurationName = "", "", ""
			},
			wantErr: []string{
				"--cert-secret-name must be set in self-signed mode",
				"--mutating-webhook-configuration-name must be set in self-signed mode",
				"--validating-webhook-configuration-name must be set in self-signed mode",
			},
		},
		"validities too short or inverted": {
			edit: func(o *Options) { o.CertValidity, o.CAValidity = 30*time.Minute, 20*time.Minute },
			wantErr: []string{
				"--self-signed-cert-validity must be at least 1h0m0s, got 30m0s",
				"--self-signed-ca-validity (20m0s) must be at least --self-signed-cert-validity (30m0s)",
				"the trust delay 10m0s must be below a third of the certificate validity 30m0s",
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv(namespaceEnv, tc.env)
			o := testOptions()
			tc.edit(&o)
			err := o.Complete()
			var got []string
			if err != nil {
				got = splitLines(err.Error())
			}
			if diff := cmp.Diff(tc.wantErr, got); diff != "" {
				t.Errorf("Complete errors (-want +got):\n%s", diff)
			}
			if tc.env != "" && o.Namespace != tc.env {
				t.Errorf("Namespace = %q, want %q from $%s", o.Namespace, tc.env, namespaceEnv)
			}
		})
	}
}

func TestOptionsDNSNames(t *testing.T) {
	o := testOptions()
	want := []string{"webhook-service.op-system.svc", "webhook-service.op-system.svc.cluster.local"}
	if diff := cmp.Diff(want, o.DNSNames()); diff != "" {
		t.Errorf("DNSNames (-want +got):\n%s", diff)
	}
}

func splitLines(s string) []string {
	var out []string
	for line := range bytes.Lines([]byte(s)) {
		out = append(out, string(bytes.TrimRight(line, "\n")))
	}
	return out
}
