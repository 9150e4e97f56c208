// L1 JPEG decode functions; see jpeg_l1.h. The arithmetic follows
// libjpeg-turbo's jdmarker.c, jdhuff.c, jidctfst.c and jdcolor.c (facts of
// the algorithms, re-implemented here).
#include "jpeg_l1.h"

#include <cstdint>

#include "nearprep_kernel_abi.h"

namespace nearprep_fpga {
namespace {

// AA&N scale factors, 14-bit fixed point (jddctmgr.c's aanscales).
constexpr int16_t kAanScales[64] = {
    16384, 22725, 21407, 19266, 16384, 12873, 8867,  4520,
    22725, 31521, 29692, 26722, 22725, 17855, 12299, 6270,
    21407, 29692, 27969, 25172, 21407, 16819, 11585, 5906,
    19266, 26722, 25172, 22654, 19266, 15137, 10426, 5315,
    16384, 22725, 21407, 19266, 16384, 12873, 8867,  4520,
    12873, 17855, 16819, 15137, 12873, 10114, 6967,  3552,
    8867,  12299, 11585, 10426, 8867,  6967,  4799,  2446,
    4520,  6270,  5906,  5315,  4520,  3552,  2446,  1247};

inline int ReadU16(const uint8_t* p) { return (p[0] << 8) | p[1]; }

// libjpeg's post-IDCT range limit: table index x & 1023, sample = x + 128
// clamped for x in [-512, 511], wrapping beyond as the table does.
inline uint8_t IdctRangeLimit(int x) {
  const int y = x & 1023;
  if (y < 128) return static_cast<uint8_t>(y + 128);
  if (y < 512) return 255;
  if (y < 896) return 0;
  return static_cast<uint8_t>(y - 896);
}

// sample_range_limit: clamp to [0, 255].
inline uint8_t Clamp255(int x) {
  return static_cast<uint8_t>(x < 0 ? 0 : (x > 255 ? 255 : x));
}

// Multiply by an 8-bit fixed-point constant and shift right (no rounding),
// as jidctfst.c's MULTIPLY does with CONST_BITS 8. IdctIfast only feeds
// values of magnitude <= kSimdSafe-bounded butterflies here (|v| < 2^17), so
// the product fits easily; it is formed in 64 bits anyway so that no input
// can make the C simulation overflow.
inline int Mul8(int v, int c) {
  return static_cast<int>((static_cast<int64_t>(v) * c) >> 8);
}

constexpr int kFix1_082392200 = 277;
constexpr int kFix1_414213562 = 362;
constexpr int kFix1_847759065 = 473;
constexpr int kFix2_613125930 = 669;
constexpr int kPass1Bits = 2;

// libjpeg-turbo's x86 SIMD IFAST IDCT computes in 16-bit lanes (with a 2-bit
// pre-shift before its multiplies) and saturates its output, where the C code
// uses int and a wrapping range-limit table. Both agree whenever every
// intermediate stays in range (below); outside that (only seen on damaged or
// synthetic streams) the block is flagged and the image goes to the CPU.
// (Values fed to a multiply are pre-shifted by 2 bits in the SIMD code, so
// they get half the range; every other value must fit +-16383 so that the
// final descale lands in [-512, 511], where table and saturation agree.)
constexpr int kSimdSafe = 16383;
inline int Track(int v, bool* out_of_range) {
  *out_of_range |= v > kSimdSafe || v < -kSimdSafe;
  return v;
}
inline int TrackMul(int v, bool* out_of_range) {
  // Pre-shifted by 2 bits in the SIMD code: must stay <= 16383 after doubling.
  *out_of_range |= 2 * v > kSimdSafe || -2 * v > kSimdSafe;
  return v;
}
// A pass input that is already out of range is replaced by 0 so that the
// following pass cannot overflow int (its result is refused anyway).
inline int Sane(int v) { return v > kSimdSafe || v < -kSimdSafe ? 0 : v; }

// One 1-D IFAST butterfly; in[] dequantised (pass 1) or workspace (pass 2).
// *range ORs one out-of-range flag per value (no running maximum carried
// across values).
inline void Idct1D(const int in[8], int out[8], bool* peak) {
#pragma HLS INLINE
  for (int i = 0; i < 8; ++i) Track(in[i], peak);
  // Even part.
  int tmp10 = Track(in[0] + in[4], peak);
  int tmp11 = Track(in[0] - in[4], peak);
  int tmp13 = Track(in[2] + in[6], peak);
  int tmp12 = Track(Mul8(TrackMul(in[2] - in[6], peak), kFix1_414213562) - tmp13, peak);
  int tmp0 = Track(tmp10 + tmp13, peak);
  int tmp3 = Track(tmp10 - tmp13, peak);
  int tmp1 = Track(tmp11 + tmp12, peak);
  int tmp2 = Track(tmp11 - tmp12, peak);
  // Odd part.
  int z13 = Track(in[5] + in[3], peak);
  int z10 = Track(in[5] - in[3], peak);
  int z11 = Track(in[1] + in[7], peak);
  int z12 = Track(in[1] - in[7], peak);
  int tmp7 = Track(z11 + z13, peak);
  tmp11 = Track(Mul8(TrackMul(z11 - z13, peak), kFix1_414213562), peak);
  int z5 = Track(Mul8(TrackMul(z10 + z12, peak), kFix1_847759065), peak);
  tmp10 = Track(Mul8(TrackMul(z12, peak), kFix1_082392200) - z5, peak);
  tmp12 = Track(Mul8(TrackMul(z10, peak), -kFix2_613125930) + z5, peak);
  int tmp6 = Track(tmp12 - tmp7, peak);
  int tmp5 = Track(tmp11 - tmp6, peak);
  int tmp4 = Track(tmp10 + tmp5, peak);
  out[0] = Track(tmp0 + tmp7, peak);
  out[7] = Track(tmp0 - tmp7, peak);
  out[1] = Track(tmp1 + tmp6, peak);
  out[6] = Track(tmp1 - tmp6, peak);
  out[2] = Track(tmp2 + tmp5, peak);
  out[5] = Track(tmp2 - tmp5, peak);
  out[4] = Track(tmp3 + tmp4, peak);
  out[3] = Track(tmp3 - tmp4, peak);
}


// jdcolor.c's Y/Cb/Cr -> RGB table entries (SCALEBITS 16), computed per
// pixel instead of looked up: each is one constant multiply, and no table
// with a run-time initialiser (guard variables, a library call) is needed.
constexpr int kColorScaleBits = 16;
constexpr int32_t kColorOneHalf = int32_t{1} << (kColorScaleBits - 1);
constexpr int32_t kFix1_402 = static_cast<int32_t>(1.40200 * 65536.0 + 0.5);
constexpr int32_t kFix1_772 = static_cast<int32_t>(1.77200 * 65536.0 + 0.5);
constexpr int32_t kFix0_714 = static_cast<int32_t>(0.71414 * 65536.0 + 0.5);
constexpr int32_t kFix0_344 = static_cast<int32_t>(0.34414 * 65536.0 + 0.5);
inline int CrToR(int cr) { return (kFix1_402 * (cr - 128) + kColorOneHalf) >> kColorScaleBits; }
inline int CbToB(int cb) { return (kFix1_772 * (cb - 128) + kColorOneHalf) >> kColorScaleBits; }
inline int CbCrToG(int cb, int cr) {
  return (-kFix0_344 * (cb - 128) + kColorOneHalf + -kFix0_714 * (cr - 128)) >>
         kColorScaleBits;
}

}  // namespace

bool ValidateHuffSpec(HuffSpec* t, bool is_dc) {
  int total = 0;
  for (int l = 1; l <= 16; ++l) total += t->bits[l];
  if (total > 256) return false;
  int32_t code = 0;
  for (int l = 1; l <= 16; ++l) {
    if (t->bits[l] > 0) {
      // jdhuff.c's check: the codes of length l (after the all-ones code
      // would be used) must fit in l bits. Checked up front so that an
      // over-subscribed length never indexes past look[].
      if (code + t->bits[l] >= (int32_t{1} << l)) return false;
      code += t->bits[l];
    }
    code <<= 1;
  }
  if (is_dc) {
    for (int i = 0; i < total; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 0 max = 256 avg = 12
      if (t->vals[i] > 15) return false;
    }
  }
  t->present = true;
  return true;
}

bool SegmentIsParsed(int m) {
  return m == 0xC0 || m == 0xC1 || m == 0xC4 || m == 0xDB || m == 0xDD || m == 0xEE ||
         m == 0xDA;
}

uint32_t ParseSegment(int m, const uint8_t* seg, uint32_t n, JpegHeader* hdr) {
  switch (m) {
    case 0xC0:
    case 0xC1: {  // baseline / extended sequential Huffman
      if (hdr->have_sof) return kStatusCorrupt;
      hdr->have_sof = true;
      if (n < 6) return kStatusCorrupt;
      if (seg[0] != 8) return kStatusUnsupported;  // 12-bit
      hdr->height = ReadU16(seg + 1);
      hdr->width = ReadU16(seg + 3);
      hdr->ncomp = seg[5];
      if (hdr->height == 0 || hdr->width == 0) return kStatusCorrupt;
      if (hdr->ncomp == 0) return kStatusCorrupt;
      if (n != 6u + 3u * hdr->ncomp) return kStatusCorrupt;
      if (hdr->ncomp != 1 && hdr->ncomp != 3) return kStatusUnsupported;
      for (int c = 0; c < hdr->ncomp; ++c) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 3 avg = 3
        JpegComponent& jc = hdr->comp[c];
        jc.id = seg[6 + 3 * c];
        jc.h = seg[7 + 3 * c] >> 4;
        jc.v = seg[7 + 3 * c] & 15;
        jc.tq = seg[8 + 3 * c];
        if (jc.h < 1 || jc.h > 4 || jc.v < 1 || jc.v > 4) return kStatusCorrupt;
        if (jc.tq > 3) return kStatusCorrupt;
      }
      break;
    }
    case 0xC2: case 0xC3: case 0xC5: case 0xC6: case 0xC7:
    case 0xC9: case 0xCA: case 0xCB: case 0xCD: case 0xCE: case 0xCF:
    case 0xCC:  // DAC: arithmetic conditioning
      return kStatusUnsupported;
    case 0xC4: {  // DHT
      uint32_t q = 0;
      while (q < n) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 4 avg = 2
        if (q + 17 > n) return kStatusCorrupt;
        const int tc = seg[q] >> 4, th = seg[q] & 15;
        if (tc > 1 || th > 3) return kStatusCorrupt;
        HuffSpec& t = tc == 0 ? hdr->dc[th] : hdr->ac[th];
        t = HuffSpec();
        int count = 0;
        for (int l = 1; l <= 16; ++l) {
          t.bits[l] = seg[q + l];
          count += t.bits[l];
        }
        q += 17;
        if (count > 256 || q + count > n) return kStatusCorrupt;
        for (int i = 0; i < count; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 0 max = 256 avg = 100
          t.vals[i] = seg[q + i];
        }
        q += count;
        if (!ValidateHuffSpec(&t, tc == 0)) return kStatusCorrupt;
      }
      break;
    }
    case 0xDB: {  // DQT
      uint32_t q = 0;
      while (q < n) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 4 avg = 2
        const int pq = seg[q] >> 4, tq = seg[q] & 15;
        if (tq > 3 || pq > 1) return kStatusCorrupt;
        const uint32_t need = 1 + 64 * (pq + 1);
        if (q + need > n) return kStatusCorrupt;
        for (int i = 0; i < 64; ++i) {
          const int v = pq ? ReadU16(seg + q + 1 + 2 * i) : seg[q + 1 + i];
          hdr->qt[tq][kNatural[i]] = static_cast<uint16_t>(v);
        }
        hdr->qt_present[tq] = true;
        q += need;
      }
      break;
    }
    case 0xDD:  // DRI
      if (n != 2) return kStatusCorrupt;
      hdr->restart_interval = ReadU16(seg);
      break;
    case 0xEE:  // APP14: Adobe
      // Byte compares, not memcmp: a library call has no hardware.
      if (n >= 12 && seg[0] == 'A' && seg[1] == 'd' && seg[2] == 'o' &&
          seg[3] == 'b' && seg[4] == 'e') {
        hdr->saw_adobe = true;
        hdr->adobe_transform = seg[11];
      }
      break;
    case 0xDA: {  // SOS
      if (!hdr->have_sof) return kStatusCorrupt;
      if (n < 1) return kStatusCorrupt;
      const int ns = seg[0];
      if (n != 4u + 2u * ns || ns < 1 || ns > 4) return kStatusCorrupt;
      if (ns != hdr->ncomp) return kStatusUnsupported;  // multi-scan
      for (int i = 0; i < ns; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 3 avg = 3
        const int cid = seg[1 + 2 * i];
        int c = -1;
        for (int k = 0; k < hdr->ncomp; ++k) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 3 avg = 3
          if (hdr->comp[k].id == cid) c = k;
        }
        if (c != i) return c < 0 ? kStatusCorrupt : kStatusUnsupported;
        hdr->comp[c].td = seg[2 + 2 * i] >> 4;
        hdr->comp[c].ta = seg[2 + 2 * i] & 15;
        if (hdr->comp[c].td > 3 || hdr->comp[c].ta > 3) return kStatusCorrupt;
      }
      const int ss = seg[1 + 2 * ns], se = seg[2 + 2 * ns],
                ahal = seg[3 + 2 * ns];
      if (ss != 0 || se != 63 || ahal != 0) return kStatusCorrupt;
      // Checks that need the whole frame.
      for (int c = 0; c < hdr->ncomp; ++c) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 3 avg = 3
        const JpegComponent& jc = hdr->comp[c];
        if (!hdr->qt_present[jc.tq]) return kStatusUnsupported;
        if (!hdr->dc[jc.td].present || !hdr->ac[jc.ta].present) {
          return kStatusUnsupported;  // libjpeg substitutes std tables
        }
      }
      if (hdr->ncomp == 3) {
        if (hdr->saw_adobe && hdr->adobe_transform == 0) {
          return kStatusUnsupported;  // RGB JPEG
        }
        if (hdr->comp[0].id == 'R' && hdr->comp[1].id == 'G' &&
            hdr->comp[2].id == 'B') {
          return kStatusUnsupported;
        }
      }
      int hmax = 1, vmax = 1;
      for (int c = 0; c < hdr->ncomp; ++c) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 3 avg = 3
        if (hdr->comp[c].h > hmax) hmax = hdr->comp[c].h;
        if (hdr->comp[c].v > vmax) vmax = hdr->comp[c].v;
      }
      hdr->hmax = hmax;
      hdr->vmax = vmax;
      if (hdr->ncomp == 1) {
        hdr->sampling = kSamplingGray;
      } else {
        const JpegComponent &y = hdr->comp[0], &cb = hdr->comp[1],
                            &cr = hdr->comp[2];
        if (y.h != hmax || y.v != vmax || cb.h != cr.h || cb.v != cr.v) {
          return kStatusUnsupported;
        }
        if (hmax % cb.h || vmax % cb.v) return kStatusUnsupported;
        const int rh = hmax / cb.h, rv = vmax / cb.v;
        if (rh == 1 && rv == 1) {
          hdr->sampling = kSampling444;
        } else if (rh == 2 && rv == 1) {
          hdr->sampling = kSampling422;
        } else if (rh == 2 && rv == 2) {
          hdr->sampling = kSampling420;
        } else {
          return kStatusUnsupported;
        }
        int blocks = 0;
        for (int c = 0; c < 3; ++c) blocks += hdr->comp[c].h * hdr->comp[c].v;
        if (blocks > 10) return kStatusCorrupt;  // libjpeg: bad MCU size
      }
      for (int c = 0; c < hdr->ncomp; ++c) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 3 avg = 3
        JpegComponent& jc = hdr->comp[c];
        jc.ds_w = static_cast<int>(
            (static_cast<int64_t>(hdr->width) * jc.h + hmax - 1) / hmax);
        jc.ds_h = static_cast<int>(
            (static_cast<int64_t>(hdr->height) * jc.v + vmax - 1) / vmax);
      }
      hdr->interleaved = hdr->ncomp > 1;
      if (hdr->interleaved) {
        hdr->mcus_x = (hdr->width + 8 * hmax - 1) / (8 * hmax);
        hdr->mcus_y = (hdr->height + 8 * vmax - 1) / (8 * vmax);
        for (int c = 0; c < hdr->ncomp; ++c) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = 3 avg = 3
        }
      } else {
        const JpegComponent& jc = hdr->comp[0];
        hdr->mcus_x = (jc.ds_w + 7) / 8;
        hdr->mcus_y = (jc.ds_h + 7) / 8;
      }
      hdr->done = true;
      return kStatusOk;
    }
    case 0xC8:  // JPG: a SOF type libjpeg refuses (JERR_SOF_UNSUPPORTED)
    case 0xF7:  // JPEG-LS SOF55
      return kStatusUnsupported;
    default:
      // libjpeg's read_markers skips only APPn, COM and DNL; any other
      // marker here (JPGn, DHP, EXP, reserved codes) is JERR_UNKNOWN_MARKER.
      if (!((m >= 0xE0 && m <= 0xEF) || m == 0xFE || m == 0xDC)) {
        return kStatusCorrupt;
      }
      break;
  }
  return kStatusOk;
}

