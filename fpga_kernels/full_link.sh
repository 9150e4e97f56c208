#!/usr/bin/env bash
# The full v++ link of the nearprep kernel (issue 33 item 5: split out of
# first_vitis_hour.sh, which runs the per-process csynths first). NOT RUN in
# this workplace (no Vitis here); written from UG1393 2021.2, unverified.
#
#   fpga_kernels/full_link.sh [OUTDIR]       (default: ./vitis_link_<date>)
#   HW=1 fpga_kernels/full_link.sh           also build the hw bitstream
#
# Steps (tool times are estimates for a workstation-class machine):
#  1. (~1-2 h) make TARGET=hw_emu (xclbin + emconfig.json), then nearprepd
#     with the FPGA backend under XCL_EMULATION_MODE=hw_emu and a CPU-backend
#     nearprepd on the tiny cosim images, one batch from each with the same
#     seed, compared byte for byte;
#  2. (HW=1; ~3-6 h) make TARGET=hw: the bitstream for the SmartSSD
#     (xcku15p-ffva1156-2LV-e through the platform) at the Makefile's
#     KERNEL_MHZ; the timing summary's worst slack is the clock answer.
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
OUT="${1:-$PWD/vitis_link_$(date +%Y%m%d_%H%M%S)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

command -v v++ > /dev/null || { echo "v++ not on PATH (source Vitis 2021.2 settings64.sh)"; exit 1; }

note "== hw_emu (~1-2 h: v++ compile + link of the whole kernel)"
d="$OUT/hw_emu"
mkdir -p "$d/data/tiny"
cp "$HERE"/cosim_images/*.jpg "$d/data/tiny/"
if make -C "$HERE" TARGET=hw_emu > "$d/build.log" 2>&1; then
  note "  hw_emu xclbin built: $HERE/build_hw_emu/nearprep_preprocess.xclbin"
  NEARPREPD="${NEARPREPD:-$ROOT/build/server/daemon/nearprepd}"
  NEARPREP="${NEARPREP:-$ROOT/build/client/cpp/nearprep}"
  cp "$HERE/build_hw_emu/emconfig.json" "$d/" 2>/dev/null
  (cd "$d" && XCL_EMULATION_MODE=hw_emu "$NEARPREPD" --port 0 --port-file "$d/fpga.port" \
     --backend fpga --xclbin "$HERE/build_hw_emu/nearprep_preprocess.xclbin" \
     --dataset tiny="$d/data" > "$d/fpga_daemon.log" 2>&1 & echo $! > "$d/fpga.pid")
  ("$NEARPREPD" --port 0 --port-file "$d/cpu.port" --backend cpu --dataset tiny="$d/data" \
     > "$d/cpu_daemon.log" 2>&1 & echo $! > "$d/cpu.pid")
  for _ in $(seq 120); do [ -s "$d/fpga.port" ] && [ -s "$d/cpu.port" ] && break; sleep 5; done
  ok=1
  "$NEARPREP" fetch --target "localhost:$(cat "$d/fpga.port")" --dataset tiny --batch-size 2 \
    --max-batches 1 --seed 1 --out "$d/fpga_out" > "$d/fetch_fpga.log" 2>&1 || ok=0
  "$NEARPREP" fetch --target "localhost:$(cat "$d/cpu.port")" --dataset tiny --batch-size 2 \
    --max-batches 1 --seed 1 --out "$d/cpu_out" > "$d/fetch_cpu.log" 2>&1 || ok=0
  kill "$(cat "$d/fpga.pid")" "$(cat "$d/cpu.pid")" 2>/dev/null
  if [ "$ok" = 1 ] && diff -r <(cd "$d/fpga_out" && find . -name '*.npy' -exec md5sum {} +) \
                              <(cd "$d/cpu_out" && find . -name '*.npy' -exec md5sum {} +) > /dev/null; then
    note "  hw_emu batch == CPU batch (check fpga_daemon.log: the images must not have fallen back)"
  else
    note "  hw_emu: fetch failed or batches differ (see $d)"
  fi
else
  note "  hw_emu build FAILED (see $d/build.log)"
fi

if [ "${HW:-0}" = 1 ]; then
  note "== hw bitstream (~3-6 h)"
  if make -C "$HERE" TARGET=hw > "$OUT/hw_build.log" 2>&1; then
    note "  hw xclbin built: $HERE/build_hw/nearprep_preprocess.xclbin"
    grep -rh -i -E "WNS|worst negative slack|timing constraints are (not )?met" \
      "$HERE/build_hw" --include='*.rpt' --include='*.log' 2>/dev/null | head -5 >> "$SUMMARY"
  else
    note "  hw build FAILED (see $OUT/hw_build.log)"
  fi
fi

note "summary: $SUMMARY"
