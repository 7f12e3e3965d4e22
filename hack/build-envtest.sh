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

log() { printf '[envtest] %s\n' "$*" >&2; }

# shellcheck source=hack/lib/kube-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/kube-build.sh"

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
[ -x "$OUT/kube-apiserver" ] || log "kube-apiserver is not cached: a cold build takes 7-17 min on 2 cores"
kube_build "$K8S_VERSION" "$OUT" kube-apiserver kubectl
for b in kube-apiserver etcd kubectl; do
  ln -sfn "$OUT/$b" "$LINK_DIR/$b"
done
log "ready: $LINK_DIR ($("$OUT/kube-apiserver" --version 2>/dev/null))"
