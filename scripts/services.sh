#!/usr/bin/env bash
# Brings up the real services Sluice's tests use: Redis on 127.0.0.1:6379,
# a Redis Cluster of 3 masters with one replica each on 127.0.0.1:7101-7106,
# MariaDB on 127.0.0.1:3306 (root, empty password, database `test`),
# Node.js with npm for the Unkey SDK check, Chromium for the console's
# browser test, Helm for the chart's test, Prometheus (with promtool) for
# the dashboard's and the alerts' tests, and a container engine (a Docker
# daemon, else Podman) for the image's test.
# It reuses a running server, else starts one from the installed binaries, else
# (as root on Debian) installs it from Debian's packages. If it cannot, it
# stops and prints the exact command to run.
set -euo pipefail

REDIS_ADDR=${SLUICE_TEST_REDIS:-127.0.0.1:6379}
MYSQL_ADDR=${SLUICE_TEST_MYSQL_ADDR:-127.0.0.1:3306}
CLUSTER_PORTS=${SLUICE_TEST_REDIS_CLUSTER_PORTS:-7101 7102 7103 7104 7105 7106}
CLUSTER_DIR=${SLUICE_TEST_REDIS_CLUSTER_DIR:-/tmp/sluice-test-cluster}

listening() { # host:port
  (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null
}

wait_for() { # host:port what
  for _ in $(seq 1 60); do
    listening "$1" && return 0
    sleep 0.5
  done
  echo "services: $2 did not start listening on $1" >&2
  return 1
}

can_install() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; }

apt_install() {
  echo "services: installing $* from Debian packages" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null ||
    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null; }
}

redis_up() {
  listening "$REDIS_ADDR" && return 0
  if ! command -v redis-server >/dev/null; then
    can_install || { echo "services: Redis is not running and not installed; run: sudo apt-get install -y redis-server" >&2; exit 1; }
    apt_install redis-server
  fi
  echo "services: starting redis-server on $REDIS_ADDR" >&2
  redis-server --daemonize yes --bind "${REDIS_ADDR%:*}" --port "${REDIS_ADDR##*:}" \
    --save "" --appendonly no --dir /tmp --logfile /tmp/sluice-test-redis.log
  wait_for "$REDIS_ADDR" Redis
}

cluster_state() { # port: prints ok, fail, or nothing when unreachable or hung
  timeout 2 redis-cli -h 127.0.0.1 -p "$1" cluster info 2>/dev/null | tr -d '\r' | sed -n 's/^cluster_state://p'
}

cluster_ok() { # every node of the cluster reports ok
  local port
  for port in $CLUSTER_PORTS; do
    [ "$(cluster_state "$port")" = ok ] || return 1
  done
}

# cluster_up reuses a healthy cluster; starts the nodes that do not listen
# (a restarted node rejoins from its nodes.conf); and creates the cluster when
# its nodes know no cluster yet, or still do not agree after a few seconds
# (then they are emptied and reset first: the cluster holds test data only).
cluster_up() {
  cluster_ok && return 0
  local port addrs=()
  for port in $CLUSTER_PORTS; do
    addrs+=("127.0.0.1:$port")
    listening "127.0.0.1:$port" && continue
    mkdir -p "$CLUSTER_DIR/$port"
    echo "services: starting Redis Cluster node on 127.0.0.1:$port" >&2
    redis-server --daemonize yes --bind 127.0.0.1 --port "$port" \
      --cluster-enabled yes --cluster-config-file "$CLUSTER_DIR/$port/nodes.conf" \
      --cluster-node-timeout 2000 --save "" --appendonly no \
      --dir "$CLUSTER_DIR/$port" --logfile "$CLUSTER_DIR/$port/redis.log"
  done
  for port in $CLUSTER_PORTS; do wait_for "127.0.0.1:$port" "Redis Cluster node"; done
  local known
  known=$(timeout 5 redis-cli -h 127.0.0.1 -p "${CLUSTER_PORTS%% *}" cluster info | tr -d '\r' | sed -n 's/^cluster_known_nodes://p')
  if [ "$known" != 1 ]; then
    for _ in $(seq 1 20); do cluster_ok && return 0; sleep 0.5; done
    echo "services: Redis Cluster on ${CLUSTER_PORTS// /,} is not healthy; resetting it" >&2
    for port in $CLUSTER_PORTS; do
      timeout 5 redis-cli -h 127.0.0.1 -p "$port" flushall >/dev/null 2>&1 || true
      timeout 5 redis-cli -h 127.0.0.1 -p "$port" cluster reset hard >/dev/null
    done
  fi
  echo "services: creating Redis Cluster on ${addrs[*]}" >&2
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >/dev/null
  for _ in $(seq 1 60); do cluster_ok && return 0; sleep 0.5; done
  echo "services: Redis Cluster did not become healthy; see $CLUSTER_DIR/*/redis.log" >&2
  return 1
}

