// Dataflow processes of entropy decoding: HuffmanDecode (scan tokens ->
// coefficient tokens, one symbol per iteration of one flat loop; a code
// longer than 9 bits takes two) and
// AssembleBlocks (coefficient tokens -> 8x8 blocks). See dataflow.h.
#include <cstdint>

#include "dataflow.h"
#include "jpeg_l1.h"
#include "nearprep_kernel_abi.h"

namespace nearprep_fpga {
namespace {

// Decode tables of the six Huffman tables of an image (table t = 2 x
// component + 0 for DC, 1 for AC), one memory per table (dim 1 partitioned):
// the decoder indexes them by table number, never through a pointer into a
// run-time-chosen partition.
//  - look[t][] (LUTRAM) is indexed by the next 9 bits: an entry (below) of
//    the code those bits start with; 0 when the code is longer than 9 bits.
//  - fast[t][] (registers: completely partitioned) is indexed by the next 4
//    bits: the entry of a code of at most 4 bits, else 0. The symbols loop
//    copies the fast entries of the table in use into 16 registers (cur[])
//    when the table changes, so its one-cycle path reads a 16:1 mux.
//  Entry: (total << 16) | (code length << 8) | symbol, total = code length +
//  value length (DC: the symbol, <= 15 by CheckHuffTable; AC: its low
//  nibble), so one read gives the bits the symbol consumes.
//  - maxcode/valoffset resolve 10..16-bit codes (registers: the seven
//    compares read them in parallel); vals[t][] (BRAM) is read once per long
//    code, in the iteration after the compares.
constexpr int kTables = 6;
constexpr int kFastBits = 4;
constexpr int kFast = 1 << kFastBits;

inline uint32_t Entry(uint32_t len, uint32_t sym, bool dc) {
  const uint32_t size = dc ? sym : (sym & 15);
  return ((len + size) << 16) | (len << 8) | sym;
}

// Reads table t (16 counts, 256 values) and builds its lookups. The first
// l with code(l) <= maxcode[l] is the code length, as in jdhuff.c's decoder;
// for the validated tables that ParseHeader sends this is the canonical code.
// INLINE: t indexes the partitioned arrays of the caller's process.
inline void ReadTable(hls::stream<uint8_t, kTableDepth>& tables, int t, bool dc,
                      uint32_t look[kTables][512], uint32_t fast[kTables][kFast],
                      int32_t maxcode[kTables][17],
                      int32_t valoffset[kTables][17], uint8_t vals[kTables][256]) {
#pragma HLS INLINE
  uint8_t bits[17];
#pragma HLS ARRAY_PARTITION variable = bits complete
  bits[0] = 0;
  NEARPREP_SIM_LOOP("HuffmanDecode.read_bits")
read_bits:
  for (int l = 1; l <= 16; ++l) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 16 max = 16
    NEARPREP_SIM_ITER();
    bits[l] = tables.read();
  }
  NEARPREP_SIM_LOOP("HuffmanDecode.read_vals")
read_vals:
  for (int k = 0; k < 256; ++k) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 256 max = 256
    NEARPREP_SIM_ITER();
    vals[t][k] = tables.read();
  }
  int32_t code = 0;
  int k = 0;
  maxcode[t][0] = -1;
  valoffset[t][0] = 0;
  NEARPREP_SIM_LOOP("HuffmanDecode.lengths")
lengths:
  for (int l = 1; l <= 16; ++l) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 16 max = 16
    NEARPREP_SIM_ITER();
    valoffset[t][l] = k - code;
    code += bits[l];
    k += bits[l];
    maxcode[t][l] = bits[l] ? code - 1 : -1;
    code <<= 1;
  }
  // Per entry: the shortest matching length by nine parallel compares on
  // the registers, then ONE vals read.
  NEARPREP_SIM_LOOP("HuffmanDecode.lookahead")
