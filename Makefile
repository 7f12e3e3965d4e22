# tpu-slice-operator

# The release: VERSION is stamped into the binary (--version, tpu_slice_operator_build_info), the
# image tag, the manifests and the chart. The committed manifests and chart name RELEASE_VERSION,
# the version this tree releases (CHANGELOG.md); `make release VERSION=v0.2.0` renders another into
# dist/ without changing the tree.
RELEASE_VERSION := v0.1.0
VERSION ?= $(RELEASE_VERSION)
IMAGE_REPO ?= ghcr.io/ray-tpu/tpu-slice-operator
# The manager image of all image targets, deploy and the release's manifests.
IMG ?= $(IMAGE_REPO):$(VERSION)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
VERSION_PKG = github.com/ray-tpu/tpu-slice-operator/internal/version
LDFLAGS = -s -w -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT)

# Versions of the control plane envtest runs against (`make envtest`, hack/envtest.sh):
# setup-envtest downloads the newest release of the ENVTEST_K8S_VERSION minor (1.37.x); when that
# fails (no network) or with ENVTEST_FROM_SOURCE=1, hack/build-envtest.sh builds exactly these
# versions from source. Either is cached per user and linked into bin/k8s/.
ENVTEST_K8S_VERSION ?= 1.37.2
ENVTEST_ETCD_VERSION ?= 3.6.16

# The rest of a local cluster (internal/localcluster): kube-scheduler and kube-controller-manager of
# CLUSTER_K8S_VERSION and kwok, downloaded from their releases by hack/build-cluster-tools.sh, or
# built from source where that fails (CLUSTER_TOOLS_FROM_SOURCE=1 skips the download), cached per
# user and linked into bin/.
CLUSTER_K8S_VERSION ?= $(ENVTEST_K8S_VERSION)
KWOK_VERSION ?= 0.8.0

# Tool versions.
CONTROLLER_TOOLS_VERSION ?= v0.23.0
SETUP_ENVTEST_VERSION ?= v0.25.1
KUSTOMIZE_VERSION ?= v5.7.1
GOLANGCI_LINT_VERSION ?= v2.15.0

GOOS ?= $(shell go env GOOS)
GOARCH ?= $(shell go env GOARCH)

# Setting SHELL to bash allows bash commands to be executed by recipes.
SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

# The Go toolchain every build, test and tool install uses: go.mod's toolchain line (go1.27.3). The
# go command downloads it through the module proxy once (GOTOOLCHAIN=<version>), whatever Go is
# installed, so every clone builds and scans (make govulncheck) with the same standard library.
GO_TOOLCHAIN ?= $(shell awk '$$1 == "toolchain" {print $$2}' go.mod)
export GOTOOLCHAIN = $(GO_TOOLCHAIN)

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen kustomize ## Generate CRD, RBAC and webhook manifests from the markers; name the release's image in config/manager.
	cd config/manager && $(KUSTOMIZE) edit set image controller=$(IMAGE_REPO):$(RELEASE_VERSION)
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd webhook paths="./api/...;./controllers/...;./webhooks/...;./internal/forward/...;./internal/nodes/..." output:crd:artifacts:config=config/crd/bases
	# The cluster autoscaler's ProvisioningRequest CRD, from the types the operator uses, for the
	# local cluster's stand-in autoscaler (its own module and manifests are not a dependency).
	$(CONTROLLER_GEN) crd paths="./internal/provisioning/..." output:crd:artifacts:config=test/crds
	# The certificate rotator's own role: only the self-signed install (config/default) carries it.
	$(CONTROLLER_GEN) rbac:roleName=cert-rotator-role paths="./internal/certs/..." output:rbac:artifacts:config=config/selfsigned

.PHONY: generate
generate: controller-gen ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/...;./internal/provisioning/..."

.PHONY: fmt
fmt: ## Run go fmt against code.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet against code.
	go vet ./...

