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

package naming

import (
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// maxGroupPrefixLength bounds the sanitized group name kept in a shortened group part. It leaves
	// room for "-<hash>" and two int32 suffixes of any sign ("-<replica>-<host>", at most 24 chars):
	// 30 + 1 + 8 + 24 = 63, so a shortened name is valid for every replica and host index.
	maxGroupPrefixLength = validation.DNS1123LabelMaxLength - 1 - hashLen - 2*(1+len("-2147483648"))
)

// Hostname returns the Pod hostname of host h of a replica: "<group>-<replica>-<h>".
//
// The result is always a valid DNS-1123 label. When the plain form is not (longer than 63
// characters, or the group name holds uppercase letters, '_', '.' or other characters a DNS label
// does not allow), the group part is replaced by its shortened form, see shortGroup:
// "<sanitized group, at most 30 chars>-<8 hex digits of SHA-256(group)>-<replica>-<h>".
// The hash is of the original group name, so distinct groups never share a shortened name.
func Hostname(group string, replica, host int32) string {
	suffix := "-" + itoa(replica) + "-" + itoa(host)
	if name := group + suffix; len(validation.IsDNS1123Label(name)) == 0 {
		return name
	}
	return shortGroup(group) + suffix
}

// ReplicaIndexValue returns the value of the replicaIndex label (label replicaIndex) read
// by the Ray autoscaler: "<group>-<replica>". When that is not a valid label value (longer than 63
// characters, or not starting and ending with an alphanumeric character, or holding characters
// other than [A-Za-z0-9_.-]) the group part is shortened exactly as in Hostname.
func ReplicaIndexValue(group string, replica int32) string {
	suffix := "-" + itoa(replica)
	if value := group + suffix; len(content.IsLabelValue(value)) == 0 {
		return value
	}
	return shortGroup(group) + suffix
}

// shortGroup returns the shortened group part used when a plain name is invalid:
// "<prefix>-<hash>", where prefix is the group name lowercased, with every character other than
// [a-z0-9-] replaced by '-', cut to maxGroupPrefixLength and trimmed of leading and trailing '-',
// and hash is the first hashLen hex digits of SHA-256 of the original group name. When
// nothing of the prefix survives, the result is the hash alone. The result is a valid DNS label
// and label value, and depends only on group.
func shortGroup(group string) string {
	hash := shortHash(group)
	prefix := dnsRunes(group)
	prefix = strings.Trim(prefix[:min(len(prefix), maxGroupPrefixLength)], "-")
	if prefix == "" {
		return hash
	}
	return prefix + "-" + hash
}

func itoa(i int32) string {
	return strconv.FormatInt(int64(i), 10)
}

// dnsRunes is dnsChars rune by rune: a multi-byte character becomes one '-'. Hostnames and
// replicaIndex values were shortened this way from the start and slice names byte by byte; both
// stay as they are, because running Pods and stored slices carry them (TestNames pins them).
func dnsRunes(s string) string {
	return strings.Map(func(r rune) rune {
		if ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') {
			return r
		}
		return '-'
	}, strings.ToLower(s))
}