lookahead:
  for (int i = 0; i < 512; ++i) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 512 max = 512
    NEARPREP_SIM_ITER();
    int sel = 0, idx = 0;
    for (int l = 9; l >= 1; --l) {  // shortest length wins: checked last
#pragma HLS UNROLL
      const int32_t c = i >> (9 - l);
      if (c <= maxcode[t][l]) {
        sel = l;
        idx = (c + valoffset[t][l]) & 255;
      }
    }
    uint32_t e = 0;
    if (sel != 0) e = Entry(static_cast<uint32_t>(sel), vals[t][idx], dc);
    look[t][i] = e;
    // the first index of each run of 32 is the 4-bit prefix i >> 5
    if ((i & 31) == 0) fast[t][i >> 5] = sel != 0 && sel <= kFastBits ? e : 0u;
  }
}

inline int Extend(uint32_t v, int s) {
  return v < (1u << (s - 1)) ? static_cast<int>(v) - (1 << s) + 1 : static_cast<int>(v);
}

enum Phase { kMcuStart, kDecode, kRestart, kFinal, kPad, kDrain, kDone };

}  // namespace

void HuffmanDecode(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                   hls::stream<uint8_t, kTableDepth>& tables,
                   hls::stream<ScanToken, kTokenDepth>& tokens,
                   hls::stream<ImageJob, kJobDepth>& job_out,
                   hls::stream<CoefToken, kTokenDepth>& coefs,
                   hls::stream<StageStatus, kStatusDepth>& status) {
  uint32_t look[kTables][512];
  uint32_t fast[kTables][kFast];
  int32_t maxcode[kTables][17];    // largest code of length l, -1 if none
  int32_t valoffset[kTables][17];  // vals index = code + valoffset[l]
  uint8_t vals[kTables][256];
#pragma HLS ARRAY_PARTITION variable = look complete dim = 1
#pragma HLS BIND_STORAGE variable = look type = ram_1p impl = lutram
#pragma HLS ARRAY_PARTITION variable = fast complete dim = 0
#pragma HLS ARRAY_PARTITION variable = maxcode complete dim = 0
#pragma HLS ARRAY_PARTITION variable = valoffset complete dim = 0
#pragma HLS ARRAY_PARTITION variable = vals complete dim = 1
#pragma HLS BIND_STORAGE variable = vals type = ram_1p impl = lutram
images:
  for (uint32_t i = 0; i < num_images; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32
    ImageJob j;
    if (!StartImage(job_in, job_out, &j)) continue;
  load_tables:
    for (int t = 0; t < 2 * j.ncomp; ++t) {
#pragma HLS LOOP_TRIPCOUNT min = 2 max = 6
      ReadTable(tables, t, (t & 1) == 0, look, fast, maxcode, valoffset, vals);
    }
    // Components of the blocks of one MCU, in scan order, 2 bits each (first
    // block lowest): the symbols loop shifts them out of a register, one
    // per block (no indexed select of the block's component).
    uint32_t mcu_comps = 0;
    int per_mcu = 0;
  mcu_layout:
    for (int c = 0; c < j.ncomp; ++c) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 3 avg = 3
    mcu_layout_blocks:
      for (int b = 0; b < j.comp_h[c] * j.comp_v[c]; ++b) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 4 avg = 2
        mcu_comps |= static_cast<uint32_t>(c) << (2 * per_mcu++);
      }
    }
    const uint32_t total_mcus = static_cast<uint32_t>(j.mcus_x) * static_cast<uint32_t>(j.mcus_y);

    // The bit window: the next nbits bits of the scan at the TOP of win
    // (MSB first), zeros below them.
    uint64_t win = 0;
    int nbits = 0;
    int fake = 0;       // zero bits supplied after a marker, at the bottom
    bool held = false;  // a marker (or the end) stopped the data
    ScanToken held_tok = kTokEnd;
    bool ended = false;  // kTokEnd was read
    int pred[3] = {0, 0, 0};
