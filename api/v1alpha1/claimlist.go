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

package v1alpha1

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// MarshalJSON encodes the claims as one string, one line per claim, sorted by worker ID.
func (l ClaimList) MarshalJSON() ([]byte, error) {
	return json.Marshal(l.String())
}

// String is the claims as stored: one line per claim, sorted by worker ID.
func (l ClaimList) String() string {
	sorted := slices.Clone(l)
	slices.SortStableFunc(sorted, func(a, b WorkerClaim) int { return cmp.Compare(a.WorkerID, b.WorkerID) })
	var b strings.Builder
	b.Grow(len(sorted) * 24)
	for i, c := range sorted {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(strconv.FormatInt(int64(c.WorkerID), 10))
		b.WriteByte(' ')
		b.WriteString(c.Token)
		if c.PodUID != "" || c.PodName != "" {
			b.WriteByte(' ')
			b.WriteString(c.PodName)
			b.WriteByte(' ')
			b.WriteString(string(c.PodUID))
		}
	}
	return b.String()
}

// UnmarshalJSON decodes the string form.
func (l *ClaimList) UnmarshalJSON(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		*l = nil
		return nil
	}
	var text string
	if err := json.Unmarshal(data, &text); err != nil {
		return fmt.Errorf("claims: %w", err)
	}
	parsed, err := ParseClaims(text)
	if err != nil {
		return err
	}
	*l = parsed
	return nil
}

// ParseClaims parses the string form of a ClaimList. It refuses a line that is not two or four
// fields, a worker ID that is not a non-negative integer, an empty token, and a worker ID named
// twice: a malformed list fails to decode rather than lose a claim.
func ParseClaims(text string) (ClaimList, error) {
	if text == "" {
		return nil, nil
	}
	lines := strings.Split(text, "\n")
	out := make(ClaimList, 0, len(lines))
	seen := make(map[int32]bool, len(lines))
	for n, line := range lines {
		fields := strings.Split(line, " ")
		if len(fields) != 2 && len(fields) != 4 {
			return nil, fmt.Errorf("claims line %d: %q: want \"<workerID> <token>\" or \"<workerID> <token> <podName> <podUID>\"", n+1, line)
		}
		id, err := strconv.ParseInt(fields[0], 10, 32)
		if err != nil || id < 0 || fields[0] != strconv.FormatInt(id, 10) {
			return nil, fmt.Errorf("claims line %d: worker ID %q is not a non-negative integer", n+1, fields[0])
		}
		if !ValidToken(fields[1]) {
			return nil, fmt.Errorf("claims line %d: invalid token %q", n+1, fields[1])
		}
		if seen[int32(id)] {
			return nil, fmt.Errorf("claims line %d: worker ID %d is claimed twice", n+1, id)
		}
		seen[int32(id)] = true
		c := WorkerClaim{WorkerID: int32(id), Token: fields[1]}
		if len(fields) == 4 {
			if !plainField(fields[2]) || !plainField(fields[3]) {
				return nil, fmt.Errorf("claims line %d: a bound claim needs its Pod's name and UID", n+1)
			}
			c.PodName, c.PodUID = fields[2], types.UID(fields[3])
		}
		out = append(out, c)
	}
	return out, nil
}

// UnmarshalJSON decodes a status, reading the list form earlier versions stored (claims) into
// Claims when the string form (workers) is absent.
func (s *TPUSliceAssignmentStatus) UnmarshalJSON(data []byte) error {
	type plain TPUSliceAssignmentStatus // no UnmarshalJSON: no recursion
	var decoded plain
	if err := json.Unmarshal(data, &decoded); err != nil {
		return err
	}
	*s = TPUSliceAssignmentStatus(decoded)
	if len(s.Claims) == 0 && len(s.LegacyClaims) > 0 {
		s.Claims = make(ClaimList, 0, len(s.LegacyClaims))
		for _, c := range s.LegacyClaims {
			s.Claims = append(s.Claims, WorkerClaim{WorkerID: c.WorkerID, Token: c.Token, PodName: c.PodName, PodUID: c.PodUID})
		}
	}
	s.LegacyClaims = nil
	return nil
}

// plainField reports whether a Pod name or UID can be stored: not empty, no whitespace.
func plainField(s string) bool {
	return s != "" && len(s) <= 253 && !strings.ContainsAny(s, " \n\r\t")
}

// ValidToken reports whether token can name a claim: 1 to 64 characters, none of them a space or
// a line break (the separators of the stored form).
func ValidToken(token string) bool {
	return token != "" && len(token) <= 64 && !strings.ContainsAny(token, " \n\r\t")
}
