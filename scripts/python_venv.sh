#!/usr/bin/env bash
# Makes the Python test venv, <build>/venv: a plain venv of Debian's
# /usr/bin/python3 (no system site-packages) with, from PyPI, pinned by
# client/python/constraints.txt: the nearprep package installed from
# ./client/python the way a user does (a real wheel, not editable; its
# native module built against the system's gRPC C++), pytest, and
# tensorflow-cpu. Also fills <build>/wheelhouse with the wheels a fresh
# `pip install ./client/python` needs (the python_pip_install_fresh test
# installs from there, offline).
#
#   scripts/python_venv.sh            (scripts/setup.sh calls it after the build)
#   NEARPREP_BUILD_DIR=build-x ...    another build folder
#
# Reuse: the venv is kept while the constraints files and Debian's python are
# unchanged (stamp: <build>/venv/.nearprep-stamp); nearprep is reinstalled
# when its sources changed (stamp: .nearprep-pkg-stamp). Needs PyPI (or
# $PIP_INDEX_URL) only when something must be downloaded; when it cannot be
# reached, it stops with a message saying so. Prints the download and
# install times.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR="${NEARPREP_BUILD_DIR:-build}"
mkdir -p "$BUILD_DIR"
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
VENV="$BUILD_DIR/venv"
WHEELHOUSE="$BUILD_DIR/wheelhouse"
PY=/usr/bin/python3
CONSTRAINTS="$ROOT/client/python/constraints.txt"
BUILD_CONSTRAINTS="$ROOT/client/python/build-constraints.txt"
# What the tests install besides nearprep (pinned in constraints.txt).
EXTRA=(pytest tensorflow-cpu)

die() {
  echo "python_venv: ERROR: $*" >&2
  exit 1
}

[ -x "$PY" ] || die "$PY not found (Debian: python3)"
"$PY" -c "import venv, ensurepip" 2>/dev/null ||
  die "$PY cannot make venvs (Debian: apt-get install python3-venv)"

stamp=$( (cat "$CONSTRAINTS" "$BUILD_CONSTRAINTS"; "$PY" -VV) | sha256sum | cut -c1-16)
# nearprep's sources: the package, its build files and what setup.py takes
# from outside client/python (setup.py EXTERNAL_FILES).
pkg_stamp=$(cd "$ROOT" && {
  find client/python -path client/python/build -prune -o -name '*.egg-info' -prune \
    -o -name __pycache__ -prune -o -type f -print
  echo proto/nearprep/v1/nearprep.proto client/cpp/include/nearprep/client.h \
    client/cpp/src/client.cc client/cpp/src/batch_decoder.cc client/cpp/src/batch_decoder.h \
    common/pem.cc common/pem.h common/tensor_codec.cc common/tensor_codec.h | tr ' ' '\n'
} | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)

if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.nearprep-stamp" 2>/dev/null)" = "$stamp" ] &&
   [ "$(cat "$VENV/.nearprep-pkg-stamp" 2>/dev/null)" = "$pkg_stamp" ]; then
  echo "python_venv: $VENV is up to date"
  exit 0
fi

pip_net() {  # pip with bounded network waits
  "$VENV/bin/pip" --disable-pip-version-check --timeout 30 --retries 2 "$@"
}

t0=$(date +%s)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.nearprep-stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "python_venv: creating $VENV"
  rm -rf "$VENV" "$WHEELHOUSE"
  "$PY" -m venv "$VENV"
  mkdir -p "$WHEELHOUSE"
  # One download step (timed), then installs from the wheelhouse only.
  if ! pip_net download -q -d "$WHEELHOUSE" -c "$CONSTRAINTS" pip \
       grpcio protobuf numpy zstandard "${EXTRA[@]}" ||
     ! pip_net download -q -d "$WHEELHOUSE" -c "$BUILD_CONSTRAINTS" \
       setuptools wheel grpcio-tools pybind11; then
    rm -rf "$VENV" "$WHEELHOUSE"
    die "could not download the pinned packages from PyPI (${PIP_INDEX_URL:-https://pypi.org/simple}):
  is PyPI reachable from this machine (proxy: HTTPS_PROXY, index: PIP_INDEX_URL)?
  Do the pins in client/python/constraints.txt and build-constraints.txt exist for $("$PY" -V)?"
  fi
  t1=$(date +%s)
  echo "python_venv: download $((t1 - t0)) s ($(du -sh "$WHEELHOUSE" | cut -f1) in $WHEELHOUSE)"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-index -f "$WHEELHOUSE" \
    -c "$CONSTRAINTS" pip
  "$VENV/bin/pip" install -q --no-index -f "$WHEELHOUSE" -c "$CONSTRAINTS" \
    grpcio protobuf numpy zstandard "${EXTRA[@]}"
  echo "$stamp" > "$VENV/.nearprep-stamp"
fi
t2=$(date +%s)
# nearprep itself: a real wheel built from ./client/python (not editable),
# build requirements from the wheelhouse too. NEARPREP_NATIVE=1: the native
# module must build here (setup.sh installed its dependencies).
echo "python_venv: installing nearprep from ./client/python"
if ! NEARPREP_NATIVE=1 "$VENV/bin/pip" install -q --no-index -f "$WHEELHOUSE" \
    -c "$CONSTRAINTS" --build-constraint "$BUILD_CONSTRAINTS" \
    --force-reinstall --no-deps ./client/python ||
   ! "$VENV/bin/pip" check; then
  die "pip install ./client/python failed in $VENV (rerun with -v: $VENV/bin/pip install -v ./client/python)"
fi
(cd / && "$VENV/bin/python" -c "import nearprep, sys; sys.exit(0 if nearprep.native_available() else 1)") ||
  die "nearprep installed in $VENV but nearprep._native does not import"
echo "$pkg_stamp" > "$VENV/.nearprep-pkg-stamp"
t3=$(date +%s)
echo "python_venv: $VENV ready (venv + pins $((t2 - t0)) s, nearprep $((t3 - t2)) s)"