.PHONY: lint
lint: golangci-lint ## Run golangci-lint (strict config in .golangci.yml).
	$(GOLANGCI_LINT) run ./...

.PHONY: lint-fix
lint-fix: golangci-lint ## Run golangci-lint and apply its fixes.
	$(GOLANGCI_LINT) run --fix ./...

.PHONY: docs
docs: ## Generate docs/flags.md from the manager's flag set (hack/flagdoc).
	go run ./hack/flagdoc > docs/flags.md.tmp
	mv docs/flags.md.tmp docs/flags.md

.PHONY: verify
verify: manifests generate fmt helm-chart docs ## Regenerate everything (CRD, RBAC, webhooks, DeepCopy, Helm chart, flag reference) and fail if the tree changed.
	go mod tidy
	@if [ -n "$$(git status --porcelain)" ]; then \
		echo "Generated files are out of date (run 'make manifests generate fmt docs' and 'go mod tidy'):"; \
		git status --porcelain; git --no-pager diff --stat; exit 1; \
	fi

##@ Test

# The test layers. Unit tests need no control plane; the others run kube-apiserver and etcd from
# `make envtest`. TEST_ARGS is passed to every `go test` of the first three.
# test/bench's own tests (its topology, flags and BENCH lines) need no control plane either.
UNIT_PKGS = $$(go list ./... | grep -v /test/) ./test/bench
TEST_TIMEOUT ?= 45m
# The chaos run of `make test`; `make test-chaos` runs longer (DURATION, default 20m).
CHAOS_DURATION ?= 2m
# CHAOS_CLUSTER is where the chaos run's halves run: none (both on the bare API server), gate-on
# (RayMultiHostIndexing=true on the local cluster) or all.
CHAOS_CLUSTER ?= gate-on
FUZZTIME ?= 30s
# MODEL_CHECKS is the model-based test's budget under `make fuzz` (TestModel in controllers; `make
# test` runs it with its small default).
MODEL_CHECKS ?= 5000
# Every suite on a control plane (integration, end-to-end, local cluster, chaos) runs with
# client-go's cache mutation detector: an informer keeps a copy of every object it caches and
# panics when the cached object is changed. The reconciler reads a slice's Pods from the cache
# without copying them (controllers/pods.go).
CACHE_MUTATION_DETECTOR = KUBE_CACHE_MUTATION_DETECTOR=true

.PHONY: test
test: test-unit test-integration envtest cluster-tools ## Run every test layer: unit, integration, end-to-end (bare API server and local cluster, side by side), then a CHAOS_DURATION (2m) chaos run, its gate-on half on the local cluster.
	@# The end-to-end suites wait on their control planes more than they compute: in two lanes,
	@# test/e2e then the capacity suites beside test/cluster, they take about the longer lane's
	@# time (CI's 15 minutes).
	$(MAKE) --no-print-directory -j2 --output-sync=target test-lane-e2e test-cluster-operator
	$(call run-chaos,$(CHAOS_DURATION),30m)

# test-lane-e2e is make test's first lane: test/e2e, then the local cluster's capacity suites.
.PHONY: test-lane-e2e
test-lane-e2e: envtest cluster-tools
	$(MAKE) --no-print-directory test-e2e
	$(MAKE) --no-print-directory test-cluster-capacity

.PHONY: test-unit
test-unit: ## Run the unit tests (no control plane).
	go test $(UNIT_PKGS) -count=1 -timeout $(TEST_TIMEOUT) $(TEST_ARGS)

.PHONY: test-integration
test-integration: envtest kustomize helm ## Run the integration suites (test/integration/...) on a real kube-apiserver.
	$(CACHE_MUTATION_DETECTOR) KUBEBUILDER_ASSETS="$(KUBEBUILDER_ASSETS)" KUSTOMIZE="$(KUSTOMIZE)" HELM="$(HELM)" go test ./test/integration/... -count=1 -timeout $(TEST_TIMEOUT) $(TEST_ARGS)

