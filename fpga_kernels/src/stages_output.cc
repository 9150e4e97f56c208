// Dataflow processes from RGB pixels to DDR: CropResize (streaming crop +
// bilinear resize + flip + augment/clip/normalise), PackOutput, BurstWrite,
// WriteStatus. See dataflow.h.
#include <cstdint>

#include "dataflow.h"
#include "nearprep_kernel_abi.h"
#include "transform_l1.h"

namespace nearprep_fpga {
namespace {

// A 512-bit word being assembled: the bytes in `mask` are set.
struct PartialWord {
  uint64_t addr;  // word index
  WideWord w;
  uint64_t mask;
};

inline void ClearWord(WideWord* w) {
#pragma HLS INLINE
  for (int k = 0; k < 64; ++k) {
#pragma HLS UNROLL
    SetWordByte(*w, k, 0);
  }
}

// dst gets src's bytes (the two cover disjoint bytes of the same word).
inline void MergeWord(PartialWord* dst, const PartialWord& src) {
#pragma HLS INLINE
  for (int k = 0; k < 64; ++k) {
#pragma HLS UNROLL
    if ((src.mask >> k) & 1) SetWordByte(dst->w, k, WordByte(src.w, k));
  }
  dst->mask |= src.mask;
}

inline uint32_t PackRgb(const Rgb& px) {
  return static_cast<uint32_t>(px.c[0]) | (static_cast<uint32_t>(px.c[1]) << 8) |
         (static_cast<uint32_t>(px.c[2]) << 16);
}
inline float Channel(uint32_t packed, int c) {
  return static_cast<float>((packed >> (8 * c)) & 0xFF) * kInv255;
}

}  // namespace

void CropResize(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                hls::stream<Rgb, kPixelDepth>& rgb, hls::stream<ImageJob, kJobDepth>& job_out,
                hls::stream<BilinearSample, kPixelDepth>& samples) {
  Tap col_taps[kMaxOutWidth];  // computed once per image
  Tap row_taps[kMaxOutHeight + 2];
  // Three source rows (the one arriving and the two an output row may
  // blend), in four copies: one per bilinear read (top-left, top-right,
  // bottom-left, bottom-right), so each copy sees one read and one write per
  // cycle. Entries are RGB packed in 24 bits (one memory word, not a struct
  // split per byte). The row being written is never one being read (an
  // output row is emitted while the source row after its lower row arrives).
  // latency = 2: the URAM's output register (timing at 225 MHz on -2LV; one
  // more cycle of pipeline depth, same II).
  uint32_t lines[4][3][kMaxWidth];
#pragma HLS ARRAY_PARTITION variable = lines complete dim = 1
#pragma HLS ARRAY_PARTITION variable = lines complete dim = 2
#pragma HLS BIND_STORAGE variable = lines type = ram_2p impl = uram latency = 2
#pragma HLS DEPENDENCE variable = lines inter false
images:
  for (uint32_t i = 0; i < num_images; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32 avg = 32
    ImageJob j;
    if (!StartImage(job_in, job_out, &j)) continue;
    // Only the crop box's pixels arrive (RasterEmit / UpsampleColor drop the
    // rest): crop_h rows of crop_w.
    const int oh = j.out_h, ow = j.out_w, ch = j.crop_h, cw = j.crop_w;
    const float sy = static_cast<float>(ch) / static_cast<float>(oh);
    const float sx = static_cast<float>(cw) / static_cast<float>(ow);
    const bool copy = ch == oh && cw == ow;
    const bool flip = (j.flags & kFlagFlip) != 0;
    NEARPREP_SIM_LOOP("CropResize.column_taps")
  column_taps:
    for (int x = 0; x < ow; ++x) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 4096 avg = 224
      NEARPREP_SIM_ITER();
      col_taps[x] = copy ? Tap{x, x, 0.0f} : MakeTap(x, sx, cw);
    }
    NEARPREP_SIM_LOOP("CropResize.row_taps")
  row_taps_loop:
    for (int y = 0; y < oh; ++y) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 4096 avg = 224
      NEARPREP_SIM_ITER();
      row_taps[y] = copy ? Tap{y, y, 0.0f} : MakeTap(y, sy, ch);
    }
    row_taps[oh] = Tap{ch, ch, 0.0f};  // sentinels: never ready
    row_taps[oh + 1] = Tap{ch, ch, 0.0f};
    int next = 0;  // next output row
    // The current output row's tap and the next one's, read ahead: the row
    // change inside the loop takes a register, not a memory read.
    Tap ty = row_taps[0];
    Tap ty_next = row_taps[1];
    // Pass r reads source row r (r < ch) and, in the same loop, emits every
    // output row whose lower source row is r - 1 or earlier; pass ch only
    // emits (the rows that need the last source row).
  source_rows:
    for (int r = 0; r <= ch; ++r) {
#pragma HLS LOOP_TRIPCOUNT min = 2 max = 16385 avg = 300
      const int reads = r < ch ? cw : 0;
      const int wr = r % 3;
      int x = 0, ox = 0;
      bool emitting = ty.hi <= r - 1;
      int top = ty.lo % 3, bot = ty.hi % 3;
      NEARPREP_SIM_LOOP("CropResize.fused")
    fused:
      for (int t = 0; x < reads || emitting; ++t) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32768 avg = 500
        NEARPREP_SIM_ITER();
        if (x < reads) {
          const uint32_t px = PackRgb(rgb.read());
          for (int k = 0; k < 4; ++k) {
#pragma HLS UNROLL
            lines[k][wr][x] = px;
          }
          ++x;
        }
        if (emitting) {
          const Tap tx = col_taps[flip ? ow - 1 - ox : ox];
          BilinearSample smp;
          smp.tl = lines[0][top][tx.lo];
          smp.tr = lines[1][top][tx.hi];
          smp.bl = lines[2][bot][tx.lo];
          smp.br = lines[3][bot][tx.hi];
          smp.lx = tx.lerp;
          smp.ly = ty.lerp;
          samples.write(smp);
          if (++ox == ow) {  // the next output row, if it is ready too
            ox = 0;
            ++next;
            ty = ty_next;
            ty_next = row_taps[next + 1 <= oh + 1 ? next + 1 : oh + 1];
            top = ty.lo % 3;
            bot = ty.hi % 3;
            emitting = next < oh && ty.hi <= r - 1;
          }
        }
      }
    }
  }
}

