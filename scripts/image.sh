#!/usr/bin/env bash
# image.sh builds the container image of the Dockerfile (FROM scratch) for
# the host's architecture, pulling nothing: it builds the linux binary with
# scripts/release.sh, then stages that binary, the host's CA bundle and an
# empty data folder as dist/ of a fresh build context, beside the
# Dockerfile and .dockerignore, and builds there with the container
# engine: docker when its daemon answers, else podman (which needs no
# daemon nor registry).
#
# Settings, from the environment (make image passes them through):
#   IMAGE      default: sluice:$VERSION
#   ARCH       default: go env GOARCH (the image is linux/$ARCH)
#   CA_BUNDLE  default: /etc/ssl/certs/ca-certificates.crt
#   DOCKER     the engine's command, docker or podman; default: docker if
#              `docker info` answers, else podman if installed
#   VERSION, COMMIT, DATE, DIST, GO: as scripts/release.sh takes them
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

GO="${GO:-go}"
if [[ -z "${DOCKER:-}" ]]; then
	DOCKER=docker
	if ! { command -v docker >/dev/null && timeout 20 docker info >/dev/null 2>&1; } && command -v podman >/dev/null; then
		DOCKER=podman
	fi
fi
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
	echo "image.sh: '$DOCKER info' failed: no container engine is reachable (start the Docker daemon, or install podman)" >&2
	exit 2
fi
# podman keeps no intermediate image of each step (docker's BuildKit keeps
# none either).
engine_args=()
if [[ "$("$DOCKER" --version 2>/dev/null)" == podman* ]]; then
	engine_args=(--layers=false)
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

echo "image.sh: building $IMAGE (linux/$ARCH) with $DOCKER" >&2
"$DOCKER" build ${engine_args[@]+"${engine_args[@]}"} --platform "linux/${ARCH}" --build-arg "TARGETARCH=${ARCH}" \
	--label "org.opencontainers.image.version=${VERSION}" \
	-t "$IMAGE" "$context"
echo "image.sh: built $IMAGE" >&2
