#!/usr/bin/env bash
# Provides the rest of a local cluster beside envtest's control plane: kube-scheduler and
# kube-controller-manager of <kubernetes-version>, and kwok of <kwok-version>, cached per user beside
# the envtest cache and linked into <link-dir>.
#
# Each binary is first downloaded from its project's releases, as `make envtest` does with
# setup-envtest: kube-scheduler and kube-controller-manager from dl.k8s.io (checked against their
# published .sha256), kwok from its GitHub release. The release host is probed with a short timeout
# first, so an offline machine loses seconds. What cannot be downloaded (no network, as on this
# project's own machines, or CLUSTER_TOOLS_FROM_SOURCE=1) is built from source through the Go module
# proxy: kube-scheduler and kube-controller-manager from k8s.io/kubernetes
# (hack/lib/kube-build.sh, as hack/build-envtest.sh builds kube-apiserver), kwok from sigs.k8s.io/kwok
# in its own tool module (it requires k8s.io v0.36, so it never enters the operator's go.mod).
#
# Usage: hack/build-cluster-tools.sh <kubernetes-version> <kwok-version> <link-dir>
# Environment: CLUSTER_TOOLS_FROM_SOURCE=1 skips the downloads; CLUSTER_TOOLS_PROBE_TIMEOUT (default
# 20, seconds) and CLUSTER_TOOLS_DOWNLOAD_TIMEOUT (default 600) bound them; TPU_CLUSTER_TOOLS_CACHE
# moves the per-user cache.
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

OS=$(go env GOOS) ARCH=$(go env GOARCH)
PROBE_TIMEOUT=${CLUSTER_TOOLS_PROBE_TIMEOUT:-20}
DOWNLOAD_TIMEOUT=${CLUSTER_TOOLS_DOWNLOAD_TIMEOUT:-600}

# reachable reports whether a release URL answers within the probe timeout.
reachable() {
  command -v curl >/dev/null && curl -fsL -o /dev/null --head --max-time "$PROBE_TIMEOUT" "$1"
}

# download fetches $1 into $OUT/$2, checked against the SHA-256 at $3 when given, or fails leaving
# nothing behind.
download() {
  local url=$1 name=$2 sum_url=${3:-} tmp="$OUT/$2.download"
  log "downloading $name from $url"
  if ! curl -fsSL --max-time "$DOWNLOAD_TIMEOUT" -o "$tmp" "$url"; then
    rm -f "$tmp"
    return 1
  fi
  if [ -n "$sum_url" ]; then
    local want got
    want=$(curl -fsSL --max-time "$PROBE_TIMEOUT" "$sum_url" | awk '{print $1}') || want=
    got=$(sha256sum "$tmp" | awk '{print $1}')
    if [ -z "$want" ] || [ "$want" != "$got" ]; then
      log "$name: checksum ${got} does not match ${want:-(none published)} at $sum_url"
      rm -f "$tmp"
      return 1
    fi
  fi
  chmod +x "$tmp"
  mv "$tmp" "$OUT/$name"
}

# download_released fetches whichever of the three binaries is not cached yet from its release;
# what it cannot fetch is left for the source build.
download_released() {
  local k8s="https://dl.k8s.io/release/v${K8S_VERSION}/bin/${OS}/${ARCH}"
  local kwok="https://github.com/kubernetes-sigs/kwok/releases/download/v${KWOK_VERSION}/kwok-${OS}-${ARCH}"
  if [ ! -x "$OUT/kube-scheduler" ] || [ ! -x "$OUT/kube-controller-manager" ]; then
    if reachable "$k8s/kube-scheduler.sha256"; then
      for b in kube-scheduler kube-controller-manager; do
        [ -x "$OUT/$b" ] || download "$k8s/$b" "$b" "$k8s/$b.sha256" || log "$b: download failed, building from source"
      done
    else
      log "dl.k8s.io is not reachable (offline?): building kube-scheduler and kube-controller-manager from source"
    fi
  fi
  if [ ! -x "$OUT/kwok" ]; then
    if reachable "$kwok"; then
      download "$kwok" kwok || log "kwok: download failed, building from source"
    else
      log "github.com is not reachable (offline?): building kwok from source"
    fi
  fi
}

mkdir -p "$OUT" "$LINK_DIR"
exec 9>"$OUT/.lock"
flock 9
if [ "${CLUSTER_TOOLS_FROM_SOURCE:-}" = 1 ]; then
  log "CLUSTER_TOOLS_FROM_SOURCE=1: building from source"
else
  download_released
fi
kube_build "$K8S_VERSION" "$OUT" kube-scheduler kube-controller-manager
[ -x "$OUT/kwok" ] || build_kwok
for b in kube-scheduler kube-controller-manager kwok; do
  ln -sfn "$OUT/$b" "$LINK_DIR/$b"
done
log "ready: $LINK_DIR ($("$OUT/kube-scheduler" --version 2>/dev/null), kwok $("$OUT/kwok" --version 2>/dev/null | head -1))"
