#!/usr/bin/env bash
# A libFuzzer campaign over nearprep's fuzz targets (docs/fuzzing.md).
#
#   scripts/fuzz_campaign.sh [-t SECONDS] [-c CORPUS_DIR] [-b CLANG_BUILD_DIR]
#                            [-j JOBS] [-n] [TARGET...]
#
#   -t SECONDS   time budget per target (default 300)
#   -c DIR       corpus folder (default fuzz-corpus); DIR/<target>/ is the
#                corpus libFuzzer grows and keeps between campaigns,
#                DIR/artifacts/<target>/ receives crash-/leak-/timeout-/oom-
#                inputs, DIR/logs/<target>.log the fuzzer's output and
#                DIR/summary.md the table of the last campaign
#   -b DIR       clang build folder (default build-clang); configured with
#                CC=clang CXX=clang++ -DNEARPREP_FUZZ=ON when absent
#   -j JOBS      libFuzzer processes per target (-fork=JOBS; default 1)
#   -n           do not (re)build the fuzzers
#   TARGET...    among jpeg_decode fpga_kernel stream_request file_list
#                records (default: all five)
#
# Seeds: the generated seeds of nearprep_fuzz_regress (written with
# NEARPREP_FUZZ_CORPUS_OUT, from $NEARPREP_BUILD_DIR, default build, or the
# clang build) plus tests/fuzz/regressions/<target>/, on the first run.
# A target that does not build is reported as such and skipped.
# Exit status: 0 when no target found anything, 1 when one did, 2 on usage
# or build errors of every target.
set -uo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET=300
CORPUS=fuzz-corpus
CLANG_BUILD=build-clang
JOBS=1
BUILD=1
while getopts "t:c:b:j:nh" opt; do
  case "$opt" in
    t) SECONDS_PER_TARGET="$OPTARG" ;;
    c) CORPUS="$OPTARG" ;;
    b) CLANG_BUILD="$OPTARG" ;;
    j) JOBS="$OPTARG" ;;
    n) BUILD=0 ;;
    *) sed -n '2,26p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
ALL_TARGETS="jpeg_decode fpga_kernel stream_request file_list records"
TARGETS="${*:-$ALL_TARGETS}"
for t in $TARGETS; do
  case " $ALL_TARGETS " in
    *" $t "*) ;;
    *) echo "fuzz_campaign: unknown target '$t' (one of: $ALL_TARGETS)" >&2; exit 2 ;;
  esac
done
case "$SECONDS_PER_TARGET" in
  ''|*[!0-9]*) echo "fuzz_campaign: -t must be a whole number of seconds" >&2; exit 2 ;;
esac

mkdir -p "$CORPUS/logs" "$CORPUS/artifacts"
CORPUS="$(cd "$CORPUS" && pwd)"

# --- Build -----------------------------------------------------------------
declare -A BUILT
if [ "$BUILD" = 1 ]; then
  if [ ! -f "$CLANG_BUILD/CMakeCache.txt" ]; then
    CC=clang CXX=clang++ cmake -S . -B "$CLANG_BUILD" \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNEARPREP_FUZZ=ON \
      ${CMAKE_CXX_COMPILER_LAUNCHER:+-DCMAKE_CXX_COMPILER_LAUNCHER=$CMAKE_CXX_COMPILER_LAUNCHER} \
      ${CMAKE_C_COMPILER_LAUNCHER:+-DCMAKE_C_COMPILER_LAUNCHER=$CMAKE_C_COMPILER_LAUNCHER} \
      > "$CORPUS/logs/configure.log" 2>&1 || {
        echo "fuzz_campaign: configuring $CLANG_BUILD failed; see $CORPUS/logs/configure.log" >&2
        tail -20 "$CORPUS/logs/configure.log" >&2
        exit 2
      }
  fi
  for t in $TARGETS; do
    echo "== building ${t}_fuzzer"
    if nice cmake --build "$CLANG_BUILD" -j "${NEARPREP_BUILD_JOBS:-2}" \
         --target "${t}_fuzzer" > "$CORPUS/logs/build-$t.log" 2>&1; then
      BUILT[$t]=1
    else
      echo "   ${t}_fuzzer did not build; see $CORPUS/logs/build-$t.log" >&2
      grep -m3 -E "error|Error" "$CORPUS/logs/build-$t.log" >&2
    fi
  done
