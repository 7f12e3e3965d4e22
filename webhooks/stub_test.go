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
	"context"

	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/placement"
)

// stubClaimer is the Claimer and Planner of the Pod webhook's tests: it records what the webhook
// hands it and answers as configured. Where IDs go is the allocator's (internal/allocator,
// internal/claims), tested there.
type stubClaimer struct {
	// assignment and err are the answer of Claim and Plan.
	assignment allocator.Assignment
	err        error
	// reinvoked and reinvokedErr are the answer of Reinvoked.
	reinvoked    bool
	reinvokedErr error

	// claims, plans and reinvocations are what Claim, Plan and Reinvoked were handed, in order.
	claims, plans []allocator.Request
	reinvocations []reinvocation
}

// reinvocation is what Reinvoked was asked about.
type reinvocation struct {
	Namespace, Slice, Token string
	WorkerID                int32
}

var (
	_ Claimer = &stubClaimer{}
	_ Planner = &stubClaimer{}
)

func (s *stubClaimer) Claim(_ context.Context, req allocator.Request) (allocator.Assignment, error) {
	s.claims = append(s.claims, req)
	return s.assignment, s.err
}

func (s *stubClaimer) Plan(_ context.Context, req allocator.Request) (allocator.Assignment, error) {
	s.plans = append(s.plans, req)
	return s.assignment, s.err
}

func (s *stubClaimer) Reinvoked(_ context.Context, namespace, slice, token string, workerID int32) (bool, error) {
	s.reinvocations = append(s.reinvocations, reinvocation{Namespace: namespace, Slice: slice, Token: token, WorkerID: workerID})
	return s.reinvoked, s.reinvokedErr
}

// calls is the number of calls the webhook made to the stub.
func (s *stubClaimer) calls() int {
	return len(s.claims) + len(s.plans) + len(s.reinvocations)
}

// fakeNodes lists fixed Nodes, or fails, and records the selectors it was asked for.
type fakeNodes struct {
	nodes     []placement.Node
	err       error
	selectors []map[string]string
}

func (f *fakeNodes) ListNodes(_ context.Context, selector map[string]string) ([]placement.Node, error) {
	f.selectors = append(f.selectors, selector)
	return f.nodes, f.err
}

// newPodWebhook returns the Pod webhook claiming and planning through stub, without RayClusters or
// Nodes to read (placement then decides on the Pod alone).
func newPodWebhook(stub *stubClaimer) *podWebhook {
	return &podWebhook{planner: stub, claimer: stub, metrics: metrics.Default}
}
