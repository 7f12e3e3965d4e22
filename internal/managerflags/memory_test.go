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

package managerflags

import "testing"

func TestSoftMemoryLimit(t *testing.T) {
	cases := map[string]struct {
		env     map[string]string
		want    int64
		set     bool
		wantErr bool
	}{
		"no limit: the runtime's default":      {env: map[string]string{}},
		"an empty limit":                       {env: map[string]string{MemoryLimitEnv: ""}},
		"512 MiB: 90 % of it":                  {env: map[string]string{MemoryLimitEnv: "536870912"}, want: 483183820, set: true},
		"surrounding space is ignored":         {env: map[string]string{MemoryLimitEnv: " 1000\n"}, want: 900, set: true},
		"GOMEMLIMIT wins":                      {env: map[string]string{MemoryLimitEnv: "536870912", "GOMEMLIMIT": "100MiB"}},
		"a quantity, not bytes, is an error":   {env: map[string]string{MemoryLimitEnv: "512Mi"}, wantErr: true},
		"zero is an error, not an unset limit": {env: map[string]string{MemoryLimitEnv: "0"}, wantErr: true},
		"a negative limit is an error":         {env: map[string]string{MemoryLimitEnv: "-1"}, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, set, err := SoftMemoryLimit(func(k string) string { return tc.env[k] })
			if (err != nil) != tc.wantErr {
				t.Fatalf("SoftMemoryLimit() error = %v, want error %t", err, tc.wantErr)
			}
			if got != tc.want || set != tc.set {
				t.Errorf("SoftMemoryLimit() = %d, %t; want %d, %t", got, set, tc.want, tc.set)
			}
		})
	}
}
