// Fixture of kernel_checks.py's recurrence selftest (never compiled):
// PackWords as of the third pass (f80b803): 12 dependent variable-position
// byte inserts into the carried 512-bit word per chunk. Must be caught at II 1.
void PackWords(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
               hls::stream<OutChunk, kPixelDepth>& chunks,
               hls::stream<ImageJob, kJobDepth>& job_out, hls::stream<OutWord, kWordDepth>& words) {
  // The last word of the previous image when it is partial: the next image
  // may own the rest of it (adjacent slots).
  PartialWord carry;
  ClearWord(&carry.w);
  carry.addr = 0;
  carry.mask = 0;
  bool have_carry = false;
  uint64_t written_end = 0;  // end of the last slot written
images:
  for (uint32_t i = 0; i < num_images; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32
    const ImageJob j = job_in.read();
    if (j.status != kStatusOk) {
      job_out.write(j);
      continue;
    }
    ImageJob done = j;
    const int el = ElementBytes(j.dtype);
    const bool nchw = j.layout == kLayoutNCHW;
    const int planes = nchw ? 3 : 1;
    const uint64_t plane_bytes =
        static_cast<uint64_t>(j.out_h) * j.out_w * static_cast<uint64_t>(el) * (nchw ? 1 : 3);
    // Slots are written whole words at a time: they must come in increasing
    // order without overlap (the words two adjacent slots share are merged).
    // Otherwise the image's output is consumed but not written.
    const bool write = j.out_off >= written_end;
    done.out_rejected = !write;
    job_out.write(done);  // BurstWrite forwards it after the image's words
    uint64_t cur[3];
    PartialWord stage[3];
#pragma HLS ARRAY_PARTITION variable = cur complete
#pragma HLS ARRAY_PARTITION variable = stage complete
    for (int p = 0; p < 3; ++p) {
#pragma HLS UNROLL
      cur[p] = j.out_off + static_cast<uint64_t>(p) * plane_bytes;
      ClearWord(&stage[p].w);
      stage[p].mask = 0;
      stage[p].addr = cur[p] >> 6;
    }
    // Partial words (a plane's first and last word), written after merging.
    PartialWord held[7];
#pragma HLS ARRAY_PARTITION variable = held complete
    int nheld = 0;
    const uint64_t n_chunks =
        nchw ? static_cast<uint64_t>(j.out_h) * 3 * ((j.out_w + 2) / 3)
             : static_cast<uint64_t>(j.out_h) * j.out_w;
    // One chunk (at most 12 bytes) per iteration: its first n1 bytes finish
    // the plane's current word, the rest (if the word completed) start the
    // next; at most one word completes per chunk, so one stream write site.
    NEARPREP_SIM_LOOP("PackWords.chunks")
  chunks_loop:
    for (uint64_t k = 0; k < n_chunks; ++k) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 200000
      NEARPREP_SIM_ITER();
      const OutChunk ch = chunks.read();
      const int p = ch.plane < 3 ? ch.plane : 0;
      const int n = ch.n <= 12 ? ch.n : 12;
      const int pos = static_cast<int>(cur[p] & 63);
      const int n1 = n < 64 - pos ? n : 64 - pos;  // bytes into the current word
      PartialWord cw = stage[p];
      for (int b = 0; b < 12; ++b) {
#pragma HLS UNROLL
        if (b < n1) {
          SetWordByte(cw.w, pos + b, ch.b[b]);
          cw.mask |= uint64_t{1} << (pos + b);
        }
      }
      cur[p] += static_cast<uint64_t>(n);
      if (pos + n1 == 64) {  // word complete
        if (!write) {
          // dropped
        } else if (cw.mask == ~uint64_t{0}) {
          words.write(OutWord{cw.w, cw.addr, false});
        } else {
          held[nheld++] = cw;  // the plane began inside this word
        }
        PartialWord nw;
        ClearWord(&nw.w);
        nw.mask = 0;
        nw.addr = cw.addr + 1;
        for (int b = 0; b < 12; ++b) {
#pragma HLS UNROLL
          if (b >= n1 && b < n) {
            SetWordByte(nw.w, b - n1, ch.b[b]);
            nw.mask |= uint64_t{1} << (b - n1);
          }
        }
        stage[p] = nw;
      } else {
        stage[p] = cw;
      }
    }
    if (!write) {
      words.write(OutWord{carry.w, 0, true});  // the image's (no) words end
      continue;
    }
    written_end = j.out_off + plane_bytes * planes;
    for (int p = 0; p < planes; ++p) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 3
      if (stage[p].mask != 0) held[nheld++] = stage[p];
    }
    // Merge partial words that share an address (plane boundaries, and the
    // previous image's last word), keep this image's last word if partial,
    // send the rest.
    if (have_carry) {
      bool merged = false;
      for (int h = 0; h < nheld; ++h) {
#pragma HLS LOOP_TRIPCOUNT min = 0 max = 7
        if (held[h].addr == carry.addr) {
          MergeWord(&held[h], carry);
          merged = true;
        }
      }
      if (!merged) words.write(OutWord{carry.w, carry.addr, false});
      have_carry = false;
    }
    const uint64_t last_word = (j.out_off + plane_bytes * planes - 1) >> 6;
  held_words:
    for (int h = 0; h < nheld; ++h) {
#pragma HLS LOOP_TRIPCOUNT min = 0 max = 7
      if (held[h].mask == 0) continue;  // merged into an earlier entry
      for (int g = h + 1; g < nheld; ++g) {
#pragma HLS LOOP_TRIPCOUNT min = 0 max = 6
        if (held[g].addr == held[h].addr) {
          MergeWord(&held[h], held[g]);
          held[g].mask = 0;
        }
      }
      if (held[h].addr == last_word && !((held[h].mask >> 63) & 1)) {
        carry = held[h];
        have_carry = true;
      } else {
        words.write(OutWord{held[h].w, held[h].addr, false});
      }
    }
    words.write(OutWord{carry.w, 0, true});  // the image's words end
  }
  // The run's last partial word, then the run's end.
  if (have_carry) words.write(OutWord{carry.w, carry.addr, false});
  words.write(OutWord{carry.w, 0, true});
}

