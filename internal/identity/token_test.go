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

package identity_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/identity"
)

// TestTokenIgnoresValuesThatCannotNameAClaim: an annotation value that could not be stored in a
// claim line counts as no token, for matching, adoption and the token index alike.
func TestTokenIgnoresValuesThatCannotNameAClaim(t *testing.T) {
	cases := map[string]struct {
		annotation string
		want       string
	}{
		"the webhook's token":         {annotation: "0123456789abcdef", want: "0123456789abcdef"},
		"a token that injects claims": {annotation: "x\n1 y\n2 z"},
		"a token with a space":        {annotation: "a b"},
		"a token of 65 characters":    {annotation: strings.Repeat("x", 65)},
		"a token that is not ASCII":   {annotation: "jeton-é"},
		"an empty annotation":         {annotation: ""},
		// docs/spec.md §3.5: a reserved ID's Pod carries a secret, its claim the secret's seal.
		"a reserved ID's secret reads as its seal": {
			annotation: "s.00112233445566778899aabbccddeeff", want: identity.Seal("s.00112233445566778899aabbccddeeff"),
		},
		"a seal copied from a slice's status proves nothing": {annotation: identity.Seal("s.00112233445566778899aabbccddeeff")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := worker().Annotation(tpuv1alpha1.ClaimTokenAnnotation, tc.annotation).Obj()
			if diff := cmp.Diff(tc.want, identity.Token(pod)); diff != "" {
				t.Errorf("Token() (-want,+got):\n%s", diff)
			}
			var wantIndex []string
			if tc.want != "" {
				wantIndex = []string{tc.want}
			}
			if diff := cmp.Diff(wantIndex, identity.TokenIndexValue(pod)); diff != "" {
				t.Errorf("TokenIndexValue() (-want,+got):\n%s", diff)
			}
		})
	}
}
