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
//  Entry: (total << 27) | (1 << 26) | (advance << 13) | (code length << 8) |
//  symbol (bit 26: a code; 0 = no code of that length here),
//  total = code length + value length (DC: the symbol, <= 15 by
//  CheckHuffTable; AC: its low nibble): one read gives the bits the symbol
//  consumes (the top field: no mask) and the zig-zag positions it advances.
//  - maxcode/valoffset resolve 10..16-bit codes (registers: the seven
//    compares read them in parallel); vals[t][] (BRAM) is read once per long
//    code, in the iteration after the compares.
constexpr int kTables = 6;
constexpr int kFastBits = 4;
constexpr int kFast = 16;  // 1 << kFastBits
static_assert(kFast == 1 << kFastBits, "fast table size");

inline uint32_t Entry(uint32_t len, uint32_t sym, bool dc) {
  const uint32_t size = dc ? sym : (sym & 15);
  const uint32_t run = sym >> 4;
  // zig-zag positions the symbol advances: AC run + 1 with a value, 16 for
  // ZRL, 64 for EOB (or any other run without a value); DC 64, so that bit
  // 6 of k + advance (k = 0 at a DC) says "the table changes after it"
  const uint32_t adv = dc ? 64u : (size != 0 ? run + 1 : (run == 15 ? 16u : 64u));
  return ((len + size) << 27) | (1u << 26) | (adv << 13) | (len << 8) | sym;
}

// Reads table t (16 counts, 256 values) and builds its lookups. The first
// l with code(l) <= maxcode[l] is the code length, as in jdhuff.c's decoder;
// for the validated tables that ParseHeader sends this is the canonical code.
// INLINE: t indexes the partitioned arrays of the caller's process.
inline void ReadTable(hls::stream<uint8_t, kTableDepth>& tables, int t, bool dc,
                      uint32_t look[kTables][512], uint32_t fast[kTables][kFast],
                      uint8_t fast_adv[kTables][kFast],
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
    if ((i & 31) == 0) {
      fast[t][i >> 5] = sel != 0 && sel <= kFastBits ? e : 0u;
      fast_adv[t][i >> 5] = static_cast<uint8_t>(sel != 0 && sel <= kFastBits ? (e >> 13) & 127 : 0);
    }
  }
}

inline int Extend(uint32_t v, int s) {
  return v < (1u << (s - 1)) ? static_cast<int>(v) - (1 << s) + 1 : static_cast<int>(v);
}


}  // namespace

void HuffmanDecode(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                   hls::stream<uint8_t, kTableDepth>& tables,
                   hls::stream<ScanToken, kTokenDepth>& tokens,
                   hls::stream<ImageJob, kJobDepth>& job_out,
                   hls::stream<CoefToken, kTokenDepth>& coefs,
                   hls::stream<StageStatus, kStatusDepth>& status) {
  uint32_t look[kTables][512];
  uint32_t fast[kTables][kFast];
  uint8_t fast_adv[kTables][kFast];  // the entries' advance fields, apart
  int32_t maxcode[kTables][17];    // largest code of length l, -1 if none
  int32_t valoffset[kTables][17];  // vals index = code + valoffset[l]
  uint8_t vals[kTables][256];
#pragma HLS ARRAY_PARTITION variable = look complete dim = 1
#pragma HLS BIND_STORAGE variable = look type = ram_1p impl = lutram
#pragma HLS ARRAY_PARTITION variable = fast complete dim = 0
#pragma HLS ARRAY_PARTITION variable = fast_adv complete dim = 0
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
      ReadTable(tables, t, (t & 1) == 0, look, fast, fast_adv, maxcode, valoffset, vals);
    }
    // Components of the blocks of one MCU, in scan order, 2 bits each (first
    // block lowest): the symbols loop shifts them out of a register, one per
    // block, instead of selecting block_comp[bi].
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
    const bool restarts = j.restart_interval != 0;

    // The bit window: the next nbits bits of the scan at the TOP of win
    // (MSB first), zeros below them; real of them are scan bits, the rest
    // (nbits - real) zeros supplied after a marker.
    uint64_t win = 0;
    int nbits = 0;
    int real = 0;
    bool held = false;  // a marker (or the end) stopped the data
    ScanToken held_tok = kTokEnd;
    bool ended = false;  // kTokEnd was read
    int pred[3] = {0, 0, 0};
