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
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
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
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/internal/version"
)

func main() {
	var f managerflags.Flags
	f.Bind(flag.CommandLine)
	_ = f.Parse(flag.CommandLine, os.Args[1:]) // flag.CommandLine exits on an error.
	if f.Version {
		fmt.Println(version.Get())
		return
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&f.Zap)))
	log := ctrl.Log.WithName("setup")
	limit, set, err := managerflags.SoftMemoryLimit(os.Getenv)
	if err != nil {
		log.Error(err, "Invalid memory limit")
		os.Exit(1)
	}
	if set {
		debug.SetMemoryLimit(limit)
		log.Info("Soft memory limit set from the container's limit", "bytes", limit)
	}
	if err := run(&f); err != nil {
		log.Error(err, "Manager exited with an error")
		os.Exit(1)
	}
}

// run builds the manager from the flags and runs it until a termination signal.
func run(f *managerflags.Flags) error {
	tlsOpts := []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }}
	if !f.EnableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	// In self-signed mode the webhook server presents the rotator's certificate from memory, so a
	// renewal takes effect at once; in external mode it watches the files in --webhook-cert-path.
	webhookTLSOpts := slices.Clone(tlsOpts)
	var rotator *certs.Rotator
	if f.Certs.Mode == certs.ModeSelfSigned {
		var err error
		if rotator, err = certs.New(f.Certs); err != nil {
			return fmt.Errorf("invalid certificate options: %w", err)
		}
		webhookTLSOpts = append(webhookTLSOpts, rotator.ConfigureTLS)
	} else if err := f.Certs.Validate(); err != nil {
		return fmt.Errorf("invalid certificate options: %w", err)
	}
	cfg := ctrl.GetConfigOrDie()
	opts := f.Operator
	var certWatcher *certwatcher.CertWatcher
	if f.ClaimForwarding {
		var err error
		if opts.Forward, certWatcher, err = forwardOptions(cfg, f, rotator); err != nil {
			return fmt.Errorf("invalid claim forwarding options: %w", err)
		}
	}
	mgr, err := operator.New(cfg, managerOptions(f, tlsOpts, webhookTLSOpts), opts)
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := addRunnables(mgr, certWatcher, rotator); err != nil {
		return err
	}
	serving := metrics.LeafInFile(filepath.Join(webhookCertDir(f), "tls.crt"))
	if rotator != nil {
		serving = metrics.LeafOf(rotator.GetCertificate)
	}
	if err := metrics.RegisterServingCertificate(serving); err != nil {
		return fmt.Errorf("registering the certificate metric: %w", err)
	}
	setupLog := ctrl.Log.WithName("setup")
	if f.ReservingAlone() {
		setupLog.Info("Claim reservations are on without --claim-forwarding: run this manager as a single replica, since replicas that each reserve IDs deny each other's Pods (docs/spec.md §3.5)",
			"reservationWindow", f.Operator.ReservationWindow)
	}
	setupLog.Info("Starting manager", "version", version.Get().Version, "commit", version.Get().Commit, "leaderElection", f.LeaderElect, "metricsAddress", f.MetricsAddr,
		"webhookPort", f.WebhookPort, "certMode", f.Certs.Mode, "claimForwarding", f.ClaimForwarding,
		"reservationWindow", f.Operator.ReservationWindow)
	return mgr.Start(ctrl.SetupSignalHandler())
}