void ResizeMath(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                hls::stream<BilinearSample, kPixelDepth>& samples,
                hls::stream<ImageJob, kJobDepth>& job_out,
                hls::stream<PixelF, kPixelDepth>& pixels) {
images:
  for (uint32_t i = 0; i < num_images; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32 avg = 32
    ImageJob j;
    if (!StartImage(job_in, job_out, &j)) continue;
    const bool copy = j.crop_h == j.out_h && j.crop_w == j.out_w;
    const bool saturation = (j.flags & kFlagSaturation) != 0;
    const uint64_t n = static_cast<uint64_t>(j.out_h) * static_cast<uint64_t>(j.out_w);
    NEARPREP_SIM_LOOP("ResizeMath.pixels")
  pixels_loop:
    for (uint64_t k = 0; k < n; ++k) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 16777216 avg = 50176
      NEARPREP_SIM_ITER();
      const BilinearSample smp = samples.read();
      PixelF out;
      for (int c = 0; c < 3; ++c) {
#pragma HLS UNROLL
        const float tl = Channel(smp.tl, c);
        if (copy) {
          out.c[c] = tl;
          continue;
        }
        const float tr = Channel(smp.tr, c);
        const float bl = Channel(smp.bl, c);
        const float br = Channel(smp.br, c);
        const float tv = tl + (tr - tl) * smp.lx;
        const float bv = bl + (br - bl) * smp.lx;
        out.c[c] = tv + (bv - tv) * smp.ly;
      }
      AugmentPixel(out.c, j.delta, saturation, j.factor, j.clip, j.normalize, j.mean, j.std);
      pixels.write(out);
    }
  }
}