#pragma HLS ARRAY_PARTITION variable = pred complete
    int k = 0;             // next zig-zag position of an AC symbol
    bool is_dc = true;     // the next symbol is the block's DC
    int comp = static_cast<int>(mcu_comps & 3);  // the current block's component
    uint32_t comp_sr = mcu_comps >> 2;           // the MCU's later blocks' components
    int blocks_left = per_mcu - 1;               // blocks of the MCU after this one
    uint32_t mcu = 0, blocks_out = 0;
    int restarts_left = j.restart_interval;
    ScanToken want_rst = static_cast<ScanToken>(kTokMarker | 0xD0);  // the next RSTn
    uint32_t result = kStatusOk;
    uint32_t iterations = 0;
    // The fast entries of the table in use (2 x comp + !is_dc), reloaded in
    // the iteration after the table changes (a DC symbol, a block's last
    // symbol): that iteration decodes nothing and, after the MCU's last
    // block, steps the MCU (mcu_done).
    uint32_t cur[kFast];
    uint8_t cur_adv[kFast];
#pragma HLS ARRAY_PARTITION variable = cur complete
#pragma HLS ARRAY_PARTITION variable = cur_adv complete
    bool reload = true;
    bool mcu_done = false;
    // A code longer than 4 bits: the iteration that misses cur[] reads
    // look[] (5-9 bits: its entry into pend, ready) or compares the next 16
    // bits with maxcode[] (10-16 bits: long, the vals[] index kept); a long
    // iteration reads vals[] (LUTRAM) and builds the entry into pend; a
    // ready iteration consumes pend like a fast entry.
    bool ready = false, l1 = false, l2 = false, l3 = false;
    uint32_t bits_l = 0;  // the next 16 bits, kept by a miss for l1
    int lsym = 0;         // the long code's symbol, read by l2
    uint32_t pend = 0;
    int long_len = 0, long_idx = 0;
    bool err = false;         // an error found by the last iteration's symbol step
    bool rst_pending = false;  // RSTn accepted: the window is emptied now
    // The phase, one-hot.
    bool p_mcu = total_mcus != 0, p_dec = false, p_rst = false, p_fin = total_mcus == 0;
    bool p_pad = false, p_drain = false, done = false;
  NEARPREP_SIM_LOOP("HuffmanDecode.symbols")
  symbols:
    while (!done) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1000 max = 400000
      NEARPREP_SIM_ITER();
      // Loop-carried path (issue 33 item 1), one iteration = one cycle:
      //   win -> cur[win >> 60] (16:1 mux of registers) -> the entry's total
      //   (its top field: no mask) -> in << total (64-bit barrel shifter) ->
      //   the select against the slow path's shift -> win: 3 dependent
      //   operators, 2.4 ns in kernel_checks.py's figures (0.6 + 1.5 + 0.3;
      //   the OR of the appended byte is on the shifter's data input, in
      //   parallel with the lookup). Off that path: the byte's position comes
      //   from nbits (a register); nbits and real are each one select of two
      //   sums computed in parallel (2.4 ns); whether the step runs reads
      //   registers only (nbits >= 32 as two bits, reload, rst_pending, the
      //   one-hot phase, the slow-path flags); the component is a shift
      //   register (comp_sr); the block end is bit 6 of k + the entry's
      //   advance (cur_adv: no mask); a 5-9 bit code's look[] entry and a
      //   long code's compares, vals[] read and entry each take their own
      //   iteration, so no memory read feeds nbits; errors found by a symbol
      //   and the MCU step act in the next iteration (err, mcu_done). The
      //   longest one-cycle paths outside the recurrences (win -> cur_adv ->
      //   k + advance -> block end -> k, comp) are ~2.7-3.0 ns by the same
      //   figures; they close cycles of two or more iterations.
      ++iterations;
      const bool need_bits = p_dec || p_mcu;
      const bool need_marker = (p_rst || p_fin) && !held;
      const bool room = nbits <= 56;
      // Input: at most one token per iteration.
      bool fill = false;   // 8 more bits in the window
      bool data = false;   // ... which are scan bits (not zeros after a marker)
      uint32_t byte = 0;
      bool data_err = false;
      if (p_drain) {
        if (!ended && tokens.read() == kTokEnd) ended = true;  // rest of the image
      } else if (need_bits && room && held) {
        fill = true;  // libjpeg supplies zeros after a marker
      } else if ((need_bits && room) || need_marker) {
        const ScanToken t = tokens.read();
        if ((t & 0x300) == kTokData && need_bits) {
          fill = true;
          data = true;
          byte = t & 0xFF;
        } else if ((t & 0x300) == kTokData) {
          data_err = true;  // data bytes before RSTn / EOI
        } else {
          held = true;
          held_tok = t;
          ended = t == kTokEnd;
        }
      }
      const bool pad_more = p_pad && blocks_out < j.blocks;
      // The symbol step.
      const bool have32 = (nbits >> 5) & 3;  // nbits >= 32 (nbits <= 64)
      // A pending entry came from a miss iteration that had 32 bits, and
      // nothing was consumed since: it needs no have32.
      const bool go = p_dec && !rst_pending && !reload;
      const bool step = go && have32;
      const bool idle = !l1 && !l2 && !l3 && !ready;  // no slow-path symbol pending
      const bool fast_case = step && idle;
      const bool pend_case = ready && go;
      const bool l1_case = l1 && go;
      const bool l2_case = l2 && go;
      const bool l3_case = l3 && go;
      const int tsel = 2 * comp + (is_dc ? 0 : 1);
      const uint32_t fe = cur[win >> 60];
      const int fast_total = static_cast<int>(fe >> 27);
      const int pend_sh = pend_case ? static_cast<int>(pend >> 27) : 0;
      // nbits after RSTn: 0, as nbits - nbits (the window itself is zeroed
      // through base)
      const int slow_total = rst_pending ? nbits : pend_sh;
      const uint64_t base = rst_pending ? 0 : win;
      const int at = rst_pending ? 0 : nbits;
      const uint64_t in = base | (fill ? static_cast<uint64_t>(byte) << (56 - at) : 0);
      const uint64_t next_win = fast_case ? in << fast_total : in << pend_sh;
      const int sh = fast_case ? fast_total : slow_total;  // bits consumed (nbits)
      const int used = fast_case ? fast_total : pend_sh;   // bits consumed (real)
      const int next_nbits = fill ? nbits + 8 - sh : nbits - sh;
      const int base_real = rst_pending ? 0 : real;
      const int next_real = data ? base_real + 8 - used : base_real - used;
      const bool hit = (fe >> 26) & 1;
      const bool miss = !hit && fast_case;
      const bool consume = (hit && fast_case) || pend_case;
      const uint32_t ce = ready ? pend : fe;  // the entry consumed
      const int sym = static_cast<int>(ce & 0xFF);
      const int len = static_cast<int>((ce >> 8) & 31);
      const int fadv = cur_adv[win >> 60];
      const int padv = static_cast<int>((pend >> 13) & 127);
      // DC: the symbol (<= 15, CheckHuffTable); AC: its low nibble. Masked
      // for both: in iterations that consume nothing ce may hold an entry
      // of another table, and the shifts below must stay defined.
      const int size = sym & 15;
      const uint32_t raw = size == 0 ? 0u : static_cast<uint32_t>((win << len) >> (64 - size));
      const int ext = size != 0 ? Extend(raw, size) : 0;
      const int pc = pred[comp];
      const int dc_sum = static_cast<int>(static_cast<uint32_t>(pc) + static_cast<uint32_t>(ext));
      const bool dc_ovf = ((pc ^ dc_sum) & (ext ^ dc_sum)) < 0;  // int32 overflow
      const bool overrun = next_real < 0;  // consumed supplied zeros
      // AC: the position after the symbol (+1); bit 6: the table changes
      // after this symbol (a DC, or the block's last AC symbol)
      const int ksum_f = k + fadv;  // a miss reads advance 0: no change
      const int ksum_p = k + padv;
      const bool sw_f = (ksum_f >> 6) & 1;
      const bool sw_p = (ksum_p >> 6) & 1;
      const int ksum = ready ? ksum_p : ksum_f;
      const bool sw = ready ? sw_p : sw_f;
      const bool last = sw && !is_dc;  // the block's last symbol
      // The slow path. A miss reads the next 9 bits' look[] entry (a 5-9 bit
      // code: ready) and keeps the next 16 bits (a longer code: l1). l1:
      // seven parallel compares with maxcode[] give the length and the
      // vals[] index; l2: the vals[] read (LUTRAM); l3: the entry built.
      const uint32_t e9 = look[tsel][win >> 55];
      const bool e9_hit = (e9 >> 26) & 1;
      int sel = 0, idx = 0;
      for (int l = 16; l >= 10; --l) {  // shortest length wins: checked last
        const int32_t code = static_cast<int32_t>(bits_l >> (16 - l));
        if (code <= maxcode[tsel][l]) {
          sel = l;
          idx = code + valoffset[tsel][l];
        }
      }
      const bool idx_ok = long_idx >= 0 && long_idx <= 255;
      const bool bad_code = (l1_case && sel == 0) || (l2_case && !idx_ok);
      const bool sym_err = consume && (overrun || (is_dc && dc_ovf));
      // Outputs of a consumed symbol (none when it is an error).
      if (consume && !sym_err && !err) {
        if (is_dc) {
          coefs.write(CoefToken{static_cast<int16_t>(dc_sum), 0, static_cast<uint8_t>(comp),
                                true, false});
        } else if (size != 0) {
          const int pos = ksum - 1;
          coefs.write(CoefToken{static_cast<int16_t>(Extend(raw, size)),
                                kNatural[pos < 79 ? pos : 79], static_cast<uint8_t>(comp), true,
                                ksum >= 64});
        } else if (last) {  // EOB, or a ZRL reaching the end
          coefs.write(CoefToken{0, 0, static_cast<uint8_t>(comp), false, true});
        }
      }
      if (consume && is_dc) pred[comp] = dc_sum;
      if (pad_more || (consume && last && !sym_err && !err)) ++blocks_out;
      // The block and MCU bookkeeping of a consumed symbol.
      const bool mcu_end = consume && last && blocks_left == 0;
      if (consume && last) {
        comp = blocks_left == 0 ? static_cast<int>(mcu_comps & 3) : static_cast<int>(comp_sr & 3);
        comp_sr = blocks_left == 0 ? mcu_comps >> 2 : comp_sr >> 2;
        blocks_left = blocks_left == 0 ? per_mcu - 1 : blocks_left - 1;
      }
      // The slow path's state.
      if (miss) {
        pend = e9;
        bits_l = static_cast<uint32_t>(win >> 48);
      }
      if (l1_case) {
        long_len = sel;
        long_idx = idx;
      }
      if (l2_case) lsym = vals[tsel][idx_ok ? long_idx : 0];
      if (l3_case) pend = Entry(static_cast<uint32_t>(long_len), static_cast<uint32_t>(lsym), is_dc);
      ready = miss ? e9_hit : (l3_case ? true : (consume ? false : ready));
      l1 = miss ? !e9_hit : (l1_case ? false : l1);
      l2 = l1_case ? true : (l2_case ? false : l2);
      l3 = l2_case ? true : (l3_case ? false : l3);
      k = consume ? (is_dc ? 1 : (sw ? 0 : ksum)) : k;
      is_dc = consume ? last : is_dc;
      // The table of the next symbol.
      if (reload) {
        for (int q = 0; q < kFast; ++q) {
#pragma HLS UNROLL
          cur[q] = fast[tsel][q];
          cur_adv[q] = fast_adv[tsel][q];
        }
      }
      // The MCU's last block was decoded. Only while decoding: a symbol
      // error moves the phase to padding (err_now) while the reload of a
      // block's last symbol consumed after it is still pending; stepping
      // the MCU there would also enter p_mcu / p_fin next to p_pad (two
      // phases), and fin would overwrite the Corrupt result with OK.
      const bool reload_mcu = reload && mcu_done && p_dec;
      reload = (sw_f && fast_case) || (sw_p && pend_case);
      mcu_done = consume ? mcu_end : mcu_done && !reload_mcu;
      // Phase steps, on the phase the iteration started in.
      const bool pad_left = real >= 8;  // a whole byte not consumed
      const bool rst_ok = p_rst && !pad_left && held && held_tok == want_rst;
      const bool rst_bad = p_rst && (pad_left || (held && held_tok != want_rst));
      const bool fin = p_fin && (pad_left || held);
      const bool start_rst = p_mcu && restarts && restarts_left == 0;
      if (pad_more) coefs.write(CoefToken{0, 0, 0, false, true});
      if (p_mcu && restarts && restarts_left != 0) --restarts_left;
      if (rst_ok) {
        held = false;
        want_rst = static_cast<ScanToken>(kTokMarker | 0xD0 | ((want_rst + 1) & 7));
        restarts_left = j.restart_interval - 1;
        pred[0] = pred[1] = pred[2] = 0;
      }
      if (rst_bad || data_err || sym_err || bad_code) result = kStatusCorrupt;
      if (fin) {
        result = pad_left ? kStatusCorrupt
                          : held_tok == (kTokMarker | 0xD9)
                                ? kStatusOk
                                : held_tok == (kTokMarker | 0xDA) ? kStatusUnsupported
                                                                  : kStatusCorrupt;
      }
      const bool last_mcu = mcu + 1 == total_mcus;
      if (reload_mcu) ++mcu;
      // The next phase (one-hot), each bit from the transitions into it.
      const bool err_now = err && p_dec;   // an error of the last symbol step
      const bool pad_end = p_pad && !pad_more;
      const bool leave = pad_end || p_drain;
      const bool n_mcu = reload_mcu && !last_mcu && !err;
      const bool n_fin = (reload_mcu && last_mcu && !err) || (p_fin && !fin && !data_err);
      const bool n_dec = (p_mcu && !start_rst) || (p_dec && !reload_mcu && !err) || rst_ok;
      const bool n_rst = start_rst || (p_rst && !rst_ok && !rst_bad && !data_err);
      const bool n_pad = err_now || rst_bad || fin || data_err || pad_more;
      p_mcu = n_mcu;
      p_fin = n_fin;
      p_dec = n_dec;
      p_rst = n_rst;
      p_pad = n_pad;
      p_drain = leave && !ended;
      done = leave && ended;
      err = (err || sym_err || bad_code) && !err_now;
      rst_pending = rst_ok;
      win = next_win;
      nbits = next_nbits;
      real = next_real;
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