// managerOptions are the manager's servers (metrics, webhooks, probes) and leader election.
func managerOptions(f *managerflags.Flags, tlsOpts, webhookTLSOpts []func(*tls.Config)) manager.Options {
	metricsOpts := metricsserver.Options{BindAddress: f.MetricsAddr, SecureServing: f.SecureMetrics, TLSOpts: tlsOpts}
	if f.SecureMetrics {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return manager.Options{
		Metrics:                metricsOpts,
		WebhookServer:          webhook.NewServer(webhook.Options{Port: f.WebhookPort, CertDir: f.WebhookCertPath, TLSOpts: webhookTLSOpts}),
		HealthProbeBindAddress: f.ProbeAddr,
		LeaderElection:         f.LeaderElect,
		LeaderElectionID:       "tpu-slice-operator.tpu.ray.io",
		// Stepping down releases the lease at once, so a new leader takes over the reconciler fast.
		LeaderElectionReleaseOnCancel: true,
	}
}

// addRunnables adds the certificate watcher or rotator and the health and readiness checks. A
// replica is ready only once it serves a certificate the webhook configurations trust (with the
// rotator), its webhook server serves (the Service must not send admissions earlier), and the
// informers the webhook reads through have synced (until then an admission would wait for a full
// list).
func addRunnables(mgr manager.Manager, certWatcher *certwatcher.CertWatcher, rotator *certs.Rotator) error {
	if certWatcher != nil {
		if err := mgr.Add(certWatcher); err != nil {
			return fmt.Errorf("watching the serving certificate: %w", err)
		}
	}
	ready := map[string]healthz.Checker{
		"webhook":   mgr.GetWebhookServer().StartedChecker(),
		"informers": operator.CachesSynced(mgr.GetCache()),
	}
	if rotator != nil {
		if err := rotator.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the certificate rotator: %w", err)
		}
		ready["certificates"] = rotator.ReadyCheck
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("setting up the health check: %w", err)
	}
	for name, check := range ready {
		if err := mgr.AddReadyzCheck(name, check); err != nil {
			return fmt.Errorf("setting up the %s readiness check: %w", name, err)
		}
	}
	return nil
}

// forwardOptions configures claim forwarding: peers are the ready endpoints of the webhook Service,
// this replica is $POD_IP on the webhook port, peers must present this replica's serving
// certificate (the rotator's in self-signed mode, else the files, watched), and this replica
// authenticates with its ServiceAccount token.
func forwardOptions(cfg *rest.Config, f *managerflags.Flags, rotator *certs.Rotator) (forward.SetupOptions, *certwatcher.CertWatcher, error) {
	certOpts := f.Certs
	if err := certOpts.Complete(); err != nil {
		return forward.SetupOptions{}, nil, err
	}
	podIP := os.Getenv(managerflags.PodIPEnv)
	if podIP == "" {
		return forward.SetupOptions{}, nil, errors.New("--claim-forwarding needs $" + managerflags.PodIPEnv + " (downward API status.podIP)")
	}
	opts := forward.SetupOptions{
		Service:   certOpts.ServiceName,
		Namespace: certOpts.Namespace,
		Self:      net.JoinHostPort(podIP, strconv.Itoa(f.WebhookPort)),
	}
	switch {
	case cfg.BearerTokenFile != "":
		opts.Router.Token = forward.FileToken(cfg.BearerTokenFile)
	case cfg.BearerToken != "":
		opts.Router.Token = forward.StaticToken(cfg.BearerToken)
	default:
		return forward.SetupOptions{}, nil, errors.New("--claim-forwarding needs a bearer token to authenticate to the other replicas (run in-cluster with a ServiceAccount)")
	}
	if rotator != nil {
		opts.Router.ServingCertificate = forward.ServingCertificateFrom(rotator.GetCertificate)
		return opts, nil, nil
	}
	certDir := webhookCertDir(f)
	watcher, err := certwatcher.New(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
	if err != nil {
		return forward.SetupOptions{}, nil, err
	}
	opts.Router.ServingCertificate = forward.ServingCertificateFrom(watcher.GetCertificate)
	return opts, watcher, nil
}

// webhookCertDir is where the webhook server reads its certificate in external mode.
func webhookCertDir(f *managerflags.Flags) string {
	if f.WebhookCertPath == "" {
		return filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs") // controller-runtime's default
	}
	return f.WebhookCertPath
}
