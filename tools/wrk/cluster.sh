#!/usr/bin/env bash
# cluster.sh runs wrk against one node of a 3-node `sluice serve --origin
# cluster` on loopback and against one `sluice serve` on the embedded
# default, interleaved, and prints for each run the requests/s and p99
# latency, the CPU time per request of the node measured and of the cluster
# node's two peers, then the peer RPCs the cluster node sent per request
# and the ratio of the medians.
#
#   tools/wrk/cluster.sh [rounds] [seconds]          # default 3 rounds of 8 s
#   SLUICE_BIN=/tmp/sluice tools/wrk/cluster.sh      # a prebuilt binary
#   SCRIPT=scripts/wrk/pass.lua tools/wrk/cluster.sh  # a load that passes
#
# Load: tools/wrk/limit.lua (1,000 identifiers, limit 100 per minute: mostly
# denied) unless SCRIPT names another, all sent to the first node; the other two serve its peer RPCs. Needs wrk and
# curl; Linux only.
set -euo pipefail

source "$(dirname "$0")/common.sh"
script=${SCRIPT:-tools/wrk/limit.lua}

gossip=(127.0.0.1:17946 127.0.0.1:17947 127.0.0.1:17948)
for i in 0 1 2; do
	others=()
	for j in 0 1 2; do [[ $j != "$i" ]] && others+=("${gossip[$j]}"); done
	"$tmp/sluice" serve --origin cluster --http-addr "127.0.0.1:1717$i" --admin-addr "127.0.0.1:1718$i" \
		--data-dir "$tmp/d$i" --log-level warn --cluster-addr "${gossip[$i]}" \
		--cluster-join "$(IFS=,; echo "${others[*]}")" 2>"$tmp/node$i.log" &
	pids+=($!)
done
"$tmp/sluice" serve --http-addr 127.0.0.1:17173 --admin-addr 127.0.0.1:17183 --data-dir "$tmp/e" --log-level warn 2>"$tmp/embedded.log" &
pids+=($!)
ready http://127.0.0.1:17170 http://127.0.0.1:17171 http://127.0.0.1:17172 http://127.0.0.1:17173
for _ in $(seq 100); do
	[[ "$(curl -s http://127.0.0.1:17180/metrics | awk '/^sluice_cluster_members / {print $2}')" == 3 ]] && break
	sleep 0.1
done

rpcs() { curl -s http://127.0.0.1:17180/metrics | awk '/^sluice_cluster_rpcs_total/ {s += $2} END {printf "%d", s}'; }

# run NAME PORT SECONDS PID [PEER...]: one wrk run; appends "name req/s
# p99 requests cpu peers" to $tmp/results: the CPU time (utime+stime) the
# process PID spent per request, and the PEER processes' together, in µs.
run() {
	local out before after peers_before=0 peers_after=0 p
	before=$(cpu "$4")
	for p in "${@:5}"; do peers_before=$((peers_before + $(cpu "$p"))); done
	out=$(wrk -t1 -c"$conns" -d"$3"s --latency -s "$script" "http://127.0.0.1:$2")
	after=$(cpu "$4")
	for p in "${@:5}"; do peers_after=$((peers_after + $(cpu "$p"))); done
	awk -v n="$1" -v rps="$(awk '/Requests\/sec/ {print $2}' <<<"$out")" -v p99="$(awk '$1 == "99%" {print $2}' <<<"$out")" \
		-v r="$(awk '/requests in/ {print $1}' <<<"$out")" -v d=$((after - before)) -v pd=$((peers_after - peers_before)) -v t="$ticks" \
		'BEGIN {printf "%-8s %10.0f req/s  p99 %-8s %d requests  %6.1f µs CPU/request  peers %5.1f µs/request\n", n, rps, p99, r, d / t * 1e6 / r, pd / t * 1e6 / r}'
}

echo "wrk -t1 -c$conns -d${secs}s, $rounds interleaved rounds, $script"
run cluster 17170 2 "${pids[0]}" >/dev/null # warm-up
run embedded 17173 2 "${pids[3]}" >/dev/null
before=$(rpcs)
for _ in $(seq "$rounds"); do
	run cluster 17170 "$secs" "${pids[0]}" "${pids[1]}" "${pids[2]}" | tee -a "$tmp/results"
	run embedded 17173 "$secs" "${pids[3]}" | tee -a "$tmp/results"
done
after=$(rpcs)
requests=$(awk '$1 == "cluster" {s += $6} END {print s}' "$tmp/results")
awk -v c="$(median cluster 2)" -v e="$(median embedded 2)" -v r=$((after - before)) -v q="$requests" \
	'BEGIN {printf "medians: cluster/embedded req/s %.2fx; the cluster node sent %d peer RPCs for %d requests (%.4f per request)\n", c / e, r, q, r / q}'
awk -v c="$(median cluster 8)" -v e="$(median embedded 8)" -v p="$(median cluster 12)" \
	'BEGIN {printf "medians: CPU per request, cluster node %.1f µs (%.2fx the embedded default'"'"'s %.1f), its peers %.1f µs\n", c, c / e, e, p}'
