// Dataflow processes from blocks to RGB pixels: Idct, McuRowsToRaster,
// UpsampleColor. See dataflow.h.
#include <cstdint>

#include "dataflow.h"
#include "jpeg_l1.h"
#include "nearprep_kernel_abi.h"

namespace nearprep_fpga {
namespace {

// MCU-row buffers: two slots (the MCU row being filled and the one before,
// whose last chroma row is the upsampler's context), luma up to 16 rows
// (2x2 blocks per MCU), chroma 8 rows. Widths: whole MCUs of the widest image.
constexpr int kRowWidth = kMaxWidth + 16;
constexpr int kChromaWidth = kMaxWidth / 2 + 16;

struct McuRowBuffers {
  uint8_t y[2][16][kRowWidth];
  uint8_t cb[2][8][kRowWidth];  // 4:4:4 chroma is as wide as luma
  uint8_t cr[2][8][kRowWidth];
};

// One output row: w luma samples and the chroma pairs it needs, streamed in
// one loop (a chroma pair every pixel for 4:4:4, every second for 4:2:x).
void EmitRow(const McuRowBuffers& b, int slot_y, int row_y, int slot_n, int row_n, int slot_f,
             int row_f, int w, int sampling, hls::stream<uint8_t, kPixelDepth>& luma,
             hls::stream<ChromaPair, kPixelDepth>& chroma) {
emit_row:
  for (int x = 0; x < w; ++x) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 16384
    luma.write(b.y[slot_y][row_y][x]);
    if (sampling == kSamplingGray) continue;
    const bool sub = sampling != kSampling444;
    if (sub && (x & 1)) continue;
    const int c = sub ? x >> 1 : x;
    chroma.write(ChromaPair{b.cb[slot_n][row_n][c], b.cb[slot_f][row_f][c], b.cr[slot_n][row_n][c],
                            b.cr[slot_f][row_f][c]});
  }
}

}  // namespace

void Idct(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
          hls::stream<int16_t, kQuantDepth>& quant, hls::stream<Block, kBlockDepth>& blocks,
          hls::stream<ImageJob, kJobDepth>& job_out, hls::stream<SampleRow, kRowDepth>& rows,
          hls::stream<StageStatus, kStatusDepth>& status) {
  int16_t qmul[3][64];
#pragma HLS ARRAY_PARTITION variable = qmul complete dim = 2
images:
  for (uint32_t i = 0; i < num_images; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32
    ImageJob j;
    if (!StartImage(job_in, job_out, &j)) continue;
  load_quant:
    for (int k = 0; k < j.ncomp * 64; ++k) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 64 max = 192
      qmul[k >> 6][k & 63] = quant.read();
    }
    // One flat loop, software-pipelined by hand: step t runs column pass
    // t % 8 of block t / 8 and row pass t % 8 of the block before it, with
    // the workspace double-buffered: 8 steps per block (+ 8 to drain).
    bool out_of_range = false;
    Block cur = Block();
    int ws[2][64];
#pragma HLS ARRAY_PARTITION variable = ws complete dim = 0
    const uint32_t steps = (j.blocks + 1) * 8;
  passes:
    for (uint32_t t = 0; t < steps; ++t) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 16 max = 800000
      const uint32_t b = t >> 3;
      const int s8 = static_cast<int>(t & 7);
      if (s8 == 0 && b < j.blocks) cur = blocks.read();
      if (b < j.blocks) {
        IdctColumn(cur.coef, qmul[cur.comp < 3 ? cur.comp : 0], s8, ws[b & 1], &out_of_range);
      }
      if (b >= 1) {
        SampleRow row;
        IdctRow(ws[(b - 1) & 1], s8, row.s, &out_of_range);
        rows.write(row);
      }
    }
    NEARPREP_SIM_WORK("Idct", j.ncomp * 64 + steps, 2);
    status.write(StageStatus{out_of_range ? static_cast<uint32_t>(kStatusUnsupported)
                                          : static_cast<uint32_t>(kStatusOk),
                             steps});
  }
}

