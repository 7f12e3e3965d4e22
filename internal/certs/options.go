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
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// Certificate modes.
const (
	// ModeSelfSigned issues and rotates the serving certificate in the operator (this package).
	ModeSelfSigned = "self-signed"
	// ModeExternal reads the serving certificate from files another tool (cert-manager) maintains.
	ModeExternal = "external"
)

// Defaults of the flags: the names config/default gives the objects (kustomize namePrefix
// tpu-slice-operator-). The +kubebuilder:rbac markers in rotator.go name the same objects.
const (
	DefaultSecretName                  = "tpu-slice-operator-webhook-server-cert"
	DefaultServiceName                 = "tpu-slice-operator-webhook-service"
	DefaultWebhookConfigurationName    = "tpu-slice-operator-webhook-configuration"
	DefaultCheckInterval               = time.Hour
	serviceAccountNamespaceFile        = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
	namespaceEnv                       = "POD_NAMESPACE"
	minValidity                        = time.Hour
	mutatingWebhookConfigurationFlag   = "mutating-webhook-configuration-name"
	validatingWebhookConfigurationFlag = "validating-webhook-configuration-name"
)

// Options configure where the webhook serving certificate comes from.
type Options struct {
	// Mode is ModeSelfSigned or ModeExternal.
	Mode string
	// Namespace of the Secret and of the webhook Service; empty means the Pod's own namespace
	// (POD_NAMESPACE, else the service account's namespace).
	Namespace string
	// SecretName is the Secret holding the CA and the serving certificate (self-signed mode).
	SecretName string
	// ServiceName is the webhook Service, whose DNS names the serving certificate carries.
	ServiceName string
	// MutatingWebhookConfigurationName and ValidatingWebhookConfigurationName receive the CA bundle.
	MutatingWebhookConfigurationName, ValidatingWebhookConfigurationName string
	// CAValidity and CertValidity are the lifetimes of what the self-signed mode issues.
	CAValidity, CertValidity time.Duration
	// TrustDelay is how long a new CA is in the bundle before it signs the serving certificate.
	TrustDelay time.Duration
	// CheckInterval bounds the time between two checks of the Secret and the webhook configurations.
	CheckInterval time.Duration
}

// BindFlags registers the options' command-line flags.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Mode, "cert-mode", ModeExternal, "Where the webhook serving certificate comes from: "+ModeSelfSigned+
		" (the operator issues it, stores it in --cert-secret-name, injects its CA into the webhook configurations and rotates it) or "+
		ModeExternal+" (files in --webhook-cert-path, e.g. from cert-manager).")
	fs.StringVar(&o.Namespace, "cert-namespace", "", "Namespace of the certificate Secret and the webhook Service (default: the Pod's namespace, from $"+namespaceEnv+").")
	fs.StringVar(&o.SecretName, "cert-secret-name", DefaultSecretName, "Secret holding the CA and serving certificate ("+ModeSelfSigned+" mode).")
	fs.StringVar(&o.ServiceName, "webhook-service-name", DefaultServiceName, "Service in front of the webhooks; the serving certificate is for its DNS names ("+ModeSelfSigned+" mode).")
	fs.StringVar(&o.MutatingWebhookConfigurationName, mutatingWebhookConfigurationFlag, DefaultWebhookConfigurationName,
		"MutatingWebhookConfiguration that receives the CA bundle ("+ModeSelfSigned+" mode).")
	fs.StringVar(&o.ValidatingWebhookConfigurationName, validatingWebhookConfigurationFlag, DefaultWebhookConfigurationName,
		"ValidatingWebhookConfiguration that receives the CA bundle ("+ModeSelfSigned+" mode).")
	fs.DurationVar(&o.CAValidity, "self-signed-ca-validity", DefaultCAValidity, "Lifetime of a CA; it is renewed two thirds into it ("+ModeSelfSigned+" mode).")
	fs.DurationVar(&o.CertValidity, "self-signed-cert-validity", DefaultCertValidity, "Lifetime of a serving certificate; it is renewed two thirds into it ("+ModeSelfSigned+" mode).")
}

// Complete fills in defaults: the namespace from the environment and unset durations.
func (o *Options) Complete() error {
	if o.Namespace == "" {
		o.Namespace = os.Getenv(namespaceEnv)
	}
	if o.Namespace == "" {
		if data, err := os.ReadFile(serviceAccountNamespaceFile); err == nil {
			o.Namespace = strings.TrimSpace(string(data))
		}
	}
	if o.CAValidity == 0 {
		o.CAValidity = DefaultCAValidity
	}
	if o.CertValidity == 0 {
		o.CertValidity = DefaultCertValidity
	}
	if o.TrustDelay == 0 {
		o.TrustDelay = DefaultTrustDelay
	}
	if o.CheckInterval == 0 {
		o.CheckInterval = DefaultCheckInterval
	}
	return o.Validate()
}

// Validate checks the options of the self-signed mode (the external mode needs none of them).
func (o *Options) Validate() error {
	switch o.Mode {
	case ModeExternal:
		return nil
	case ModeSelfSigned:
	default:
		return fmt.Errorf("--cert-mode must be %s or %s, got %q", ModeSelfSigned, ModeExternal, o.Mode)
	}
	var errs []error
	for _, required := range []struct{ flag, value string }{
		{"cert-namespace", o.Namespace},
		{"cert-secret-name", o.SecretName},
		{"webhook-service-name", o.ServiceName},
		{mutatingWebhookConfigurationFlag, o.MutatingWebhookConfigurationName},
		{validatingWebhookConfigurationFlag, o.ValidatingWebhookConfigurationName},
	} {
		if required.value == "" {
			errs = append(errs, fmt.Errorf("--%s must be set in %s mode", required.flag, ModeSelfSigned))
		}
	}
	if o.CertValidity < minValidity {
		errs = append(errs, fmt.Errorf("--self-signed-cert-validity must be at least %s, got %s", minValidity, o.CertValidity))
	}
	if o.CAValidity < o.CertValidity {
		errs = append(errs, fmt.Errorf("--self-signed-ca-validity (%s) must be at least --self-signed-cert-validity (%s)", o.CAValidity, o.CertValidity))
	}
	if o.TrustDelay < 0 || o.TrustDelay >= o.CertValidity/3 {
		errs = append(errs, fmt.Errorf("the trust delay %s must be below a third of the certificate validity %s", o.TrustDelay, o.CertValidity))
	}
	return errors.Join(errs...)
}

// DNSNames are the names the API server uses to call the webhook Service.
func (o *Options) DNSNames() []string {
	base := o.ServiceName + "." + o.Namespace + ".svc"
	return []string{base, base + ".cluster.local"}
}

// Policy is the issuing policy these options describe.
func (o *Options) Policy() Policy {
	return Policy{DNSNames: o.DNSNames(), CAValidity: o.CAValidity, CertValidity: o.CertValidity, TrustDelay: o.TrustDelay}
}
