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

// Command manager runs the tpu-slice-operator: the Pod and RayCluster admission webhooks (served by
// every replica) and the TPUSliceAssignment reconciler (leader-elected).
package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/ray-tpu/tpu-slice-operator/internal/certs"
	"github.com/ray-tpu/tpu-slice-operator/internal/forward"
	"github.com/ray-tpu/tpu-slice-operator/internal/managerflags"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/webhooks"
)

func main() {
	var f managerflags.Flags
	f.Bind(flag.CommandLine)
	flag.Parse()
	metricsAddr, probeAddr, webhookCertPath := f.MetricsAddr, f.ProbeAddr, f.WebhookCertPath
	secureMetrics, enableHTTP2, leaderElect := f.SecureMetrics, f.EnableHTTP2, f.LeaderElect
	claimForwarding, webhookPort := f.ClaimForwarding, f.WebhookPort
	opts, certOpts, zapOpts := f.Operator, f.Certs, f.Zap

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	tlsOpts := []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }}
	if !enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	// In self-signed mode the webhook server presents the rotator's certificate from memory, so a
	// renewal takes effect at once; in external mode it watches the files in webhookCertPath.
	webhookTLSOpts := slices.Clone(tlsOpts)
	var rotator *certs.Rotator
	if certOpts.Mode == certs.ModeSelfSigned {
		var err error
		if rotator, err = certs.New(certOpts); err != nil {
			log.Error(err, "Invalid certificate options")
			os.Exit(1)
		}
		webhookTLSOpts = append(webhookTLSOpts, rotator.ConfigureTLS)
	} else if err := certOpts.Validate(); err != nil {
		log.Error(err, "Invalid certificate options")
		os.Exit(1)
	}
	metricsOpts := metricsserver.Options{BindAddress: metricsAddr, SecureServing: secureMetrics, TLSOpts: tlsOpts}
	if secureMetrics {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}

	cfg := ctrl.GetConfigOrDie()
	var certWatcher *certwatcher.CertWatcher
	if claimForwarding {
		var err error
		if opts.Webhooks.Forward, certWatcher, err = forwardOptions(cfg, certOpts, rotator, webhookCertPath, webhookPort); err != nil {
			log.Error(err, "Invalid claim forwarding options")
			os.Exit(1)
		}
	}

	mgr, err := operator.New(cfg, manager.Options{
		Metrics:                metricsOpts,
		WebhookServer:          webhook.NewServer(webhook.Options{Port: webhookPort, CertDir: webhookCertPath, TLSOpts: webhookTLSOpts}),
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       "tpu-slice-operator.tpu.ray.io",
		// Stepping down releases the lease at once, so a new leader takes over the reconciler fast.
		LeaderElectionReleaseOnCancel: true,
	}, opts)
	if err != nil {
		log.Error(err, "Unable to create manager")
		os.Exit(1)
	}
	if certWatcher != nil {
		if err := mgr.Add(certWatcher); err != nil {
			log.Error(err, "Unable to watch the serving certificate")
			os.Exit(1)
		}
	}
	if rotator != nil {
		if err := rotator.SetupWithManager(mgr); err != nil {
			log.Error(err, "Unable to set up the certificate rotator")
			os.Exit(1)
		}
		// Ready only once this replica serves a certificate the webhook configurations trust.
		if err := mgr.AddReadyzCheck("certificates", rotator.ReadyCheck); err != nil {
			log.Error(err, "Unable to set up readiness check")
			os.Exit(1)
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "Unable to set up health check")
		os.Exit(1)
	}
	// Ready only once the webhook server serves: the Service must not send admissions earlier.
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		log.Error(err, "Unable to set up readiness check")
		os.Exit(1)
	}

	// Ready only once the informers the webhook reads through have synced: until then an admission
	// would wait for a full list.
	if err := mgr.AddReadyzCheck("informers", operator.CachesSynced(mgr.GetCache())); err != nil {
		log.Error(err, "Unable to set up readiness check")
		os.Exit(1)
	}

	log.Info("Starting manager", "leaderElection", leaderElect, "metricsAddress", metricsAddr, "webhookPort", webhookPort, "certMode", certOpts.Mode, "claimForwarding", claimForwarding)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "Manager exited with an error")
		os.Exit(1)
	}
}

// forwardOptions configures claim forwarding: peers are the ready endpoints of the webhook Service,
// this replica is $POD_IP on the webhook port, peers must present this replica's serving
// certificate (the rotator's in self-signed mode, else the files, watched), and this replica
// authenticates with its ServiceAccount token.
func forwardOptions(cfg *rest.Config, certOpts certs.Options, rotator *certs.Rotator, certDir string, port int) (webhooks.ForwardOptions, *certwatcher.CertWatcher, error) {
	if err := certOpts.Complete(); err != nil {
		return webhooks.ForwardOptions{}, nil, err
	}
	podIP := os.Getenv(managerflags.PodIPEnv)
	if podIP == "" {
		return webhooks.ForwardOptions{}, nil, errors.New("--claim-forwarding needs $" + managerflags.PodIPEnv + " (downward API status.podIP)")
	}
	opts := webhooks.ForwardOptions{
		Service:   certOpts.ServiceName,
		Namespace: certOpts.Namespace,
		Self:      net.JoinHostPort(podIP, strconv.Itoa(port)),
	}
	switch {
	case cfg.BearerTokenFile != "":
		opts.Token = forward.FileToken(cfg.BearerTokenFile)
	case cfg.BearerToken != "":
		opts.Token = forward.StaticToken(cfg.BearerToken)
	default:
		return webhooks.ForwardOptions{}, nil, errors.New("--claim-forwarding needs a bearer token to authenticate to the other replicas (run in-cluster with a ServiceAccount)")
	}
	if rotator != nil {
		opts.ServingCertificate = func() (*tls.Certificate, error) { return rotator.GetCertificate(nil) }
		return opts, nil, nil
	}
	if certDir == "" {
		certDir = filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs") // controller-runtime's default
	}
	watcher, err := certwatcher.New(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
	if err != nil {
		return webhooks.ForwardOptions{}, nil, err
	}
	opts.ServingCertificate = func() (*tls.Certificate, error) { return watcher.GetCertificate(nil) }
	return opts, watcher, nil
}
