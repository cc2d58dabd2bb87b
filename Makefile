# Sluice's developer commands. `make test` is the one command that runs the
# whole suite on a fresh machine: it brings up Redis and MariaDB first.
GO      ?= go
LINT    ?= golangci-lint
PKGS    ?= ./...

.PHONY: test services unit bench lint run accuracy chaos fullsize release image

# Packages run one at a time (-p 1): several hold real-time load tests
# (accuracy against the reference model over real processes) that would
# starve each other on a small machine. Within a package, the tests marked
# parallel (the cluster tests of e2e, the fault tests of the Redis origin
# and of the root package, each mostly waiting on windows, timeouts or a
# fault, and the simulator's longest runs, each on one core) run three at
# a time. The other e2e tests stay serial: run beside the cluster tests,
# their builds and processes starve the cluster tests' accuracy checks.
#
# -trimpath keeps this checkout's path out of the compiled packages, so a
# fresh clone of the same code finds them in the build cache.
test: services
	$(GO) vet $(PKGS)
	$(GO) test -race -trimpath -count=1 -p 1 -parallel 3 -timeout 15m $(PKGS)

services:
	scripts/services.sh

# unit runs the tests that need no services (fast feedback while coding).
unit:
	$(GO) test -race -count=1 -short . ./internal/... ./origin/memory/...

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

lint:
	$(LINT) run $(PKGS)

run:
	$(GO) run ./cmd/sluice serve

# accuracy regenerates docs/accuracy/ (report.md, results.json, a chart per
# scenario) by simulation; copy its summary table into docs/accuracy.md.
accuracy:
	$(GO) run ./cmd/sluice sim --all --out docs/accuracy

# chaos runs the long form of the chaos test (e2e/chaos_test.go): five
# minutes of load on two regions of real servers while Redis is killed,
# frozen, slowed and reset, MariaDB cut, nodes restarted and clients
# cancel. SLUICE_CHAOS_SEED=<n> repeats a run (the seed is logged).
CHAOS_DURATION ?= 5m
chaos: services
	SLUICE_CHAOS_DURATION=$(CHAOS_DURATION) $(GO) test -race -count=1 -run '^TestChaos$$' -v -timeout 30m ./e2e

# fullsize runs one node of scale-1m at full size (e2e/fullsize_test.go):
# ~1.7 million rows of 9 other regions in MariaDB, the node's 5,000
# requests a second over a million identities for a window; it reports the
# node's heap and cells and what its pulls cost (docs/capacity.md).
fullsize: services
	SLUICE_FULLSIZE=1 $(GO) test -count=1 -run '^TestFullSizeNode$$' -v -timeout 15m ./e2e

# release builds static binaries (CGO_ENABLED=0, -trimpath) of cmd/sluice
# into dist/ as sluice-<os>-<arch>, stamped with VERSION (default: git
# describe --tags --always --dirty), the commit and the build date, and
# writes dist/SHA256SUMS (check it with: cd dist && sha256sum -c SHA256SUMS).
# TARGETS="linux/amd64" builds a subset (docs/howto/deploy.md).
release:
	scripts/release.sh

# image builds the container image sluice:$(VERSION) (FROM scratch: the
# binary and a CA bundle, user 65532) from a linux binary of the host's
# architecture, pulling nothing: with docker if its daemon answers, else
# with podman (DOCKER=podman or DOCKER=docker picks one; docs/howto/deploy.md).
image:
	scripts/image.sh
