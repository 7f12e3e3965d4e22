#!/usr/bin/env bash
# Provides the envtest control-plane binaries (kube-apiserver, etcd, kubectl) and links them into
# <link-dir>, which the Makefile passes to the tests as KUBEBUILDER_ASSETS.
#
# First Kubebuilder's setup-envtest (<setup-envtest>, installed by `make setup-envtest`): the newest
# release of the Kubernetes minor version the index offers, from the per-user store if it is there,
# else downloaded (seconds). If that fails (no setup-envtest, no network: the index is probed with
# a short timeout first, so an offline machine loses seconds, not minutes), or with
# ENVTEST_FROM_SOURCE=1, hack/build-envtest.sh builds the exact versions from source through the Go
# module proxy (8+ minutes once, then cached per user).
#
# Usage: hack/envtest.sh <kubernetes-version> <etcd-version> <link-dir> [<setup-envtest>]
# Environment: ENVTEST_FROM_SOURCE=1 skips setup-envtest; ENVTEST_PROBE_TIMEOUT (default 20s) and
# ENVTEST_DOWNLOAD_TIMEOUT (default 10m) bound its index probe and its download;
# TPU_ENVTEST_CACHE moves the per-user cache.
set -euo pipefail

K8S_VERSION=${1:?kubernetes version, e.g. 1.37.2}
ETCD_VERSION=${2:?etcd version, e.g. 3.6.16}
LINK_DIR=${3:?directory to link the binaries into}
SETUP_ENVTEST=${4:-}

CACHE_ROOT=${TPU_ENVTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tpu-slice-operator/envtest}
STORE="$CACHE_ROOT/setup-envtest"
# setup-envtest's selector: any patch release of the pinned minor version, e.g. 1.37.x.
SELECTOR="$(echo "$K8S_VERSION" | cut -d. -f1-2).x"
BINARIES=(kube-apiserver etcd kubectl)

log() { printf '[envtest] %s\n' "$*" >&2; }

# bounded runs "$@" for at most $1 when timeout(1) exists.
bounded() {
  local limit=$1
  shift
  if command -v timeout >/dev/null; then
    timeout "$limit" "$@"
  else
    "$@"
  fi
}

# from_setup_envtest prints the directory of setup-envtest's binaries, from the store or
# downloaded, or fails.
from_setup_envtest() {
  local platform=(--bin-dir "$STORE" --os "$(go env GOOS)" --arch "$(go env GOARCH)")
  local dir
  if dir=$("$SETUP_ENVTEST" use --installed-only "$SELECTOR" "${platform[@]}" -p path 2>/dev/null); then
    printf '%s' "$dir"
    return
  fi
  log "setup-envtest: looking up envtest $SELECTOR (timeout ${ENVTEST_PROBE_TIMEOUT:-20s})"
  bounded "${ENVTEST_PROBE_TIMEOUT:-20s}" "$SETUP_ENVTEST" list "$SELECTOR" "${platform[@]}" >/dev/null || return 1
  log "setup-envtest: downloading envtest $SELECTOR"
  bounded "${ENVTEST_DOWNLOAD_TIMEOUT:-10m}" "$SETUP_ENVTEST" use "$SELECTOR" "${platform[@]}" -p path
}

link() {
  local dir=$1
  mkdir -p "$LINK_DIR"
  for b in "${BINARIES[@]}"; do
    ln -sfn "$dir/$b" "$LINK_DIR/$b"
  done
  log "ready: $LINK_DIR ($("$LINK_DIR/kube-apiserver" --version 2>/dev/null), from $2)"
}

if [ "${ENVTEST_FROM_SOURCE:-}" = 1 ]; then
  log "ENVTEST_FROM_SOURCE=1: building from source"
elif [ -z "$SETUP_ENVTEST" ] || [ ! -x "$SETUP_ENVTEST" ]; then
  log "setup-envtest is not installed: building from source"
else
  mkdir -p "$STORE"
  if dir=$(from_setup_envtest) && [ -n "$dir" ]; then
    missing=0
    for b in "${BINARIES[@]}"; do
      [ -x "$dir/$b" ] || { log "setup-envtest's $dir has no $b"; missing=1; }
    done
    if [ "$missing" = 0 ]; then
      link "$dir" setup-envtest
      exit 0
    fi
  fi
  log "setup-envtest could not provide envtest $SELECTOR (offline?): falling back to the from-source build of v$K8S_VERSION, cached once built (ENVTEST_FROM_SOURCE=1 skips the attempt)"
fi
exec "$(dirname "$0")/build-envtest.sh" "$K8S_VERSION" "$ETCD_VERSION" "$LINK_DIR"