void PackOutput(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                hls::stream<PixelF, kPixelDepth>& pixels,
                hls::stream<ImageJob, kJobDepth>& job_out,
                hls::stream<OutChunk, kPixelDepth>& chunks) {
  // NCHW: one output row, emitted plane by plane: one array per channel,
  // each in three banks (x % 3) so that a chunk's three reads hit three
  // banks.
  float row[3][kMaxOutWidth];
#pragma HLS ARRAY_PARTITION variable = row complete dim = 1
#pragma HLS ARRAY_PARTITION variable = row cyclic factor = 3 dim = 2
images:
  for (uint32_t i = 0; i < num_images; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32
    ImageJob j;
    if (!StartImage(job_in, job_out, &j)) continue;
    const int el = ElementBytes(j.dtype);
  out_rows:
    for (int y = 0; y < j.out_h; ++y) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 4096
      if (j.layout != 1) {  // NHWC: one chunk per pixel, in address order
      NEARPREP_SIM_LOOP("PackOutput.nhwc")
      nhwc:
        for (int x = 0; x < j.out_w; ++x) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 4096
          NEARPREP_SIM_ITER();
          const PixelF p = pixels.read();
          OutChunk ch;
          for (int c = 0; c < 3; ++c) PackElement(p.c[c], j.dtype, &ch.b[c * el]);
          ch.n = static_cast<uint8_t>(3 * el);
          ch.plane = 0;
          chunks.write(ch);
        }
        continue;
      }
    NEARPREP_SIM_LOOP("PackOutput.nchw_in")
    nchw_in:
      for (int x = 0; x < j.out_w; ++x) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 4096
        NEARPREP_SIM_ITER();
        const PixelF px = pixels.read();
        for (int c = 0; c < 3; ++c) {
#pragma HLS UNROLL
          row[c][x] = px.c[c];
        }
      }
    nchw_planes:
      for (int c = 0; c < 3; ++c) {
      NEARPREP_SIM_LOOP("PackOutput.nchw_out")
      nchw_out:
        for (int x = 0; x < j.out_w; x += 3) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 1366
          NEARPREP_SIM_ITER();
          OutChunk ch;
          const int n = j.out_w - x < 3 ? j.out_w - x : 3;
          for (int k = 0; k < 3; ++k) {
            if (k < n) PackElement(row[c][x + k], j.dtype, &ch.b[k * el]);
          }
          ch.n = static_cast<uint8_t>(n * el);
          ch.plane = static_cast<uint8_t>(c);
          chunks.write(ch);
        }
      }
    }
  }
}

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
    // The loop-carried path (stage[p].w -> stage[p].w): a 3-way select of
    // the plane's word, ONE shift-and-mask insert (an AND and an OR per bit:
    // the shifted chunk and mask come from this iteration's chunk and the
    // plane's byte position, not from the word), the 2-way select between
    // it and the spill word: 4 dependent LUT levels. (Before the fourth
    // pass: 12 dependent variable-position byte inserts into the carried
    // word, II 3-8.)
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
      // The chunk's n bytes and their byte mask in the low bytes of a word
      // (constant positions: wiring and one AND per bit; bytes >= n zero).
      WideWord bits, ones;
      ClearWord(&bits);
      ClearWord(&ones);
      for (int b = 0; b < 12; ++b) {
#pragma HLS UNROLL
        if (b < n) {
          SetWordByte(bits, b, ch.b[b]);
          SetWordByte(ones, b, 0xFF);
        }
      }
      const uint64_t bytes = (uint64_t{1} << n) - 1;
      PartialWord cw = stage[p];
      // One insert: what passes the word's top byte is dropped (it is the
      // spill); the byte mask the same way.
      cw.w = (cw.w & ~(ones << (8 * pos))) | (bits << (8 * pos));
      cw.mask |= bytes << pos;
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
        nw.w = bits >> (8 * n1);  // the spill: one shift
        nw.mask = bytes >> n1;
        nw.addr = cw.addr + 1;
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

