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

package forward

import (
	"crypto/tls"
	"testing"
)

func TestSetupOptionsValidate(t *testing.T) {
	complete := func() SetupOptions {
		return SetupOptions{
			Service: "tpu-slice-operator-webhook-service", Namespace: "tpu-slice-operator-system", Self: "10.0.0.1:9443",
			Router: Options{
				ServingCertificate: func() (*tls.Certificate, error) { return &tls.Certificate{}, nil },
				Token:              StaticToken("token"),
			},
		}
	}
	cases := []struct {
		name    string
		change  func(*SetupOptions)
		wantErr string
	}{
		{name: "complete", change: func(*SetupOptions) {}},
		{name: "no namespace", change: func(o *SetupOptions) { o.Namespace = "" },
			wantErr: "claim forwarding through Service tpu-slice-operator-webhook-service needs: namespace"},
		{name: "no own address ($POD_IP unset)", change: func(o *SetupOptions) { o.Self = "" },
			wantErr: "claim forwarding through Service tpu-slice-operator-webhook-service needs: own address"},
		{name: "no certificate and no token", change: func(o *SetupOptions) { o.Router.ServingCertificate, o.Router.Token = nil, nil },
			wantErr: "claim forwarding through Service tpu-slice-operator-webhook-service needs: serving certificate, bearer token"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := complete()
			tc.change(&o)
			err := o.validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("validate() = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr):
				t.Errorf("validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestSetupOptionsEnabled(t *testing.T) {
	if (&SetupOptions{}).Enabled() {
		t.Error("forwarding without a Service is enabled")
	}
	if !(&SetupOptions{Service: "svc"}).Enabled() {
		t.Error("forwarding with a Service is not enabled")
	}
}
