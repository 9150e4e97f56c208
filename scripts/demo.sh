#!/usr/bin/env bash
# The main job: build, generate a synthetic dataset, start nearprepd on it,
# stream several epochs with the C++ client (prints the steady-state images/s
# and MB/s of epochs 2..N apart from the first epoch and the time to first
# batch), and write a contact sheet of augmented samples to out/sheet.png.
# If ../shared/datasets/imagenet-sample-200 exists it is served too and
# streamed as well.
set -euo pipefail
cd "$(dirname "$0")/.."
# The demo needs no PyPI: the Python test venv (tensorflow-cpu, ...) is for
# scripts/test.sh (NEARPREP_SKIP_VENV=0 makes it here too).
NEARPREP_SKIP_VENV="${NEARPREP_SKIP_VENV:-1}" scripts/setup.sh
BUILD_DIR="${NEARPREP_BUILD_DIR:-build}"
NEARPREP="$BUILD_DIR/client/cpp/nearprep"
NEARPREPD="$BUILD_DIR/server/daemon/nearprepd"
OUT="out"
mkdir -p "$OUT"
rm -rf "$OUT/demo-data"
"$NEARPREP" mkdataset --out "$OUT/demo-data" --classes 8 --per-class 40 --seed 7

CONFIG="$OUT/demo.yaml"
{
  echo "listen: 127.0.0.1"
  echo "datasets:"
  echo "  - name: synthetic"
  echo "    format: image_folder"
  echo "    root: $PWD/$OUT/demo-data"
  if [ -d ../shared/datasets/imagenet-sample-200 ]; then
    echo "  - name: imagenet-sample-200"
    echo "    format: image_folder"
    echo "    root: $(cd ../shared/datasets/imagenet-sample-200 && pwd)"
  fi
} > "$CONFIG"

rm -f "$OUT/port"
"$NEARPREPD" --config "$CONFIG" --port 0 --port-file "$OUT/port" --log-level warn &
DAEMON=$!
trap 'kill -TERM $DAEMON 2>/dev/null || true; wait $DAEMON 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do [ -s "$OUT/port" ] && break; sleep 0.1; done
[ -s "$OUT/port" ] || { echo "demo: nearprepd did not start" >&2; exit 1; }
TARGET="127.0.0.1:$(cat "$OUT/port")"

"$NEARPREP" info --target "$TARGET"
AUG=(--shuffle --seed 1 --flip-probability 0.5 --brightness-max-delta 0.1254902
     --saturation 0.5 1.5 --height 224 --width 224)
EPOCHS="${NEARPREP_DEMO_EPOCHS:-4}"
echo "== $EPOCHS epochs of 'synthetic' (float32, tf_compat)"
"$NEARPREP" stream --target "$TARGET" --dataset synthetic --batch-size 32 "${AUG[@]}" \
  --epochs "$EPOCHS" --sheet "$OUT/sheet.png"
if [ -d ../shared/datasets/imagenet-sample-200 ]; then
  echo "== $EPOCHS epochs of 'imagenet-sample-200' (float32, tf_compat)"
  "$NEARPREP" stream --target "$TARGET" --dataset imagenet-sample-200 --batch-size 32 "${AUG[@]}" \
    --epochs "$EPOCHS" --sheet "$OUT/sheet-imagenet.png"
fi
echo "demo: contact sheet written to $OUT/sheet.png"
