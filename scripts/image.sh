#!/usr/bin/env bash
# image.sh builds the container image of the Dockerfile (FROM scratch) for
# the host's architecture, pulling nothing: it builds the linux binary with
# scripts/release.sh, then stages that binary, the host's CA bundle and an
# empty data folder as dist/ of a fresh build context, beside the
# Dockerfile and .dockerignore, and runs docker build there.
#
# Settings, from the environment (make image passes them through):
#   IMAGE      default: sluice:$VERSION
#   ARCH       default: go env GOARCH (the image is linux/$ARCH)
#   CA_BUNDLE  default: /etc/ssl/certs/ca-certificates.crt
#   DOCKER     default: docker
#   VERSION, COMMIT, DATE, DIST, GO: as scripts/release.sh takes them
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

GO="${GO:-go}"
DOCKER="${DOCKER:-docker}"
ARCH="${ARCH:-$("$GO" env GOARCH)}"
CA_BUNDLE="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
DIST="${DIST:-dist}"
if [[ -z "${VERSION:-}" ]]; then
	VERSION="$(git describe --tags --always --dirty 2>/dev/null || echo dev)"
fi
export VERSION DIST GO
IMAGE="${IMAGE:-sluice:${VERSION}}"

if [[ ! -s "$CA_BUNDLE" ]]; then
	echo "image.sh: no CA bundle at $CA_BUNDLE (install ca-certificates, or set CA_BUNDLE)" >&2
	exit 2
fi
if ! "$DOCKER" info >/dev/null 2>&1; then
	echo "image.sh: '$DOCKER info' failed: no container runtime is reachable" >&2
	exit 2
fi

TARGETS="linux/${ARCH}" scripts/release.sh

context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
mkdir -p "$context/dist/image-data"
cp Dockerfile .dockerignore "$context/"
cp "$DIST/sluice-linux-${ARCH}" "$context/dist/"
cp "$CA_BUNDLE" "$context/dist/ca-certificates.crt"
chmod 0644 "$context/dist/ca-certificates.crt"
chmod 0755 "$context/dist/sluice-linux-${ARCH}" "$context/dist/image-data"

echo "image.sh: building $IMAGE (linux/$ARCH)" >&2
"$DOCKER" build --platform "linux/${ARCH}" --build-arg "TARGETARCH=${ARCH}" \
	--label "org.opencontainers.image.version=${VERSION}" \
	-t "$IMAGE" "$context"
echo "image.sh: built $IMAGE" >&2
