#!/usr/bin/env bash
# Resolves the Dockerfile's base images to the digests their tags name today and writes them,
# digest-pinned, to hack/base-images.env (read by `make docker-build`, `make docker-buildx` and
# `make release`). Needs a registry client: `docker buildx imagetools` or `crane`. Review and commit
# the change like any dependency bump.
#
# Usage: hack/pin-base-images.sh
set -euo pipefail
cd "$(dirname "$0")/.."
toolchain=$(awk '$1 == "toolchain" {print $2}' go.mod)
images=(
	"GO_IMAGE=golang:${toolchain#go}"
	"BASE_IMAGE=gcr.io/distroless/static:nonroot"
)

digest() {
	if command -v crane >/dev/null; then
		crane digest "$1"
	elif docker buildx version >/dev/null 2>&1; then
		docker buildx imagetools inspect "$1" --format '{{json .Manifest.Digest}}' | tr -d '"'
	else
		echo "pin-base-images.sh: needs crane or docker buildx" >&2
		return 1
	fi
}

out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "# The Dockerfile's base images, pinned by digest: written by hack/pin-base-images.sh." > "$out"
for entry in "${images[@]}"; do
	name=${entry%%=*} ref=${entry#*=}
	d=$(digest "$ref")
	[[ $d == sha256:* ]] || { echo "pin-base-images.sh: no digest for $ref: $d" >&2; exit 1; }
	echo "$name=$ref@$d" >> "$out"
done
mv "$out" hack/base-images.env
trap - EXIT
cat hack/base-images.env
