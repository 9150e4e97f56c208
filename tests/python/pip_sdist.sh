#!/usr/bin/env bash
# ctest python_pip_sdist: the sdist of client/python builds on its own, and a
# build without the native module falls back loudly.
#  1. `setup.py sdist` from the checkout; the sdist holds the proto and the
#     C++ sources (_src/), so that unpacked away from the checkout,
#     `pip install <sdist dir>` builds the stubs and nearprep._native;
#     nearprep-py info then says "native receive module: yes".
#  2. The same sdist with a cmake that fails: the install still succeeds,
#     the wheel carries NATIVE_MISSING.txt, `import nearprep` warns,
#     native_available() is False, and a Client receives through grpcio.
# Offline (<build>/wheelhouse, from scripts/python_venv.sh). Uses ccache for
# the native build when it is installed (CCACHE_BASEDIR: the unpacked sdist).
#   tests/python/pip_sdist.sh <build dir>     (from the source root)
set -euo pipefail
BUILD=$(cd "$1" && pwd)
WHEELHOUSE="$BUILD/wheelhouse"
ROOT=$PWD
[ -d "$WHEELHOUSE" ] || { echo "no $WHEELHOUSE: run scripts/python_venv.sh" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/nearprep-pip-sdist.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
OFFLINE=(--disable-pip-version-check --no-index -f "$WHEELHOUSE"
         -c "$ROOT/client/python/constraints.txt"
         --build-constraint "$ROOT/client/python/build-constraints.txt")
t0=$(date +%s)

/usr/bin/python3 -m venv "$TMP/v"
"$TMP/v/bin/pip" install -q --disable-pip-version-check --no-index -f "$WHEELHOUSE" \
  -c "$ROOT/client/python/constraints.txt" pip setuptools wheel
(cd client/python && "$TMP/v/bin/python" setup.py -q sdist -d "$TMP/dist" > "$TMP/sdist.log" 2>&1) ||
  { cat "$TMP/sdist.log"; exit 1; }
VERSION=$(sed -n 's/^project(nearprep VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
SDIST="$TMP/dist/nearprep-$VERSION.tar.gz"
[ -f "$SDIST" ] || { ls -l "$TMP/dist"; echo "no $SDIST" >&2; exit 1; }
mkdir "$TMP/src"
tar -xzf "$SDIST" -C "$TMP/src"
PKG="$TMP/src/nearprep-$VERSION"
for f in _src/proto/nearprep/v1/nearprep.proto _src/client/cpp/src/client.cc \
         _src/common/tensor_codec.cc _src/client/python/native/native_module.cc \
         native/wheel/CMakeLists.txt setup.py pyproject.toml nearprep/__init__.py; do
  [ -f "$PKG/$f" ] || { echo "sdist lacks $f" >&2; tar -tzf "$SDIST" >&2; exit 1; }
done
if tar -tzf "$SDIST" | grep -q '_pb2'; then
  echo "sdist carries generated stubs (they are made at build time)" >&2; exit 1
fi

# 1. From the sdist alone, with the native module.
if command -v ccache > /dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR="$TMP"
fi
(cd "$TMP" && NEARPREP_NATIVE=1 NEARPREP_NATIVE_JOBS=2 "$TMP/v/bin/pip" install -q \
  "${OFFLINE[@]}" "$PKG")
(cd "$TMP" && "$TMP/v/bin/nearprep-py" info) | tee "$TMP/info.txt"
grep -q "^native receive module: yes" "$TMP/info.txt"
grep -q "stubs: $TMP/v/lib/" "$TMP/info.txt"
t1=$(date +%s)
echo "sdist -> installed with native: $((t1 - t0)) s"

# 2. The native build fails (a cmake that exits 1): pure-Python wheel, loud.
mkdir "$TMP/badbin"
printf '#!/bin/sh\necho "cmake: simulated failure" >&2\nexit 1\n' > "$TMP/badbin/cmake"
chmod +x "$TMP/badbin/cmake"
rm -rf "$PKG/build"
(cd "$TMP" && PATH="$TMP/badbin:$PATH" "$TMP/v/bin/pip" install -q --force-reinstall --no-deps \
  "${OFFLINE[@]}" "$PKG")
SITE=$("$TMP/v/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
grep -q "CMake configure failed" "$SITE/nearprep/NATIVE_MISSING.txt"
if ls "$SITE"/nearprep/_native*.so > /dev/null 2>&1; then
  echo "a stale _native module was left in the fallback install" >&2; exit 1
fi
(cd "$TMP" && "$TMP/v/bin/python" -W error::RuntimeWarning -c "import nearprep" 2> "$TMP/warn.txt") &&
  { echo "import nearprep did not warn about the missing native module" >&2; exit 1; }
grep -q "nearprep._native was not built" "$TMP/warn.txt"
(cd "$TMP" && "$TMP/v/bin/python" -W ignore::RuntimeWarning - <<'EOF'
import nearprep
from nearprep import transport as tr
assert not nearprep.native_available()
assert "CMake configure failed" in nearprep.native_missing_reason()
assert isinstance(nearprep.Client("localhost:1")._transport, tr.GrpcioTransport)
print("fallback: grpcio transport,", nearprep.native_missing_reason())
EOF
)
echo "sdist checks: $(($(date +%s) - t0)) s"
