# shellcheck shell=bash
# Sourced by hack/build-envtest.sh and hack/build-cluster-tools.sh: builds commands of
# k8s.io/kubernetes through the Go module proxy in a throw-away wrapper module, version-stamped as
# the release binaries are. The sourcing script defines log <message>.

# Static binaries, built by the local toolchain, resolving modules as the wrapper's go.mod says.
export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0

# go_directive prints the go directive of a wrapper module: the toolchain's major.minor.
go_directive() { go env GOVERSION | sed 's/^go//; s/\.[0-9]*$//'; }

# kube_build <kubernetes-version> <out-dir> <command>... builds each k8s.io/kubernetes/cmd/<command>
# that <out-dir> does not hold yet into <out-dir>/<command>; with all of them there it does nothing.
kube_build() {
  local version=$1 out=$2
  shift 2
  local cmd missing=()
  for cmd in "$@"; do [ -x "$out/$cmd" ] || missing+=("$cmd"); done
  [ ${#missing[@]} -gt 0 ] || return 0
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  log "resolving k8s.io/kubernetes v${version}"
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@v${version}" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
  [ -f "$gomod" ] || { log "cannot find go.mod of k8s.io/kubernetes v${version}"; exit 1; }
  {
    echo "module kubebuild"
    echo
    echo "go $(go_directive)"
    echo
    echo "require k8s.io/kubernetes v${version}"
    echo
    # k8s.io/kubernetes requires its staging modules as v0.0.0 with local replaces: point each at
    # its published release (v0.<minor>.<patch> for Kubernetes 1.<minor>.<patch>) instead.
    grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$gomod" |
      awk -v v="v0.${version#*.}" '{print "replace " $1 " => " $1 " " v}'
  } > "$work/go.mod"
  (
    cd "$work"
    local pkgs=()
    for cmd in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/${cmd}@v${version}"); done
    go get "${pkgs[@]}"
    local pkg=k8s.io/component-base/version
    local ld="-s -w -X ${pkg}.gitVersion=v${version} -X ${pkg}.gitMajor=${version%%.*}"
    ld="$ld -X ${pkg}.gitMinor=$(echo "$version" | cut -d. -f2) -X ${pkg}.gitTreeState=clean"
    ld="$ld -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
    for cmd in "${missing[@]}"; do
      log "building $cmd v${version}"
      go build -trimpath -ldflags "$ld" -o "$out/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
      mv "$out/$cmd.tmp" "$out/$cmd"
    done
  )
}
