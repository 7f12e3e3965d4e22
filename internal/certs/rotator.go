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

// Package certs gives the webhook server its serving certificate without cert-manager: a
// self-signed CA and a serving certificate kept in one Secret (so every replica serves
// certificates of the same CA), the CA bundle injected into both webhook configurations, and both
// renewed two thirds into their validity. Every replica runs the Rotator: it creates the Secret if
// it is missing, renews what is due (the Secret's resourceVersion picks one writer when replicas
// race), re-injects the bundle if someone resets it, and serves the current certificate from memory
// through tls.Config.GetCertificate, so a renewal needs no restart and no volume sync.
package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
)

// The Rotator's permissions, generated into config/selfsigned/role.yaml (only the self-signed
// install carries them). The Secret and the webhook configurations are named, so the Rotator can
// read and write exactly those; its caches list and watch them by metadata.name, which the API
// server authorizes against resourceNames. Creating the Secret cannot be limited by name.
//
// +kubebuilder:rbac:groups="",namespace=system,resources=secrets,verbs=create
// +kubebuilder:rbac:groups="",namespace=system,resources=secrets,verbs=get;list;watch;update,resourceNames=tpu-slice-operator-webhook-server-cert
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations;validatingwebhookconfigurations,verbs=get;list;watch;update,resourceNames=tpu-slice-operator-webhook-configuration

const (
	controllerName = "webhook-cert-rotator"
	// minRequeue spaces out checks when a renewal is due at once (it never is after a write).
	minRequeue = time.Second
)

// Rotator keeps the webhook serving certificate and the CA bundle of the webhook configurations
// current. It is a reconciler of a single key (the Secret), run on every replica.
type Rotator struct {
	opts   Options
	policy Policy
	key    types.NamespacedName
	clock  clock.PassiveClock
	log    logr.Logger

	// client writes; reader reads the Rotator's own cache; live reads the API server directly.
	client client.Client
	reader client.Reader
	live   client.Reader

	serving atomic.Pointer[servingPair]
	ready   atomic.Bool
}

// servingPair is the certificate the webhook server presents, with the PEM it was parsed from.
type servingPair struct {
	certPEM, keyPEM []byte
	cert            *tls.Certificate
}

// New returns a Rotator for opts (completed and validated). Its ConfigureTLS can be given to the
// webhook server before the manager exists; SetupWithManager then starts it.
func New(opts Options) (*Rotator, error) {
	if err := opts.Complete(); err != nil {
		return nil, err
	}
	if opts.Mode != ModeSelfSigned {
		return nil, fmt.Errorf("the rotator runs only in %s mode, not %q", ModeSelfSigned, opts.Mode)
	}
	return &Rotator{
		opts:   opts,
		policy: opts.Policy(),
		key:    types.NamespacedName{Namespace: opts.Namespace, Name: opts.SecretName},
		clock:  clock.RealClock{},
		log:    ctrl.Log.WithName("cert-rotator"),
	}, nil
}

// ConfigureTLS makes a TLS server present the Rotator's current certificate. When it is set, the
// webhook server reads no certificate files.
func (r *Rotator) ConfigureTLS(c *tls.Config) {
	c.GetCertificate = r.GetCertificate
}

// GetCertificate returns the current serving certificate, or an error (failing the handshake)
// before the first one is loaded.
func (r *Rotator) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if pair := r.serving.Load(); pair != nil {
		return pair.cert, nil
	}
	return nil, errors.New("no webhook serving certificate yet")
}

// ReadyCheck is a readiness check: it passes once this replica serves a certificate whose CA
// bundle it has seen in both webhook configurations.
func (r *Rotator) ReadyCheck(*http.Request) error {
	if r.serving.Load() == nil || !r.ready.Load() {
		return errors.New("webhook certificates are not in place yet")
	}
	return nil
}

