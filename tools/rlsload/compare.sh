#!/usr/bin/env bash
# Side by side, interleaved (A…E, then E…A, ROUNDS rounds): rate-limit
# servers under tools/rlsload, one and three descriptors per call, passing
# (domain edge) and mostly denied (edge-denied), from a client that does not
# offer gzip and one that does. Prints calls/s, the share of calls that
# passed, the server's CPU per call and, for the servers on Redis, Redis's
# CPU per call, each line with the load average before it; then the mean of
# each case and its ratio to tools/rlsceiling.
#
#   A ceiling      tools/rlsceiling, a trivial grpc-go ShouldRateLimit server
#   B sluice       sluice serve --rls-addr, embedded default
#   C sluice-redis sluice serve --rls-addr --redis-url $REDIS
#   D ratelimit    envoyproxy/ratelimit on $REDIS, if RATELIMIT_BIN is set
#   E gubernator   gubernator's native GetRateLimits, if GUBERNATOR_BIN is set
#   F sluice-base, G sluice-base-redis: B and C served by the sluice binary
#                  BASE_SLUICE_BIN, if set (another commit's, for a before
#                  and after in one run)
#
# Every server gets the rules of tools/rlsload/rls (gubernator: the same
# limits carried by each request). The peers are not built here: see
# docs/benchmarks/envoy-rls.md for how they were built and run. CLIENTS picks the
# clients (default both: rlsload rlsload-gzip).
#
#   DUR=8s ROUNDS=2 RATELIMIT_BIN=/path/ratelimit GUBERNATOR_BIN=/path/gubernator tools/rlsload/compare.sh
#   BASE_SLUICE_BIN=/tmp/sluice-before tools/rlsload/compare.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${DUR:-5s}
ROUNDS=${ROUNDS:-2}
REDIS=${REDIS:-127.0.0.1:6379}
CLIENTS=${CLIENTS:-rlsload rlsload-gzip}
bin=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$bin"' EXIT
go build -o "$bin/sluice" ./cmd/sluice
go build -o "$bin/rlsceiling" ./tools/rlsceiling
go build -o "$bin/rlsload" ./tools/rlsload
go build -tags gzip -o "$bin/rlsload-gzip" ./tools/rlsload
redis_pid=$(redis-cli -h "${REDIS%:*}" -p "${REDIS#*:}" info server | tr -d '\r' | sed -n 's/^process_id://p')

declare -A addr pid extra
targets=(ceiling sluice sluice-redis)
"$bin/rlsceiling" -addr 127.0.0.1:18082 2>/dev/null &
pids+=($!) addr[ceiling]=127.0.0.1:18082 pid[ceiling]=$!
"$bin/sluice" serve --http-addr 127.0.0.1:18080 --admin-addr 127.0.0.1:0 --data-dir "$bin" \
  --rls-config tools/rlsload/rls --rls-addr 127.0.0.1:18081 --log-level error &
pids+=($!) addr[sluice]=127.0.0.1:18081 pid[sluice]=$!
mkdir "$bin/redis-data"
"$bin/sluice" serve --http-addr 127.0.0.1:18090 --admin-addr 127.0.0.1:0 --data-dir "$bin/redis-data" \
  --redis-url "redis://$REDIS/0" --rls-config tools/rlsload/rls --rls-addr 127.0.0.1:18091 --log-level error &
pids+=($!) addr[sluice-redis]=127.0.0.1:18091 pid[sluice-redis]=$! extra[sluice-redis]="-redis-pid $redis_pid"
if [[ -n ${BASE_SLUICE_BIN:-} ]]; then
  mkdir "$bin/base-data" "$bin/base-redis-data"
  "$BASE_SLUICE_BIN" serve --http-addr 127.0.0.1:18100 --admin-addr 127.0.0.1:0 --data-dir "$bin/base-data" \
    --rls-config tools/rlsload/rls --rls-addr 127.0.0.1:18101 --log-level error &
  pids+=($!) addr[sluice-base]=127.0.0.1:18101 pid[sluice-base]=$!
  "$BASE_SLUICE_BIN" serve --http-addr 127.0.0.1:18110 --admin-addr 127.0.0.1:0 --data-dir "$bin/base-redis-data" \
    --redis-url "redis://$REDIS/0" --rls-config tools/rlsload/rls --rls-addr 127.0.0.1:18111 --log-level error &
  pids+=($!) addr[sluice-base-redis]=127.0.0.1:18111 pid[sluice-base-redis]=$! extra[sluice-base-redis]="-redis-pid $redis_pid"
  targets+=(sluice-base sluice-base-redis)
