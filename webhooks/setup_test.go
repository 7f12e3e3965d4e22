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

package webhooks

import (
	"crypto/tls"
	"testing"

	"github.com/ray-tpu/tpu-slice-operator/internal/forward"
)

func TestForwardOptionsValidate(t *testing.T) {
	complete := func() ForwardOptions {
		return ForwardOptions{
			Service: "tpu-slice-operator-webhook-service", Namespace: "tpu-slice-operator-system", Self: "10.0.0.1:9443",
			ServingCertificate: func() (*tls.Certificate, error) { return &tls.Certificate{}, nil },
			Token:              forward.StaticToken("token"),
		}
	}
	cases := []struct {
		name    string
		change  func(*ForwardOptions)
		wantErr string
	}{
		{name: "complete", change: func(*ForwardOptions) {}},
		{name: "no namespace", change: func(o *ForwardOptions) { o.Namespace = "" },
			wantErr: "claim forwarding through Service tpu-slice-operator-webhook-service needs: namespace"},
		{name: "no own address ($POD_IP unset)", change: func(o *ForwardOptions) { o.Self = "" },
			wantErr: "claim forwarding through Service tpu-slice-operator-webhook-service needs: own address"},
		{name: "no certificate and no token", change: func(o *ForwardOptions) { o.ServingCertificate, o.Token = nil, nil },
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

func TestForwardOptionsEnabled(t *testing.T) {
	if (&ForwardOptions{}).Enabled() {
		t.Error("forwarding without a Service is enabled")
	}
	if !(&ForwardOptions{Service: "svc"}).Enabled() {
		t.Error("forwarding with a Service is not enabled")
	}
}
