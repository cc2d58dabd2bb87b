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
for port in 17070 17071; do
	for _ in $(seq 100); do
		curl -s -o /dev/null -X POST "http://127.0.0.1:$port/v2/ratelimit.limit" -H 'Authorization: Bearer load' -H 'Content-Type: application/json' -d '{"namespace":"load","identifier":"x","limit":1,"duration":60000}' && break
		sleep 0.1
	done
done

ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# run NAME PID PORT SECONDS: one wrk run; appends "name req/s p99 cpu_us" to $tmp/results.
run() {
	local before after out reqs rps p99
	before=$(cpu "$2")
	out=$(wrk -t1 -c"$conns" -d"$4"s --latency -s tools/wrk/limit.lua "http://127.0.0.1:$3")
	after=$(cpu "$2")
	reqs=$(awk '/requests in/ {print $1}' <<<"$out")
	rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
	p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
	awk -v n="$1" -v rps="$rps" -v p99="$p99" -v d=$((after - before)) -v t="$ticks" -v r="$reqs" \
		'BEGIN {printf "%-8s %10.0f req/s  p99 %-8s  %6.1f µs CPU/request\n", n, rps, p99, d / t * 1e6 / r}'
}

echo "wrk -t1 -c$conns -d${secs}s, $rounds interleaved rounds, tools/wrk/limit.lua (1,000 identifiers)${TRACE_RATIO:+, server tracing at $TRACE_RATIO}"
run sluice $sluice_pid 17070 2 >/dev/null # warm-up
run ceiling $ceiling_pid 17071 2 >/dev/null
for _ in $(seq "$rounds"); do
	run sluice $sluice_pid 17070 "$secs" | tee -a "$tmp/results"
	run ceiling $ceiling_pid 17071 "$secs" | tee -a "$tmp/results"
done
median() { grep "^$1 " "$tmp/results" | awk -v f="$2" '{print $f}' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
awk -v sr="$(median sluice 2)" -v cr="$(median ceiling 2)" -v sc="$(median sluice 6)" -v cc="$(median ceiling 6)" \
	'BEGIN {printf "medians: sluice/ceiling req/s %.2fx, CPU/request %.2fx\n", sr / cr, sc / cc}'