fi
if [[ -n ${RATELIMIT_BIN:-} ]]; then
  mkdir -p "$bin/runtime/ratelimit/config"
  cp tools/rlsload/rls/*.yaml "$bin/runtime/ratelimit/config/"
  env USE_STATSD=false LOG_LEVEL=error REDIS_SOCKET_TYPE=tcp REDIS_URL="$REDIS" \
    RUNTIME_ROOT="$bin/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
    GRPC_HOST=127.0.0.1 GRPC_PORT=18083 HOST=127.0.0.1 PORT=18086 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18087 \
    "$RATELIMIT_BIN" >"$bin/ratelimit.log" 2>&1 &
  pids+=($!) addr[ratelimit]=127.0.0.1:18083 pid[ratelimit]=$! extra[ratelimit]="-redis-pid $redis_pid"
  targets+=(ratelimit)
fi
if [[ -n ${GUBERNATOR_BIN:-} ]]; then
  env OTEL_TRACES_EXPORTER=none GUBER_LOG_LEVEL=error GUBER_GRPC_ADDRESS=127.0.0.1:18084 \
    GUBER_HTTP_ADDRESS=127.0.0.1:18085 GUBER_PEER_DISCOVERY_TYPE=member-list \
    GUBER_MEMBERLIST_ADDRESS=127.0.0.1:17946 GUBER_MEMBERLIST_BIND_ADDRESS=127.0.0.1:17946 \
    GUBER_MEMBERLIST_ADVERTISE_ADDRESS=127.0.0.1:17946 GUBER_MEMBERLIST_KNOWN_NODES=127.0.0.1:17946 \
    "$GUBERNATOR_BIN" >"$bin/gubernator.log" 2>&1 &
  pids+=($!) addr[gubernator]=127.0.0.1:18084 pid[gubernator]=$! extra[gubernator]="-proto gubernator"
  targets+=(gubernator)
fi
sleep 3

measure() { # target client domain descriptors
  local args=${extra[$1]:-}
  if [[ $1 == gubernator && $3 == edge-denied ]]; then
    args+=" -limit 1 -window 1h" # the rule of edge-denied; edge's is rlsload's default
  fi
  printf '%-12s %-12s %-11s d=%s  load %s  ' "$1" "$2" "$3" "$4" "$(cut -d' ' -f1 /proc/loadavg)"
  # shellcheck disable=SC2086 # args are words
  "$bin/$2" -addr "${addr[$1]}" -pid "${pid[$1]}" -d "$DUR" -domain "$3" -descriptors "$4" $args
}

run() {
  for client in $CLIENTS; do
    for domain in edge edge-denied; do
      for d in 1 3; do
        for round in $(seq "$ROUNDS"); do
          order=("${targets[@]}")
          if ! (( round % 2 )); then
            order=(); for ((i = ${#targets[@]} - 1; i >= 0; i--)); do order+=("${targets[i]}"); done
          fi
          for target in "${order[@]}"; do
            measure "$target" "$client" "$domain" "$d"
          done
        done
      done
    done
  done
}

# The mean of each case, and its ratio to the ceiling's mean of that case.
summary() {
  awk '
    { key = $2 " " $3 " " $4; t = $1; n[t, key]++
      for (i = 1; i <= NF; i++) {
        if ($i == "calls/s") cs[t, key] += $(i + 1)
        if ($i == "server") cpu[t, key] += $(i + 3)
        if ($i == "redis") rcpu[t, key] += $(i + 3)
      }
      if (!(key in seen)) { seen[key] = 1; keys[++nk] = key }
      if (!(t in seent)) { seent[t] = 1; ts[++nt] = t } }
    END {
      printf "\n%-12s %-12s %-11s %-4s %9s %6s %9s %6s %9s\n", "target", "client", "domain", "d", "calls/s", "ratio", "cpu µs", "ratio", "redis µs"
      for (k = 1; k <= nk; k++) for (j = 1; j <= nt; j++) {
        t = ts[j]; key = keys[k]; m = n[t, key]; c = n["ceiling", key]
        if (!m) continue
        split(key, f, " ")
        printf "%-12s %-12s %-11s %-4s %9.0f %6.2f %9.1f %6.2f %9.1f\n", t, f[1], f[2], f[3], cs[t, key] / m,
          (cs[t, key] / m) / (cs["ceiling", key] / c), cpu[t, key] / m, (cpu[t, key] / m) / (cpu["ceiling", key] / c), rcpu[t, key] / m
      }
    }'
}

run | tee "$bin/runs.txt"
summary <"$bin/runs.txt"
