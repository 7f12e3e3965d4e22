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

// Package naming computes the names the webhook and the reconciler must agree on: the
// TPUSliceAssignment of a slice, the headless Service KubeRay creates for multi-host groups, a
// host's Pod hostname and the replicaIndex label value. Every rule that shortens a name lives here.
package naming

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	"k8s.io/apimachinery/pkg/util/validation"
)

// hashLen is the number of hex characters of the identity hash in a slice name.
const hashLen = 8

// SliceName returns the TPUSliceAssignment name of one replica of a worker group:
// "<cluster>-<group>-<hash>-<replica>", lowercased, at most 63 characters so it also fits in a label
// value. The hash covers the exact cluster and group names, so two groups whose names only collide
// after joining or shortening ("a-b"+"c" and "a"+"b-c") never share a slice. The RayCluster UID is not
// part of the name: a re-created cluster reuses the name, and the spec's UID tells the two apart.
func SliceName(cluster, group string, replica int32) string {
	suffix := "-" + shortHash(cluster+"/"+group) + "-" + strconv.Itoa(int(replica))
	prefix := sanitize(cluster + "-" + group)
	if maxLen := validation.DNS1123LabelMaxLength - len(suffix); len(prefix) > maxLen {
		prefix = strings.TrimRight(prefix[:maxLen], "-")
	}
	if prefix == "" {
		return "slice" + suffix
	}
	return prefix + suffix
}

// HeadlessServiceName returns the name of the headless worker Service KubeRay creates for a cluster
// with a multi-host group. KubeRay (1.4–1.6, common.BuildHeadlessServiceForRayCluster) uses
// "<cluster>-headless" as is, without shortening; a name over 63 characters cannot be a Pod subdomain.
func HeadlessServiceName(cluster string) string {
	return cluster + rayutils.DashSymbol + rayutils.HeadlessServiceSuffix
}

// ValidateSubdomain returns the problems with name as a Pod subdomain (a DNS-1123 label).
func ValidateSubdomain(name string) []string {
	return validation.IsDNS1123Label(name)
}

// sanitize is dnsChars(s) trimmed of dashes at both ends.
func sanitize(s string) string {
	return strings.Trim(dnsChars(s), "-")
}

// dnsChars lowercases s and turns every character other than [a-z0-9] into '-', byte by byte (a
// multi-byte character becomes as many dashes as it has bytes), keeping its length.
func dnsChars(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '-'
		}
	}
	return string(b)
}

// shortHash returns the first hashLen hex digits of SHA-256 of s: what a shortened name adds so
// that two names that shorten alike stay distinct.
func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:hashLen]
}

// LabelValue returns s when it is a valid label value, else a deterministic shortened form ending
// in a hash of s, so that a selector on it matches exactly the objects labeled from s.
func LabelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	suffix := "-" + shortHash(s)
	prefix := sanitize(s)
	if maxLen := validation.LabelValueMaxLength - len(suffix); len(prefix) > maxLen {
		prefix = strings.TrimRight(prefix[:maxLen], "-")
	}
	if prefix == "" {
		prefix = "x"
	}
	return prefix + suffix
}
