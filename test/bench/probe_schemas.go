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

package main

import (
	"fmt"
	"strconv"
	"strings"
)

// The probe's throwaway CRDs: the same spec as TPUSliceAssignment v1alpha1 today, and one status
// schema per encoding of the claims. Each probe claim carries the same information: worker ID,
// token, Pod name and Pod UID (the list of objects also its claimedAt, as today).

// probeGroup is the API group of the probe's CRDs, apart from the operator's.
const probeGroup = "probe.bench.tpu.ray.io"

// probeMaxClaims bounds the claims (maxItems, maxProperties) where a CEL rule iterates over them, so
// that its estimated cost is bounded: tpu7x's largest slice has 2,304 hosts and a v5p slice at most
// 8,960 chips, one Pod per chip at most.
const probeMaxClaims = 9216

// probeMaxText bounds the one-string encoding (maxLength) where a CEL rule reads it: 9,216 lines
// of at most 112 bytes.
const probeMaxText = probeMaxClaims * 112

// probeLine is the regular expression a line of the text encoding matches: ID, token, and for a
// bound claim the Pod name and UID.
const probeLine = `[0-9]{1,4} [0-9a-f]{16}( [a-z0-9.-]{1,63} [0-9a-f-]{36})?`

// specSchema is TPUSliceAssignment's spec schema as of v1alpha1, without descriptions; rules are
// added to it as its x-kubernetes-validations.
func specSchema(rules string) string {
	return `type: object
required: [groupName, hosts, rayClusterName, rayClusterUID, replicaIndex, topology]
properties:
  rayClusterName: {type: string, minLength: 1, maxLength: 253}
  rayClusterUID: {type: string}
  groupName: {type: string, minLength: 1}
  replicaIndex: {type: integer, format: int32, minimum: 0}
  replicaName: {type: string}
  hosts: {type: integer, format: int32, minimum: 1}
  topology: {type: string, pattern: '^[0-9]+(x[0-9]+){0,2}$'}
  accelerator: {type: string}
` + rules
}

// conditionsSchema is metav1.Condition's schema, as a list-map keyed by type.
const conditionsSchema = `
  conditions:
    type: array
    x-kubernetes-list-type: map
    x-kubernetes-list-map-keys: [type]
    items:
      type: object
      required: [lastTransitionTime, message, reason, status, type]
      properties:
        lastTransitionTime: {type: string, format: date-time}
        message: {type: string, maxLength: 32768}
        observedGeneration: {type: integer, format: int64, minimum: 0}
        reason: {type: string, minLength: 1, maxLength: 1024, pattern: '^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$'}
        status: {type: string, enum: ["True", "False", Unknown]}
        type: {type: string, maxLength: 316, pattern: '^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$'}
`

// statusSchema is a status holding claims (the schema of the field, indented as a property), the
// count and the conditions.
func statusSchema(claims, rules string) string {
	return `type: object
properties:
  claimed: {type: integer, format: int32}
  claims:
` + indent(claims, "    ") + conditionsSchema + rules
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = prefix + lines[i]
	}
	return strings.Join(lines, "\n")
}

// The schema of status.claims in each encoding.
var (
	objectsSchema = func(listType, maxItems string) string {
		return `type: array
x-kubernetes-list-type: ` + listType + maxItems + `
items:
  type: object
  required: [claimedAt, token, workerID]
  properties:
    workerID: {type: integer, format: int32, minimum: 0}
    token: {type: string, minLength: 1}
    podName: {type: string}
    podUID: {type: string}
    claimedAt: {type: string, format: date-time}
`
	}
	stringsSchema = `type: array
x-kubernetes-list-type: atomic
items: {type: string}
`
	textSchema = func(extra string) string { return "type: string" + extra + "\n" }
	mapSchema  = func(extra string) string {
		return "type: object\nadditionalProperties: {type: string}" + extra + "\n"
	}
)

// representation is one encoding of the claims, with the rules its CRD carries.
type representation struct {
	key, title string
	kind       string
	spec       string
	status     string
	// rootRules are x-kubernetes-validations at the root of the schema (YAML list items).
	rootRules string
	// encode is status.claims for these claims.
	encode func(claims []probeClaim) any
	// onePatch, if set, is a patch of status.claims that changes claim i alone (patch type, body),
	// given the object's resourceVersion.
	onePatch func(rv string, i int, c probeClaim) (string, []byte)
	// fullMergePatch also measures a JSON merge patch carrying every claim.
	fullMergePatch bool
}

func rules(list ...string) string {
	if len(list) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("x-kubernetes-validations:\n")
	for _, r := range list {
		fmt.Fprintf(&b, "- rule: %q\n", r)
	}
	return b.String()
}

func maxItems(n int) string { return "\nmaxItems: " + strconv.Itoa(n) }

