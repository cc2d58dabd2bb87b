#!/usr/bin/env bash
# ceiling.sh runs wrk against `sluice serve` (embedded default) and against
# the trivial JSON handler of tools/ceiling, interleaved, and prints for each
# run the requests/s, the p99 latency and the server's CPU time per request
# (utime+stime of its process from /proc/PID/stat over the run, divided by
# the requests wrk completed), then the ratios of the medians.
#
#   tools/wrk/ceiling.sh [rounds] [seconds]          # default 3 rounds of 8 s
#   TRACE_RATIO=0.01 tools/wrk/ceiling.sh            # server traced at 1%
#   SLUICE_BIN=/tmp/old-sluice tools/wrk/ceiling.sh  # a prebuilt binary
#
# With TRACE_RATIO set, the server exports its spans over OTLP/HTTP to a
# second ceiling process that discards them. Needs wrk and curl; Linux only.
set -euo pipefail

source "$(dirname "$0")/common.sh"
(cd tools/ceiling && go build -o "$tmp/ceiling" .)

serve_args=(serve --http-addr 127.0.0.1:17070 --admin-addr "" --data-dir "$tmp/data" --log-level warn)
if [[ -n "${TRACE_RATIO:-}" ]]; then
	"$tmp/ceiling" -addr 127.0.0.1:14318 2>/dev/null &
	pids+=($!)
	serve_args+=(--otel-endpoint http://127.0.0.1:14318 --otel-sample-ratio "$TRACE_RATIO")
fi
"$tmp/sluice" "${serve_args[@]}" 2>"$tmp/sluice.log" &
sluice_pid=$!
pids+=($sluice_pid)
"$tmp/ceiling" -addr 127.0.0.1:17071 2>/dev/null &
ceiling_pid=$!
pids+=($ceiling_pid)
ready http://127.0.0.1:17070 http://127.0.0.1:17071

echo "wrk -t1 -c$conns -d${secs}s, $rounds interleaved rounds, tools/wrk/limit.lua (1,000 identifiers)${TRACE_RATIO:+, server tracing at $TRACE_RATIO}"
measure sluice $sluice_pid http://127.0.0.1:17070 2 >/dev/null # warm-up
measure ceiling $ceiling_pid http://127.0.0.1:17071 2 >/dev/null
for _ in $(seq "$rounds"); do
	measure sluice $sluice_pid http://127.0.0.1:17070 "$secs" | tee -a "$tmp/results"
	measure ceiling $ceiling_pid http://127.0.0.1:17071 "$secs" | tee -a "$tmp/results"
done
awk -v sr="$(median sluice 2)" -v cr="$(median ceiling 2)" -v sc="$(median sluice 6)" -v cc="$(median ceiling 6)" \
	'BEGIN {printf "medians: sluice/ceiling req/s %.2fx, CPU/request %.2fx\n", sr / cr, sc / cc}'
