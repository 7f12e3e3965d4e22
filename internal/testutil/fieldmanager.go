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

package testutil

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// RequireFieldManager returns fake-client interceptors that fail t on every create, update, patch
// or apply (of an object or of its subresources) whose options do not name fieldManager, and then
// pass the write on.
func RequireFieldManager(t testing.TB, fieldManager string) interceptor.Funcs {
	check := func(verb string, obj any, got string) {
		if got != fieldManager {
			t.Errorf("%s of %T with field manager %q, want %q", verb, obj, got, fieldManager)
		}
	}
	return interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			check("create", obj, (&client.CreateOptions{}).ApplyOptions(opts).FieldManager)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			check("update", obj, (&client.UpdateOptions{}).ApplyOptions(opts).FieldManager)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			check("patch", obj, (&client.PatchOptions{}).ApplyOptions(opts).FieldManager)
			return c.Patch(ctx, obj, patch, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			check("apply", obj, (&client.ApplyOptions{}).ApplyOptions(opts).FieldManager)
			return c.Apply(ctx, obj, opts...)
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			check(sub+" create", obj, (&client.SubResourceCreateOptions{}).ApplyOptions(opts).FieldManager)
			return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			check(sub+" update", obj, (&client.SubResourceUpdateOptions{}).ApplyOptions(opts).FieldManager)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			check(sub+" patch", obj, (&client.SubResourcePatchOptions{}).ApplyOptions(opts).FieldManager)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}
}