mysql_up() {
  if ! listening "$MYSQL_ADDR"; then
    local daemon
    daemon=$(command -v mariadbd || command -v mysqld || ls /usr/sbin/mariadbd /usr/sbin/mysqld 2>/dev/null | head -1 || true)
    if [ -z "$daemon" ]; then
      can_install || { echo "services: MariaDB is not running and not installed; run: sudo apt-get install -y mariadb-server" >&2; exit 1; }
      apt_install mariadb-server
      daemon=/usr/sbin/mariadbd
    fi
    echo "services: starting $daemon" >&2
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
    if command -v start-stop-daemon >/dev/null; then
      start-stop-daemon --start --oknodo --background --exec "$daemon" -- --user=mysql
    else
      nohup "$daemon" --user=mysql >/tmp/sluice-test-mariadb.log 2>&1 &
    fi
    wait_for "$MYSQL_ADDR" MariaDB
  fi
  # Tests connect as root with an empty password over TCP to database `test`.
  local client
  client=$(command -v mariadb || command -v mysql || true)
  if [ -n "$client" ] &&
    ! "$client" -h "${MYSQL_ADDR%:*}" -P "${MYSQL_ADDR##*:}" --protocol=TCP -uroot -e 'CREATE DATABASE IF NOT EXISTS test' 2>/dev/null; then
    # A fresh Debian install lets root in through the socket only.
    "$client" -uroot -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket; CREATE DATABASE IF NOT EXISTS test" ||
      { echo "services: cannot log in to MariaDB as root; run: sudo mariadb -e \"ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket; CREATE DATABASE IF NOT EXISTS test\"" >&2; exit 1; }
  fi
}

# node_up makes Node.js and npm available for e2e/TestNodeClient (the Unkey
# SDK check), which fails rather than skips when CI is set.
node_up() {
  command -v node >/dev/null && command -v npm >/dev/null && return 0
  can_install || { echo "services: Node.js and npm are not installed; run: sudo apt-get install -y nodejs npm" >&2; exit 1; }
  apt_install nodejs npm
}

# chromium_up makes Chromium available for cmd/sluice's
# TestConsoleInBrowser (the console in a headless browser, driven by
# chromedp), which fails rather than skips when CI is set.
chromium_up() {
  command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null && return 0
  can_install || { echo "services: Chromium is not installed; run: sudo apt-get install -y chromium" >&2; exit 1; }
  apt_install chromium
}

# helm_up installs Helm, pinned, from its Go module into $(go env GOPATH)/bin
# (or GOBIN) for deploy/TestChart, which renders the chart with
# `helm template` and fails rather than skips when CI is set. A helm of that
# version already there is kept; the first build takes some minutes.
HELM_VERSION=v3.22.0
helm_bin() {
  local dir
  dir=$(go env GOBIN)
  echo "${dir:-$(go env GOPATH)/bin}/helm"
}
helm_up() {
  local bin
  bin=$(helm_bin)
  [ "$(go version -m "$bin" 2>/dev/null | awk '$1 == "mod" && $2 == "helm.sh/helm/v3" { print $3 }')" = "$HELM_VERSION" ] && return 0
  echo "services: installing helm $HELM_VERSION with go install into ${bin%/helm}" >&2
  (cd / && go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION") ||
    { echo "services: installing helm failed; run: go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2; exit 1; }
}

# prometheus_up makes Prometheus and promtool (Debian's package
# prometheus) available for package deploy's TestPrometheus, which runs a
# real Prometheus on a port of its own, and TestAlertRules and
# TestDashboardPromQLSyntax, which run promtool; they fail rather than skip
# when CI is set. The tests start their own Prometheus (on a host with
# systemd, Debian's package also starts its service on :9090, unused).
prometheus_up() {
  command -v prometheus >/dev/null && command -v promtool >/dev/null && return 0
  can_install || { echo "services: Prometheus is not installed; run: sudo apt-get install -y prometheus" >&2; exit 1; }
  apt_install prometheus
}

# engine_up makes a container engine available for cmd/sluice's
# TestContainerImage, which builds the image with scripts/image.sh and
# fails rather than skips when CI is set: a Docker daemon that answers is
# used as it is, else Podman (Debian's package podman), which builds
# without a daemon.
engine_up() {
  command -v docker >/dev/null && timeout 20 docker info >/dev/null 2>&1 && return 0
  command -v podman >/dev/null && return 0
  can_install || { echo "services: no Docker daemon answers and Podman is not installed; run: sudo apt-get install -y podman" >&2; exit 1; }
  apt_install podman
}

redis_up
cluster_up
mysql_up
node_up
chromium_up
helm_up
prometheus_up
engine_up
echo "services: Redis at $REDIS_ADDR, Redis Cluster at 127.0.0.1:${CLUSTER_PORTS// /,}, MariaDB at $MYSQL_ADDR, $(node --version 2>/dev/null) with npm $(npm --version 2>/dev/null), $(chromium --version 2>/dev/null | head -1), helm $HELM_VERSION at $(helm_bin), $(prometheus --version 2>&1 | head -1), $(podman --version 2>/dev/null || docker --version 2>/dev/null)" >&2
