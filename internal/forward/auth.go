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
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
)

// Authenticated wraps next so that only callers the API server authenticates (TokenReview of the
// bearer token) and authorizes (SubjectAccessReview: the request's method, lower-cased, on its
// non-resource URL path) reach it, as the API server would: 401 for no or an unknown token, 403
// for a caller without the permission. Both reviews are cached (a minute for tokens, five minutes
// for allowed and 30 s for denied decisions), so a forwarded claim rarely waits for one.
//
// controller-runtime's metrics filter does the same but answers an unknown token with 500.
func Authenticated(cfg *rest.Config, httpClient *http.Client, log logr.Logger, next http.Handler) (http.Handler, error) {
	authn, err := authenticationv1.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	authz, err := authorizationv1.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	retry := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	tokens, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		CacheTTL:                 time.Minute,
		TokenAccessReviewClient:  authn,
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      retry,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("building the token authenticator: %w", err)
	}
	decisions, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: authz,
		AllowCacheTTL:             5 * time.Minute,
		DenyCacheTTL:              30 * time.Second,
		WebhookRetryBackoff:       retry,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("building the authorizer: %w", err)
	}
	return &authenticated{tokens: tokens, decisions: decisions, log: log, next: next}, nil
}

type authenticated struct {
	tokens    authenticator.Request
	decisions authorizer.Authorizer
	log       logr.Logger
	next      http.Handler
}

func (a *authenticated) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	// An unknown token is an error too; whatever the cause, the caller claims locally instead.
	res, ok, err := a.tokens.AuthenticateRequest(req)
	if err != nil || !ok {
		a.log.V(1).Info("Refused an unauthenticated forwarded claim", "err", err)
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	attrs := authorizer.AttributesRecord{User: res.User, Verb: strings.ToLower(req.Method), Path: req.URL.Path}
	decision, reason, err := a.decisions.Authorize(req.Context(), attrs)
	if err != nil {
		a.log.Error(err, "Authorizing a forwarded claim", "user", res.User.GetName())
		http.Error(w, "authorization failed", http.StatusInternalServerError)
		return
	}
	if decision != authorizer.DecisionAllow {
		a.log.V(1).Info("Refused a forwarded claim", "user", res.User.GetName(), "reason", reason)
		http.Error(w, "Forbidden: "+res.User.GetName()+" may not post "+req.URL.Path, http.StatusForbidden)
		return
	}
	a.next.ServeHTTP(w, req)
}
