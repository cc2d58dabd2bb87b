#!/usr/bin/env bash
# release.sh builds the release binaries of cmd/sluice and their checksums.
#
# Each target is a static executable (CGO_ENABLED=0, -trimpath, stripped)
# named sluice-<os>-<arch> in $DIST, stamped with the version, the commit
# and the build date (`sluice version` prints them). $DIST/SHA256SUMS lists
# the SHA-256 of every binary built by this run, in sha256sum's format:
#
#   cd dist && sha256sum -c SHA256SUMS
#
# Settings, from the environment (make release passes them through):
#   VERSION  default: git describe --tags --always --dirty (or "dev")
#   COMMIT   default: git rev-parse HEAD (or "unknown")
#   DATE     default: SOURCE_DATE_EPOCH as RFC 3339 UTC if set, else now
#   TARGETS  default: "linux/amd64 linux/arm64 darwin/arm64"
#   DIST     default: dist (relative to the repository root)
#   GO       default: go
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

GO="${GO:-go}"
TARGETS="${TARGETS:-linux/amd64 linux/arm64 darwin/arm64}"
DIST="${DIST:-dist}"

if [[ -z "${VERSION:-}" ]]; then
	VERSION="$(git describe --tags --always --dirty 2>/dev/null || echo dev)"
fi
if [[ -z "${COMMIT:-}" ]]; then
	COMMIT="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
fi
if [[ -z "${DATE:-}" ]]; then
	if [[ -n "${SOURCE_DATE_EPOCH:-}" ]]; then
		DATE="$(date -u -d "@${SOURCE_DATE_EPOCH}" +%Y-%m-%dT%H:%M:%SZ)"
	else
		DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	fi
fi
for v in "$VERSION" "$COMMIT" "$DATE"; do
	if [[ "$v" =~ [[:space:]\'\"] ]]; then
		echo "release.sh: VERSION, COMMIT and DATE must not hold spaces or quotes: '$v'" >&2
		exit 2
	fi
done

mkdir -p "$DIST"
ldflags="-s -w -X main.version=${VERSION} -X main.commit=${COMMIT} -X main.date=${DATE}"
built=()
for target in $TARGETS; do
	os="${target%/*}"
	arch="${target#*/}"
	if [[ -z "$os" || -z "$arch" || "$target" != */* ]]; then
		echo "release.sh: target '$target' is not OS/ARCH" >&2
		exit 2
	fi
	out="sluice-${os}-${arch}"
	echo "release.sh: building $out (version $VERSION, commit $COMMIT, date $DATE)" >&2
	CGO_ENABLED=0 GOOS="$os" GOARCH="$arch" "$GO" build -trimpath -buildvcs=false \
		-ldflags "$ldflags" -o "$DIST/$out" ./cmd/sluice
	built+=("$out")
done

(
	cd "$DIST"
	sha256sum "${built[@]}" >SHA256SUMS.tmp
	mv SHA256SUMS.tmp SHA256SUMS
	sha256sum -c --quiet SHA256SUMS
)
echo "release.sh: wrote ${built[*]} and SHA256SUMS in $DIST" >&2
