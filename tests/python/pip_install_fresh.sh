#!/usr/bin/env bash
# ctest python_pip_install_fresh: what a user does, from scratch.
#   python3 -m venv v && v/bin/pip install ./client/python
# in a new plain venv of Debian's python, then: nearprep imports from the
# venv, its native module is there, `nearprep-py info` works, and one batch
# streams from nearprepd through the native path (test_packaging.py with
# NEARPREP_TEST_INSTALLED=1).
# Offline: packages come from <build>/wheelhouse (scripts/python_venv.sh
# downloaded the pinned wheels there), with pip's --no-index.
#   tests/python/pip_install_fresh.sh <build dir>     (from the source root)
set -euo pipefail
BUILD=$(cd "$1" && pwd)
WHEELHOUSE="$BUILD/wheelhouse"
ROOT=$PWD
[ -d "$WHEELHOUSE" ] || { echo "no $WHEELHOUSE: run scripts/python_venv.sh" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/nearprep-pip-fresh.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
OFFLINE=(--disable-pip-version-check --no-index -f "$WHEELHOUSE"
         -c "$ROOT/client/python/constraints.txt")

t0=$(date +%s)
/usr/bin/python3 -m venv "$TMP/v"
# The pip of the pins (Debian's ensurepip has 23.0, without --build-constraint).
"$TMP/v/bin/pip" install -q "${OFFLINE[@]}" pip
# The user's command (plus the offline options): a real wheel, native module
# required (NEARPREP_NATIVE=1: a missing one is a failure here, not a warning).
NEARPREP_NATIVE=1 "$TMP/v/bin/pip" install -q "${OFFLINE[@]}" \
  --build-constraint "$ROOT/client/python/build-constraints.txt" ./client/python
t1=$(date +%s)
echo "pip install ./client/python: $((t1 - t0)) s"
"$TMP/v/bin/pip" check
(cd "$TMP" && "$TMP/v/bin/nearprep-py" info)
(cd "$TMP" && "$TMP/v/bin/nearprep-py" --version) | grep -qx "nearprep $(
  sed -n 's/^project(nearprep VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)"
"$TMP/v/bin/pip" install -q "${OFFLINE[@]}" pytest
# The wheel's checks (not the TF one: no tensorflow in this venv; not the
# source-checkout stub cache). None may skip: the daemon and the native path
# are there.
out=$(cd "$ROOT" && NEARPREP_TEST_INSTALLED=1 "$TMP/v/bin/python" -m pytest -q -rs \
  -p no:cacheprovider -W error::RuntimeWarning tests/python/test_packaging.py \
  -k "installed_wheel or version or runtime_import or lower_bound" 2>&1) ||
  { echo "$out"; exit 1; }
echo "$out"
if grep -q skipped <<< "$out"; then
  echo "test_packaging.py skipped tests in the fresh venv" >&2
  exit 1
fi
echo "fresh venv checks: $(($(date +%s) - t0)) s"
