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

package gate

import (
	"fmt"
	"hash/fnv"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/placement"
)

// A domain is taken by creating its Lease in the operator's namespace: the create succeeds for
// one writer only, whatever the number of slices and replicas, and a Lease is handed over only
// with an update conditional on its resourceVersion. The Lease is a lock, never renewed: it
// holds as long as its holder slice exists and holds the domain (docs/spec.md §4).
const (
	// LeaseLabel marks the operator's domain Leases (value "true"); the Lease cache selects it.
	LeaseLabel = "tpu.ray.io/domain-lease"
	// LeaseKeyAnnotation and LeaseDomainAnnotation hold the key and the domain a Lease locks.
	LeaseKeyAnnotation    = "tpu.ray.io/domain-key"
	LeaseDomainAnnotation = "tpu.ray.io/domain"
	// leasePrefix starts every domain Lease's name.
	leasePrefix = "tpu-domain-"
)

// LeaseName is the name of the Lease that locks domain of key: readable, and unique per key and
// domain through a hash. Any label value gives a valid name: the readable part keeps only
// lowercase letters, digits and dashes ('.', '_' and capitals, which a label value may hold in
// runs such as "a..b" or "a._b", are not all allowed there in a name).
func LeaseName(key, domain string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key + "=" + domain))
	readable := strings.Trim(strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		default:
			return '-'
		}
	}, domain), "-")
	return fmt.Sprintf("%s%s-%016x", leasePrefix, readable, h.Sum64())
}

// Holder is the slice a domain Lease names.
type Holder struct {
	Namespace, Name string
	UID             types.UID
}

// HolderOf returns the holder of slice.
func HolderOf(slice *tpuv1alpha1.TPUSliceAssignment) Holder {
	return Holder{Namespace: slice.Namespace, Name: slice.Name, UID: slice.UID}
}

// String is the Lease's holderIdentity: namespace/name/uid.
func (h Holder) String() string { return h.Namespace + "/" + h.Name + "/" + string(h.UID) }

// Slice is the holder as namespace/name, for messages.
func (h Holder) Slice() string { return h.Namespace + "/" + h.Name }

// parseHolder reads a holderIdentity written by Holder.String.
func parseHolder(s string) (Holder, bool) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return Holder{}, false
	}
	return Holder{Namespace: parts[0], Name: parts[1], UID: types.UID(parts[2])}, true
}

// Lock is what a domain Lease says.
type Lock struct {
	Key, Domain string
	Holder      Holder
}

// LockOf reads a domain Lease; ok is false for a Lease that is none (or was edited by hand).
func LockOf(lease *coordinationv1.Lease) (Lock, bool) {
	if lease.Labels[LeaseLabel] != "true" || lease.Spec.HolderIdentity == nil {
		return Lock{}, false
	}
	h, ok := parseHolder(*lease.Spec.HolderIdentity)
	key, domain := lease.Annotations[LeaseKeyAnnotation], lease.Annotations[LeaseDomainAnnotation]
	if !ok || key == "" || domain == "" || lease.Name != LeaseName(key, domain) {
		return Lock{}, false
	}
	return Lock{Key: key, Domain: domain, Holder: h}, true
}

// NewLease returns the Lease, in namespace, that locks domain of key for holder.
func NewLease(namespace, key, domain string, holder Holder) *coordinationv1.Lease {
	id := holder.String()
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: LeaseName(key, domain), Namespace: namespace,
			Labels:      map[string]string{LeaseLabel: "true"},
			Annotations: map[string]string{LeaseKeyAnnotation: key, LeaseDomainAnnotation: domain},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &id},
	}
}

// OtherHolds returns the domains of keys other than key that the Leases lock.
func OtherHolds(leases []coordinationv1.Lease, key string) []placement.KeyHold {
	var out []placement.KeyHold
	for i := range leases {
		if l, ok := LockOf(&leases[i]); ok && l.Key != key {
			out = append(out, placement.KeyHold{Key: l.Key, Hold: placement.Hold{Domain: l.Domain, Slice: l.Holder.Slice(), UID: l.Holder.UID}})
		}
	}
	return out
}

// Holds returns the domains of key that the Leases lock, as placement.Holds.
func Holds(leases []coordinationv1.Lease, key string) []placement.Hold {
	var out []placement.Hold
	for i := range leases {
		if l, ok := LockOf(&leases[i]); ok && l.Key == key {
			out = append(out, placement.Hold{Domain: l.Domain, Slice: l.Holder.Slice(), UID: l.Holder.UID})
		}
	}
	return out
}
