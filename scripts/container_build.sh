#!/usr/bin/env bash
# Builds the nearprepd container image (deploy/container/Dockerfile) and
# smoke-tests it. CI runs it after the tests (.ci/run); it takes about 4
# minutes on an idle 2-core machine (a debootstrap of Debian 12 and a compile
# of nearprepd inside the image), 12-16 when the machine is busy. docs/operations.md,
# "Container image", describes it.
#
# There is no Docker engine here and no image registry, so:
#   1. debootstrap a minimal Debian 12 root and import it as the base image
#      (buildah from scratch + copy the root + commit), once;
#   2. buildah bud --isolation chroot builds the Dockerfile on that base (apt
#      inside reaches Debian's archive);
#   3. buildah run --isolation chroot runs the smoke test in the runtime
#      image: no compiler present, nearprepd starts on a small generated
#      dataset, answers GetServerInfo, streams an epoch, and answers /healthz
#      and /metrics (podman run fails on this VM's cgroup setup).
#
#   scripts/container_build.sh              base (if missing) + image + smoke
#   scripts/container_build.sh --smoke-only smoke test of an existing image
# Environment: NEARPREP_IMAGE (default localhost/nearprepd:VERSION),
# NEARPREP_BASE_IMAGE (localhost/debian:12-debootstrap), DEBIAN_MIRROR,
# NEARPREP_CONTAINER_WORK (/var/tmp/nearprep-container). Needs root (or
# sudo), debootstrap and buildah (installed with apt-get when missing).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=$(sed -n 's/^project(nearprep VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
IMAGE=${NEARPREP_IMAGE:-localhost/nearprepd:${VERSION}}
BASE=${NEARPREP_BASE_IMAGE:-localhost/debian:12-debootstrap}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
WORK=${NEARPREP_CONTAINER_WORK:-/var/tmp/nearprep-container}
SMOKE_ONLY=0
[ "${1:-}" = "--smoke-only" ] && SMOKE_ONLY=1

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
log() { echo "container_build: $*" >&2; }

for tool in debootstrap buildah; do
  if ! command -v "$tool" > /dev/null; then
    log "installing $tool"
    $SUDO apt-get update
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y \
      --no-install-recommends "$tool"
  fi
done

# buildah run's arguments for the smoke test: chroot isolation, the host's
# network (loopback only is used).
smoke_test() {
  log "smoke test of $IMAGE"
  # One version: the label, the project() VERSION and the binary agree.
  local label
  label=$($SUDO buildah inspect --type image \
    --format '{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}' "$IMAGE")
  if [ "$label" != "$VERSION" ]; then
    log "image label org.opencontainers.image.version is '$label', CMakeLists.txt says $VERSION"
    exit 1
  fi
  local ctr
  ctr=$($SUDO buildah from "$IMAGE")
  trap '$SUDO buildah rm "$ctr" > /dev/null 2>&1 || true' RETURN
  $SUDO buildah run --isolation chroot "$ctr" -- /bin/bash -c '
    set -euo pipefail
    for c in gcc cc c++ g++ clang; do
      if command -v "$c" > /dev/null; then echo "compiler $c in the runtime image" >&2; exit 1; fi
    done
    cd /tmp
    /opt/nearprep/bin/nearprep mkdataset --out /tmp/smoke --classes 2 --per-class 8 > /dev/null
    /opt/nearprep/bin/nearprepd --dataset smoke=/tmp/smoke --listen 127.0.0.1 \
      --port 0 --port-file /tmp/port --metrics-listen 127.0.0.1:0 \
      --metrics-port-file /tmp/mport --workers 2 --log-level warn &
    pid=$!
    for _ in $(seq 300); do
      [ -s /tmp/port ] && [ -s /tmp/mport ] && break
      kill -0 "$pid" || { echo "nearprepd exited" >&2; exit 1; }
      sleep 0.1
    done
    port=$(cat /tmp/port); mport=$(cat /tmp/mport)
    /opt/nearprep/bin/nearprep info --target "127.0.0.1:$port"
    /opt/nearprep/bin/nearprep stream --target "127.0.0.1:$port" --dataset smoke \
      --batch-size 4 --height 32 --width 32 --epochs 1
    http_get() {  # bash only: the runtime image has no curl
      exec 3<>"/dev/tcp/127.0.0.1/$mport"
      printf "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n" "$1" >&3
      cat <&3
      exec 3>&-
    }
    health=$(http_get /healthz)
    grep -q "^HTTP/1.[01] 200" <<< "$health" && grep -q "^ok" <<< "$health" \
      || { echo "health check failed: $health" >&2; exit 1; }
    metrics=$(http_get /metrics)
    grep -q "^nearprep_samples_sent_total{dataset=\"smoke\"} 16$" <<< "$metrics" \
      || { echo "metrics do not show the 16 samples sent" >&2; exit 1; }
    kill -TERM "$pid"
    wait "$pid"
    echo "smoke test passed: no compiler, served 16 images, /healthz ok"
  '
}

if [ "$SMOKE_ONLY" = 0 ]; then
  start=$(date +%s)
  if ! $SUDO buildah images --quiet "$BASE" > /dev/null 2>&1; then
    log "debootstrap Debian 12 (bookworm, minbase) into $WORK/rootfs"
    $SUDO rm -rf "$WORK/rootfs"
    $SUDO mkdir -p "$WORK"
    if ! $SUDO debootstrap --variant=minbase bookworm "$WORK/rootfs" "$MIRROR"; then
      # The one step that depends on the machine rather than on this
      # repository (the mirror must be reachable). CI sets
      # NEARPREP_CONTAINER_BASE_OPTIONAL=1: a machine that cannot debootstrap
      # skips the image, loudly; every later failure still fails.
      if [ "${NEARPREP_CONTAINER_BASE_OPTIONAL:-0}" = 1 ]; then
        log "SKIPPED: debootstrap of Debian 12 from $MIRROR failed on this machine; no image built"
        exit 0
      fi
      exit 1
    fi
    $SUDO rm -rf "$WORK/rootfs/var/cache/apt/archives/"*.deb
    log "importing it as $BASE"
    ctr=$($SUDO buildah from scratch)
    $SUDO buildah copy "$ctr" "$WORK/rootfs" / > /dev/null
    $SUDO buildah config --cmd /bin/bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
    $SUDO buildah commit --rm "$ctr" "$BASE"
  fi
  log "building $IMAGE (deploy/container/Dockerfile on $BASE)"
  $SUDO buildah bud --isolation chroot --build-arg "BASE=$BASE" \
    --build-arg "NEARPREP_VERSION=$VERSION" \
    -f deploy/container/Dockerfile -t "$IMAGE" .
  log "built in $(( $(date +%s) - start )) s"
fi
smoke_test
log "ok: $IMAGE"