else
  for t in $TARGETS; do
    [ -x "$CLANG_BUILD/tests/fuzz/${t}_fuzzer" ] && BUILT[$t]=1
  done
fi

# --- Seeds -----------------------------------------------------------------
SEEDER=""
for d in "${NEARPREP_BUILD_DIR:-build}" "$CLANG_BUILD"; do
  if [ -x "$d/tests/fuzz/nearprep_fuzz_regress" ]; then
    SEEDER="$d/tests/fuzz/nearprep_fuzz_regress"
    break
  fi
done
SEEDS="$CORPUS/seeds"
if [ -n "$SEEDER" ] && [ ! -d "$SEEDS" ]; then
  echo "== seeds from $SEEDER"
  NEARPREP_FUZZ_ITERS=1 NEARPREP_FUZZ_CORPUS_OUT="$SEEDS" "$SEEDER" \
    --gtest_filter='Fuzz.*' > "$CORPUS/logs/seeds.log" 2>&1 ||
    echo "   (the seeder reported failures; see $CORPUS/logs/seeds.log)" >&2
fi

# --- Campaign --------------------------------------------------------------
SUMMARY="$CORPUS/summary.md"
{
  echo "| target | seconds | executions | executions/s | corpus (start -> end) | coverage (cov / ft) | peak RSS MB | findings |"
  echo "|---|---|---|---|---|---|---|---|"
} > "$SUMMARY"
FOUND=0
ANY_RAN=0
for t in $TARGETS; do
  if [ -z "${BUILT[$t]:-}" ]; then
    echo "| $t | - | - | - | - | - | - | not built (logs/build-$t.log) |" >> "$SUMMARY"
    continue
  fi
  ANY_RAN=1
  dir="$CORPUS/$t"
  art="$CORPUS/artifacts/$t"
  mkdir -p "$dir" "$art"
  if [ -z "$(ls -A "$dir")" ]; then
    [ -d "$SEEDS/$t" ] && cp "$SEEDS/$t"/* "$dir"/ 2>/dev/null
    cp tests/fuzz/regressions/"$t"/* "$dir"/ 2>/dev/null
  fi
  start_units=$(ls "$dir" | wc -l)
  log="$CORPUS/logs/$t.log"
  echo "== $t: ${SECONDS_PER_TARGET}s, corpus $dir ($start_units inputs)"
  fork=()
  [ "$JOBS" -gt 1 ] && fork=(-fork="$JOBS" -ignore_crashes=1)
  "$CLANG_BUILD/tests/fuzz/${t}_fuzzer" "${fork[@]}" \
    -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$art/" "$dir" > "$log" 2>&1
  rc=$?
  end_units=$(ls "$dir" | wc -l)
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
  rss=$(grep -o 'stat::peak_rss_mb: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(echo "$last" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*')
  ft=$(echo "$last" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*')
  if [ -z "$execs" ]; then  # -fork mode prints no final stats
    execs=$(echo "$last" | grep -o '^#[0-9]*' | tr -d '#')
    [ -n "$execs" ] && rate=$((execs / (SECONDS_PER_TARGET > 0 ? SECONDS_PER_TARGET : 1)))
  fi
  findings=$(ls "$art" | grep -cE '^(crash|leak|timeout|oom|slow-unit)-')
  what="none"
  if [ "$findings" -gt 0 ]; then
    FOUND=1
    what="$findings: $(ls "$art" | grep -E '^(crash|leak|timeout|oom|slow-unit)-' | tr '\n' ' ')"
  elif [ "$rc" -ne 0 ]; then
    FOUND=1
    what="fuzzer exit $rc (see logs/$t.log)"
  fi
  echo "| $t | $SECONDS_PER_TARGET | ${execs:-?} | ${rate:-?} | $start_units -> $end_units | ${cov:-?} / ${ft:-?} | ${rss:-?} | $what |" >> "$SUMMARY"
done
echo
cat "$SUMMARY"
[ "$ANY_RAN" = 1 ] || exit 2
exit "$FOUND"
