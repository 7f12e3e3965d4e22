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

// MarshalJSON encodes the claims as one string, one line per claim, sorted by worker ID. It
// refuses a list that would not parse back to itself (Format).
func (l ClaimList) MarshalJSON() ([]byte, error) {
	text, err := l.Format()
	if err != nil {
		return nil, err
	}
	return json.Marshal(text)
}

// Format returns the claims as stored: one line per claim, sorted by worker ID. It refuses, with
// an error naming the claim, a list that ParseClaims would not read back as the same claims: a
// worker ID named twice or negative, or a claim that Validate refuses.
func (l ClaimList) Format() (string, error) {
	return formatLines(l, claimLines.what, claimLines.twice, func(c WorkerClaim) int32 { return c.WorkerID }, WorkerClaim.Validate,
		24, func(b *strings.Builder, c WorkerClaim) {
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

// String is the claims as stored (Format), for logs and comparisons; a list that cannot be
// stored is shown quoted, with why.
func (l ClaimList) String() string {
	text, err := l.Format()
	if err != nil {
		return displayInvalid(l, err, func(c WorkerClaim) string {
			return fmt.Sprintf("%d %s %s %s", c.WorkerID, c.Token, c.PodName, c.PodUID)
		})
	}
	return text
}

// Validate reports why the claim cannot be stored, nil when it can: its token must be one
// ValidToken accepts, and a bound claim needs its Pod's name and UID, each ValidPodName and
// ValidPodUID.
func (c WorkerClaim) Validate() error {
	switch {
	case !ValidToken(c.Token):
		return fmt.Errorf("invalid token %q", c.Token)
	case c.PodName == "" && c.PodUID == "":
		return nil
	case !ValidPodName(c.PodName) || !ValidPodUID(string(c.PodUID)):
		return fmt.Errorf("a bound claim needs its Pod's name and UID, got %q and %q", c.PodName, c.PodUID)
	}
	return nil
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
// fields, a worker ID that is not a non-negative integer, an invalid token, and a worker ID named
// twice: a malformed list fails to decode rather than lose a claim. A status decodes leniently
// instead (TPUSliceAssignmentStatus.UnmarshalJSON).
func ParseClaims(text string) (ClaimList, error) {
	return parseLines(text, claimLines)
}

// UnmarshalJSON decodes a status, reading the list form earlier versions stored (claims) into
// Claims when the string form (workers) is absent.
//
// It never fails on a line of workers or hosts that does not parse (written by hand, by an older
// version, or by a bug): one such object must not stop the list and watch of every slice. The
// lines that parse are kept, and each that does not is recorded in MalformedLines, which the
// reconciler reports and repairs (docs/spec.md §8).
func (s *TPUSliceAssignmentStatus) UnmarshalJSON(data []byte) error {
	type plain TPUSliceAssignmentStatus // no UnmarshalJSON: no recursion
	var decoded struct {
		plain
		// The stored lines, parsed below; these shadow plain's fields of the same names.
		Claims json.RawMessage `json:"workers,omitempty"`
		Hosts  json.RawMessage `json:"hosts,omitempty"`
	}
	if err := json.Unmarshal(data, &decoded); err != nil {
		return err
	}
	*s = TPUSliceAssignmentStatus(decoded.plain)
	s.Claims, s.Hosts, s.MalformedLines = nil, nil, nil
	var bad []error
	if text, err := unmarshalText(decoded.Claims, "workers"); err != nil {
		bad = append(bad, err)
	} else {
		var lineErrs []error
		s.Claims, lineErrs = parseLinesLenient(text, claimLines)
		bad = append(bad, lineErrs...)
	}
	if text, err := unmarshalText(decoded.Hosts, "hosts"); err != nil {
		bad = append(bad, err)
	} else {
		var lineErrs []error
		s.Hosts, lineErrs = parseLinesLenient(text, hostLines)
		bad = append(bad, lineErrs...)
	}
	if len(s.Claims) == 0 && len(s.LegacyClaims) > 0 {
		s.Claims = make(ClaimList, 0, len(s.LegacyClaims))
		seen := map[int32]bool{}
		for i, lc := range s.LegacyClaims {
			c := WorkerClaim{WorkerID: lc.WorkerID, Token: lc.Token, PodName: lc.PodName, PodUID: lc.PodUID}
			err := c.Validate()
			switch {
			case err == nil && c.WorkerID < 0:
				err = fmt.Errorf("worker ID %d is negative", c.WorkerID)
			case err == nil && seen[c.WorkerID]:
				err = fmt.Errorf("worker ID %d is claimed twice", c.WorkerID)
			}
			if err != nil {
				bad = append(bad, fmt.Errorf("claims[%d]: %w", i, err))
				continue
			}
			seen[c.WorkerID] = true
			s.Claims = append(s.Claims, c)
		}
	}
	s.LegacyClaims = nil
	for _, err := range bad {
		s.MalformedLines = append(s.MalformedLines, err.Error())
	}
	return nil
}

// MarshalJSON encodes a status. It refuses one that holds MalformedLines: writing it would drop
// them silently. Only the repair, which rebuilds the claims from the live Pods and clears
// MalformedLines, writes such a slice.
func (s TPUSliceAssignmentStatus) MarshalJSON() ([]byte, error) {
	if len(s.MalformedLines) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrMalformedLines, strings.Join(s.MalformedLines, "; "))
	}
	type plain TPUSliceAssignmentStatus // no MarshalJSON: no recursion
	return json.Marshal(plain(s))
}

// ErrMalformedLines is the error of a write of a status that holds malformed lines.
var ErrMalformedLines = errors.New("the slice's stored status holds lines that do not parse; only the operator's repair from the live Pods may write it")

// ValidToken reports whether token can name a claim: 1 to 64 printable ASCII characters, none of
// them a space (a space or line break would split the stored line, and JSON does not keep bytes
// that are not UTF-8). The webhook's tokens are hex; an adopted Pod's is its UID.
func ValidToken(token string) bool {
	return token != "" && len(token) <= 64 && printable(token)
}

// ValidPodName reports whether a Pod name can be stored in a bound claim (any name the API server
// accepts can).
func ValidPodName(name string) bool {
	return plainField(name)
}

// ValidPodUID reports whether a Pod UID can be stored in a bound claim (any UID the API server
// generates can).
func ValidPodUID(uid string) bool {
	return plainField(uid)
}
