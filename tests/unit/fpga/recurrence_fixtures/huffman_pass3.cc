// Fixture of kernel_checks.py's recurrence selftest (never compiled):
// HuffmanDecode's symbols loop as of the third pass (f80b803): window
// shift by nbits, LUTRAM look[] read, table select by block_comp[bi], nbits -= total
// in one loop-carried cycle. Must be caught at II 1. (The partitions and
// bindings of its tables are declared in the function, as in the kernel.)
void HuffmanDecode(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                   hls::stream<uint8_t, kTableDepth>& tables,
                   hls::stream<ScanToken, kTokenDepth>& tokens,
                   hls::stream<ImageJob, kJobDepth>& job_out,
                   hls::stream<CoefToken, kTokenDepth>& coefs,
                   hls::stream<StageStatus, kStatusDepth>& status) {
  uint32_t look[kTables][512];
  int32_t maxcode[kTables][17];    // largest code of length l, -1 if none
  int32_t valoffset[kTables][17];  // vals index = code + valoffset[l]
  uint8_t vals[kTables][256];
#pragma HLS ARRAY_PARTITION variable = look complete dim = 1
#pragma HLS BIND_STORAGE variable = look type = ram_1p impl = lutram
#pragma HLS ARRAY_PARTITION variable = maxcode complete dim = 0
#pragma HLS ARRAY_PARTITION variable = valoffset complete dim = 0
#pragma HLS ARRAY_PARTITION variable = vals complete dim = 1
images:
  for (uint32_t i = 0; i < num_images; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32
    ImageJob j;
    if (!StartImage(job_in, job_out, &j)) continue;
  load_tables:
    for (int t = 0; t < 2 * j.ncomp; ++t) {
#pragma HLS LOOP_TRIPCOUNT min = 2 max = 6
      ReadTable(tables, t, (t & 1) == 0, look, maxcode, valoffset, vals);
    }
    // Components of the blocks of one MCU, in scan order.
    uint8_t block_comp[4 + 1 + 1];
    int per_mcu = 0;
  mcu_layout:
    for (int c = 0; c < j.ncomp; ++c) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 3 avg = 3
    mcu_layout_blocks:
      for (int b = 0; b < j.comp_h[c] * j.comp_v[c]; ++b) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 4 avg = 2
        block_comp[per_mcu++] = static_cast<uint8_t>(c);
      }
    }
    const uint32_t total_mcus = static_cast<uint32_t>(j.mcus_x) * static_cast<uint32_t>(j.mcus_y);

    uint64_t acc = 0;  // bit buffer: the next nbits bits are its low bits
    int nbits = 0;
    int fake = 0;       // zero bits supplied after a marker, at the bottom
    bool held = false;  // a marker (or the end) stopped the data
    ScanToken held_tok = kTokEnd;
    bool ended = false;  // kTokEnd was read
    int pred[3] = {0, 0, 0};
