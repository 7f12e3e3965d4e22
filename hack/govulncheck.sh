#!/usr/bin/env bash
# Runs govulncheck against a local Go vulnerability database and fails on any vulnerability the
# code calls that hack/govulncheck.allow does not accept with a reason.
#
# vuln.go.dev, govulncheck's default database, is unreachable here, but the Go module proxy serves
# golang.org/x/vulndb, whose data/osv holds every OSV entry. hack/vulndb writes them in the layout
# `govulncheck -db file://...` reads, once per vulndb version, cached per user and shared by every
# clone. hack/vulnreport then reads govulncheck's JSON and applies the allow list.
#
# Usage: hack/govulncheck.sh <govulncheck binary> <golang.org/x/vulndb version> [packages]
# (default ./...). Cache: $TPU_VULNDB_CACHE, else ~/.cache/tpu-slice-operator.
# For govulncheck's own full report: <govulncheck binary> -db file://<cache>/vulndb-<version> ./...
set -euo pipefail
cd "$(dirname "$0")/.."
# The toolchain of go.mod's toolchain line, as the Makefile sets it: its standard library is scanned.
export GOTOOLCHAIN=${GOTOOLCHAIN:-$(awk '$1 == "toolchain" {print $2}' go.mod)}

govulncheck=$1 version=$2
shift 2
if [[ $# -eq 0 ]]; then
	set -- ./...
fi
cache=${TPU_VULNDB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tpu-slice-operator}
db=$cache/vulndb-$version
if [[ ! -f $db/index/modules.json ]]; then
	mkdir -p "$cache"
	echo "Building the vulnerability database from golang.org/x/vulndb@$version into $db"
	go run ./hack/vulndb -version "$version" -out "$db"
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT
# In JSON mode govulncheck exits 0 whatever it finds; a non-zero status is a failed scan.
"$govulncheck" -db "file://$db" -format json "$@" > "$out"
go run ./hack/vulnreport -allow hack/govulncheck.allow < "$out"
