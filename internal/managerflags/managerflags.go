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

// Package managerflags declares every command-line flag of the manager (cmd), on a flag set the
// caller chooses, so that the manager parses them and hack/flagdoc documents the same set.
package managerflags

import (
	"flag"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/ray-tpu/tpu-slice-operator/internal/certs"
	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
)

// PodIPEnv holds the Pod's IP (downward API): with claim forwarding, the replica's own endpoint.
const PodIPEnv = "POD_IP"

// Flags are the manager's settings, filled in by parsing the flag set Bind registered them on.
type Flags struct {
	MetricsAddr, ProbeAddr, WebhookCertPath string
	SecureMetrics, EnableHTTP2, LeaderElect bool
	ClaimForwarding                         bool
	// Version asks the manager to print its version and exit.
	Version     bool
	WebhookPort int
	Operator    operator.Options
	Certs       certs.Options
	Zap         zap.Options
}

// Bind registers every flag of the manager on fs. The --kubeconfig flag is not among them:
// controller-runtime registers it on flag.CommandLine when its client config package loads.
func (f *Flags) Bind(fs *flag.FlagSet) {
	fs.StringVar(&f.MetricsAddr, "metrics-bind-address", "0", "Address the metrics endpoint binds to, e.g. :8443 (https) or :8080 (http); 0 disables it.")
	fs.BoolVar(&f.Version, "version", false, "Print the version, commit and Go version the manager was built with, and exit.")
	fs.StringVar(&f.ProbeAddr, "health-probe-bind-address", ":8081", "Address the health and readiness probes bind to.")
	fs.BoolVar(&f.LeaderElect, "leader-elect", false, "Elect a leader for the reconciler, so that several replicas can serve the webhooks.")
	fs.BoolVar(&f.SecureMetrics, "metrics-secure", true, "Serve metrics over HTTPS with authentication and authorization.")
	fs.BoolVar(&f.EnableHTTP2, "enable-http2", false, "Enable HTTP/2 on the webhook and metrics servers (off by default: CVE-2023-44487, CVE-2023-39325).")
	fs.StringVar(&f.WebhookCertPath, "webhook-cert-path", "", "Directory holding the webhook serving certificate (tls.crt, tls.key) in --cert-mode=external; empty uses controller-runtime's default.")
	fs.IntVar(&f.WebhookPort, "webhook-port", webhook.DefaultPort, "Port the admission webhooks listen on.")
	fs.BoolVar(&f.ClaimForwarding, "claim-forwarding", false, "Send each claim to the replica that owns its worker group (chosen over the ready endpoints of --webhook-service-name), "+
		"so that one replica commits a group's claims together; needs $"+PodIPEnv+" and a ServiceAccount token.")
	f.Operator.BindFlags(fs)
	f.Certs.BindFlags(fs)
	f.Zap.BindFlags(fs)
}

// Parse parses args with fs, on which Bind registered f's flags, and completes the settings that
// depend on more than one flag: without --claim-forwarding, claim reservations are off unless
// --claim-reservation-window is given (docs/spec.md §3.5). Reservations need one holder per worker
// group: replicas that do not forward each reserve for the requests they get, and a KubeRay Pod
// whose index labels name an ID another replica reserved is denied until that replica hands it out
// or gives it back, a window later (a 256-host replica took 524 s through three such replicas,
// docs/performance.md); a single replica may set the flag.
func (f *Flags) Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	windowSet := false
	fs.Visit(func(fl *flag.Flag) { windowSet = windowSet || fl.Name == operator.ReservationWindowFlag })
	if !f.ClaimForwarding && !windowSet {
		f.Operator.ReservationWindow = -1
	}
	return nil
}

// ReservingAlone reports whether the parsed flags reserve claims without forwarding them: right
// for a single replica only.
func (f *Flags) ReservingAlone() bool {
	return !f.ClaimForwarding && f.Operator.ReservationWindow > 0
}