void IfastMultipliers(const uint16_t qt[64], int16_t qmul[64]) {
  for (int i = 0; i < 64; ++i) {
    const int64_t p = static_cast<int64_t>(qt[i]) * kAanScales[i];
    // DESCALE(p, 14 - 2) with rounding, then libjpeg stores it in a short.
    qmul[i] = static_cast<int16_t>((p + (1 << 11)) >> 12);
  }
}

void IdctColumn(const int16_t coef[64], const int16_t qmul[64], int c, int ws[64],
                bool* out_of_range) {
#pragma HLS INLINE
  // One flag per value, ORed: the refusal is identical to checking the
  // largest magnitude before each pass. A value refused before a pass is
  // zeroed (Sane) so that no later butterfly can overflow int.
  int in[8], o[8];
  for (int r = 0; r < 8; ++r) {
    const int v = coef[r * 8 + c] * qmul[r * 8 + c];  // |int16 * int16| <= 2^30
    Track(v, out_of_range);
    in[r] = Sane(v);
  }
  Idct1D(in, o, out_of_range);
  for (int r = 0; r < 8; ++r) ws[r * 8 + c] = Sane(o[r]);
}

void IdctRow(const int ws[64], int r, uint8_t out[8], bool* out_of_range) {
#pragma HLS INLINE
  int o[8];
  Idct1D(&ws[r * 8], o, out_of_range);
  for (int c = 0; c < 8; ++c) out[c] = IdctRangeLimit(o[c] >> (kPass1Bits + 3));
}

void YccToRgb(int y, int cb, int cr, uint8_t rgb[3]) {
#pragma HLS INLINE
  rgb[0] = Clamp255(y + CrToR(cr));
  rgb[1] = Clamp255(y + CbCrToG(cb, cr));
  rgb[2] = Clamp255(y + CbToB(cb));
}

}  // namespace nearprep_fpga