// SetupWithManager adds the Rotator's cache (the Secret and the two webhook configurations, by
// name) and its controller, which runs on every replica, leader or not.
func (r *Rotator) SetupWithManager(mgr manager.Manager) error {
	byName := func(name string) fields.Selector { return fields.OneTermEqualSelector("metadata.name", name) }
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme:                      mgr.GetScheme(),
		Mapper:                      mgr.GetRESTMapper(),
		ReaderFailOnMissingInformer: true,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {
				Namespaces: map[string]cache.Config{r.key.Namespace: {}},
				Field:      byName(r.key.Name),
			},
			&admissionregistrationv1.MutatingWebhookConfiguration{}:   {Field: byName(r.opts.MutatingWebhookConfigurationName)},
			&admissionregistrationv1.ValidatingWebhookConfiguration{}: {Field: byName(r.opts.ValidatingWebhookConfigurationName)},
		},
	})
	if err != nil {
		return fmt.Errorf("creating the certificate cache: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return fmt.Errorf("adding the certificate cache: %w", err)
	}
	r.client, r.reader, r.live = mgr.GetClient(), c, mgr.GetAPIReader()

	ctl, err := controller.New(controllerName, mgr, controller.Options{
		Reconciler:         r,
		NeedLeaderElection: ptr.To(false),
	})
	if err != nil {
		return fmt.Errorf("creating the %s controller: %w", controllerName, err)
	}
	enqueue := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: r.key}}
	})
	for _, obj := range []client.Object{
		&corev1.Secret{},
		&admissionregistrationv1.MutatingWebhookConfiguration{},
		&admissionregistrationv1.ValidatingWebhookConfiguration{},
	} {
		if err := ctl.Watch(source.Kind(c, obj, enqueue)); err != nil {
			return fmt.Errorf("watching %T: %w", obj, err)
		}
	}
	// One check at start, even when none of the objects exists yet.
	kick := source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		q.Add(reconcile.Request{NamespacedName: r.key})
		return nil
	})
	if err := ctl.Watch(kick); err != nil {
		return fmt.Errorf("queueing the first check: %w", err)
	}
	return nil
}

// Reconcile brings the Secret, the webhook configurations and the served certificate up to date,
// and comes back when the next renewal is due.
func (r *Rotator) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	now := r.clock.Now()
	plan, err := r.ensureSecret(ctx, now)
	if apierrors.IsConflict(err) {
		// Another replica wrote first; its write queues this key again.
		r.log.V(1).Info("Certificate objects changed meanwhile, checking again", "err", err)
		return reconcile.Result{RequeueAfter: minRequeue}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	// The bundle goes into the webhook configurations before this replica serves a certificate
	// signed by a CA in it, so the API server never gets a certificate from this replica that the
	// configurations do not trust yet.
	injected, err := r.inject(ctx, plan.Material.CABundle)
	if apierrors.IsConflict(err) {
		r.log.V(1).Info("Webhook configuration changed meanwhile, checking again", "err", err)
		return reconcile.Result{RequeueAfter: minRequeue}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.load(plan.Material); err != nil {
		return reconcile.Result{}, err
	}
	if injected && !r.ready.Swap(true) {
		r.log.Info("Webhook certificates in place", "secret", r.key.String(),
			"mutatingWebhookConfiguration", r.opts.MutatingWebhookConfigurationName,
			"validatingWebhookConfiguration", r.opts.ValidatingWebhookConfigurationName)
	}
	return reconcile.Result{RequeueAfter: r.requeueAfter(now, plan.NextCheck)}, nil
}

func (r *Rotator) requeueAfter(now, next time.Time) time.Duration {
	return min(max(next.Sub(now), minRequeue), r.opts.CheckInterval)
}

// ensureSecret creates or renews the Secret and returns the plan it now holds.
func (r *Rotator) ensureSecret(ctx context.Context, now time.Time) (Plan, error) {
	secret := &corev1.Secret{}
	err := r.reader.Get(ctx, r.key, secret)
	if apierrors.IsNotFound(err) {
		created, plan, createErr := r.createSecret(ctx, now)
		if created {
			return plan, nil
		}
		if !apierrors.IsAlreadyExists(createErr) {
			return Plan{}, createErr
		}
		// Another replica created it first: go on from what it wrote.
		err = r.live.Get(ctx, r.key, secret)
	}
	if err != nil {
		return Plan{}, fmt.Errorf("reading Secret %s: %w", r.key, err)
	}
	plan, err := r.policy.Plan(now, MaterialFromData(secret.Data))
	if err != nil {
		return Plan{}, err
	}
	if !plan.Changed() {
		return plan, nil
	}
	secret.Data = plan.Material.Into(secret.Data)
	if err := r.client.Update(ctx, secret, client.FieldOwner(constants.FieldManager)); err != nil {
		return Plan{}, fmt.Errorf("updating Secret %s: %w", r.key, err)
	}
	r.log.Info("Renewed webhook certificates", "secret", r.key.String(), "reasons", plan.Reasons, "nextCheck", plan.NextCheck)
	return plan, nil
}

// createSecret creates the Secret with a new CA and serving certificate. It reports whether it did.
func (r *Rotator) createSecret(ctx context.Context, now time.Time) (bool, Plan, error) {
	plan, err := r.policy.Plan(now, Material{})
	if err != nil {
		return false, Plan{}, err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      r.key.Name,
			Namespace: r.key.Namespace,
			Labels: map[string]string{
				"app.kubernetes.io/name":       "tpu-slice-operator",
				"app.kubernetes.io/component":  "webhook-certificate",
				"app.kubernetes.io/managed-by": "tpu-slice-operator",
			},
		},
		Type: corev1.SecretTypeTLS,
		Data: plan.Material.Into(nil),
	}
	if err := r.client.Create(ctx, secret, client.FieldOwner(constants.FieldManager)); err != nil {
		return false, Plan{}, fmt.Errorf("creating Secret %s: %w", r.key, err)
	}
	r.log.Info("Created the webhook certificate Secret", "secret", r.key.String(), "nextCheck", plan.NextCheck)
	return true, plan, nil
}

