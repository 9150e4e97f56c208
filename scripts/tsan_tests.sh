#!/usr/bin/env bash
# ThreadSanitizer run of the concurrent parts: the pipeline and its shared
# worker pool (scheduler), the block cache, the fleet's global plan shared by
# threads, and the C++ FleetClient's prefetch threads.
#  1. configures a TSan build tree (default build-tsan: the default compiler
#     with -fsanitize=thread -O1 -g1; no benchmarks, Python stubs or XRT) and
#     builds only nearprep_pipeline_test, data_block_cache_test,
#     fleet_plan_threads_test and the `nearprep` CLI;
#  2. runs those three tests (ctest);
#  3. runs the `nearprep fleet-read` tests of tests/python/test_fleet_daemons.py,
#     test_fleet_hedge.py and test_fleet_verify.py (hedged requests cancel
#     the losing node request from another thread; verification runs a
#     second and third replica's requests beside the batch's) with that
#     TSan CLI against the regular build's daemons (NEARPREP_BUILD_DIR,
#     default build: scripts/setup.sh must have built it).
# A race makes the process exit 66 (TSAN_OPTIONS halt_on_error), which fails
# the test. Locks must be visible to TSan: Debian's libabsl is not built with
# TSan, so absl::Mutex is invisible to it; the code it runs uses
# nearprep::Mutex (common/mutex.h, a std::mutex). Each test has a timeout;
# the whole script is bounded by NEARPREP_TSAN_TIMEOUT seconds (default
# 1500). 8.5 minutes measured at -j1 on a loaded 2-core machine (load ~10-20),
# empty ccache. scripts/test.sh runs it
# (NEARPREP_SKIP_TSAN=1 skips it there).
#   NEARPREP_TSAN_BUILD_DIR  the TSan build tree (default build-tsan)
#   NEARPREP_JOBS            parallel compiles (default: nproc)
#   NEARPREP_CMAKE_ARGS      extra cmake arguments (e.g. a ccache launcher)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${NEARPREP_TSAN_BUILD_DIR:-build-tsan}"
MAIN_BUILD="${NEARPREP_BUILD_DIR:-build}"
JOBS="${NEARPREP_JOBS:-$(nproc)}"
if [ -z "${NEARPREP_TSAN_DEADLINE:-}" ]; then
  export NEARPREP_TSAN_DEADLINE=1
  exec timeout --kill-after=30 "${NEARPREP_TSAN_TIMEOUT:-1500}" "$0" "$@"
fi
GEN=()
if command -v ninja > /dev/null; then GEN=(-G Ninja); fi
FLAGS="-fsanitize=thread -fno-omit-frame-pointer -O1 -g1"
mkdir -p "$BUILD"
# shellcheck disable=SC2086
cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_CXX_FLAGS="$FLAGS" -DCMAKE_C_FLAGS="$FLAGS" \
  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread \
  -DNEARPREP_BUILD_BENCH=OFF -DNEARPREP_WITH_PYTHON=OFF -DNEARPREP_WITH_XRT=OFF \
  ${NEARPREP_CMAKE_ARGS:-} > "$BUILD/configure.log" 2>&1 || {
  cat "$BUILD/configure.log" >&2
  exit 1
}
TESTS=(nearprep_pipeline_test data_block_cache_test fleet_plan_threads_test)
cmake --build "$BUILD" -j"$JOBS" --target "${TESTS[@]}" nearprep

# scripts/tsan.supp: reports inside the uninstrumented gRPC / Abseil /
# protobuf libraries are dropped (see there).
export TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:suppressions=$(pwd)/scripts/tsan.supp${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
regex="^($(IFS='|'; echo "${TESTS[*]}"))\$"
ctest --test-dir "$BUILD" -R "$regex" --output-on-failure -j"$JOBS" --timeout 300

# The C++ FleetClient under TSan, through the CLI the fleet tests run.
if [ ! -x "$MAIN_BUILD/server/daemon/nearprepd" ]; then
  echo "tsan_tests: $MAIN_BUILD/server/daemon/nearprepd missing (run scripts/setup.sh)" >&2
  exit 1
fi
ROOT="$(pwd)"
env PYTHONPATH="$ROOT/client/python:$ROOT/$MAIN_BUILD/python:$ROOT/tests/python" \
  NEARPREP_PROTO_PATH="$ROOT/$MAIN_BUILD/python" \
  NEARPREPD="$ROOT/$MAIN_BUILD/server/daemon/nearprepd" \
  NEARPREP_CLI="$ROOT/$BUILD/client/cpp/nearprep" \
  timeout 600 /usr/bin/python3 -m pytest -q -p no:cacheprovider \
  tests/python/test_fleet_daemons.py tests/python/test_fleet_hedge.py \
  tests/python/test_fleet_verify.py -k "cpp"
echo "tsan_tests: no data race reported"
