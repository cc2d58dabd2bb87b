#!/usr/bin/env bash
# Side by side, interleaved (A B, then B A): Sluice's Envoy RLS on
# --rls-addr (embedded default) and tools/rlsceiling, a trivial grpc-go
# server, under tools/rlsload: one and three descriptors per call, passing
# (domain edge) and mostly denied (edge-denied), from a client that does not
# offer gzip and one that does. Prints calls/s and the server's CPU per call.
# DUR=5s ROUNDS=2 tools/rlsload/compare.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${DUR:-5s}
ROUNDS=${ROUNDS:-2}
bin=$(mktemp -d)
go build -o "$bin/sluice" ./cmd/sluice
go build -o "$bin/rlsceiling" ./tools/rlsceiling
go build -o "$bin/rlsload" ./tools/rlsload
go build -tags gzip -o "$bin/rlsload-gzip" ./tools/rlsload
"$bin/sluice" serve --http-addr 127.0.0.1:18080 --admin-addr 127.0.0.1:0 --data-dir "$bin" \
  --rls-config tools/rlsload/rls --rls-addr 127.0.0.1:18081 --log-level error &
sluice=$!
"$bin/rlsceiling" -addr 127.0.0.1:18082 2>/dev/null &
ceiling=$!
trap 'kill $sluice $ceiling 2>/dev/null; rm -rf "$bin"' EXIT
sleep 1
measure() { # name addr pid client domain descriptors
  printf '%-9s %-12s %-11s d=%s  ' "$1" "$4" "$5" "$6"
  "$bin/$4" -addr "$2" -pid "$3" -d "$DUR" -domain "$5" -descriptors "$6"
}
for client in rlsload rlsload-gzip; do
  for domain in edge edge-denied; do
    for d in 1 3; do
      for round in $(seq "$ROUNDS"); do
        if (( round % 2 )); then
          measure sluice 127.0.0.1:18081 $sluice $client $domain $d
          measure ceiling 127.0.0.1:18082 $ceiling $client $domain $d
        else
          measure ceiling 127.0.0.1:18082 $ceiling $client $domain $d
          measure sluice 127.0.0.1:18081 $sluice $client $domain $d
        fi
      done
    done
  done
done
