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

// Package rendezvous picks the owner of a key among a set of members by highest random weight
// (rendezvous hashing): every member that sees the same set picks the same owner, and when a
// member joins or leaves only the keys it owns (or comes to own) move.
package rendezvous

import (
	"hash/fnv"
)

// Owner returns the member with the highest weight for key, and false when there are no members.
// Ties (a 64-bit collision) go to the lexically smaller member, so the answer never depends on
// the members' order.
func Owner(key string, members []string) (string, bool) {
	var (
		best       string
		bestWeight uint64
		found      bool
	)
	for _, m := range members {
		w := Weight(key, m)
		if !found || w > bestWeight || (w == bestWeight && m < best) {
			best, bestWeight, found = m, w, true
		}
	}
	return best, found
}

// Weight is the weight of member for key: a 64-bit FNV-1a hash of both, separated by a byte that
// occurs in neither (NUL), so that ("ab", "c") and ("a", "bc") differ, then mixed so that keys
// and members that share long prefixes still spread evenly.
func Weight(key, member string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key)) // hash.Hash never fails.
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(member))
	return mix(h.Sum64())
}

// mix is the finalizer of SplitMix64: FNV's low bits alone are poorly distributed for short inputs.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
