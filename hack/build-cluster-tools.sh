#!/usr/bin/env bash
# Builds the rest of a local cluster beside envtest's control plane: kube-scheduler and
# kube-controller-manager from k8s.io/kubernetes (the wrapper-module technique of
# hack/build-envtest.sh, same version stamping), and kwok from sigs.k8s.io/kwok in its own tool
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
STAGING_VERSION="v0.${K8S_VERSION#*.}"

log() { printf '[cluster-tools] %s\n' "$*" >&2; }

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
    echo "module clustertoolsbuild"
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
    go get "k8s.io/kubernetes/cmd/kube-scheduler@v${K8S_VERSION}" "k8s.io/kubernetes/cmd/kube-controller-manager@v${K8S_VERSION}"
    local pkg=k8s.io/component-base/version
    local ld="-s -w -X ${pkg}.gitVersion=v${K8S_VERSION} -X ${pkg}.gitMajor=${K8S_VERSION%%.*}"
    ld="$ld -X ${pkg}.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2) -X ${pkg}.gitTreeState=clean"
    ld="$ld -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
    for b in kube-scheduler kube-controller-manager; do
      [ -x "$OUT/$b" ] && continue
      log "building $b v${K8S_VERSION}"
      go build -trimpath -ldflags "$ld" -o "$OUT/$b.tmp" "k8s.io/kubernetes/cmd/$b"
      mv "$OUT/$b.tmp" "$OUT/$b"
    done
  )
}

build_kwok() {
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  printf 'module kwokbuild\n\ngo %s\n' "$(go env GOVERSION | sed 's/^go//; s/\.[0-9]*$//')" > "$work/go.mod"
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
{ [ -x "$OUT/kube-scheduler" ] && [ -x "$OUT/kube-controller-manager" ]; } || build_kube
[ -x "$OUT/kwok" ] || build_kwok
for b in kube-scheduler kube-controller-manager kwok; do
  ln -sfn "$OUT/$b" "$LINK_DIR/$b"
done
log "ready: $LINK_DIR ($("$OUT/kube-scheduler" --version 2>/dev/null), kwok $("$OUT/kwok" --version 2>/dev/null | head -1))"