#pragma HLS ARRAY_PARTITION variable = pred complete
    int k = 0;       // next zig-zag position of the block (0: DC)
    int bi = 0;      // block of the MCU
    uint32_t mcu = 0, blocks_out = 0;
    int restarts_left = j.restart_interval;
    int next_rst = 0;
    uint32_t result = kStatusOk;
    uint32_t iterations = 0;
    // A code longer than 9 bits takes two iterations: the first finds its
    // length and vals index (compares on registers), the second reads the
    // symbol and consumes the bits.
    bool long_pending = false;
    int long_len = 0, long_idx = 0;
    Phase phase = total_mcus == 0 ? kFinal : kMcuStart;
  NEARPREP_SIM_LOOP("HuffmanDecode.symbols")
  symbols:
    while (phase != kDone) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1000 max = 400000
      NEARPREP_SIM_ITER();
      ++iterations;
      // Input: at most one token per iteration.
      const bool need_bits = phase == kDecode || phase == kMcuStart;
      const bool need_marker = (phase == kRestart || phase == kFinal) && !held;
      if (phase == kDrain) {
        if (!ended && tokens.read() == kTokEnd) ended = true;  // rest of the image
      } else if (need_bits && nbits <= 56 && held) {
        acc <<= 8;  // libjpeg supplies zeros after a marker
        nbits += 8;
        fake += 8;
      } else if ((need_bits && nbits <= 56) || need_marker) {
        const ScanToken t = tokens.read();
        if ((t & 0x300) == kTokData && need_bits) {
          acc = (acc << 8) | (t & 0xFF);
          nbits += 8;
        } else if ((t & 0x300) == kTokData) {
          result = kStatusCorrupt;  // data bytes before RSTn / EOI
          phase = kPad;
        } else {
          held = true;
          held_tok = t;
          ended = t == kTokEnd;
        }
      }
      if (phase == kMcuStart) {
        if (j.restart_interval != 0 && restarts_left == 0) {
          phase = kRestart;
        } else {
          if (j.restart_interval != 0) --restarts_left;
          phase = kDecode;
        }
      } else if (phase == kRestart) {
        // Only padding of the current byte may be left, then RSTn.
        if (nbits - fake >= 8) {
          result = kStatusCorrupt;
          phase = kPad;
        } else if (held) {
          if (held_tok != (kTokMarker | (0xD0 + next_rst))) {
            result = kStatusCorrupt;
            phase = kPad;
          } else {
            acc = 0;
            nbits = 0;
            fake = 0;
            held = false;
            next_rst = (next_rst + 1) & 7;
            restarts_left = j.restart_interval - 1;
            pred[0] = pred[1] = pred[2] = 0;
            phase = kDecode;
          }
        }
      } else if (phase == kFinal) {
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
      } else if (phase == kDecode && nbits >= 32) {
        const int c = block_comp[bi];
        const int t = 2 * c + (k == 0 ? 0 : 1);
        const uint32_t bits32 = static_cast<uint32_t>(acc >> (nbits - 32));
        const uint32_t e = look[t][bits32 >> 23];
        int len = static_cast<int>((e >> 8) & 15);
        int sym = static_cast<int>(e & 0xFF);
        bool consume = true;
        bool from_look = len != 0;  // the total length comes from the table
        if (long_pending) {  // second iteration of a long code
          len = long_len;
          sym = long_idx >= 0 && long_idx <= 255 ? vals[t][long_idx] : -1;
          long_pending = false;
          from_look = false;
        } else if (len == 0) {  // first iteration of a long code
          const uint32_t bits16 = bits32 >> 16;
          int sel = 0, idx = 0;
          for (int l = 16; l >= 10; --l) {  // shortest length wins: checked last
            const int32_t code = static_cast<int32_t>(bits16 >> (16 - l));
            if (code <= maxcode[t][l]) {
              sel = l;
              idx = code + valoffset[t][l];
            }
          }
          if (sel != 0) {
            long_pending = true;
            long_len = sel;
            long_idx = idx;
            consume = false;
          }
        }
        if (!consume) {
          // the symbol is resolved in the next iteration
        } else {
          const int size = k == 0 ? sym : (sym & 15);
          const uint32_t raw =
              size == 0 ? 0u : static_cast<uint32_t>((bits32 << len) >> (32 - size));
          // Short codes: code + value length straight from the table entry
          // (the only arithmetic between the table read and the next
          // window); long codes: added here, in their second iteration.
          nbits -= from_look ? static_cast<int>(e >> 12) : len + size;
          if (len == 0 || sym < 0) {
            result = kStatusCorrupt;  // no such code (JWRN_HUFF_BAD_CODE)
            phase = kPad;
          } else if (nbits < fake) {
            result = kStatusCorrupt;  // consumed supplied zeros: overrun
            phase = kPad;
          } else if (k == 0) {
            const int64_t next =
                static_cast<int64_t>(pred[c]) + (size != 0 ? Extend(raw, size) : 0);
            if (next > INT32_MAX || next < INT32_MIN) {
              result = kStatusCorrupt;  // libjpeg-turbo: JERR_BAD_DCT_COEF
              phase = kPad;
            } else {
              pred[c] = static_cast<int>(next);
              coefs.write(CoefToken{static_cast<int16_t>(pred[c]), 0, static_cast<uint8_t>(c),
                                    true, false});
              k = 1;
            }
          } else {
            const int run = sym >> 4;
            bool last = false;
            if (size != 0) {
              const int pos = k + run;
              coefs.write(CoefToken{static_cast<int16_t>(Extend(raw, size)),
                                    kNatural[pos < 79 ? pos : 79], static_cast<uint8_t>(c), true,
                                    pos + 1 >= 64});
              k = pos + 1;
              last = k >= 64;
            } else if (run == 15) {  // ZRL
              k += 16;
              last = k >= 64;
              if (last) coefs.write(CoefToken{0, 0, static_cast<uint8_t>(c), false, true});
            } else {  // EOB
              coefs.write(CoefToken{0, 0, static_cast<uint8_t>(c), false, true});
              last = true;
            }
            if (last) {
              ++blocks_out;
              k = 0;
              if (++bi == per_mcu) {
                bi = 0;
                phase = ++mcu == total_mcus ? kFinal : kMcuStart;
              }
            }
          }
        }
      } else if (phase == kPad) {
        // Every block the header promised, so the later stages finish the
        // image; a block cut short by an error is closed by the first one.
        if (blocks_out < j.blocks) {
          coefs.write(CoefToken{0, 0, 0, false, true});
          ++blocks_out;
        } else {
          phase = kDrain;
        }
      }
      if (phase == kDrain && ended) phase = kDone;
    }
    status.write(StageStatus{result, iterations});
  }
}

