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
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// MarshalJSON encodes the claims as one string, one line per claim, sorted by worker ID.
func (l ClaimList) MarshalJSON() ([]byte, error) {
	return json.Marshal(l.String())
}

// String is the claims as stored: one line per claim, sorted by worker ID.
func (l ClaimList) String() string {
	return formatLines(l, func(c WorkerClaim) int32 { return c.WorkerID }, 24, func(b *strings.Builder, c WorkerClaim) {
		b.WriteByte(' ')
		b.WriteString(c.Token)
		if c.PodName != "" || c.PodUID != "" {
			b.WriteByte(' ')
			b.WriteString(c.PodName)
			b.WriteByte(' ')
			b.WriteString(string(c.PodUID))
		}
	})
}

// UnmarshalJSON decodes the string form.
func (l *ClaimList) UnmarshalJSON(data []byte) error {
	parsed, err := unmarshalLines(data, "claims", ParseClaims)
	if err != nil {
		return err
	}
	*l = parsed
	return nil
}

// claimLines is the line format of a ClaimList.
var claimLines = lineFormat[WorkerClaim]{
	what: "claims", twice: "claimed twice",
	fields: []int{2, 4}, want: `"<workerID> <token>" or "<workerID> <token> <podName> <podUID>"`,
	item: func(id int32, fields []string) (WorkerClaim, error) {
		if !ValidToken(fields[1]) {
			return WorkerClaim{}, fmt.Errorf("invalid token %q", fields[1])
		}
		c := WorkerClaim{WorkerID: id, Token: fields[1]}
		if len(fields) == 4 {
			if !plainField(fields[2]) || !plainField(fields[3]) {
				return WorkerClaim{}, errors.New("a bound claim needs its Pod's name and UID")
			}
			c.PodName, c.PodUID = fields[2], types.UID(fields[3])
		}
		return c, nil
	},
}

// ParseClaims parses the string form of a ClaimList. It refuses a line that is not two or four
// fields, a worker ID that is not a non-negative integer, an empty token, and a worker ID named
// twice: a malformed list fails to decode rather than lose a claim.
func ParseClaims(text string) (ClaimList, error) {
	return parseLines(text, claimLines)
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
