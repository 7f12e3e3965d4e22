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
	"net"
	"slices"
	"strconv"
	"sync/atomic"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/ray-tpu/tpu-slice-operator/internal/rendezvous"
)

// Peers is the set of replicas that serve the webhooks, as this replica (Self) last saw it. Safe
// for concurrent use.
type Peers struct {
	self    string
	members atomic.Pointer[[]string]
}

// NewPeers returns an empty set for the replica whose address is self (host:port).
func NewPeers(self string) *Peers {
	p := &Peers{self: self}
	p.Set(nil)
	return p
}

// Self is this replica's address.
func (p *Peers) Self() string { return p.self }

// Set replaces the members.
func (p *Peers) Set(members []string) {
	members = slices.Clone(members)
	p.members.Store(&members)
}

// Members returns the current members.
func (p *Peers) Members() []string { return slices.Clone(*p.members.Load()) }

// Owner returns the member that owns key; ok is false when there is none (no replica is ready,
// not even this one).
func (p *Peers) Owner(key string) (owner string, ok bool) {
	return rendezvous.Owner(key, *p.members.Load())
}

// ReadyAddresses returns the host:port of every ready endpoint of the slices, once each, sorted.
// The port is the slice's port named portName (any port when portName is empty); a slice without
// such a port contributes nothing. An endpoint whose ready condition is unset counts as ready, as
// the EndpointSlice API asks of consumers; a terminating endpoint is not ready.
func ReadyAddresses(endpointSlices []discoveryv1.EndpointSlice, portName string) []string {
	var out []string
	for i := range endpointSlices {
		s := &endpointSlices[i]
		port, ok := slicePort(s, portName)
		if !ok {
			continue
		}
		for _, ep := range s.Endpoints {
			if !ptr.Deref(ep.Conditions.Ready, true) || ptr.Deref(ep.Conditions.Terminating, false) {
				continue
			}
			for _, addr := range ep.Addresses {
				out = append(out, net.JoinHostPort(addr, strconv.Itoa(int(port))))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func slicePort(s *discoveryv1.EndpointSlice, name string) (int32, bool) {
	for _, p := range s.Ports {
		if p.Port != nil && (name == "" || ptr.Deref(p.Name, "") == name) {
			return *p.Port, true
		}
	}
	return 0, false
}
