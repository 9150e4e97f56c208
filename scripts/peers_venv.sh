#!/usr/bin/env bash
# Makes <build>/peers-venv for bench/peers (issue 22): a plain venv of
# Debian's /usr/bin/python3 with NVIDIA DALI (nvidia-dali-cuda120, CPU-only
# use) and what it needs, pinned by bench/peers/requirements.txt. Called by
# scripts/setup.sh after scripts/python_venv.sh; about 490 MB of downloads
# the first time (kept while the pins and Debian's python are unchanged:
# stamp <build>/peers-venv/.nearprep-stamp).
#
# Never fails the build: when PyPI or a wheel is not there, it says so and
# removes the half-made venv; bench/peers/run.py then reports the DALI rows
# as "not installed". NEARPREP_SKIP_PEERS=1 skips it.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR="${NEARPREP_BUILD_DIR:-build}"
mkdir -p "$BUILD_DIR"
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
VENV="$BUILD_DIR/peers-venv"
REQ="$ROOT/bench/peers/requirements.txt"
PY=/usr/bin/python3

if [ "${NEARPREP_SKIP_PEERS:-0}" = "1" ]; then
  echo "peers_venv: skipped (NEARPREP_SKIP_PEERS=1)"
  exit 0
fi
stamp=$( (cat "$REQ"; "$PY" -VV) | sha256sum | cut -c1-16)
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.nearprep-stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "peers_venv: $VENV is up to date"
  exit 0
fi
t0=$(date +%s)
echo "peers_venv: creating $VENV (NVIDIA DALI, about 490 MB from PyPI)"
rm -rf "$VENV"
if ! "$PY" -m venv "$VENV" ||
   ! "$VENV/bin/pip" install -q --disable-pip-version-check --timeout 30 --retries 2 \
       --no-deps -r "$REQ" ||
   ! "$VENV/bin/pip" check > /dev/null ||
   ! "$VENV/bin/python" -c "import nvidia.dali.fn"; then
  rm -rf "$VENV"
  echo "peers_venv: WARNING: could not install bench/peers/requirements.txt into $VENV" \
       "(PyPI: ${PIP_INDEX_URL:-https://pypi.org/simple}); bench/peers/run.py will report" \
       "its DALI rows as 'not installed'" >&2
  exit 0
fi
echo "$stamp" > "$VENV/.nearprep-stamp"
echo "peers_venv: $VENV ready ($(( $(date +%s) - t0 )) s)"
