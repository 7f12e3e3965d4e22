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
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
)

// probeClaim is one bound claim, as the reconciler leaves it: what every encoding carries.
type probeClaim struct {
	id              int
	token, pod, uid string
	at              string
}

func newProbeClaims(n int) []probeClaim {
	at := time.Now().UTC().Format(time.RFC3339)
	claims := make([]probeClaim, n)
	for i := range claims {
		claims[i] = probeClaim{id: i, token: allocator.NewToken(), pod: "bench-tpu-worker-" + rand.String(5), uid: string(uuid.NewUUID()), at: at}
	}
	return claims
}

// line is the claim as one line of text, without its newline.
func (c probeClaim) line() string { return fmt.Sprintf("%d %s %s %s", c.id, c.token, c.pod, c.uid) }

// value is the claim without its ID, the value of the map encoding.
func (c probeClaim) value() string { return c.token + " " + c.pod + " " + c.uid }

func (c probeClaim) object() map[string]any {
	return map[string]any{"workerID": c.id, "token": c.token, "podName": c.pod, "podUID": c.uid, "claimedAt": c.at}
}

func encodeObjects(claims []probeClaim) any {
	out := make([]map[string]any, len(claims))
	for i, c := range claims {
		out[i] = c.object()
	}
	return out
}

func encodeStrings(claims []probeClaim) any {
	out := make([]string, len(claims))
	for i, c := range claims {
		out[i] = c.line()
	}
	return out
}

func encodeText(claims []probeClaim) any {
	var b strings.Builder
	for _, c := range claims {
		b.WriteString(c.line())
		b.WriteByte('\n')
	}
	return b.String()
}

// encodeTextSeparated is encodeText with "; " between the claims instead of newlines, which JSON
// has to escape.
func encodeTextSeparated(claims []probeClaim) any {
	lines := make([]string, len(claims))
	for i, c := range claims {
		lines[i] = c.line()
	}
	return strings.Join(lines, "; ")
}

func encodeMap(claims []probeClaim) any {
	out := make(map[string]string, len(claims))
	for _, c := range claims {
		out[strconv.Itoa(c.id)] = c.value()
	}
	return out
}

// jsonPatch is an RFC 6902 patch that first sets metadata.resourceVersion to rv, so that the API
// server's update of the patched object conflicts when the object has moved on.
func jsonPatch(rv string, ops ...map[string]any) []byte {
	all := append([]map[string]any{{"op": "replace", "path": "/metadata/resourceVersion", "value": rv}}, ops...)
	data, _ := json.Marshal(all)
	return data
}

func objectsPatch(rv string, i int, c probeClaim) (string, []byte) {
	return string(types.JSONPatchType), jsonPatch(rv, map[string]any{"op": "replace", "path": fmt.Sprintf("/status/claims/%d", i), "value": c.object()})
}

func stringsPatch(rv string, i int, c probeClaim) (string, []byte) {
	return string(types.JSONPatchType), jsonPatch(rv, map[string]any{"op": "replace", "path": fmt.Sprintf("/status/claims/%d", i), "value": c.line()})
}

func mapPatch(rv string, _ int, c probeClaim) (string, []byte) {
	data, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": rv},
		"status":   map[string]any{"claims": map[string]string{strconv.Itoa(c.id): c.value()}},
	})
	return string(types.MergePatchType), data
}
