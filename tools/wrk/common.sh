# common.sh is sourced by the load scripts (tools/wrk/*.sh, scripts/flood.sh)
# after `set -euo pipefail`. It reads the script's arguments [rounds]
# [seconds] (default 3 rounds of 8 s) and CONNS (default 32) into rounds,
# secs and conns; moves to the repository's root; makes a temporary
# directory, $tmp, removed on exit after every process whose PID the script
# adds to the array pids is killed; and puts the sluice binary at
# $tmp/sluice: a copy of SLUICE_BIN if set, else built from ./cmd/sluice.
# It defines ready (wait for servers), measure (one wrk run with the
# server's CPU time per request) and median (of a field of $tmp/results).

rounds=${1:-3}
secs=${2:-8}
conns=${CONNS:-32}
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

if [[ -n "${SLUICE_BIN:-}" ]]; then
	cp "$SLUICE_BIN" "$tmp/sluice"
else
	go build -o "$tmp/sluice" ./cmd/sluice
fi

# ready URL...: waits, up to 10 s each, until every URL answers a limit call.
ready() {
	local url
	for url in "$@"; do
		for _ in $(seq 100); do
			curl -skf -o /dev/null -X POST "$url/v2/ratelimit.limit" -H 'Authorization: Bearer load' -H 'Content-Type: application/json' \
				-d '{"namespace":"load","identifier":"x","limit":1,"duration":60000}' && break
			sleep 0.1
		done
	done
}

# median NAME FIELD: the median of field FIELD over the lines of
# $tmp/results that start with NAME.
median() { grep "^$1 " "$tmp/results" | awk -v f="$2" '{print $f}' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# measure NAME PID URL SECONDS: one wrk run against URL with
# tools/wrk/limit.lua; prints "name req/s p99 cpu_us", the last the CPU time
# (utime+stime) the process PID spent per request over the run.
measure() {
	local before after out reqs rps p99
	before=$(cpu "$2")
	out=$(wrk -t1 -c"$conns" -d"$4"s --latency -s tools/wrk/limit.lua "$3")
	after=$(cpu "$2")
	reqs=$(awk '/requests in/ {print $1}' <<<"$out")
	rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
	p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
	awk -v n="$1" -v rps="$rps" -v p99="$p99" -v d=$((after - before)) -v t="$ticks" -v r="$reqs" \
		'BEGIN {printf "%-8s %10.0f req/s  p99 %-8s  %6.1f µs CPU/request\n", n, rps, p99, d / t * 1e6 / r}'
}
