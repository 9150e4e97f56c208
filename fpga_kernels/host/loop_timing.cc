// loop_timing.cc: THE reviewed timing table of the timed C simulation
// (hls_sim.h, bench/fpga/timed_model.cc). One entry per loop the kernel
// brackets with NEARPREP_SIM_LOOP and per sequential event
// (NEARPREP_SIM_EVENT); a bracketed id missing here aborts the simulation.
//
// Columns: id, II {optimistic, expected}, pipeline depth {optimistic,
// expected}, the reason. For an event the "II" is the cycles per unit and the
// depth is unused. Values are a reading of the sources as they stand under
// Vitis HLS 2021.2 rules at 250 MHz, NOT synthesis reports (nothing here has
// been synthesised): "optimistic" is the best a synthesis run could
// plausibly give for the code as written, "expected" what a reviewer
// expects. Change an entry together with the code it describes, and say why.
#include <vector>

#include "hls_sim.h"

namespace hls_sim {

std::vector<LoopTiming>& MutableTimingTable() {
  static std::vector<LoopTiming>* table = new std::vector<LoopTiming>{
      // --- DDR (m_axi, one DDR4 bank; hls_config.tcl -m_axi_latency 64) ---
      {"DDR.read_latency", {64, 150}, {0, 0},
       "cycles from a read burst's request to its first beat: 64 = the m_axi_latency the config "
       "declares, 150 = ~600 ns DDR4 + interconnect at 250 MHz as measured on Alveo-class "
       "boards; paid per burst (the burst and split loops are sequential in BurstRead, so the "
       "next request is not issued early). Override: timed_model --ddr-latency"},
      {"DDR.write_burst", {2, 8}, {0, 0},
       "per write burst: address handshake and the write-response bookkeeping with 8 "
       "outstanding writes (posted; the latency itself is hidden)"},
      // --- ReadControl ---
      {"ReadControl.cfg_copy", {1, 1}, {3, 3}, "24 words, one 32-bit m_axi beat per cycle"},
      {"ReadControl.desc_copy", {1, 1}, {3, 3}, "16 words per image, one beat per cycle"},
      // --- BurstRead ---
      {"BurstRead.burst", {1, 1}, {3, 4}, "one 512-bit beat per cycle into a 64-word buffer"},
      {"BurstRead.split", {1, 1}, {2, 3},
       "one byte out per cycle: a byte select of a 512-bit register, no recurrence"},
      // --- ParseHeader ---
      {"ParseHeader.segment", {1, 1}, {2, 3}, "one byte in, one write into seg[] per cycle"},
      {"ParseHeader.parse_segment", {10, 30}, {0, 0},
       "per kept or skipped segment: the marker FSM steps and ParseSegment's fixed work"},
      {"ParseHeader.parse_segment_byte", {1, 2}, {0, 0},
       "per byte of a kept segment: ParseSegment's loops over DQT/DHT/SOF/SOS bytes (jpeg_l1.cc "
       "walks the bytes one per step; the DHT count/value checks read two arrays)"},
      {"ParseHeader.ifast_multipliers", {64, 70}, {0, 0},
       "IfastMultipliers: 64 multiply-shift steps per component"},
      {"ParseHeader.table_bytes", {1, 1}, {2, 3}, "one table byte per cycle into the FIFO"},
      {"ParseHeader.quant_values", {1, 1}, {2, 2}, "one multiplier per cycle into the FIFO"},
      {"ParseHeader.forward", {1, 1}, {2, 2}, "one scan byte per cycle, FIFO to FIFO"},
      {"ParseHeader.drain", {1, 1}, {2, 2}, "one byte read per cycle (refused image)"},
      // --- Destuff ---
      {"Destuff.bytes", {1, 1}, {2, 3}, "2-state FSM on one byte per cycle"},
      // --- HuffmanDecode ---
      {"HuffmanDecode.read_bits", {1, 1}, {2, 2}, "16 counts, one per cycle"},
      {"HuffmanDecode.read_vals", {1, 1}, {2, 2}, "256 values, one per cycle"},
      {"HuffmanDecode.lengths", {1, 1}, {3, 4},
       "code/k recurrence of one add per cycle (fits II 1)"},
      {"HuffmanDecode.lookahead", {1, 5}, {6, 8},
       "unrolled 9-length scan reads maxcode[], valoffset[] and vals[] 9 times each per "
       "iteration; the arrays of HuffLookup are not partitioned (2 ports each): "
       "ceil(9/2) = 5 expected; 1 only if HLS maps the small arrays to registers"},
      {"HuffmanDecode.symbols", {3, 4}, {8, 12},
       "the review (issue 24): the 9-bit table read sits inside the bit-count recurrence "
       "(nbits -= len + size feeds the next window), and the long-code path reads the "
       "unpartitioned maxcode[]/valoffset[] 7 times each: II 3-4"},
      // --- AssembleBlocks ---
      {"AssembleBlocks.tokens", {1, 1}, {3, 4},
       "buf[] completely partitioned: one indexed write (a mux) and the 64-bit mask per cycle"},
      // --- Idct ---
      {"Idct.load_quant", {1, 1}, {2, 2}, "one multiplier per cycle into qmul (dim 2 partitioned)"},
      {"Idct.passes", {1, 4}, {20, 28},
       "column pass reads 8 coefficients of `Block cur` per step; cur has no ARRAY_PARTITION: "
       "8 reads / 2 ports = 4 expected; 1 if HLS keeps the struct read from the stream in "
       "registers. Depth: dequantising multiply + two butterfly passes"},
      // --- McuRowReceive / RasterEmit ---
      {"McuRowReceive.receive", {4, 4}, {3, 4},
       "8 byte writes per cycle into one row of the MCU-row block (uint8_t [32][16400], "
       "2 ports): II 4 (the review)"},
      {"RasterEmit.emit_row", {3, 3}, {4, 5},
       "luma, row-15 save and 4 chroma reads of the same block per cycle (6 reads, 2 ports): "
       "II 3 (the review)"},
      // --- UpsampleColor ---
      {"UpsampleColor.pixels", {1, 1}, {6, 8},
       "colsum window in registers, fixed-point colour conversion (3 multiplies)"},
      // --- CropResize ---
      {"CropResize.column_taps", {1, 1}, {30, 40},
       "MakeTap: float multiply/add, floor/ceil, per output column"},
      {"CropResize.row_taps", {1, 1}, {30, 40}, "MakeTap per output row"},
      {"CropResize.fused", {1, 3}, {150, 250},
       "4 reads + 1 write of the Rgb line buffers per cycle; the struct lines are split per "
       "byte: either II 3 or 36 arrays x 4 URAM = 144 URAM (> the KU15P's 128), so II 1 only "
       "with a resource violation (the review). Depth: u8->float, bilinear (2 levels of "
       "sub/mul/add), brightness, saturation (HSV round trip with divides), clip, normalise "
       "(divide): ~150-250 cycles, paid on every entry (one per source row)"},
      // --- PackOutput ---
      {"PackOutput.nhwc", {1, 1}, {4, 6}, "one pixel per cycle, pack 3 elements"},
      {"PackOutput.nchw_in", {1, 1}, {2, 2}, "one pixel per cycle into row[]"},
      {"PackOutput.nchw_out", {1, 2}, {4, 6},
       "3 reads of row[] (unpartitioned, 2 ports) per cycle: II 2 (the review)"},
      // --- BurstWrite ---
      {"BurstWrite.chunks", {14, 26}, {0, 0},
       "NOT pipelined as written (the review): FlushBurst's variable-bound loop is called "
       "inside the loop, so HLS builds no pipeline; each iteration runs sequentially: the "
       "12-byte inner loop (one byte per cycle, or two when the word-complete branch is "
       "scheduled) plus the read and the PushWord test"},
      {"BurstWrite.flush", {1, 1}, {2, 3}, "one 512-bit beat per cycle"},
      // --- WriteStatus ---
      {"WriteStatus.record", {1, 1}, {3, 3}, "8 status words, one beat per cycle"},
  };
  return *table;
}

}  // namespace hls_sim
