#!/usr/bin/env bash
# Builds the rest of a local cluster beside envtest's control plane: kube-scheduler and
# kube-controller-manager from k8s.io/kubernetes (hack/lib/kube-build.sh, as
# hack/build-envtest.sh builds kube-apiserver), and kwok from sigs.k8s.io/kwok in its own tool
# module (it requires k8s.io v0.36, so it never enters the operator's go.mod). The result is cached
# per user beside the envtest cache and linked into <link-dir>.
#
# Usage: hack/build-cluster-tools.sh <kubernetes-version> <kwok-version> <link-dir>
set -euo pipefail

K8S_VERSION=${1:?kubernetes version, e.g. 1.37.2}
KWOK_VERSION=${2:?kwok version, e.g. 0.8.0}
LINK_DIR=${3:?directory to link the binaries into}

CACHE_ROOT=${TPU_CLUSTER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tpu-slice-operator/cluster}
OUT="$CACHE_ROOT/k8s-${K8S_VERSION}-kwok-${KWOK_VERSION}-$(go env GOOS)-$(go env GOARCH)"

log() { printf '[cluster-tools] %s\n' "$*" >&2; }

# shellcheck source=hack/lib/kube-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/kube-build.sh"

build_kwok() {
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  printf 'module kwokbuild\n\ngo %s\n' "$(go_directive)" > "$work/go.mod"
  (
    cd "$work"
    go get "sigs.k8s.io/kwok/cmd/kwok@v${KWOK_VERSION}"
    log "building kwok v${KWOK_VERSION}"
    go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION}" \
      -o "$OUT/kwok.tmp" sigs.k8s.io/kwok/cmd/kwok
    mv "$OUT/kwok.tmp" "$OUT/kwok"
  )
}

mkdir -p "$OUT" "$LINK_DIR"
exec 9>"$OUT/.lock"
flock 9
kube_build "$K8S_VERSION" "$OUT" kube-scheduler kube-controller-manager
[ -x "$OUT/kwok" ] || build_kwok
for b in kube-scheduler kube-controller-manager kwok; do
  ln -sfn "$OUT/$b" "$LINK_DIR/$b"
done
log "ready: $LINK_DIR ($("$OUT/kube-scheduler" --version 2>/dev/null), kwok $("$OUT/kwok" --version 2>/dev/null | head -1))"