#pragma HLS ARRAY_PARTITION variable = pred complete
    int k = 0;                             // next zig-zag position of the block (0: DC)
    int comp = static_cast<int>(mcu_comps & 3);  // the current block's component
    uint32_t comp_sr = mcu_comps >> 2;     // the MCU's later blocks' components
    int blocks_left = per_mcu - 1;         // blocks of the MCU after this one
    uint32_t mcu = 0, blocks_out = 0;
    int restarts_left = j.restart_interval;
    int next_rst = 0;
    uint32_t result = kStatusOk;
    uint32_t iterations = 0;
    // The fast entries of the table in use (table 2 x comp + (k != 0)),
    // reloaded in the iteration after the table changes (after a DC symbol,
    // after a block's last symbol): that iteration decodes nothing.
    uint32_t cur[kFast];
#pragma HLS ARRAY_PARTITION variable = cur complete
    bool reload = true;
    // A symbol whose code is longer than 4 bits takes more iterations:
    // slow = 0: none; the iteration that misses cur[] reads look[] (a 5-9
    // bit code: its entry goes to pend, slow = 1) or compares the next 16
    // bits with maxcode[] (10-16 bits: slow = 2, the vals[] index kept);
    // slow = 2: vals[] read, the entry built into pend (slow = 1); slow = 1:
    // pend is consumed like a fast entry.
    int slow = 0;
    uint32_t pend = 0;
    int long_len = 0, long_idx = 0;
    Phase phase = total_mcus == 0 ? kFinal : kMcuStart;
  NEARPREP_SIM_LOOP("HuffmanDecode.symbols")
  symbols:
    while (phase != kDone) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1000 max = 400000
      NEARPREP_SIM_ITER();
      // Loop-carried path (issue 33): win -> cur[win >> 60] (a 16:1 mux of
      // registers) -> the entry's total length -> win << total (a 64-bit
      // barrel shifter) -> the select between that and the slow path's
      // shift -> win: 3 dependent operators. The byte appended this
      // iteration is ORed into win BEFORE the shift, at a position from
      // nbits (a register), off that path; nbits is updated as the select
      // of two precomputed sums (nbits - total, nbits + 8 - total); the
      // decision to decode reads registers only (nbits >= 32, phase, slow,
      // reload); the component is a shift register; a long code's value
      // (vals[], LUTRAM) is read in its own iteration into pend, so no
      // memory read feeds the bit count.
      ++iterations;
      const Phase phase0 = phase;  // the phase steps below read the iteration's first phase
      const bool decoding = phase == kDecode;
      const bool need_bits = decoding || phase == kMcuStart;
      const bool need_marker = (phase == kRestart || phase == kFinal) && !held;
      const bool room = nbits <= 56;
      // Input: at most one token per iteration.
      bool fill = false;     // 8 more bits: a data byte, or zeros after a marker
      uint32_t byte = 0;
      if (phase == kDrain) {
        if (!ended && tokens.read() == kTokEnd) ended = true;  // rest of the image
      } else if (need_bits && room && held) {
        fill = true;  // libjpeg supplies zeros after a marker
        fake += 8;
      } else if ((need_bits && room) || need_marker) {
        const ScanToken t = tokens.read();
        if ((t & 0x300) == kTokData && need_bits) {
          fill = true;
          byte = t & 0xFF;
        } else if ((t & 0x300) == kTokData) {
          result = kStatusCorrupt;  // data bytes before RSTn / EOI
          phase = kPad;
        } else {
          held = true;
          held_tok = t;
          ended = t == kTokEnd;
        }
      }
      // The symbol step (registers only decide whether it runs).
      const bool step = decoding && !reload && nbits >= 32;
      const bool fast_case = step && slow == 0;
      const bool pend_case = step && slow == 1;
      const int tsel = 2 * comp + (k == 0 ? 0 : 1);
      const uint32_t fe = cur[win >> 60];
      const uint32_t ce = pend_case ? pend : fe;  // the entry consumed, if any
      const bool consume = pend_case || (fast_case && fe != 0);
      const int fast_total = static_cast<int>(fe >> 16);
      const int pend_total = pend_case ? static_cast<int>(pend >> 16) : 0;
      const uint64_t in = win | (fill ? static_cast<uint64_t>(byte) << (56 - nbits) : 0);
      const uint64_t next_win = fast_case ? in << fast_total : in << pend_total;
      const int sh = fast_case ? fast_total : pend_total;
      const int next_nbits = fill ? nbits + 8 - sh : nbits - sh;
      bool restart_reset = false;
      if (fast_case && fe == 0) {
        // A code longer than 4 bits: its look[] entry, or the long-code search.
        const uint32_t e9 = look[tsel][win >> 55];
        if (e9 != 0) {
          pend = e9;
          slow = 1;
        } else {
          const uint32_t bits16 = static_cast<uint32_t>(win >> 48);
          int sel = 0, idx = 0;
          for (int l = 16; l >= 10; --l) {  // shortest length wins: checked last
            const int32_t code = static_cast<int32_t>(bits16 >> (16 - l));
            if (code <= maxcode[tsel][l]) {
              sel = l;
              idx = code + valoffset[tsel][l];
            }
          }
          if (sel != 0) {
            long_len = sel;
            long_idx = idx;
            slow = 2;
          } else {
            result = kStatusCorrupt;  // no such code (JWRN_HUFF_BAD_CODE)
            phase = kPad;
          }
        }
      } else if (step && slow == 2) {
        if (long_idx >= 0 && long_idx <= 255) {
          pend = Entry(static_cast<uint32_t>(long_len), vals[tsel][long_idx], k == 0);
          slow = 1;
        } else {
          result = kStatusCorrupt;  // no such code
          phase = kPad;
        }
      } else if (consume) {
        slow = 0;
        const int sym = static_cast<int>(ce & 0xFF);
        const int len = static_cast<int>((ce >> 8) & 31);
        const int size = k == 0 ? sym : (sym & 15);
        const uint32_t raw =
            size == 0 ? 0u : static_cast<uint32_t>((win << len) >> (64 - size));
        if (next_nbits < fake) {
          result = kStatusCorrupt;  // consumed supplied zeros: overrun
          phase = kPad;
        } else if (k == 0) {
          const int64_t next =
              static_cast<int64_t>(pred[comp]) + (size != 0 ? Extend(raw, size) : 0);
          if (next > INT32_MAX || next < INT32_MIN) {
            result = kStatusCorrupt;  // libjpeg-turbo: JERR_BAD_DCT_COEF
            phase = kPad;
          } else {
            pred[comp] = static_cast<int>(next);
            coefs.write(CoefToken{static_cast<int16_t>(pred[comp]), 0,
                                  static_cast<uint8_t>(comp), true, false});
            k = 1;
            reload = true;  // the AC table next
          }
        } else {
          const int run = sym >> 4;
          bool last = false;
          if (size != 0) {
            const int pos = k + run;
            coefs.write(CoefToken{static_cast<int16_t>(Extend(raw, size)),
                                  kNatural[pos < 79 ? pos : 79], static_cast<uint8_t>(comp),
                                  true, pos + 1 >= 64});
            k = pos + 1;
            last = k >= 64;
          } else if (run == 15) {  // ZRL
            k += 16;
            last = k >= 64;
            if (last) coefs.write(CoefToken{0, 0, static_cast<uint8_t>(comp), false, true});
          } else {  // EOB
            coefs.write(CoefToken{0, 0, static_cast<uint8_t>(comp), false, true});
            last = true;
          }
          if (last) {
            ++blocks_out;
            k = 0;
            reload = true;  // the next block's DC table
            if (blocks_left == 0) {
              comp = static_cast<int>(mcu_comps & 3);
              comp_sr = mcu_comps >> 2;
              blocks_left = per_mcu - 1;
              phase = ++mcu == total_mcus ? kFinal : kMcuStart;
            } else {
              comp = static_cast<int>(comp_sr & 3);
              comp_sr >>= 2;
              --blocks_left;
            }
          }
        }
      } else if (reload) {
        for (int q = 0; q < kFast; ++q) {
#pragma HLS UNROLL
          cur[q] = fast[tsel][q];
        }
        reload = false;
      }
      if (phase0 == kMcuStart) {
        if (j.restart_interval != 0 && restarts_left == 0) {
          phase = kRestart;
        } else {
          if (j.restart_interval != 0) --restarts_left;
          phase = kDecode;
        }
      } else if (phase0 == kRestart) {
        // Only padding of the current byte may be left, then RSTn.
        if (nbits - fake >= 8) {
          result = kStatusCorrupt;
          phase = kPad;
        } else if (held) {
          if (held_tok != (kTokMarker | (0xD0 + next_rst))) {
            result = kStatusCorrupt;
            phase = kPad;
          } else {
            restart_reset = true;
            fake = 0;
            held = false;
            next_rst = (next_rst + 1) & 7;
            restarts_left = j.restart_interval - 1;
            pred[0] = pred[1] = pred[2] = 0;
            phase = kDecode;
          }
        }
      } else if (phase0 == kFinal) {
        if (nbits - fake >= 8) {
          result = kStatusCorrupt;  // extraneous bytes after the last MCU
          phase = kPad;
        } else if (held) {
          if (held_tok == (kTokMarker | 0xD9)) {
            result = kStatusOk;
          } else if (held_tok == (kTokMarker | 0xDA)) {
            result = kStatusUnsupported;  // another scan follows
          } else {
            result = kStatusCorrupt;
          }
          phase = kPad;
        }
      } else if (phase0 == kPad) {
        // Every block the header promised, so the later stages finish the
        // image; a block cut short by an error is closed by the first one.
        if (blocks_out < j.blocks) {
          coefs.write(CoefToken{0, 0, 0, false, true});
          ++blocks_out;
        } else {
          phase = kDrain;
        }
      }
      win = restart_reset ? 0 : next_win;
      nbits = restart_reset ? 0 : next_nbits;
      if (phase == kDrain && ended) phase = kDone;
    }
    status.write(StageStatus{result, iterations});
  }
}

