#!/usr/bin/env bash
# flood.sh measures the over-limit flood of docs/benchmarks/redis.md: wrk sends
# scripts/wrk/flood.lua (10 identifiers far over a limit of 100 per minute)
# to `sluice serve` on the embedded default and to `sluice serve --redis-url`
# on a redis-server of its own, interleaved, and prints for each run the
# requests/s and p99, and for the Redis runs the Redis commands per request
# (INFO commandstats before and after the run; commands run inside scripts
# included) with the commands that made them.
#
#   scripts/flood.sh [rounds] [seconds]          # default 3 rounds of 8 s
#   SLUICE_BIN=/tmp/sluice scripts/flood.sh     # a prebuilt binary
#   SCRIPT=tools/wrk/limit.lua scripts/flood.sh  # another wrk script
#
# Needs wrk, redis-server, redis-cli and curl; Linux only.
set -euo pipefail

source "$(dirname "$0")/../tools/wrk/common.sh"
redis_port=${REDIS_PORT:-16390}
script=${SCRIPT:-scripts/wrk/flood.lua}
redis-server --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no --dir "$tmp" >/dev/null &
pids+=($!)
"$tmp/sluice" serve --http-addr 127.0.0.1:17080 --admin-addr "" --data-dir "$tmp/embedded" --log-level warn 2>"$tmp/embedded.log" &
pids+=($!)
"$tmp/sluice" serve --http-addr 127.0.0.1:17081 --admin-addr "" --data-dir "$tmp/redis" --log-level warn \
	--redis-url "redis://127.0.0.1:$redis_port/0" 2>"$tmp/redis.log" &
pids+=($!)
ready http://127.0.0.1:17080 http://127.0.0.1:17081

# commands prints the calls of every command in INFO commandstats except
# INFO itself, one "name calls" per line.
commands() {
	redis-cli -p "$redis_port" info commandstats | tr -d '\r' |
		sed -n 's/^cmdstat_\([^:]*\):calls=\([0-9]*\),.*/\1 \2/p' | grep -v '^info '
}

# run NAME PORT: one wrk run; prints its figures.
run() {
	local out reqs rps p99
	[[ $1 == redis ]] && commands >"$tmp/before"
	out=$(wrk -t1 -c"$conns" -d"${secs}s" --latency -s "$script" "http://127.0.0.1:$2")
	reqs=$(awk '/requests in/ {print $1}' <<<"$out")
	rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
	p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
	if [[ $1 == redis ]]; then
		commands >"$tmp/after"
		local detail total
		detail=$(join -a 2 -e 0 -o 2.1,1.2,2.2 <(sort "$tmp/before") <(sort "$tmp/after") |
			awk '{d = $3 - $2; if (d > 0) printf "%s %d, ", $1, d}')
		total=$(join -a 2 -e 0 -o 1.2,2.2 <(sort "$tmp/before") <(sort "$tmp/after") | awk '{s += $2 - $1} END {print s}')
		printf '%-8s %9s req/s  p99 %-8s %8d requests  %6d Redis commands = %.4f per request (%s)\n' \
			"$1" "$rps" "$p99" "$reqs" "$total" "$(awk -v t="$total" -v r="$reqs" 'BEGIN {print t / r}')" "${detail%, }"
	else
		printf '%-8s %9s req/s  p99 %-8s %8d requests\n' "$1" "$rps" "$p99" "$reqs"
	fi
	echo "$1 $rps" >>"$tmp/results"
}

echo "flood: $script, $rounds rounds of ${secs}s, wrk -t1 -c$conns, $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(date -u '+%Y-%m-%d %H:%M UTC')"
for _ in $(seq "$rounds"); do
	run embedded 17080
	run redis 17081
done
awk '{s[$1] += $2; n[$1]++} END {e = s["embedded"] / n["embedded"]; r = s["redis"] / n["redis"];
	printf "mean: embedded %.0f req/s, redis %.0f req/s: redis / embedded = %.3f\n", e, r, r / e}' "$tmp/results"