.PHONY: test-e2e
test-e2e: envtest ## Run the end-to-end suite (test/e2e): KubeRay's RayCluster controller in-process, with RayMultiHostIndexing off and on.
	$(CACHE_MUTATION_DETECTOR) KUBEBUILDER_ASSETS="$(KUBEBUILDER_ASSETS)" go test ./test/e2e -count=1 -timeout $(TEST_TIMEOUT) $(TEST_ARGS)

.PHONY: test-chaos
test-chaos: envtest cluster-tools ## Run the chaos suite (SEED=<n> DURATION=<total, split between both KubeRay gate settings; default 20m> CHAOS_CLUSTER=none|gate-on|all, default gate-on: that half on the local cluster).
	$(call run-chaos,$(or $(DURATION),20m),0)

# run-chaos runs the chaos suite for $(1) with go test's timeout $(2); SEED=0 (default) derives the
# seed from the time and prints it.
define run-chaos
$(CACHE_MUTATION_DETECTOR) KUBEBUILDER_ASSETS="$(KUBEBUILDER_ASSETS)" CLUSTER_ASSETS="$(CLUSTER_ASSETS)" go test ./test/chaos -count=1 -timeout $(2) -v -args -chaos.seed=$(or $(SEED),0) -chaos.duration=$(1) -chaos.cluster=$(CHAOS_CLUSTER)
endef

.PHONY: test-cluster
test-cluster: envtest cluster-tools ## Run the local cluster's suites: the stand-in autoscaler's (test/autoscaler), slices getting capacity through it (test/capacity), then the operator's (test/cluster), on the real scheduler, kube-controller-manager and kwok TPU nodes.
	$(MAKE) --no-print-directory test-cluster-capacity
	$(MAKE) --no-print-directory test-cluster-operator

# test-cluster-capacity runs the stand-in autoscaler's suite and the capacity suite (about 30 s
# each); test-cluster-operator the operator's suite (about 3 minutes).
.PHONY: test-cluster-capacity test-cluster-operator
test-cluster-capacity: envtest cluster-tools
	$(CACHE_MUTATION_DETECTOR) KUBEBUILDER_ASSETS="$(KUBEBUILDER_ASSETS)" CLUSTER_ASSETS="$(CLUSTER_ASSETS)" go test ./test/autoscaler -count=1 -timeout $(TEST_TIMEOUT) $(TEST_ARGS)
	$(CACHE_MUTATION_DETECTOR) KUBEBUILDER_ASSETS="$(KUBEBUILDER_ASSETS)" CLUSTER_ASSETS="$(CLUSTER_ASSETS)" go test ./test/capacity -count=1 -timeout $(TEST_TIMEOUT) $(TEST_ARGS)

test-cluster-operator: envtest cluster-tools
	$(CACHE_MUTATION_DETECTOR) KUBEBUILDER_ASSETS="$(KUBEBUILDER_ASSETS)" CLUSTER_ASSETS="$(CLUSTER_ASSETS)" go test ./test/cluster -count=1 -timeout $(TEST_TIMEOUT) $(TEST_ARGS)

.PHONY: fuzz
fuzz: ## Run every fuzz target of the repository (func Fuzz... in a _test.go file), each for FUZZTIME (default 30s), then the model-based test for MODEL_CHECKS (default 5000) histories.
	@targets=$$(git grep -o -E '^func Fuzz[A-Za-z0-9_]+' -- '*_test.go' | sed 's/:func /:/'); \
	[ -n "$$targets" ] || { echo "no fuzz targets found" >&2; exit 1; }; \
	for t in $$targets; do \
		pkg=./$$(dirname "$${t%%:*}"); target=$${t##*:}; \
		echo "fuzzing $$target in $$pkg for $(FUZZTIME)"; \
		go test "$$pkg" -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) || exit 1; \
	done; \
	echo "model-based test TestModel in ./controllers for $(MODEL_CHECKS) histories"; \
	go test ./controllers -run '^TestModel$$' -count=1 -timeout $(TEST_TIMEOUT) -rapid.checks=$(MODEL_CHECKS)