void McuRowsToRaster(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                     hls::stream<SampleRow, kRowDepth>& rows,
                     hls::stream<ImageJob, kJobDepth>& job_out,
                     hls::stream<uint8_t, kPixelDepth>& luma,
                     hls::stream<ChromaPair, kPixelDepth>& chroma) {
  McuRowBuffers buf;
#pragma HLS BIND_STORAGE variable = buf type = ram_2p impl = uram
images:
  for (uint32_t i = 0; i < num_images; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32
    ImageJob j;
    if (!StartImage(job_in, job_out, &j)) continue;
    const int w = j.width, h = j.height;
    const int rows_per_mcu_row = j.ncomp == 3 ? 8 * j.comp_v[0] : 8;
    const bool h2v2 = j.sampling == kSampling420;
    // A deferred luma row (the last of an MCU row in 4:2:0, whose farther
    // chroma row is the first of the next MCU row): its slot, or -1.
    int pending_slot = -1;
    uint64_t work = 0, entries = 0;
  mcu_rows_loop:
    for (int m = 0; m < j.mcus_y; ++m) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 1024
      const int slot = m & 1;
      // Receive MCU row m: every block's 8 rows into its plane, in one flat
      // loop that walks (MCU, component, block row, block column, row).
      const int per_mcu = j.comp_h[0] * j.comp_v[0] + (j.ncomp == 3 ? 2 : 0);
      const int n_rows = j.mcus_x * per_mcu * 8;
      int mx = 0, blk = 0, r = 0;
    receive:
      for (int t = 0; t < n_rows; ++t) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 8 max = 98304
        const SampleRow row = rows.read();
        // Block `blk` of the MCU: luma blocks first (row-major by, bx), then
        // Cb, then Cr.
        const int nl = j.comp_h[0] * j.comp_v[0];
        const int c = blk < nl ? 0 : blk - nl + 1;
        const int by = c == 0 ? blk / j.comp_h[0] : 0;
        const int bx = c == 0 ? blk % j.comp_h[0] : 0;
        const int col = (mx * (c == 0 ? j.comp_h[0] : 1) + bx) * 8;
        for (int k = 0; k < 8; ++k) {
          if (c == 0) {
            buf.y[slot][by * 8 + r][col + k] = row.s[k];
          } else if (c == 1) {
            buf.cb[slot][r][col + k] = row.s[k];
          } else {
            buf.cr[slot][r][col + k] = row.s[k];
          }
        }
        if (++r == 8) {
          r = 0;
          if (++blk == per_mcu) {
            blk = 0;
            ++mx;
          }
        }
      }
      work += n_rows;
      ++entries;
      const int y0 = m * rows_per_mcu_row;
      if (!h2v2) {
      plain_rows:
        for (int r = 0; r < rows_per_mcu_row && y0 + r < h; ++r) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 8
          EmitRow(buf, slot, r, slot, r, slot, r, w, j.sampling, luma, chroma);
          work += w;
          ++entries;
        }
        continue;
      }
      // 4:2:0: the deferred last row of MCU row m-1 first (its farther
      // chroma row is row 0 here), then this MCU row's rows.
      const int ds_h = j.ds_h[1];
      if (pending_slot >= 0) {
        EmitRow(buf, pending_slot, 15, pending_slot, 7, slot, 0, w, j.sampling, luma, chroma);
        pending_slot = -1;
        work += w;
        ++entries;
      }
    h2v2_rows:
      for (int r = 0; r < 16 && y0 + r < h; ++r) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 16
        const int y = y0 + r;
        const int in_row = y >> 1;
        int far = (y & 1) ? in_row + 1 : in_row - 1;
        if (far < 0) far = 0;                  // top context = row 0
        if (far > ds_h - 1) far = ds_h - 1;    // bottom row replicated
        const int near_local = in_row - 8 * m;  // 0..7
        const int far_local = far - 8 * m;      // -1..8
        if (far_local == 8) {
          pending_slot = slot;  // only r == 15, and not the last MCU row
          continue;
        }
        const int far_slot = far_local < 0 ? 1 - slot : slot;
        const int far_row = far_local < 0 ? 7 : far_local;
        EmitRow(buf, slot, r, slot, near_local, far_slot, far_row, w, j.sampling, luma, chroma);
        work += w;
        ++entries;
      }
    }
    NEARPREP_SIM_WORK("McuRowsToRaster", work, entries);
  }
}

