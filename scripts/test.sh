#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test (C++ via ctest, Python
# via pytest registered in ctest), then the two concurrency checks that need
# builds of their own: clang's thread-safety analysis of server/ and
# client/cpp and cli (scripts/check_thread_safety.sh, ~5 min on a loaded 2-core machine) and the
# ThreadSanitizer run of the pipeline, scheduler, block cache, global plan
# and C++ fleet client (scripts/tsan_tests.sh, ~8.5 min).
# NEARPREP_SKIP_THREAD_SAFETY=1 / NEARPREP_SKIP_TSAN=1 skip those. Exit
# status: 0 when all three passed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR="${NEARPREP_BUILD_DIR:-build}"
status=0
(cd "$BUILD_DIR" && ctest --output-on-failure -j"${NEARPREP_TEST_JOBS:-2}" --timeout 900) ||
  status=$?
if [ "${NEARPREP_SKIP_THREAD_SAFETY:-0}" != "1" ]; then
  scripts/check_thread_safety.sh || { echo "test.sh: thread-safety check FAILED" >&2; status=1; }
fi
if [ "${NEARPREP_SKIP_TSAN:-0}" != "1" ]; then
  scripts/tsan_tests.sh || { echo "test.sh: ThreadSanitizer run FAILED" >&2; status=1; }
fi
exit "$status"
