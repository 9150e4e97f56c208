#!/usr/bin/env bash
# The first paid Vitis hour (issue 24): what to run first, in order, on a
# machine with Vitis 2021.2 and the SmartSSD platform, unchanged. NOT RUN in
# this workplace (no Vitis here): every step is written from UG1399 / UG1393
# 2021.2 and unverified until someone runs it.
#
#   fpga_kernels/first_vitis_hour.sh [OUTDIR]      (default: ./vitis_hour_<date>)
#   STEPS="1 2 3 4 5" PART=xcku15p-ffva1156-2-e     (env overrides)
#
# Steps (each logs to OUTDIR/<step>/..., goes on after a failure, and the
# summary at the end says what passed):
#  1. csynth of each dataflow process alone as the top, on the KU15P at the
#     Makefile's KERNEL_MHZ, with hls_config.tcl (config_dataflow
#     -strict_mode warning: errors would hide the other messages);
#  2. the messages that matter, grepped from every log: II violations, memory
#     port limits, unrolling, dataflow/bypass/strict-mode warnings; and every
#     pipelined loop's achieved II and depth next to the timed model's table
#     (fpga_kernels/host/loop_timing.cc) - update the table with what you see;
#  3. csynth of the whole kernel (nearprep_preprocess), resources from its
#     report next to kernel_checks.py's estimate (48 URAM, ~350 BRAM36);
#  4. C/RTL co-simulation of the whole kernel on two tiny JPEGs
#     (fpga_kernels/cosim_images: 16x16 4:2:0 and 8x8 gray): csim writes the
#     golden output, cosim must reproduce it byte for byte
#     (fpga_kernels/host/cosim_tb.cc; it runs the kernel's own C-simulation
#     model - threads, bounded FIFOs - in csim; a known risk for cosim: the
#     testbench sees WideWord as the C-simulation struct of 64 bytes, the RTL
#     wrapper as ap_uint<512> - same bytes, other type; if the wrapper does
#     not compile, that is the first thing to fix);
#  5. hw_emu: make TARGET=hw_emu (xclbin + emconfig), then the daemon on the
#     tiny images with the FPGA backend under XCL_EMULATION_MODE=hw_emu and a
#     CPU-backend daemon, one batch from each with the same seed, compared.
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
OUT="${1:-$PWD/vitis_hour_$(date +%Y%m%d_%H%M%S)}"
PART="${PART:-xcku15p-ffva1156-2-e}"
STEPS="${STEPS:-1 2 3 4 5}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

command -v vitis_hls > /dev/null || { echo "vitis_hls not on PATH (source Vitis 2021.2 settings64.sh)"; exit 1; }
vitis_hls -version 2>&1 | grep -q "v2021.2" || note "WARNING: not Vitis HLS 2021.2: $(vitis_hls -version 2>&1 | head -1)"

MHZ="$(sed -n 's/^KERNEL_MHZ *:= *//p' "$HERE/Makefile")"
PERIOD="$(awk -v m="$MHZ" 'BEGIN { printf "%.3f", 1000 / m }')"
CFLAGS="$(make -s -C "$HERE" flags) -I$HERE/include"
SRCS="$(make -s -C "$HERE" srcs)"
SRC_PATHS=""
for s in $SRCS; do SRC_PATHS="$SRC_PATHS $HERE/$s"; done
# The dataflow processes (dataflow.h), each synthesised alone first: a small
# top finishes in minutes and its messages are about that process only.
PROCESSES="ReadControl BurstRead ParseHeader Destuff HuffmanDecode AssembleBlocks Idct
  McuRowReceive RasterEmit UpsampleColor CropResize ResizeMath PackOutput PackWords BurstWrite
  WriteStatus"

# csynth TOP DIR [extra tcl]
csynth() {
  local top="$1" dir="$2" extra="${3:-}"
  mkdir -p "$dir"
  cat > "$dir/run.tcl" <<TCL
open_project -reset proj_$top
set_top $top
foreach f {$SRC_PATHS} { add_files \$f -cflags "$CFLAGS" }
$extra
open_solution -reset sol -flow_target vitis
set_part $PART
create_clock -period $PERIOD -name default
source $HERE/hls_config.tcl
csynth_design
exit
TCL
  (cd "$dir" && timeout 3600 vitis_hls -f run.tcl > csynth.log 2>&1)
}

if [[ " $STEPS " == *" 1 "* ]]; then
  note "== 1. csynth per process ($PART, $MHZ MHz, period $PERIOD ns)"
  for p in $PROCESSES; do
    if csynth "$p" "$OUT/1_process/$p"; then note "  $p: csynth OK"; else note "  $p: csynth FAILED (see $OUT/1_process/$p/csynth.log)"; fi
  done