.PHONY: bench
bench: envtest cluster-tools ## Benchmark Pod admission against a same-run no-webhook baseline (S1-S5), placement by the real scheduler against nodeSelector-only Pods (S6), KubeRay creating a replica (S7), the failover bound at the defaults (S8), and the reconcile CPU of one Node event with 300 slices waiting for a domain against waking them all (S9); plot and CSVs in bin/bench; BENCH_ARGS=-scenarios=S1,S6, -s6-hosts=64,256, -probe-representations; see docs/performance.md.
	KUBEBUILDER_ASSETS="$(KUBEBUILDER_ASSETS)" CLUSTER_ASSETS="$(CLUSTER_ASSETS)" go run ./test/bench $(BENCH_ARGS)

##@ Build

.PHONY: build
build: generate fmt vet ## Build the manager binary.
	CGO_ENABLED=0 go build -trimpath -ldflags="$(LDFLAGS)" -o bin/manager ./cmd

# The Dockerfile's build, without Docker: the same command and flags for every platform the image
# is built for. CI runs it, so a build break in any image platform fails CI although no Docker
# engine is available there.
.PHONY: build-platforms
build-platforms: ## Build the manager exactly as the Dockerfile does, for each of PLATFORMS, into dist/.
	@mkdir -p dist
	@for p in $$(echo "$(PLATFORMS)" | tr ',' ' '); do \
		os=$${p%/*}; arch=$${p#*/}; \
		echo "building dist/manager-$$os-$$arch"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -ldflags="$(LDFLAGS)" -o dist/manager-$$os-$$arch cmd/main.go || exit 1; \
	done

.PHONY: run
run: manifests generate ## Run the manager against the cluster in ~/.kube/config.
	go run ./cmd $(ARGS)

.PHONY: run-local
run-local: envtest $(if $(LOCAL_BARE),,cluster-tools) ## Run the operator and KubeRay on a local cluster: kube-scheduler, kube-controller-manager and kwok TPU node pools for every sample (ARGS=--pool=... adds pools); LOCAL_BARE=1 runs etcd + kube-apiserver alone.
	go build -o bin/run-local ./cmd/run-local
	KUBEBUILDER_ASSETS="$(KUBEBUILDER_ASSETS)" CLUSTER_ASSETS="$(CLUSTER_ASSETS)" exec bin/run-local --kubeconfig-out=bin/local/kubeconfig $(if $(LOCAL_BARE),--bare) $(ARGS)

# The image's base images, pinned by digest in hack/base-images.env (`hack/pin-base-images.sh`
# resolves them where a registry is reachable), and the version stamped into its binary.
IMAGE_BUILD_ARGS = $(shell sed -n 's/^\([A-Z_]*=[^ ]*\)$$/--build-arg \1/p' hack/base-images.env) --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT)
# check-pins fails unless hack/base-images.env pins both base images by digest.
define check-pins
@[ "$$(grep -cE '^(GO|BASE)_IMAGE=[^ ]+@sha256:[0-9a-f]{64}$$' hack/base-images.env)" = 2 ] || { echo "hack/base-images.env does not pin both base images by digest: run hack/pin-base-images.sh" >&2; exit 1; }
endef

.PHONY: docker-build
docker-build: ## Build the manager image (needs a Docker engine).
	$(check-pins)
	docker build $(IMAGE_BUILD_ARGS) -t $(IMG) .

.PHONY: docker-push
docker-push: ## Push the manager image.
	docker push $(IMG)

PLATFORMS ?= linux/arm64,linux/amd64
.PHONY: docker-buildx
docker-buildx: ## Build and push the manager image for several platforms.
	$(check-pins)
	docker buildx build --push --platform=$(PLATFORMS) $(IMAGE_BUILD_ARGS) --tag $(IMG) .