void UpsampleColor(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                   hls::stream<uint8_t, kPixelDepth>& luma,
                   hls::stream<ChromaPair, kPixelDepth>& chroma,
                   hls::stream<ImageJob, kJobDepth>& job_out, hls::stream<Rgb, kPixelDepth>& rgb) {
images:
  for (uint32_t i = 0; i < num_images; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32
    ImageJob j;
    if (!StartImage(job_in, job_out, &j)) continue;
    const int w = j.width;
    const bool sub = j.sampling == kSampling422 || j.sampling == kSampling420;
    const bool h2v2 = j.sampling == kSampling420;
    const int ds_w = sub ? j.ds_w[1] : w;
    const bool fancy = ds_w > 2;  // libjpeg replicates narrow components
    // Per row: the pixels, plus up to two chroma columns read ahead.
    NEARPREP_SIM_WORK("UpsampleColor",
                      static_cast<uint64_t>(j.height) * (w + (sub ? (ds_w > 1 ? 2 : 1) : 0)),
                      j.height);
  rows_loop:
    for (int y = 0; y < j.height; ++y) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 16384
      // Sliding window of chroma columns (previous, current, next) as
      // libjpeg's "colsum" (h2v2: 3 * near + far; h2v1: the sample).
      int cb_prev = 0, cb_cur = 0, cb_next = 0, cr_prev = 0, cr_cur = 0, cr_next = 0;
      int cb_near = 0, cr_near = 0, cb_next_near = 0, cr_next_near = 0;
      if (sub) {
        const ChromaPair p0 = chroma.read();
        const ChromaPair p1 = ds_w > 1 ? chroma.read() : p0;
        cb_cur = h2v2 ? p0.cb_near * 3 + p0.cb_far : p0.cb_near;
        cr_cur = h2v2 ? p0.cr_near * 3 + p0.cr_far : p0.cr_near;
        cb_next = h2v2 ? p1.cb_near * 3 + p1.cb_far : p1.cb_near;
        cr_next = h2v2 ? p1.cr_near * 3 + p1.cr_far : p1.cr_near;
        cb_near = p0.cb_near;
        cr_near = p0.cr_near;
        cb_next_near = p1.cb_near;
        cr_next_near = p1.cr_near;
        cb_prev = cb_cur;
        cr_prev = cr_cur;
      }
    pixels:
      for (int x = 0; x < w; ++x) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 16384
        const int yy = luma.read();
        int cb = yy, cr = yy;
        if (j.sampling == kSampling444) {
          const ChromaPair p = chroma.read();
          cb = p.cb_near;
          cr = p.cr_near;
        } else if (sub) {
          const int c = x >> 1;
          if (!(x & 1) && c > 0) {  // move the window to chroma column c
            cb_prev = cb_cur;
            cr_prev = cr_cur;
            cb_cur = cb_next;
            cr_cur = cr_next;
            cb_near = cb_next_near;
            cr_near = cr_next_near;
            if (c + 1 < ds_w) {
              const ChromaPair p = chroma.read();
              cb_next = h2v2 ? p.cb_near * 3 + p.cb_far : p.cb_near;
              cr_next = h2v2 ? p.cr_near * 3 + p.cr_far : p.cr_near;
              cb_next_near = p.cb_near;
              cr_next_near = p.cr_near;
            } else {  // last column: the edge is replicated
              cb_next = cb_cur;
              cr_next = cr_cur;
            }
          }
          if (!fancy) {
            cb = cb_near;
            cr = cr_near;
          } else if (h2v2) {
            cb = (x & 1) ? (cb_cur * 3 + cb_next + 7) >> 4 : (cb_cur * 3 + cb_prev + 8) >> 4;
            cr = (x & 1) ? (cr_cur * 3 + cr_next + 7) >> 4 : (cr_cur * 3 + cr_prev + 8) >> 4;
          } else {
            cb = (x & 1) ? (cb_cur * 3 + cb_next + 2) >> 2 : (cb_cur * 3 + cb_prev + 1) >> 2;
            cr = (x & 1) ? (cr_cur * 3 + cr_next + 2) >> 2 : (cr_cur * 3 + cr_prev + 1) >> 2;
          }
        }
        Rgb px;
        if (j.sampling == kSamplingGray) {
          px.c[0] = px.c[1] = px.c[2] = static_cast<uint8_t>(yy);
        } else {
          YccToRgb(yy, cb, cr, px.c);
        }
        rgb.write(px);
      }
    }
  }
}

}  // namespace nearprep_fpga
