#!/usr/bin/env bash
# Prints the kustomize render of a directory of config/ with the manager image set to <image>,
# without changing the tree: `make deploy`, `make undeploy`, `make build-installer`, `make release`.
# The render goes through a temporary overlay whose images transformer replaces the image
# config/manager names (the release's, $(IMAGE_REPO):$(RELEASE_VERSION)).
#
# Usage: KUSTOMIZE=bin/kustomize hack/render.sh <config dir> <image>
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kustomize=${KUSTOMIZE:-$root/bin/kustomize}
[[ $kustomize == */* ]] && kustomize=$(cd "$(dirname "$kustomize")" && pwd)/$(basename "$kustomize")
dir=$(cd "$1" && pwd) image=$2

# The image config/manager sets: the one every render names before this overlay.
base=$(awk '$1 == "newName:" {print $2; exit}' "$root/config/manager/kustomization.yaml")
[[ -n $base ]] || { echo "render.sh: no newName in config/manager/kustomization.yaml" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# kustomize takes a base by a relative path only.
cat > "$tmp/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- $(realpath --relative-to="$tmp" "$dir")
YAML
(cd "$tmp" && "$kustomize" edit set image "$base=$image")
"$kustomize" build "$tmp"
