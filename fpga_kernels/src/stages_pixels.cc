// Dataflow processes from blocks to RGB pixels: Idct,
// McuRowReceive, RasterEmit, UpsampleColor. See dataflow.h.
#include <cstdint>

#include "dataflow.h"
#include "jpeg_l1.h"
#include "nearprep_kernel_abi.h"

namespace nearprep_fpga {
namespace {

// Pending lines of RasterEmit (4:2:0): the last luma row of the previous MCU
// row and its last chroma rows (Cb, Cr), kept when that MCU row is released.
constexpr int kPendLuma = 0, kPendCb = 1, kPendCr = 2;

// Where one raster row's samples come from: block rows of the MCU row held
// (luma row, chroma rows within the chroma plane) or the pending lines.
struct RowPlan {
  int y_row;
  bool y_pend;
  int n_row;  // nearer chroma row (4:2:x), the chroma row (4:4:4)
  bool n_pend;
  int f_row;  // farther chroma row (4:2:0 context; = n_row otherwise)
  bool f_pend;
  bool emit;  // the row is inside the crop box: send it downstream
  bool save;  // keep luma row 15 and this row's nearer chroma as pending lines
};

// Sample x of a row stored as 8-sample words.
inline uint8_t WordSample(uint64_t w, int x) { return static_cast<uint8_t>(w >> (8 * (x & 7))); }

// One raster row: w luma samples and the chroma pairs it needs (a pair every
// pixel for 4:4:4, every second for 4:2:x), in one loop; optionally copies
// the pending lines in the same pass. INLINE: the locked blocks stay in the
// process that holds the locks. Per iteration each memory sees at most two
// accesses: luma block 2 reads (the row, row 15 for the save), each chroma
// block 2 reads (near, far), each pending line 1 read + 1 write (near and
// far never both come from the pending line with different values: one
// read serves both).
void EmitRow(McuLumaBlock& yb, McuChromaBlock& cbb, McuChromaBlock& crb,
             uint8_t pend[3][kMcuRowWidth], const RowPlan& p, int w, int sampling,
             hls::stream<uint8_t, kPixelDepth>& luma,
             hls::stream<ChromaPair, kPixelDepth>& chroma) {
#pragma HLS INLINE
  NEARPREP_SIM_LOOP("RasterEmit.emit_row")
emit_row:
  for (int x = 0; x < w; ++x) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 16384 avg = 500
#pragma HLS DEPENDENCE variable = pend inter false
    NEARPREP_SIM_ITER();
    const uint8_t ypend = pend[kPendLuma][x];
    const uint8_t yv = p.y_pend ? ypend : WordSample(yb[p.y_row][x >> 3], x);
    if (p.emit) luma.write(yv);
    if (p.save) pend[kPendLuma][x] = WordSample(yb[15][x >> 3], x);
    if (sampling == kSamplingGray) continue;
    const bool sub = sampling != kSampling444;
    if (sub && (x & 1)) continue;
    const int c = sub ? x >> 1 : x;
    const uint8_t cbp = pend[kPendCb][c];
    const uint8_t crp = pend[kPendCr][c];
    const uint8_t cbn = p.n_pend ? cbp : WordSample(cbb[p.n_row][c >> 3], c);
    const uint8_t crn = p.n_pend ? crp : WordSample(crb[p.n_row][c >> 3], c);
    const uint8_t cbf = p.f_pend ? cbp : WordSample(cbb[p.f_row][c >> 3], c);
    const uint8_t crf = p.f_pend ? crp : WordSample(crb[p.f_row][c >> 3], c);
    if (p.emit) chroma.write(ChromaPair{cbn, cbf, crn, crf});
    if (p.save) {
      pend[kPendCb][c] = cbn;
      pend[kPendCr][c] = crn;
    }
  }
}

inline bool InCrop(const ImageJob& j, int y) { return y >= j.crop_y && y < j.crop_y + j.crop_h; }

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
  NEARPREP_SIM_LOOP("Idct.load_quant")
  load_quant:
    for (int k = 0; k < j.ncomp * 64; ++k) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 64 max = 192
      NEARPREP_SIM_ITER();
      qmul[k >> 6][k & 63] = quant.read();
    }
    // One flat loop, software-pipelined by hand: step t runs column pass
    // t % 8 of block t / 8 and row pass t % 8 of the block before it, with
    // the workspace double-buffered: 8 steps per block (+ 8 to drain).
    bool out_of_range = false;
    // The block being transformed: the column pass reads 8 coefficients per
    // step, so every coefficient is its own register.
    int16_t cur[64];
