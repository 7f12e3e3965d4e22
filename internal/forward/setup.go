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

package forward

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// +kubebuilder:rbac:urls=/tpu-claims/v1,verbs=post
// +kubebuilder:rbac:groups=discovery.k8s.io,namespace=system,resources=endpointslices,verbs=get;list;watch

// DefaultPortName is the webhook Service's port name (config/webhook/service.yaml).
const DefaultPortName = "webhook"

// SetupOptions configure claim forwarding between the replicas behind the webhook Service.
type SetupOptions struct {
	// Service and Namespace name the webhook Service: its ready endpoints are the replicas.
	// An empty Service turns forwarding off.
	Service, Namespace string
	// PortName is the Service port the webhooks are served on (default DefaultPortName).
	PortName string
	// Self is this replica's address (host:port) as the Service's endpoints list it.
	Self string
	// Router configures the Router: its claim timeout, certificate, token, log and metrics.
	Router Options
}

// Enabled reports whether claims are forwarded.
func (o *SetupOptions) Enabled() bool { return o.Service != "" }

func (o *SetupOptions) validate() error {
	var missing []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"namespace", o.Namespace != ""},
		{"own address", o.Self != ""},
		{"serving certificate", o.Router.ServingCertificate != nil},
		{"bearer token", o.Router.Token != nil},
	} {
		if !f.set {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("claim forwarding through Service %s needs: %s", o.Service, strings.Join(missing, ", "))
	}
	return nil
}

// CacheOptions limits the manager's EndpointSlice cache to the webhook Service's.
func (o *SetupOptions) CacheOptions() cache.ByObject {
	return cache.ByObject{
		Namespaces: map[string]cache.Config{o.Namespace: {}},
		Label:      labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: o.Service}),
	}
}

// Setup returns the Router that sends claims to their group's owner (claiming through local what
// this replica owns), keeps its peers in step with the webhook Service's EndpointSlices, and serves
// on mgr's webhook server the claims peers forward, behind Kubernetes authentication (TokenReview)
// and authorization (SubjectAccessReview on Path).
func Setup(mgr manager.Manager, local Local, opts SetupOptions) (*Router, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.PortName == "" {
		opts.PortName = DefaultPortName
	}
	opts.Router.Log = mgr.GetLogger().WithName("claim-forwarding")
	router := NewRouter(local, NewPeers(opts.Self), opts.Router)
	if err := watchEndpoints(mgr, router.Peers(), opts); err != nil {
		return nil, err
	}
	handler, err := Authenticated(mgr.GetConfig(), mgr.GetHTTPClient(), opts.Router.Log, router)
	if err != nil {
		return nil, fmt.Errorf("building the authentication of forwarded claims: %w", err)
	}
	mgr.GetWebhookServer().Register(Path, handler)
	return router, nil
}

// watchEndpoints sets peers to the ready endpoints of the webhook Service whenever its
// EndpointSlices change.
func watchEndpoints(mgr manager.Manager, peers *Peers, opts SetupOptions) error {
	informer, err := mgr.GetCache().GetInformer(context.Background(), &discoveryv1.EndpointSlice{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("starting the EndpointSlice informer: %w", err)
	}
	log := opts.Router.Log
	refresh := func() {
		var list discoveryv1.EndpointSliceList
		if err := mgr.GetCache().List(context.Background(), &list, client.InNamespace(opts.Namespace),
			client.MatchingLabels{discoveryv1.LabelServiceName: opts.Service}); err != nil {
			log.Error(err, "Listing the webhook Service's EndpointSlices")
			return
		}
		members := ReadyAddresses(list.Items, opts.PortName)
		if !slices.Equal(members, peers.Members()) {
			log.Info("Webhook replicas changed", "replicas", members, "self", opts.Self)
			peers.Set(members)
		}
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { refresh() },
		UpdateFunc: func(any, any) { refresh() },
		DeleteFunc: func(any) { refresh() },
	}); err != nil {
		return fmt.Errorf("watching the webhook Service's EndpointSlices: %w", err)
	}
	return nil
}

// ServingCertificateFrom adapts a tls.Config-style GetCertificate to Options.ServingCertificate.
func ServingCertificateFrom(get func(*tls.ClientHelloInfo) (*tls.Certificate, error)) func() (*tls.Certificate, error) {
	return func() (*tls.Certificate, error) { return get(nil) }
}
