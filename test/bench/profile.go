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
	"os"
	"path/filepath"
	"runtime/pprof"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// profileRound profiles the first round of a scenario measured in rounds (S7) only.
func (b *bench) profileRound(ctx context.Context, name string, round int) func() {
	if round > 0 {
		return func() {}
	}
	return b.profile(ctx, name)
}

// profile starts CPU profiles of this process and of the API server when -profile-dir is set, and
// returns the function that stops them and writes <dir>/<name>-{bench,apiserver}.pprof.
func (b *bench) profile(ctx context.Context, name string) func() {
	if profileDir == "" || b.noProfiles {
		return func() {}
	}
	f, err := os.Create(filepath.Join(profileDir, name+"-bench.pprof"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
		return func() {}
	}
	_ = pprof.StartCPUProfile(f)
	rc, err := rest.RESTClientFor(restConfigForRaw(b.env.Config))
	done := make(chan struct{})
	if err == nil {
		go func() {
			defer close(done)
			data, err := rc.Get().AbsPath("/debug/pprof/profile").Param("seconds", "8").DoRaw(ctx)
			if err != nil {
				fmt.Fprintln(os.Stderr, "apiserver profile:", err)
				return
			}
			_ = os.WriteFile(filepath.Join(profileDir, name+"-apiserver.pprof"), data, 0o600)
		}()
	} else {
		close(done)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		<-done
	}
}

func restConfigForRaw(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return c
}