fi

if [[ " $STEPS " == *" 2 "* ]]; then
  note "== 2. messages (all logs so far) -> $OUT/2_messages.txt"
  # II and schedule: HLS 200-880 (II violation), 200-885 (memory ports),
  # 200-1470 (pipelining result: target/final II, depth); unrolling: 214-186,
  # 200-489, 'unroll'; dataflow: 200-786 / 'bypass' / 'strict'; and any ERROR.
  grep -rn -E "II Violation|HLS 200-880|HLS 200-885|limited memory ports|Pipelining result|Final II|HLS 200-1470|[Uu]nroll|HLS 214-186|HLS 200-489|bypass|strict|HLS 200-786|DATAFLOW|ERROR" \
    "$OUT" --include=csynth.log > "$OUT/2_messages.txt" 2>/dev/null
  note "  $(grep -c -E 'II Violation|HLS 200-880|limited memory ports' "$OUT/2_messages.txt") II violation / port messages, $(grep -c 'ERROR' "$OUT/2_messages.txt") errors"
  # Achieved II / depth per pipelined loop vs the timed model's table.
  {
    echo "loop (log) | achieved | timed model table (loop_timing.cc: {ii opt, exp}, {depth opt, exp})"
    grep -rh -E "Pipelining result" "$OUT" --include=csynth.log | while read -r line; do
      loop="$(echo "$line" | sed -n "s/.*loop '\([^']*\)'.*/\1/p")"
      ach="$(echo "$line" | sed -n 's/.*\(Target II = [0-9]*, Final II = [0-9]*, Depth = [0-9]*\).*/\1/p')"
      label="${loop##*_}"
      want="$(grep -E "\"[A-Za-z]+\.$label\"" "$HERE/host/loop_timing.cc" | head -1 | sed 's/^ *//')"
      echo "$loop | $ach | ${want:-no table entry for label $label}"
    done
  } > "$OUT/2_ii_vs_table.txt"
  note "  achieved II/depth next to the table: $OUT/2_ii_vs_table.txt"
fi

if [[ " $STEPS " == *" 3 "* ]]; then
  note "== 3. csynth of the whole kernel"
  if csynth nearprep_preprocess "$OUT/3_kernel"; then
    note "  nearprep_preprocess: csynth OK"
    rpt="$(find "$OUT/3_kernel" -name 'nearprep_preprocess_csynth.rpt' | head -1)"
    [ -n "$rpt" ] && grep -A12 -E "== Utilization Estimates|Total" "$rpt" | head -30 >> "$SUMMARY"
    note "  compare: kernel_checks.py structure estimates 48 URAM, ~350 BRAM36 (tests/unit/fpga)"
  else
    note "  nearprep_preprocess: csynth FAILED (see $OUT/3_kernel/csynth.log)"
  fi
fi

if [[ " $STEPS " == *" 4 "* ]]; then
  note "== 4. C/RTL co-simulation on $HERE/cosim_images"
  d="$OUT/4_cosim"
  mkdir -p "$d/images"
  cp "$HERE"/cosim_images/* "$d/images/"
  cat > "$d/run.tcl" <<TCL
open_project -reset proj_cosim
set_top nearprep_preprocess
foreach f {$SRC_PATHS} { add_files \$f -cflags "$CFLAGS" }
add_files -tb $HERE/host/cosim_tb.cc -cflags "$CFLAGS -I$HERE/host"
add_files -tb $HERE/host/hls_sim.cc -cflags "$CFLAGS -I$HERE/host"
add_files -tb $HERE/host/loop_timing.cc -cflags "$CFLAGS -I$HERE/host"
open_solution -reset sol -flow_target vitis
set_part $PART
create_clock -period $PERIOD -name default
source $HERE/hls_config.tcl
csim_design -ldflags {-pthread} -argv "write $d/images"
csynth_design
cosim_design -ldflags {-pthread} -argv "check $d/images" -trace_level none
exit
TCL
  if (cd "$d" && timeout 7200 vitis_hls -f run.tcl > cosim.log 2>&1) && grep -q "RTL output == C simulation output" "$d/cosim.log"; then
    note "  cosim: RTL == C simulation"
  else
    note "  cosim: FAILED or mismatch (see $d/cosim.log)"
  fi
fi

if [[ " $STEPS " == *" 5 "* ]]; then
  note "== 5. hw_emu"
  d="$OUT/5_hw_emu"
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
fi

note "summary: $SUMMARY"