.PHONY: build-installer
build-installer: manifests generate kustomize ## Render config/default with IMG into dist/install.yaml.
	mkdir -p dist
	KUSTOMIZE="$(KUSTOMIZE)" hack/render.sh config/default $(IMG) > dist/install.yaml

# The release's artifacts, in dist/: install.yaml (config/default) and install-certmanager.yaml
# (config/certmanager-overlay) naming $(IMAGE_REPO):$(VERSION), the chart packaged at VERSION,
# the manager binaries of PLATFORMS, an SBOM of the module graph, and checksums. The multi-arch
# image is built (and pushed with PUSH=1) only where a Docker engine with buildx runs; elsewhere
# the release says so and the binaries prove every platform builds. Nothing in the tree changes.
PUSH ?= 0
.PHONY: release
release: manifests kustomize helm ## Build a release into dist/ (VERSION=v0.1.0; PUSH=1 pushes the multi-arch image where Docker exists).
	@[[ "$(VERSION)" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$$ ]] || { echo "VERSION=$(VERSION) is not a semantic version v<major>.<minor>.<patch>[-<pre>]" >&2; exit 1; }
	rm -rf dist && mkdir -p dist
	KUSTOMIZE="$(KUSTOMIZE)" hack/render.sh config/default $(IMG) > dist/install.yaml
	KUSTOMIZE="$(KUSTOMIZE)" hack/render.sh config/certmanager-overlay $(IMG) > dist/install-certmanager.yaml
	$(HELM) package $(CHART_DIR) --version $(patsubst v%,%,$(VERSION)) --app-version $(VERSION) --destination dist
	$(MAKE) --no-print-directory build-platforms
	go run ./hack/sbom -version $(VERSION) -created "$$(git log -1 --format=%cI 2>/dev/null || date -u +%FT%TZ)" ./cmd > dist/sbom.spdx.json
	@if docker buildx version >/dev/null 2>&1; then \
		[ "$$(grep -cE '^(GO|BASE)_IMAGE=[^ ]+@sha256:[0-9a-f]{64}$$' hack/base-images.env)" = 2 ] || { echo "hack/base-images.env does not pin both base images by digest: run hack/pin-base-images.sh" >&2; exit 1; }; \
		echo "building the image $(IMG) for $(PLATFORMS)"; \
		docker buildx build $(if $(filter 1,$(PUSH)),--push) --platform=$(PLATFORMS) $(IMAGE_BUILD_ARGS) --tag $(IMG) .; \
	else \
		echo "no Docker engine with buildx here: the image $(IMG) is not built (make release on a machine with Docker)"; \
	fi
	cd dist && sha256sum $$(ls | grep -v SHA256SUMS) > SHA256SUMS
	@echo "release $(VERSION) in dist/:"; ls -l dist

GOVULNCHECK_VERSION ?= v1.9.0
# The golang.org/x/vulndb module version (from the Go module proxy) the local database is built from.
VULNDB_VERSION ?= v0.0.0-20261105234957-e22db6528018
GOVULNCHECK ?= $(LOCALBIN)/govulncheck

.PHONY: govulncheck
govulncheck: ## Check code and dependencies for known vulnerabilities (database built from golang.org/x/vulndb, cached per user).
	@mkdir -p "$(LOCALBIN)"
	$(call go-install-tool,$(GOVULNCHECK),golang.org/x/vuln/cmd/govulncheck,$(GOVULNCHECK_VERSION))
	hack/govulncheck.sh "$(GOVULNCHECK)" $(VULNDB_VERSION) ./...

##@ Deployment

ifndef ignore-not-found
  ignore-not-found = false
endif

