#!/usr/bin/env bash
# The first paid Vitis hour (issue 24): what to run first, in order, on a
# machine with Vitis 2021.2 and the SmartSSD platform, unchanged. NOT RUN in
# this workplace (no Vitis here): every step is written from UG1399 / UG1393
# 2021.2 and unverified until someone runs it.
#
#   fpga_kernels/first_vitis_hour.sh [OUTDIR]      (default: ./vitis_hour_<date>)
#   STEPS="1 2" PART=xcku15p-ffva1156-2LV-e          (env overrides; default STEPS="1 2")
#
# Steps (each logs to OUTDIR/<step>/..., goes on after a failure, and the
# summary at the end says what passed). Tool times are estimates for a
# workstation-class machine (unverified: nothing here has been run):
#  1. (default; ~30-60 min for the three) csynth of the three processes the
#     timing table is least sure of, each alone through its extern "C" top
#     (src/synth_tops.cc): synth_HuffmanDecode (the symbols loop: expected
#     II 2 in the table), synth_PackWords (the 512-bit shift-and-mask
#     insert) and synth_CropResize (URAM lines, latency 2), on the SmartSSD's
#     part at the Makefile's KERNEL_MHZ, with hls_config.tcl (config_dataflow
#     -strict_mode warning: errors would hide the other messages);
#  2. (default; seconds) the messages that matter, grepped from every log: II
#     violations, memory port limits, unrolling, dataflow/bypass/strict-mode
#     warnings; every pipelined loop's achieved II and depth next to the timed
#     model's table (fpga_kernels/host/loop_timing.cc); and
#     tests/unit/fpga/kernel_checks.py csynth on every csynth.xml: it fails
#     where the table is more optimistic than a report - update the table
#     (and the docs' figures) with what you see;
#  1b. (~1-2 h) the other processes alone, same way (synth_McuRows is
#     McuRowReceive + RasterEmit as one DATAFLOW top: their stream-of-blocks
#     ports cannot be a top's);
#  3. (~1-2 h) csynth of the whole kernel (nearprep_preprocess), resources
#     from its report next to kernel_checks.py's estimate (48 URAM, ~350
#     BRAM36);
#  4. (~1-3 h) C/RTL co-simulation of the whole kernel on two tiny JPEGs
#     (fpga_kernels/cosim_images: 16x16 4:2:0 and 8x8 gray): csim writes the
#     golden output, cosim must reproduce it byte for byte
#     (fpga_kernels/host/cosim_tb.cc; it runs the kernel's own C-simulation
#     model - threads, bounded FIFOs - in csim; a known risk for cosim: the
#     testbench sees WideWord as the C-simulation struct of 64 bytes, the RTL
#     wrapper as ap_uint<512> - same bytes, other type; if the wrapper does
#     not compile, that is the first thing to fix).
# The v++ link (hw_emu xclbin, the hw_emu batch against the CPU backend, the
# hw bitstream) is a separate script: fpga_kernels/full_link.sh (hours).
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
OUT="${1:-$PWD/vitis_hour_$(date +%Y%m%d_%H%M%S)}"
# The SmartSSD platform's part: the low-voltage -2LV speed grade (slower
# than -2 at the same clock).
PART="${PART:-xcku15p-ffva1156-2LV-e}"
STEPS="${STEPS:-1 2}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

command -v vitis_hls > /dev/null || { echo "vitis_hls not on PATH (source Vitis 2021.2 settings64.sh)"; exit 1; }
vitis_hls -version 2>&1 | grep -q "v2021.2" || note "WARNING: not Vitis HLS 2021.2: $(vitis_hls -version 2>&1 | head -1)"

MHZ="$(sed -n 's/^KERNEL_MHZ *[?:]*= *//p' "$HERE/Makefile")"
PERIOD="$(awk -v m="$MHZ" 'BEGIN { printf "%.3f", 1000 / m }')"
CFLAGS="$(make -s -C "$HERE" flags) -I$HERE/include"
SRCS="$(make -s -C "$HERE" srcs)"
SRC_PATHS=""
for s in $SRCS; do SRC_PATHS="$SRC_PATHS $HERE/$s"; done
# The per-process tops (extern "C", src/synth_tops.cc) are added to the
# per-process runs only.
TOP_PATHS=""
for s in $(make -s -C "$HERE" synth-tops); do TOP_PATHS="$TOP_PATHS $HERE/$s"; done
# Step 1: the three processes the table is least sure of (tens of minutes);
# step 1b: the others (McuRowReceive + RasterEmit as one top).
FIRST_TOPS="synth_HuffmanDecode synth_PackWords synth_CropResize"
OTHER_TOPS="synth_ReadControl synth_BurstRead synth_ParseHeader synth_Destuff synth_AssembleBlocks
  synth_Idct synth_McuRows synth_UpsampleColor synth_ResizeMath synth_PackOutput synth_BurstWrite
  synth_WriteStatus"

# csynth TOP DIR [extra source paths]
csynth() {
  local top="$1" dir="$2" extra="${3:-}"
  mkdir -p "$dir"
  cat > "$dir/run.tcl" <<TCL
open_project -reset proj_$top
set_top $top
foreach f {$SRC_PATHS $extra} { add_files \$f -cflags "$CFLAGS" }
open_solution -reset sol -flow_target vitis
set_part $PART
create_clock -period $PERIOD -name default
source $HERE/hls_config.tcl
csynth_design
exit
TCL
  (cd "$dir" && timeout 3600 vitis_hls -f run.tcl > csynth.log 2>&1)
}

per_process() {  # TOPS
  for p in $1; do
    if csynth "$p" "$OUT/1_process/$p" "$TOP_PATHS"; then note "  $p: csynth OK"; else note "  $p: csynth FAILED (see $OUT/1_process/$p/csynth.log)"; fi
  done
}

if [[ " $STEPS " == *" 1 "* ]]; then
  note "== 1. csynth of $FIRST_TOPS ($PART, $MHZ MHz, period $PERIOD ns; ~30-60 min)"
  per_process "$FIRST_TOPS"
fi

if [[ " $STEPS " == *" 1b "* ]]; then
  note "== 1b. csynth of the other processes (~1-2 h)"
  per_process "$OTHER_TOPS"
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
  # The reports against the table (fails where the table is more optimistic).
  mapfile -t reports < <(find "$OUT" -path '*syn/report/*_csynth.xml' | sort)
  if [ "${#reports[@]}" -gt 0 ]; then
    if python3 "$ROOT/tests/unit/fpga/kernel_checks.py" csynth --makefile "$HERE/Makefile" \
         "${reports[@]}" > "$OUT/2_csynth_vs_table.txt" 2>&1; then
      note "  csynth reports vs table: the table is not more optimistic ($OUT/2_csynth_vs_table.txt)"
    else
      note "  csynth reports vs table: FINDINGS - update loop_timing.cc ($OUT/2_csynth_vs_table.txt)"
    fi
  fi
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

note "summary: $SUMMARY"
