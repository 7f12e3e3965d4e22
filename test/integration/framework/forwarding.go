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

package framework

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/certs"
	"github.com/ray-tpu/tpu-slice-operator/internal/forward"
	"github.com/ray-tpu/tpu-slice-operator/internal/rendezvous"
)

// ForwardNamespace and ForwardService are where forwarding instances find each other: the
// namespace and webhook Service of the production install (config/default).
const (
	ForwardNamespace = "tpu-slice-operator-system"
	ForwardService   = certs.DefaultServiceName
	// forwardAccount is the ServiceAccount whose token forwarding instances present, allowed only
	// to post forwarded claims.
	forwardAccount = "claim-forwarding-test"
)

// loopbackName is how the instances are listed in their EndpointSlices and know themselves
// (EndpointSlice addresses are FQDNs of two labels or more, and never loopback IPs).
const loopbackName = "instances.tpu-slice-operator.test"

// forwardOptions configures opts to forward claims as the instance listening on port does.
func (e *Env) forwardOptions(ctx context.Context, opts *InstanceOptions, port int) error {
	token := opts.ForwardToken
	if token == "" {
		var err error
		if token, err = e.forwardToken(ctx); err != nil {
			return err
		}
	} else if err := e.ensureNamespace(ctx, ForwardNamespace); err != nil {
		return err
	}
	wio := &e.Env.WebhookInstallOptions
	cert, err := tls.LoadX509KeyPair(filepath.Join(wio.LocalServingCertDir, "tls.crt"), filepath.Join(wio.LocalServingCertDir, "tls.key"))
	if err != nil {
		return fmt.Errorf("loading webhook serving certificate: %w", err)
	}
	opts.Operator.Forward = forward.SetupOptions{
		Service:   ForwardService,
		Namespace: ForwardNamespace,
		Self:      EndpointAddress(port),
		Router: forward.Options{
			ServingCertificate: func() (*tls.Certificate, error) { return &cert, nil },
			Token:              forward.StaticToken(token),
			DialContext:        e.dialInstance,
		},
	}
	return nil
}

// forwardToken returns (creating once) a token of a ServiceAccount bound to a ClusterRole that
// allows exactly posting forwarded claims.
func (e *Env) forwardToken(ctx context.Context) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.forwardTokenValue != "" {
		return e.forwardTokenValue, nil
	}
	if err := e.ensureNamespace(ctx, ForwardNamespace); err != nil {
		return "", err
	}
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: forwardAccount, Namespace: ForwardNamespace}},
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: forwardAccount},
			Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{forward.Path}, Verbs: []string{"post"}}},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: forwardAccount},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: forwardAccount},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: forwardAccount, Namespace: ForwardNamespace}},
		},
	}
	for _, obj := range objs {
		if err := e.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	token, err := ServiceAccountToken(ctx, e.Client, ForwardNamespace, forwardAccount)
	if err != nil {
		return "", err
	}
	e.forwardTokenValue = token
	return token, nil
}

// ServiceAccountToken returns a token of a ServiceAccount (TokenRequest), valid for a day.
func ServiceAccountToken(ctx context.Context, c client.Client, namespace, name string) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}}
	if err := c.SubResource("token").Create(ctx, sa, req); err != nil {
		return "", fmt.Errorf("requesting a token of ServiceAccount %s/%s: %w", namespace, name, err)
	}
	return req.Status.Token, nil
}

func (e *Env) ensureNamespace(ctx context.Context, name string) error {
	err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// addEndpoint makes the instance listening on port a ready endpoint of the webhook Service, as the
// EndpointSlice controller would once its Pod is ready. Instances share the loopback address, so
// each has its own EndpointSlice for its own port.
func (e *Env) addEndpoint(ctx context.Context, port int) (*discoveryv1.EndpointSlice, error) {
	slice := EndpointSlice(port)
	if err := e.Client.Create(ctx, slice); err != nil {
		return nil, fmt.Errorf("creating the instance's EndpointSlice: %w", err)
	}
	return slice, nil
}

// EndpointAddress is the address forwarding instances know the instance listening on port by.
func EndpointAddress(port int) string { return net.JoinHostPort(loopbackName, strconv.Itoa(port)) }

// EndpointSlice returns the EndpointSlice that lists the instance listening on port as a ready
// endpoint of the webhook Service.
func EndpointSlice(port int) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s-%d", ForwardService, port),
			Namespace: ForwardNamespace,
			Labels:    map[string]string{discoveryv1.LabelServiceName: ForwardService},
		},
		// The API server refuses loopback IPs in EndpointSlices: the instances are listed by a
		// name that their dialer maps to the loopback address they listen on.
		AddressType: discoveryv1.AddressTypeFQDN,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{loopbackName},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		}},
		Ports: []discoveryv1.EndpointPort{{
			Name: ptr.To(forward.DefaultPortName), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP),
		}},
	}
}

// dialInstance dials an instance listed as loopbackName on the loopback address it listens on.
func (e *Env) dialInstance(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if host == loopbackName {
		addr = net.JoinHostPort(e.Env.WebhookInstallOptions.LocalServingHost, port)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// WaitForPeers waits until every forwarding instance among instances sees exactly the forwarding
// ones among them as its peers (their EndpointSlices have reached its cache).
func WaitForPeers(ctx context.Context, instances ...*Instance) error {
	var want []string
	for _, inst := range instances {
		if inst.Peers != nil {
			want = append(want, inst.Peers.Self())
		}
	}
	slices.Sort(want)
	deadline := time.Now().Add(30 * time.Second)
	for _, inst := range instances {
		for inst.Peers != nil && !slices.Equal(inst.Peers.Members(), want) {
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("instance %s sees peers %v, want %v", inst.Addr, inst.Peers.Members(), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// ForwardClaim posts req to inst's claim-forwarding endpoint as a peer replica would, with the
// token forwarding instances present, and returns the HTTP status and body of the answer.
func (e *Env) ForwardClaim(ctx context.Context, inst *Instance, req allocator.Request, timeout time.Duration) (int, []byte, error) {
	token, err := e.forwardToken(ctx)
	if err != nil {
		return 0, nil, err
	}
	body, err := json.Marshal(map[string]any{"request": req, "timeoutMillis": timeout.Milliseconds()})
	if err != nil {
		return 0, nil, err
	}
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+inst.Addr+forward.Path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set("Authorization", "Bearer "+token)
	httpClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}} //nolint:gosec // loopback to our own test server.
	resp, err := httpClient.Do(httpReq)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// GroupOwner returns the index among instances of the one that owns the worker group of the
// RayCluster (namespace, uid) under claim forwarding, as the first instance sees the replicas: the
// holder of the group's reservations.
func GroupOwner(instances []*Instance, namespace string, uid types.UID, group string) (int, error) {
	if len(instances) == 0 || instances[0].Peers == nil {
		return -1, errors.New("no forwarding instances")
	}
	owner, ok := rendezvous.Owner(forward.GroupKey(allocator.Request{Namespace: namespace, ClusterUID: uid, GroupName: group}),
		instances[0].Peers.Members())
	if !ok {
		return -1, errors.New("no forwarding peers")
	}
	i := slices.IndexFunc(instances, func(inst *Instance) bool {
		_, port, err := net.SplitHostPort(inst.Addr)
		p, perr := strconv.Atoi(port)
		return err == nil && perr == nil && EndpointAddress(p) == owner
	})
	if i < 0 {
		return -1, fmt.Errorf("the owner %s is none of the instances", owner)
	}
	return i, nil
}