.PHONY: install
install: manifests kustomize ## Install the CRD into the cluster in ~/.kube/config.
	@command -v "$(KUBECTL)" >/dev/null || { echo "no kubectl on the PATH (and no bin/kubectl from make envtest): install kubectl, or set KUBECTL=<path>" >&2; exit 1; }
	$(KUSTOMIZE) build config/crd | $(KUBECTL) apply --server-side -f -

.PHONY: uninstall
uninstall: manifests kustomize ## Uninstall the CRD from the cluster in ~/.kube/config.
	@command -v "$(KUBECTL)" >/dev/null || { echo "no kubectl on the PATH (and no bin/kubectl from make envtest): install kubectl, or set KUBECTL=<path>" >&2; exit 1; }
	$(KUSTOMIZE) build config/crd | $(KUBECTL) delete --ignore-not-found=$(ignore-not-found) -f -

# What deploy and undeploy install: config/default (built-in certificates, nothing to install
# first) or config/certmanager-overlay (certificates from cert-manager, which must be running).
DEPLOY_CONFIG ?= config/default

.PHONY: deploy
deploy: manifests kustomize ## Deploy the operator to the cluster in ~/.kube/config (DEPLOY_CONFIG=config/certmanager-overlay for cert-manager).
	@command -v "$(KUBECTL)" >/dev/null || { echo "no kubectl on the PATH (and no bin/kubectl from make envtest): install kubectl, or set KUBECTL=<path>" >&2; exit 1; }
	KUSTOMIZE="$(KUSTOMIZE)" hack/render.sh $(DEPLOY_CONFIG) $(IMG) | $(KUBECTL) apply --server-side -f -

.PHONY: undeploy
undeploy: kustomize ## Remove the operator from the cluster in ~/.kube/config (the CRD and every TPUSliceAssignment too).
	@command -v "$(KUBECTL)" >/dev/null || { echo "no kubectl on the PATH (and no bin/kubectl from make envtest): install kubectl, or set KUBECTL=<path>" >&2; exit 1; }
	KUSTOMIZE="$(KUSTOMIZE)" hack/render.sh $(DEPLOY_CONFIG) $(IMG) | $(KUBECTL) delete --ignore-not-found=$(ignore-not-found) -f -

HELM_VERSION ?= v3.22.0
HELM ?= $(LOCALBIN)/helm
CHART_DIR ?= charts/tpu-slice-operator

.PHONY: helm
helm: ## Install helm into bin/ (built from source).
	@mkdir -p "$(LOCALBIN)"
	$(call go-install-tool,$(HELM),helm.sh/helm/v3/cmd/helm,$(HELM_VERSION))

.PHONY: helm-chart
helm-chart: manifests kustomize ## Generate the Helm chart in charts/ from config/default, config/certmanager-overlay and config/prometheus (hack/helm).
	go run ./hack/helm -kustomize $(KUSTOMIZE) -version $(patsubst v%,%,$(RELEASE_VERSION)) -out $(CHART_DIR)

.PHONY: helm-verify
helm-verify: helm-chart helm ## Fail if the chart is out of sync with config/; lint it and render it with its defaults and with every optional part on.
	@if [ -n "$$(git status --porcelain -- charts/)" ]; then \
		echo "charts/ is out of date with config/ (run 'make helm-chart'):"; \
		git status --porcelain -- charts/; git --no-pager diff --stat -- charts/; exit 1; \
	fi
	$(HELM) lint --strict $(CHART_DIR)
	$(HELM) template tpu-slice-operator $(CHART_DIR) --namespace tpu-slice-operator-system > /dev/null
	$(HELM) template tpu-slice-operator $(CHART_DIR) --namespace tpu-slice-operator-system --set certManager.enabled=true \
		--set metrics.serviceMonitor.enabled=true --set prometheusRule.enabled=true > /dev/null

##@ Dependencies

LOCALBIN ?= $(CURDIR)/bin
$(LOCALBIN):
	mkdir -p $(LOCALBIN)