// inject writes the bundle into every webhook of both configurations. It reports false, without
// an error, when a configuration does not exist (yet): its creation queues another check.
func (r *Rotator) inject(ctx context.Context, bundle []byte) (bool, error) {
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	injected := true
	for _, wc := range []struct {
		kind, name string
		obj        client.Object
		configs    func() []*admissionregistrationv1.WebhookClientConfig
	}{
		{"MutatingWebhookConfiguration", r.opts.MutatingWebhookConfigurationName, mutating, func() []*admissionregistrationv1.WebhookClientConfig {
			out := make([]*admissionregistrationv1.WebhookClientConfig, len(mutating.Webhooks))
			for i := range mutating.Webhooks {
				out[i] = &mutating.Webhooks[i].ClientConfig
			}
			return out
		}},
		{"ValidatingWebhookConfiguration", r.opts.ValidatingWebhookConfigurationName, validating, func() []*admissionregistrationv1.WebhookClientConfig {
			out := make([]*admissionregistrationv1.WebhookClientConfig, len(validating.Webhooks))
			for i := range validating.Webhooks {
				out[i] = &validating.Webhooks[i].ClientConfig
			}
			return out
		}},
	} {
		kind := wc.kind
		if err := r.reader.Get(ctx, client.ObjectKey{Name: wc.name}, wc.obj); err != nil {
			if apierrors.IsNotFound(err) {
				r.log.Info("Webhook configuration not found, waiting for it", "kind", kind, "name", wc.name)
				injected = false
				continue
			}
			return false, fmt.Errorf("reading %s %s: %w", kind, wc.name, err)
		}
		changed := false
		for _, cc := range wc.configs() {
			if !bytes.Equal(cc.CABundle, bundle) {
				cc.CABundle = bundle
				changed = true
			}
		}
		if !changed {
			continue
		}
		if err := r.client.Update(ctx, wc.obj, client.FieldOwner(constants.FieldManager)); err != nil {
			return false, fmt.Errorf("injecting the CA bundle into %s %s: %w", kind, wc.name, err)
		}
		r.log.Info("Injected the CA bundle", "kind", kind, "name", wc.name)
	}
	return injected, nil
}

// load makes the Material's serving certificate the one this replica presents.
func (r *Rotator) load(m Material) error {
	if cur := r.serving.Load(); cur != nil && bytes.Equal(cur.certPEM, m.Cert) && bytes.Equal(cur.keyPEM, m.Key) {
		return nil
	}
	pair, err := tls.X509KeyPair(m.Cert, m.Key)
	if err != nil {
		return fmt.Errorf("loading the serving certificate of Secret %s: %w", r.key, err)
	}
	r.serving.Store(&servingPair{certPEM: m.Cert, keyPEM: m.Key, cert: &pair})
	r.log.Info("Serving a new webhook certificate", "serial", pair.Leaf.SerialNumber.Text(16),
		"issuer", pair.Leaf.Issuer.CommonName, "notAfter", pair.Leaf.NotAfter)
	return nil
}