#pragma HLS ARRAY_PARTITION variable = cur complete
    uint8_t cur_comp = 0;
    for (int k = 0; k < 64; ++k) {
#pragma HLS UNROLL
      cur[k] = 0;
    }
    int ws[2][64];
#pragma HLS ARRAY_PARTITION variable = ws complete dim = 0
    const uint32_t steps = (j.blocks + 1) * 8;
  NEARPREP_SIM_LOOP("Idct.passes")
  passes:
    for (uint32_t t = 0; t < steps; ++t) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 16 max = 800000
      NEARPREP_SIM_ITER();
      const uint32_t b = t >> 3;
      const int s8 = static_cast<int>(t & 7);
      if (s8 == 0 && b < j.blocks) {
        const Block in = blocks.read();
        for (int k = 0; k < 64; ++k) {
#pragma HLS UNROLL
          cur[k] = in.coef[k];
        }
        cur_comp = in.comp;
      }
      if (b < j.blocks) {
        IdctColumn(cur, qmul[cur_comp < 3 ? cur_comp : 0], s8, ws[b & 1], &out_of_range);
      }
      if (b >= 1) {
        SampleRow row;
        IdctRow(ws[(b - 1) & 1], s8, row.s, &out_of_range);
        rows.write(row);
      }
    }
    status.write(StageStatus{out_of_range ? static_cast<uint32_t>(kStatusUnsupported)
                                          : static_cast<uint32_t>(kStatusOk),
                             steps});
  }
}

void McuRowReceive(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                   hls::stream<SampleRow, kRowDepth>& rows,
                   hls::stream<ImageJob, kJobDepth>& job_out, McuLumaStream& luma_rows,
                   McuChromaStream& cb_rows, McuChromaStream& cr_rows) {
images:
  for (uint32_t i = 0; i < num_images; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32 avg = 32
    ImageJob j;
    if (!StartImage(job_in, job_out, &j)) continue;
    const int nl = j.comp_h[0] * j.comp_v[0];
    const int per_mcu = nl + (j.ncomp == 3 ? 2 : 0);
    const int n_rows = j.mcus_x * per_mcu * 8;
  mcu_rows_loop:
    for (int m = 0; m < j.mcus_y; ++m) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 1024 avg = 24
      hls::write_lock<McuLumaBlock> y_lock(luma_rows);
      hls::write_lock<McuChromaBlock> cb_lock(cb_rows);
      hls::write_lock<McuChromaBlock> cr_lock(cr_rows);
      McuLumaBlock& yb = y_lock;
      McuChromaBlock& cbb = cb_lock;
      McuChromaBlock& crb = cr_lock;
      // Every block's 8 rows into its plane, one 8-sample word per
      // iteration, in one flat loop that walks (MCU, block, row): luma
      // blocks first (row-major by, bx), then Cb, then Cr.
      int mx = 0, b = 0, r = 0;
      NEARPREP_SIM_LOOP("McuRowReceive.receive")
    receive:
      for (int t = 0; t < n_rows; ++t) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 8 max = 98304 avg = 1500
        NEARPREP_SIM_ITER();
        const SampleRow row = rows.read();
        uint64_t word = 0;
        for (int k = 0; k < 8; ++k) {
#pragma HLS UNROLL
          word |= static_cast<uint64_t>(row.s[k]) << (8 * k);
        }
        const int c = b < nl ? 0 : b - nl + 1;
        const int by = c == 0 ? b / j.comp_h[0] : 0;
        const int bx = c == 0 ? b % j.comp_h[0] : 0;
        const int col = mx * (c == 0 ? j.comp_h[0] : 1) + bx;  // word column
        if (c == 0) {
          yb[by * 8 + r][col] = word;
        } else if (c == 1) {
          cbb[r][col] = word;
        } else {
          crb[r][col] = word;
        }
        if (++r == 8) {
          r = 0;
          if (++b == per_mcu) {
            b = 0;
            ++mx;
          }
        }
      }
    }
  }
}