KUBEBUILDER_ASSETS ?= $(LOCALBIN)/k8s/$(ENVTEST_K8S_VERSION)-$(GOOS)-$(GOARCH)
# The kubectl of install, deploy and their undoing: the one on the PATH, else the one `make envtest`
# provides (bin/kubectl).
KUBECTL ?= $(or $(shell command -v kubectl 2>/dev/null),$(LOCALBIN)/kubectl)
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
KUSTOMIZE ?= $(LOCALBIN)/kustomize
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint
SETUP_ENVTEST ?= $(LOCALBIN)/setup-envtest

.PHONY: envtest
envtest: $(LOCALBIN) ## Get kube-apiserver, etcd and kubectl with setup-envtest, or build them from source when that fails or ENVTEST_FROM_SOURCE=1 (cached per user); link them into bin/k8s/, and bin/kubectl to that kubectl.
	@if [ "$(ENVTEST_FROM_SOURCE)" != 1 ]; then \
		$(MAKE) --no-print-directory setup-envtest || echo "[envtest] cannot install setup-envtest" >&2; \
	fi
	@ENVTEST_FROM_SOURCE="$(ENVTEST_FROM_SOURCE)" hack/envtest.sh $(ENVTEST_K8S_VERSION) $(ENVTEST_ETCD_VERSION) $(KUBEBUILDER_ASSETS) $(SETUP_ENVTEST)
	@ln -sfn "$(KUBEBUILDER_ASSETS)/kubectl" "$(LOCALBIN)/kubectl"

.PHONY: setup-envtest
setup-envtest: $(LOCALBIN) ## Install Kubebuilder's setup-envtest into bin/.
	$(call go-install-tool,$(SETUP_ENVTEST),sigs.k8s.io/controller-runtime/tools/setup-envtest,$(SETUP_ENVTEST_VERSION))

CLUSTER_ASSETS ?= $(LOCALBIN)/cluster/$(CLUSTER_K8S_VERSION)-kwok-$(KWOK_VERSION)-$(GOOS)-$(GOARCH)

.PHONY: cluster-tools
cluster-tools: ## Get kube-scheduler, kube-controller-manager and kwok from their releases, or build them from source where that fails or CLUSTER_TOOLS_FROM_SOURCE=1 (cached per user); link them into bin/cluster/.
	@hack/build-cluster-tools.sh $(CLUSTER_K8S_VERSION) $(KWOK_VERSION) $(CLUSTER_ASSETS)

.PHONY: controller-gen
controller-gen: $(LOCALBIN) ## Install controller-gen into bin/.
	$(call go-install-tool,$(CONTROLLER_GEN),sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_TOOLS_VERSION))

.PHONY: kustomize
kustomize: $(LOCALBIN) ## Install kustomize into bin/.
	$(call go-install-tool,$(KUSTOMIZE),sigs.k8s.io/kustomize/kustomize/v5,$(KUSTOMIZE_VERSION))

.PHONY: golangci-lint
golangci-lint: $(LOCALBIN) ## Install golangci-lint into bin/.
	$(call go-install-tool,$(GOLANGCI_LINT),github.com/golangci/golangci-lint/v2/cmd/golangci-lint,$(GOLANGCI_LINT_VERSION))

# go-install-tool installs a Go tool at a pinned version into bin/ as <name>-<version>, linked as <name>.
# $1 - target path, $2 - package, $3 - version
define go-install-tool
@[ -f "$(1)-$(3)" ] && [ "$$(readlink -- "$(1)" 2>/dev/null)" = "$(notdir $(1))-$(3)" ] || { \
set -e; \
echo "Installing $(2)@$(3)"; \
rm -f "$(1)"; \
GOBIN="$(LOCALBIN)" go install $(2)@$(3); \
mv "$(LOCALBIN)/$$(basename "$(1)")" "$(1)-$(3)"; \
ln -sf "$(notdir $(1))-$(3)" "$(1)"; \
}
endef
