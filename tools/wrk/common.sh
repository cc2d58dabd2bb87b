# common.sh is sourced by the load scripts (tools/wrk/*.sh, scripts/flood.sh)
# after `set -euo pipefail`. It reads the script's arguments [rounds]
# [seconds] (default 3 rounds of 8 s) and CONNS (default 32) into rounds,
# secs and conns; moves to the repository's root; makes a temporary
# directory, $tmp, removed on exit after every process whose PID the script
# adds to the array pids is killed; and puts the sluice binary at
# $tmp/sluice: a copy of SLUICE_BIN if set, else built from ./cmd/sluice.

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
