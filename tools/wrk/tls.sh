#!/usr/bin/env bash
# tls.sh measures what TLS costs `sluice serve`: two servers from one binary
# (embedded default), one plaintext and one with --tls-cert/--tls-key (a
# throwaway self-signed P-256 certificate made with openssl), driven by wrk
# over keep-alive connections, interleaved. For each run it prints the
# requests/s, the p99 latency and the server's CPU time per request
# (utime+stime of its process from /proc/PID/stat over the run, divided by
# the requests wrk completed), then the ratios of the medians.
#
#   tools/wrk/tls.sh [rounds] [seconds]          # default 3 rounds of 8 s
#   SLUICE_BIN=/tmp/sluice tools/wrk/tls.sh      # a prebuilt binary
#
# wrk speaks HTTP/1.1 over TLS (no ALPN) and does not verify the
# certificate. Needs wrk, openssl and curl; Linux only.
set -euo pipefail

source "$(dirname "$0")/common.sh"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
	-addext subjectAltName=IP:127.0.0.1 -keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null

common=(serve --log-level warn --admin-addr "")
"$tmp/sluice" "${common[@]}" --http-addr 127.0.0.1:17080 --data-dir "$tmp/plain" 2>"$tmp/plain.log" &
plain_pid=$!
pids+=($plain_pid)
"$tmp/sluice" "${common[@]}" --http-addr 127.0.0.1:17443 --data-dir "$tmp/tls" --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem" 2>"$tmp/tls.log" &
tls_pid=$!
pids+=($tls_pid)
ready http://127.0.0.1:17080 https://127.0.0.1:17443
echo "TLS: $(openssl s_client -connect 127.0.0.1:17443 -brief </dev/null 2>&1 | grep -E 'Protocol version|Ciphersuite' | tr '\n' ' ')"

echo "wrk -t1 -c$conns -d${secs}s, keep-alive, $rounds interleaved rounds, tools/wrk/limit.lua (1,000 identifiers)"
measure plain $plain_pid http://127.0.0.1:17080 2 >/dev/null # warm-up
measure tls $tls_pid https://127.0.0.1:17443 2 >/dev/null
for _ in $(seq "$rounds"); do
	measure plain $plain_pid http://127.0.0.1:17080 "$secs" | tee -a "$tmp/results"
	measure tls $tls_pid https://127.0.0.1:17443 "$secs" | tee -a "$tmp/results"
done
awk -v pr="$(median plain 2)" -v tr="$(median tls 2)" -v pc="$(median plain 6)" -v tc="$(median tls 6)" \
	'BEGIN {printf "medians: tls/plain req/s %.2fx, CPU/request %.2fx (%.1f -> %.1f µs)\n", tr / pr, tc / pc, pc, tc}'
