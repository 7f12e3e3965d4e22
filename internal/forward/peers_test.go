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
	"testing"

	"github.com/google/go-cmp/cmp"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

func endpoint(ready, terminating *bool, addrs ...string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: addrs, Conditions: discoveryv1.EndpointConditions{Ready: ready, Terminating: terminating}}
}

func port(name string, p int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr.To(name), Port: ptr.To(p)}
}

func TestReadyAddresses(t *testing.T) {
	cases := []struct {
		name     string
		slices   []discoveryv1.EndpointSlice
		portName string
		want     []string
	}{
		{name: "no slices", want: nil},
		{
			name: "ready endpoints on the named port",
			slices: []discoveryv1.EndpointSlice{{
				Ports:     []discoveryv1.EndpointPort{port("metrics", 8443), port("webhook", 9443)},
				Endpoints: []discoveryv1.Endpoint{endpoint(ptr.To(true), nil, "10.0.0.2"), endpoint(ptr.To(true), nil, "10.0.0.1")},
			}},
			portName: "webhook",
			want:     []string{"10.0.0.1:9443", "10.0.0.2:9443"},
		},
		{
			name: "unset ready counts as ready; not ready and terminating do not",
			slices: []discoveryv1.EndpointSlice{{
				Ports: []discoveryv1.EndpointPort{port("webhook", 9443)},
				Endpoints: []discoveryv1.Endpoint{
					endpoint(nil, nil, "10.0.0.1"),
					endpoint(ptr.To(false), nil, "10.0.0.2"),
					endpoint(ptr.To(true), ptr.To(true), "10.0.0.3"),
				},
			}},
			portName: "webhook",
			want:     []string{"10.0.0.1:9443"},
		},
		{
			name: "a slice without the port contributes nothing",
			slices: []discoveryv1.EndpointSlice{
				{Ports: []discoveryv1.EndpointPort{port("other", 1)}, Endpoints: []discoveryv1.Endpoint{endpoint(nil, nil, "10.0.0.9")}},
				{Ports: []discoveryv1.EndpointPort{port("webhook", 9443)}, Endpoints: []discoveryv1.Endpoint{endpoint(nil, nil, "10.0.0.1")}},
			},
			portName: "webhook",
			want:     []string{"10.0.0.1:9443"},
		},
		{
			name: "an empty port name takes the slice's port",
			slices: []discoveryv1.EndpointSlice{
				{Ports: []discoveryv1.EndpointPort{port("", 9443)}, Endpoints: []discoveryv1.Endpoint{endpoint(nil, nil, "10.0.0.1")}},
			},
			want: []string{"10.0.0.1:9443"},
		},
		{
			name: "duplicates across slices (an endpoint moving between slices) appear once; IPv6 is bracketed",
			slices: []discoveryv1.EndpointSlice{
				{Ports: []discoveryv1.EndpointPort{port("webhook", 9443)}, Endpoints: []discoveryv1.Endpoint{endpoint(nil, nil, "10.0.0.1")}},
				{Ports: []discoveryv1.EndpointPort{port("webhook", 9443)}, Endpoints: []discoveryv1.Endpoint{endpoint(nil, nil, "10.0.0.1", "fd00::1")}},
			},
			portName: "webhook",
			want:     []string{"10.0.0.1:9443", "[fd00::1]:9443"},
		},
		{
			name: "instances on one host with their own ports (the integration tests)",
			slices: []discoveryv1.EndpointSlice{
				{Ports: []discoveryv1.EndpointPort{port("webhook", 40001)}, Endpoints: []discoveryv1.Endpoint{endpoint(ptr.To(true), nil, "127.0.0.1")}},
				{Ports: []discoveryv1.EndpointPort{port("webhook", 40000)}, Endpoints: []discoveryv1.Endpoint{endpoint(ptr.To(true), nil, "127.0.0.1")}},
			},
			portName: "webhook",
			want:     []string{"127.0.0.1:40000", "127.0.0.1:40001"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ReadyAddresses(tc.slices, tc.portName)); diff != "" {
				t.Errorf("ReadyAddresses() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPeersOwner(t *testing.T) {
	p := NewPeers("10.0.0.1:9443")
	if _, ok := p.Owner("ns/uid/group"); ok {
		t.Fatal("Owner() with no members found one")
	}
	members := []string{"10.0.0.1:9443", "10.0.0.2:9443"}
	p.Set(members)
	members[0] = "changed" // Set keeps its own copy.
	if diff := cmp.Diff([]string{"10.0.0.1:9443", "10.0.0.2:9443"}, p.Members()); diff != "" {
		t.Errorf("Members() mismatch (-want +got):\n%s", diff)
	}
	owner, ok := p.Owner("ns/uid/group")
	if !ok || (owner != "10.0.0.1:9443" && owner != "10.0.0.2:9443") {
		t.Errorf("Owner() = %q, %v; want a member", owner, ok)
	}
}
