#!/usr/bin/env bash
# Clang's thread-safety analysis (-Wthread-safety -Werror=thread-safety) on
# every source file of server/, client/cpp/, cli/, common/ and proto/options/:
# configures a clang build tree (default build-thread-safety; no tests,
# benchmarks or Python),
# makes only the generated headers (protoc), and runs
# scripts/check_thread_safety.py check over its compile_commands.json
# (syntax only, no object files), after that script's planted-violation
# self-test. 5 minutes measured at -j1 on a loaded 2-core machine; no ccache
# needed. scripts/test.sh
# runs it (NEARPREP_SKIP_THREAD_SAFETY=1 skips it there).
#   NEARPREP_TSA_BUILD_DIR   the build tree (default build-thread-safety)
#   NEARPREP_JOBS            parallel compiles (default: nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${NEARPREP_TSA_BUILD_DIR:-build-thread-safety}"
JOBS="${NEARPREP_JOBS:-$(nproc)}"
CLANGXX="${NEARPREP_CLANGXX:-clang++}"
if ! command -v "$CLANGXX" > /dev/null; then
  echo "check_thread_safety: $CLANGXX not found (Debian: apt-get install clang;" \
       "scripts/setup.sh installs it)" >&2
  exit 1
fi
CLANGC="${CLANGXX/clang++/clang}"
/usr/bin/python3 scripts/check_thread_safety.py selftest --clang "$CLANGXX"
mkdir -p "$BUILD"
GEN=()
if command -v ninja > /dev/null; then GEN=(-G Ninja); fi
cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_COMPILER="$CLANGXX" -DCMAKE_C_COMPILER="$CLANGC" \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DNEARPREP_BUILD_TESTS=OFF \
  -DNEARPREP_BUILD_BENCH=OFF -DNEARPREP_WITH_PYTHON=OFF > "$BUILD/configure.log" 2>&1 || {
  cat "$BUILD/configure.log" >&2
  exit 1
}
# The generated headers the sources include (nothing else is built; with
# make, which cannot build one file, the two proto libraries).
if [ "${#GEN[@]}" -gt 0 ]; then
  cmake --build "$BUILD" -j"$JOBS" --target proto/gen/nearprep/v1/nearprep.pb.h \
    proto/gen/nearprep/v1/nearprep.grpc.pb.h proto/gen/nearprep/v1/tf_example.pb.h > /dev/null
else
  cmake --build "$BUILD" -j"$JOBS" --target nearprep_proto nearprep_tf_example_proto > /dev/null
fi
/usr/bin/python3 scripts/check_thread_safety.py check --build "$BUILD" -j "$JOBS"
