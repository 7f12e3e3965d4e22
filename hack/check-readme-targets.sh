#!/usr/bin/env bash
# Fails unless every `make <target>` command the README names is a target of the Makefile, so that a
# newcomer's first commands exist. .ci/run runs it.
#
# Usage: hack/check-readme-targets.sh [README.md]
set -euo pipefail
cd "$(dirname "$0")/.."
readme=${1:-README.md}
# A command: `make <target>` in backticks, or a line of a code block that starts with it.
targets=$(grep -oE '(^|`)make [a-z][a-z0-9-]*' "$readme" | awk '{print $2}' | sort -u)
[[ -n $targets ]] || { echo "$readme names no make target" >&2; exit 1; }
missing=0
for t in $targets; do
	if ! grep -qE "^${t}:" Makefile; then
		echo "$readme names 'make $t', which the Makefile does not define" >&2
		missing=1
	fi
done
[[ $missing == 0 ]] && echo "every make target $readme names exists: $(echo $targets | tr '\n' ' ')"
