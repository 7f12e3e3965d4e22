#!/usr/bin/env bash
# Splits an API server CPU profile that the representation probe took (make bench
# BENCH_ARGS='-scenarios= -probe-representations') into CPU per write by stage, as in
# REPRESENTATIONS.md. Each row is the samples whose stack has the stage's frames (inclusive), so rows
# overlap where stages nest (coercion inside decoding).
#
# Usage: test/bench/pprof-categories.sh <profile> <writes during the profile, as the PROBE line says>
set -euo pipefail
f=${1:?profile}; w=${2:?writes}
q() { GOTOOLCHAIN=local go tool pprof -top -nodefraction=0 -nodecount=1000000 "$@" $f 2>/dev/null; }
ms() { sed -n 's/.*Showing nodes accounting for \([0-9.]*\)\(m\?s\),.*/\1 \2/p' | head -1 | awk -v w="$w" '{v=$1; if($2=="s") v*=1000; printf "%.1f", v/w}'; }
tot=$(q | ms)
echo "$f: $w writes, $tot ms of API server CPU per write"
c() { # name focus [ignore]
  if [ -n "${3:-}" ]; then v=$(q -focus="$2" -ignore="${3}" | ms); else v=$(q -focus="$2" | ms); fi
  printf '| %s | %s |\n' "$1" "${v:-0}"
}
c "request: decode the body (JSON to unstructured, incl. coercion)" 'schemaCoercingDecoder.Decode' 'watchChan|etcd3'
c "request: schema coercion (pruning, ObjectMeta, nulls)" 'unstructuredSchemaCoercer..apply' 'watchChan|etcd3'
c "update: decode the stored object from etcd (JSON + coercion)" 'etcd3.\(\*defaultDecoder\).Decode' 'watchChan'
c "update: OpenAPI schema validation (kube-openapi, ratcheting)" 'ValidateCustomResourceUpdate'
c "update: CEL validation" 'apiserver/schema/cel.\(\*Validator\).Validate'
c "update: managed fields (structured-merge-diff)" 'managedfields|structured-merge-diff'
c "update: deep copies" 'DeepCopyJSON'
c "update: encode for etcd" 'doEncode' 'WriteObjectNegotiated|watchChan|cacheWatcher|cachingObject'
c "update: etcd transaction (client side)" 'clientv3|grpc'
c "response: encode and write" 'WriteObjectNegotiated'
c "watch cache: decode every event from etcd (asynchronous)" 'watchChan..transform'
c "watch fan-out: encode and send to watchers" 'cacheWatcher|serveWatch|WatchServer'
c "garbage collection (background mark workers)" 'gcBgMarkWorker'
