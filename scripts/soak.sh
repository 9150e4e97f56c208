#!/usr/bin/env bash
# Soak test: nearprepd under `nearprep load` with many concurrent streams for
# a while, sampling the daemon's resident memory (VmRSS) once a second, and
# comparing it with the documented bound
#   streams x prefetch_depth x batch bytes + overhead (docs/architecture.md).
#
#   scripts/soak.sh [-d SECONDS] [-s STREAMS] [-b BATCH] [-p PREFETCH]
#                   [-S SIDE] [-w WORKERS] [-l SLOW] [-o OUT_DIR]
#
#   -d SECONDS   load duration (default 120)
#   -s STREAMS   concurrent streams (default 64)
#   -b BATCH     batch size (default 16)
#   -p PREFETCH  the daemon's --prefetch-depth (default 4)
#   -S SIDE      output height = width (default 224; float32 output)
#   -w WORKERS   daemon worker threads (default 0: one per core)
#   -l SLOW      how many streams are slow consumers (sleep 200 ms per batch;
#                default a quarter of the streams)
#   -o OUT_DIR   where rss.csv, load.json, daemon.log and summary.txt go
#                (default out/soak)
#   -a ARGS      extra nearprepd arguments (e.g. "--grpc-memory 0")
#
# Serves ../shared/datasets/imagenet-sample-200 when present, else a
# synthetic dataset made with `nearprep mkdataset`. Needs a built tree
# ($NEARPREP_BUILD_DIR, default build). Exit status: that of `nearprep load`,
# or 3 when the peak RSS growth exceeded the bound plus 150 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=120 STREAMS=64 BATCH=16 PREFETCH=4 SIDE=224 WORKERS=0 SLOW="" OUT=out/soak
EXTRA=""
while getopts "d:s:b:p:S:w:l:o:a:h" opt; do
  case "$opt" in
    d) DURATION="$OPTARG" ;;
    s) STREAMS="$OPTARG" ;;
    b) BATCH="$OPTARG" ;;
    p) PREFETCH="$OPTARG" ;;
    S) SIDE="$OPTARG" ;;
    w) WORKERS="$OPTARG" ;;
    l) SLOW="$OPTARG" ;;
    o) OUT="$OPTARG" ;;
    a) EXTRA="$OPTARG" ;;
    *) sed -n '2,25p' "$0"; exit 2 ;;
  esac
done
SLOW="${SLOW:-$((STREAMS / 4))}"
BUILD_DIR="${NEARPREP_BUILD_DIR:-build}"
NEARPREP="$BUILD_DIR/client/cpp/nearprep"
NEARPREPD="$BUILD_DIR/server/daemon/nearprepd"
for b in "$NEARPREP" "$NEARPREPD"; do
  [ -x "$b" ] || { echo "soak: $b not built" >&2; exit 2; }
done
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

DATA=../shared/datasets/imagenet-sample-200
if [ ! -d "$DATA" ]; then
  DATA="$OUT/data"
  [ -d "$DATA" ] || "$NEARPREP" mkdataset --out "$DATA" --classes 10 --per-class 20 --seed 1 > /dev/null
fi
DATA="$(cd "$DATA" && pwd)"

rm -f "$OUT/port"
"$NEARPREPD" --listen 127.0.0.1 --port 0 --port-file "$OUT/port" --log-level warn \
  --dataset "d=$DATA" --workers "$WORKERS" --prefetch-depth "$PREFETCH" \
  --max-concurrent-streams "$((STREAMS + 8))" $EXTRA > "$OUT/daemon.log" 2>&1 &
DPID=$!
SAMPLER=""
cleanup() {
  [ -n "$SAMPLER" ] && kill "$SAMPLER" 2> /dev/null || true
  kill "$DPID" 2> /dev/null || true
  wait "$DPID" 2> /dev/null || true
}
trap cleanup EXIT
for _ in $(seq 100); do
  [ -s "$OUT/port" ] && break
  kill -0 "$DPID" 2> /dev/null || { echo "soak: nearprepd exited; see $OUT/daemon.log" >&2; exit 2; }
  sleep 0.1
done
PORT="$(cat "$OUT/port")"
sleep 0.5
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$DPID/status" 2> /dev/null || echo 0; }
IDLE_KB="$(rss_kb)"

echo "t_s,rss_mib" > "$OUT/rss.csv"
(
  t=0
  while kill -0 "$DPID" 2> /dev/null; do
    echo "$t,$(awk -v k="$(rss_kb)" 'BEGIN {printf "%.1f", k / 1024}')" >> "$OUT/rss.csv"
    sleep 1
    t=$((t + 1))
  done
) &
SAMPLER=$!

echo "soak: $STREAMS streams ($SLOW slow) for ${DURATION}s, batch $BATCH x ${SIDE}x${SIDE} float32, prefetch $PREFETCH, dataset $DATA"
set +e
"$NEARPREP" load --quiet --target "127.0.0.1:$PORT" --dataset d --streams "$STREAMS" \
  --slow "$SLOW" --consumer-delay 200 --duration "$DURATION" --ramp-up 2 --shuffle \
  --height "$SIDE" --width "$SIDE" --batch-size "$BATCH" --json "$OUT/load.json" \
  > "$OUT/load.out" 2>&1
LOAD_RC=$?
set -e
sleep 1
END_KB="$(rss_kb)"
kill "$SAMPLER" 2> /dev/null || true
wait "$SAMPLER" 2> /dev/null || true
SAMPLER=""

set +e
/usr/bin/python3 - "$OUT" "$IDLE_KB" "$END_KB" "$STREAMS" "$PREFETCH" "$BATCH" "$SIDE" "$LOAD_RC" "$DURATION" <<'EOF' | tee "$OUT/summary.txt"
import csv, json, sys
out, idle_kb, end_kb, streams, depth, batch, side, rc, duration = sys.argv[1:]
idle = int(idle_kb) / 1024
end = int(end_kb) / 1024
rows = [(int(r["t_s"]), float(r["rss_mib"])) for r in csv.DictReader(open(out + "/rss.csv"))]
peak_t, peak = max(rows, key=lambda r: r[1]) if rows else (0, idle)
half = [v for t, v in rows if t >= len(rows) // 2]
batch_mib = int(batch) * int(side) * int(side) * 3 * 4 / 2**20
bound = int(streams) * int(depth) * batch_mib
try:
    rep = json.load(open(out + "/load.json"))
except Exception:
    rep = {}
print(f"streams {streams}, prefetch {depth}, batch {batch} x {side}x{side} float32 "
      f"({batch_mib:.1f} MiB), duration {duration} s, load exit {rc}")
print(f"images {rep.get('images', '?')}, images/s {rep.get('images_per_s', 0):.0f}, "
      f"stream errors {len(rep.get('stream_errors', []) or [])}")
print(f"daemon RSS MiB: idle {idle:.0f}, peak {peak:.0f} (at {peak_t} s, +{peak - idle:.0f}), "
      f"second half min/max {min(half) if half else 0:.0f}/{max(half) if half else 0:.0f}, "
      f"end {end:.0f}")
print(f"bound streams x prefetch x batch = {bound:.0f} MiB; peak growth / bound = "
      f"{(peak - idle) / bound:.2f}")
sys.exit(3 if peak - idle > bound + 150 else 0)
EOF
SUMMARY_RC=${PIPESTATUS[0]}
[ "$LOAD_RC" -ne 0 ] && exit "$LOAD_RC"
exit "$SUMMARY_RC"
