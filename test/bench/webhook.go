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
	"context"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ray-tpu/tpu-slice-operator/internal/operator"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/test/integration/framework"
)

// unregisterPodWebhook removes the Pod webhook so the baseline's creates skip it; it returns the
// configuration for registerPodWebhook.
func (b *bench) unregisterPodWebhook(ctx context.Context) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	var list admissionregistrationv1.MutatingWebhookConfigurationList
	if err := b.c.List(ctx, &list); err != nil {
		return nil, err
	}
	if len(list.Items) != 1 {
		return nil, fmt.Errorf("want one mutating webhook configuration, found %d", len(list.Items))
	}
	saved := list.Items[0].DeepCopy()
	if err := b.c.Delete(ctx, &list.Items[0]); err != nil {
		return nil, err
	}
	return saved, b.waitForWebhook(ctx, false)
}

func (b *bench) registerPodWebhook(ctx context.Context, saved *admissionregistrationv1.MutatingWebhookConfiguration) error {
	cfg := saved.DeepCopy()
	cfg.ResourceVersion, cfg.UID = "", ""
	if err := b.c.Create(ctx, cfg); err != nil {
		return err
	}
	return b.waitForWebhook(ctx, true)
}

// waitForWebhook waits until the API server has picked up the webhook configuration change: a dry
// run TPU worker Pod comes back mutated exactly when the webhook is registered.
func (b *bench) waitForWebhook(ctx context.Context, registered bool) error {
	ns, err := b.namespace(ctx, "probe")
	if err != nil {
		return err
	}
	rc := testutil.MakeRayCluster("probe", ns).TPUGroup("tpu", "tpu-v6e-slice", "4x4", 4, 4, 1).ManagedByMultiKueue().Obj()
	if err := b.c.Create(ctx, rc); err != nil {
		return err
	}
	var probe []*framework.Instance
	if registered {
		inst, err := b.env.StartInstance(ctx, framework.InstanceOptions{Operator: operator.Options{DisableControllers: true}})
		if err != nil {
			return err
		}
		defer func() { _ = inst.Stop() }()
		probe = append(probe, inst)
		b.env.ServeWebhooksFrom(probe...)
		defer b.env.ServeWebhooksFrom(b.validator)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		pod := testutil.WorkerPodFor(rc, "tpu").Obj()
		err := b.c.Create(ctx, pod, client.DryRunAll)
		_, mutated := framework.WorkerEnv(pod, "TPU_WORKER_ID")
		if err == nil && mutated == registered {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the API server did not pick up the webhook change (registered=%t)", registered)
}
