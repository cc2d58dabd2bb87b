#!/usr/bin/env bash
# analytics.sh runs wrk against two `sluice serve` processes of one binary
# (embedded default), one with --analytics=false and one with analytics on
# (the default), interleaved, and prints for each run the requests/s, the
# p99 latency and the server's CPU time per request (utime+stime of its
# process from /proc/PID/stat over the run, divided by the requests wrk
# completed), then the ratios of the medians (on / off).
#
#   tools/wrk/analytics.sh [rounds] [seconds]          # default 3 rounds of 8 s
#   SLUICE_BIN=/tmp/sluice tools/wrk/analytics.sh      # a prebuilt binary
#
# tools/wrk/limit.lua spreads the calls over 1,000 identifiers of one
# namespace, so every sketch evicts: the dearest case of the analytics.
# Needs wrk and curl; Linux only.
set -euo pipefail

source "$(dirname "$0")/common.sh"

common=(serve --admin-addr "" --log-level warn)
"$tmp/sluice" "${common[@]}" --http-addr 127.0.0.1:17070 --data-dir "$tmp/off" --analytics=false 2>"$tmp/off.log" &
off_pid=$!
pids+=($off_pid)
"$tmp/sluice" "${common[@]}" --http-addr 127.0.0.1:17072 --data-dir "$tmp/on" 2>"$tmp/on.log" &
on_pid=$!
pids+=($on_pid)
ready http://127.0.0.1:17070 http://127.0.0.1:17072

echo "wrk -t1 -c$conns -d${secs}s, $rounds interleaved rounds, tools/wrk/limit.lua (1,000 identifiers)"
measure off $off_pid http://127.0.0.1:17070 2 >/dev/null # warm-up
measure on $on_pid http://127.0.0.1:17072 2 >/dev/null
for _ in $(seq "$rounds"); do
	measure off $off_pid http://127.0.0.1:17070 "$secs" | tee -a "$tmp/results"
	measure on $on_pid http://127.0.0.1:17072 "$secs" | tee -a "$tmp/results"
done
awk -v onr="$(median on 2)" -v offr="$(median off 2)" -v onc="$(median on 6)" -v offc="$(median off 6)" \
	'BEGIN {printf "medians: on/off req/s %.3fx, CPU/request %.3fx\n", onr / offr, onc / offc}'