void AssembleBlocks(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                    hls::stream<CoefToken, kTokenDepth>& coefs,
                    hls::stream<ImageJob, kJobDepth>& job_out,
                    hls::stream<Block, kBlockDepth>& blocks) {
  int16_t buf[64];
#pragma HLS ARRAY_PARTITION variable = buf complete
images:
  for (uint32_t i = 0; i < num_images; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32
    ImageJob j;
    if (!StartImage(job_in, job_out, &j)) continue;
    // One flat loop over the image's tokens; a block goes out (one wide
    // write) with its last token. A mask of the coefficients set replaces a
    // clearing pass per block.
    uint64_t valid = 0;
    uint8_t comp = 0;
    uint32_t b = 0, n_tokens = 0;
  NEARPREP_SIM_LOOP("AssembleBlocks.tokens")
  tokens_loop:
    while (b < j.blocks) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 6400000
      NEARPREP_SIM_ITER();
      const CoefToken t = coefs.read();
      ++n_tokens;
      if (t.has_value) {
        buf[t.pos] = t.value;
        valid |= uint64_t{1} << t.pos;
        comp = t.comp;
      }
      if (t.last) {
        Block blk;
        for (int k = 0; k < 64; ++k) {
#pragma HLS UNROLL
          blk.coef[k] = (valid >> k) & 1 ? buf[k] : static_cast<int16_t>(0);
        }
        blk.comp = comp;
        blocks.write(blk);
        valid = 0;
        comp = 0;
        ++b;
      }
    }
  }
}

}  // namespace nearprep_fpga