// representations lists the encodings the probe measures.
func representations() []representation {
	spec := specSchema("")
	immutableSpec := specSchema(rules("self == oldSelf"))
	hostBound := rules("!has(self.status) || !has(self.status.claims) || self.status.claims.all(c, c.workerID < self.spec.hosts)")
	keyBound := rules("!has(self.status) || !has(self.status.claims) || self.status.claims.all(k, int(k) < self.spec.hosts)")
	claimedBound := rules("!has(self.status) || self.status.claimed <= self.spec.hosts")
	return []representation{
		{key: "a", title: "(a) atomic list of objects (today)", kind: "ProbeObjects", spec: spec,
			status: statusSchema(objectsSchema("atomic", ""), ""), encode: encodeObjects, onePatch: objectsPatch, fullMergePatch: true},
		{key: "a-map", title: "(a) as a list-map keyed by workerID (before the list was atomic)", kind: "ProbeObjectsMap", spec: spec,
			status: statusSchema(objectsSchema("map\nx-kubernetes-list-map-keys: [workerID]", ""), ""), encode: encodeObjects},
		{key: "b", title: "(b) atomic list of strings", kind: "ProbeStrings", spec: spec,
			status: statusSchema(stringsSchema, ""), encode: encodeStrings, onePatch: stringsPatch},
		{key: "c", title: "(c) one string, one line per claim", kind: "ProbeText", spec: spec,
			status: statusSchema(textSchema(""), ""), encode: encodeText, fullMergePatch: true},
		{key: "c-semicolons", title: "(c) with `; ` between the claims instead of newlines (no JSON escapes)", kind: "ProbeTextSemicolons", spec: spec,
			status: statusSchema(textSchema(""), ""), encode: encodeTextSeparated},
		{key: "d", title: "(d) map of ID to string", kind: "ProbeMap", spec: spec,
			status: statusSchema(mapSchema(""), ""), encode: encodeMap, onePatch: mapPatch},
		{key: "d-atomic", title: "(d) as an atomic map (`x-kubernetes-map-type: atomic`)", kind: "ProbeMapAtomic", spec: spec,
			status: statusSchema(mapSchema("\nx-kubernetes-map-type: atomic"), ""), encode: encodeMap, onePatch: mapPatch},
		{key: "e-c-size", title: "(c) + maxLength + `size(self.claims) <= N` on status", kind: "ProbeTextSize", spec: spec,
			status: statusSchema(textSchema("\nmaxLength: "+strconv.Itoa(probeMaxText)), rules("!has(self.claims) || size(self.claims) <= "+strconv.Itoa(probeMaxText))), encode: encodeText},
		{key: "e-c-regex", title: "(c) + maxLength + `self.matches(line regex)` on the string", kind: "ProbeTextRegex", spec: spec,
			status: statusSchema(textSchema("\nmaxLength: "+strconv.Itoa(probeMaxText)+"\n"+rules("self.matches('^("+probeLine+"\\n)*$')")), ""), encode: encodeText},
		{key: "e-c-claimed", title: "(c) + root `status.claimed <= spec.hosts`", kind: "ProbeTextClaimed", spec: spec,
			status: statusSchema(textSchema(""), ""), rootRules: claimedBound, encode: encodeText},
		{key: "e-c-split", title: "(c) + maxLength + root rule: every line's ID < spec.hosts (split)", kind: "ProbeTextSplit", spec: spec,
			status:    statusSchema(textSchema("\nmaxLength: "+strconv.Itoa(probeMaxText)), ""),
			rootRules: rules("!has(self.status) || !has(self.status.claims) || self.status.claims.split('\\n').all(l, l == '' || int(l.split(' ')[0]) < self.spec.hosts)"), encode: encodeText},
		{key: "e-c-split-2304", title: "(c) + the same split rule, maxLength for 2,304 lines of 100 bytes", kind: "ProbeTextSplitSmall", spec: spec,
			status:    statusSchema(textSchema("\nmaxLength: "+strconv.Itoa(2304*100)), ""),
			rootRules: rules("!has(self.status) || !has(self.status.claims) || self.status.claims.split('\\n').all(l, l == '' || int(l.split(' ')[0]) < self.spec.hosts)"), encode: encodeText},
		{key: "e-a-all", title: "(a) + maxItems + root `claims.all(c, c.workerID < spec.hosts)`", kind: "ProbeObjectsAll", spec: spec,
			status: statusSchema(objectsSchema("atomic", maxItems(probeMaxClaims)), ""), rootRules: hostBound, encode: encodeObjects},
		{key: "e-a-all-immutable", title: "(a) + maxItems + root `claims.all(...)` + spec `self == oldSelf`", kind: "ProbeObjectsAllImmutable", spec: immutableSpec,
			status: statusSchema(objectsSchema("atomic", maxItems(probeMaxClaims)), ""), rootRules: hostBound, encode: encodeObjects},
		{key: "e-a-immutable", title: "(a) + spec `self == oldSelf` alone", kind: "ProbeObjectsImmutable", spec: immutableSpec,
			status: statusSchema(objectsSchema("atomic", ""), ""), encode: encodeObjects},
		{key: "e-d-keys", title: "(d) + maxProperties + root `claims.all(k, int(k) < spec.hosts)`", kind: "ProbeMapKeys", spec: spec,
			status: statusSchema(mapSchema("\nmaxProperties: "+strconv.Itoa(probeMaxClaims)), ""), rootRules: keyBound, encode: encodeMap, onePatch: mapPatch},
	}
}
