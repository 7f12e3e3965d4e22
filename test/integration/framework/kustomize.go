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

package framework

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/ray-tpu/tpu-slice-operator/internal/localenv"
)

// KustomizeBinary returns the kustomize binary: $KUSTOMIZE, else bin/kustomize of the repository.
// It is an error, naming `make test`, when the binary is not there.
func KustomizeBinary() (string, error) {
	k := os.Getenv("KUSTOMIZE")
	if k == "" {
		k = filepath.Join(localenv.RootDir(), "bin", "kustomize")
	}
	if _, err := os.Stat(k); err != nil {
		return "", fmt.Errorf("kustomize not found at %s: run the tests with `make test` (it installs kustomize into bin/)", k)
	}
	return k, nil
}

// Kustomize runs `kustomize build` on dir, relative to the repository root (e.g. "config/default"),
// and returns the objects it renders. A failing build is an error carrying kustomize's stderr.
func Kustomize(dir string) ([]*unstructured.Unstructured, error) {
	k, err := KustomizeBinary()
	if err != nil {
		return nil, err
	}
	out, err := exec.Command(k, "build", filepath.Join(localenv.RootDir(), dir)).Output()
	if exitErr, ok := errors.AsType[*exec.ExitError](err); ok {
		return nil, fmt.Errorf("kustomize build %s: %s", dir, exitErr.Stderr)
	}
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return ParseYAML(out)
}

// ParseYAML splits a multi-document YAML stream into objects, skipping empty documents (blank, or
// holding only comments, as in helm template's output).
func ParseYAML(data []byte) ([]*unstructured.Unstructured, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading a YAML document: %w", err)
		}
		u := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, fmt.Errorf("parsing a YAML document: %w", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}
