#!/usr/bin/env bash
# Builds the envtest control-plane binaries (kube-apiserver, etcd, kubectl) from source through the
# Go module proxy: hack/envtest.sh's fallback when setup-envtest cannot download them (as on this
# project's own machines) or ENVTEST_FROM_SOURCE=1. The result is cached per user and reused by
# every clone; it is linked into <link-dir>.
#
# Usage: hack/build-envtest.sh <kubernetes-version> <etcd-version> <link-dir>
set -euo pipefail

K8S_VERSION=${1:?kubernetes version, e.g. 1.37.2}
ETCD_VERSION=${2:?etcd version, e.g. 3.6.16}
LINK_DIR=${3:?directory to link the binaries into}

CACHE_ROOT=${TPU_ENVTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tpu-slice-operator/envtest}
OUT="$CACHE_ROOT/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}-$(go env GOOS)-$(go env GOARCH)"
STAGING_VERSION="v0.${K8S_VERSION#*.}"

log() { printf '[envtest] %s\n' "$*" >&2; }

export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0

build_kube() {
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  log "resolving k8s.io/kubernetes v${K8S_VERSION}"
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
  [ -f "$gomod" ] || { log "cannot find go.mod of k8s.io/kubernetes v${K8S_VERSION}"; exit 1; }
  {
    echo "module envtestbuild"
    echo
    echo "go $(go env GOVERSION | sed 's/^go//; s/\.[0-9]*$//')"
    echo
    echo "require k8s.io/kubernetes v${K8S_VERSION}"
    echo
    # k8s.io/kubernetes requires its staging modules as v0.0.0 with local replaces: point each at
    # its published release instead.
    grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$gomod" |
      awk -v v="$STAGING_VERSION" '{print "replace " $1 " => " $1 " " v}'
  } > "$work/go.mod"
  (
    cd "$work"
    go get "k8s.io/kubernetes/cmd/kube-apiserver@v${K8S_VERSION}" "k8s.io/kubernetes/cmd/kubectl@v${K8S_VERSION}"
    local pkg=k8s.io/component-base/version
    local ld="-s -w -X ${pkg}.gitVersion=v${K8S_VERSION} -X ${pkg}.gitMajor=${K8S_VERSION%%.*}"
    ld="$ld -X ${pkg}.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2) -X ${pkg}.gitTreeState=clean"
    ld="$ld -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
    log "building kube-apiserver v${K8S_VERSION} (cold: 7-17 min on 2 cores)"
    go build -trimpath -ldflags "$ld" -o "$OUT/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
    mv "$OUT/kube-apiserver.tmp" "$OUT/kube-apiserver"
    log "building kubectl v${K8S_VERSION}"
    go build -trimpath -ldflags "$ld" -o "$OUT/kubectl.tmp" k8s.io/kubernetes/cmd/kubectl
    mv "$OUT/kubectl.tmp" "$OUT/kubectl"
  )
}

build_etcd() {
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  cat > "$work/main.go" <<'GO'
// Command etcd is etcd's own server entry point, built from the published server module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  printf 'module etcdbuild\n\ngo 1.25\n' > "$work/go.mod"
  (
    cd "$work"
    go get "go.etcd.io/etcd/server/v3@v${ETCD_VERSION}"
    log "building etcd v${ETCD_VERSION}"
    go build -trimpath -ldflags "-s -w" -o "$OUT/etcd.tmp" .
    mv "$OUT/etcd.tmp" "$OUT/etcd"
  )
}

mkdir -p "$OUT" "$LINK_DIR"
exec 9>"$OUT/.lock"
flock 9
[ -x "$OUT/etcd" ] || build_etcd
{ [ -x "$OUT/kube-apiserver" ] && [ -x "$OUT/kubectl" ]; } || build_kube
for b in kube-apiserver etcd kubectl; do
  ln -sfn "$OUT/$b" "$LINK_DIR/$b"
done
log "ready: $LINK_DIR ($("$OUT/kube-apiserver" --version 2>/dev/null))"