namespace {

// Writes the words up to the next end token, runs of consecutive addresses
// as bursts of up to kBurstWords: a gather loop (one word per cycle) fills
// the burst buffer until the run breaks, then the burst goes out (one beat
// per cycle). The word that broke the run starts the next burst.
void WriteWords(WideWord* out, hls::stream<OutWord, kWordDepth>& words) {
  WideWord buf[kBurstWords];
  OutWord t = words.read();
bursts:
  while (!t.end) {
#pragma HLS LOOP_TRIPCOUNT min = 0 max = 200
    const uint64_t start = t.addr;
    buf[0] = t.w;
    int n = 1;
    // The address the next word must have to join the burst, kept as a
    // register next to n: the compare reads it directly (not start + n, an
    // add and a 64-bit compare chained on n's recurrence).
    uint64_t next_addr = start + 1;
    bool more = true;
    NEARPREP_SIM_LOOP("BurstWrite.gather")
  gather:
    while (more) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 64
      NEARPREP_SIM_ITER();
      t = words.read();
      if (!t.end && n < kBurstWords && t.addr == next_addr) {
        buf[n++] = t.w;
        ++next_addr;
      } else {
        more = false;
      }
    }
    NEARPREP_SIM_EVENT("DDR.write_burst", 1);
    NEARPREP_SIM_LOOP("BurstWrite.flush")
  flush:
    for (int k = 0; k < n; ++k) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 64
      NEARPREP_SIM_ITER();
      out[start + static_cast<uint64_t>(k)] = buf[k];
    }
  }
}

}  // namespace

void BurstWrite(WideWord* out, uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                hls::stream<OutWord, kWordDepth>& words,
                hls::stream<ImageJob, kJobDepth>& job_out) {
images:
  for (uint32_t i = 0; i < num_images; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32
    const ImageJob j = job_in.read();
    if (j.status == kStatusOk) WriteWords(out, words);
    job_out.write(j);  // the image's words are all out: its status may follow
  }
  WriteWords(out, words);  // the run's last partial word
}

void WriteStatus(uint32_t* status, uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                 hls::stream<StageStatus, kStatusDepth>& huffman,
                 hls::stream<StageStatus, kStatusDepth>& idct) {
images:
  for (uint32_t i = 0; i < num_images; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32
    const ImageJob j = job_in.read();
    uint32_t st[kStatusWords];
    for (int k = 0; k < kStatusWords; ++k) st[k] = 0;
    uint32_t code = j.status;
    st[kStSampling] = static_cast<uint32_t>(j.sampling);
    st[kStHeight] = static_cast<uint32_t>(j.height);
    st[kStWidth] = static_cast<uint32_t>(j.width);
    if (j.status == kStatusOk) {
      const StageStatus hs = huffman.read();
      const StageStatus is = idct.read();
      code = hs.status != kStatusOk ? hs.status : is.status;
      if (code == kStatusOk && j.out_rejected) code = kStatusCorrupt;
      if (code == kStatusOk) {
        st[kStCyclesEntropy] = hs.iterations;
        st[kStCyclesIdct] = is.iterations;
        st[kStCyclesColor] = static_cast<uint32_t>(j.width) * static_cast<uint32_t>(j.height);
        st[kStCyclesResize] = static_cast<uint32_t>(j.out_h) * static_cast<uint32_t>(j.out_w);
      }
    }
    st[kStCode] = code;
  NEARPREP_SIM_LOOP("WriteStatus.record")
  record:
    for (int k = 0; k < kStatusWords; ++k) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 8 max = 8
      NEARPREP_SIM_ITER();
      status[static_cast<uint64_t>(j.index) * kStatusWords + k] = st[k];
    }
  }
}

}  // namespace nearprep_fpga