void RasterEmit(uint32_t num_images, hls::stream<ImageJob, kJobDepth>& job_in,
                McuLumaStream& luma_rows, McuChromaStream& cb_rows, McuChromaStream& cr_rows,
                hls::stream<ImageJob, kJobDepth>& job_out,
                hls::stream<uint8_t, kPixelDepth>& luma,
                hls::stream<ChromaPair, kPixelDepth>& chroma) {
  // latency = 2: a registered BRAM output (timing at 225 MHz on -2LV; one
  // more cycle of EmitRow's pipeline depth, same II).
  uint8_t pend[3][kMcuRowWidth];
#pragma HLS ARRAY_PARTITION variable = pend complete dim = 1
#pragma HLS BIND_STORAGE variable = pend type = ram_2p impl = bram latency = 2
images:
  for (uint32_t i = 0; i < num_images; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 32 avg = 32
    ImageJob j;
    if (!StartImage(job_in, job_out, &j)) continue;
    const int w = j.width, h = j.height;
    const int rows_per_mcu_row = j.ncomp == 3 ? 8 * j.comp_v[0] : 8;
    const bool h2v2 = j.sampling == kSampling420;
    const int ds_h = j.ds_h[1];
  mcu_rows_loop:
    for (int m = 0; m < j.mcus_y; ++m) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 1024 avg = 24
      hls::read_lock<McuLumaBlock> y_lock(luma_rows);
      hls::read_lock<McuChromaBlock> cb_lock(cb_rows);
      hls::read_lock<McuChromaBlock> cr_lock(cr_rows);
      McuLumaBlock& yb = y_lock;
      McuChromaBlock& cbb = cb_lock;
      McuChromaBlock& crb = cr_lock;
      const int y0 = m * rows_per_mcu_row;
      if (!h2v2) {
      plain_rows:
        for (int r = 0; r < rows_per_mcu_row && y0 + r < h; ++r) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 8 avg = 8
          if (!InCrop(j, y0 + r)) continue;
          const RowPlan p{r, false, r, false, r, false, true, false};
          EmitRow(yb, cbb, crb, pend, p, w, j.sampling, luma, chroma);
        }
        continue;
      }
      // 4:2:0: first the last row of MCU row m-1, deferred until now (its
      // farther chroma row is this MCU row's first); it and its nearer
      // chroma row were kept as the pending lines.
      if (m > 0 && InCrop(j, y0 - 1)) {
        const RowPlan p{0, true, 0, true, 0, false, true, false};
        EmitRow(yb, cbb, crb, pend, p, w, j.sampling, luma, chroma);
      }
    h2v2_rows:
      for (int r = 0; r < 16 && y0 + r < h; ++r) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 16 avg = 16
        const int y = y0 + r;
        const int in_row = y >> 1;
        int far = (y & 1) ? in_row + 1 : in_row - 1;
        if (far < 0) far = 0;                  // top context = row 0
        if (far > ds_h - 1) far = ds_h - 1;    // bottom row replicated
        const int near_local = in_row - 8 * m;  // 0..7
        const int far_local = far - 8 * m;      // -1..8
        if (far_local == 8) continue;           // r == 15, not the last MCU row: deferred
        // Row 14 of an MCU row with a successor keeps luma row 15 and chroma
        // row 7 (its nearer row) as the pending lines, in the same pass.
        const bool save = r == 14 && m + 1 < j.mcus_y;
        const bool emit = InCrop(j, y);
        if (!emit && !save) continue;
        const RowPlan p{r, false, near_local, false, far_local < 0 ? 0 : far_local,
                        far_local < 0, emit, save};
        EmitRow(yb, cbb, crb, pend, p, w, j.sampling, luma, chroma);
      }
    }
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
    // Only the crop box's rows arrive (RasterEmit drops the others), whole;
    // only the crop box's columns leave.
    const int x_end = j.crop_x + j.crop_w;
  rows_loop:
    for (int y = 0; y < j.crop_h; ++y) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 16384 avg = 300
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
    NEARPREP_SIM_LOOP("UpsampleColor.pixels")
    pixels:
      for (int x = 0; x < w; ++x) {
#pragma HLS PIPELINE II = 1
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 16384
        NEARPREP_SIM_ITER();
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
        if (x >= j.crop_x && x < x_end) rgb.write(px);
      }
    }
  }
}

}  // namespace nearprep_fpga
