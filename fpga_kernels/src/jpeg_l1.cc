// L1 JPEG decode functions; see jpeg_l1.h. The arithmetic follows
// libjpeg-turbo's jdhuff.c, jidctfst.c, jdsample.c and jdcolor.c (facts of
// the algorithms, re-implemented here).
#include "jpeg_l1.h"

#include <cstdint>

#include "nearprep_kernel_abi.h"

namespace nearprep_fpga {
namespace {

// Zig-zag index -> natural index, with libjpeg's 16 extra entries so that a
// corrupt run past 63 lands on coefficient 63 (as jpeg_natural_order does).
constexpr uint8_t kNatural[64 + 16] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,
    12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28,
    35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
    58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
    63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63};

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

// Builds the canonical decode tables; false when libjpeg would reject the
// table (JERR_BAD_HUFF_TABLE, "Bogus Huffman table definition"). The code
// counts are validated before any lookahead entry is written: with
// code + bits[l] < 2^l for every length, each 9-bit lookahead index stays
// below 512.
bool BuildHuffTable(HuffTable* t, bool is_dc) {
  int total = 0;
  for (int l = 1; l <= 16; ++l) total += t->bits[l];
  if (total > 256) return false;
  int32_t code = 0;
  int k = 0;
  for (int l = 1; l <= 16; ++l) {
    t->valoffset[l] = k - code;
    if (t->bits[l] > 0) {
      // jdhuff.c's check: the codes of length l (after the all-ones code
      // would be used) must fit in l bits. Checked up front so that an
      // over-subscribed length never indexes past look[].
      if (code + t->bits[l] >= (int32_t{1} << l)) return false;
      for (int i = 0; i < t->bits[l]; ++i) {
        if (l <= 9) {
          const int shift = 9 - l;
          const int base = code << shift;
          for (int j = 0; j < (1 << shift); ++j) {
            t->look[base + j] = static_cast<uint16_t>((l << 8) | t->vals[k]);
          }
        }
        ++code;
        ++k;
      }
      t->maxcode[l] = code - 1;
    } else {
      t->maxcode[l] = -1;
    }
    code <<= 1;
  }
  t->maxcode[17] = 0x7FFFFFFF;
  if (is_dc) {
    for (int i = 0; i < total; ++i) {
      if (t->vals[i] > 15) return false;
    }
  }
  t->present = true;
  return true;
}

// Bit reader over the entropy-coded segment with libjpeg's marker rules:
// FF 00 is a data FF, FF FF.. 00 too; any other FF xx is a marker, after which
// zeros are supplied. Consuming a supplied zero (or reading past the end) is
// an overrun: libjpeg warns there, which TF_COMPAT treats as corrupt.
struct BitReader {
  const uint8_t* data;
  uint32_t pos, end;
  uint64_t acc = 0;
  int nbits = 0;
  int fake = 0;  // supplied zero bits at the bottom of acc
  bool marker = false;
  uint32_t marker_pos = 0;
  bool overrun = false;

  void Fill() {
#pragma HLS INLINE
  fill_loop:
    for (int i = 0; i < 8 && nbits <= 56; ++i) {
#pragma HLS PIPELINE II = 1
      uint32_t byte = 0;
      if (marker) {
        fake += 8;
      } else if (pos >= end) {
        marker = true;
        marker_pos = end;
        fake += 8;
      } else {
        byte = data[pos];
        if (byte == 0xFF) {
          uint32_t p = pos + 1;
          while (p < end && data[p] == 0xFF) ++p;
          if (p < end && data[p] == 0x00) {
            pos = p + 1;
          } else {
            marker = true;
            marker_pos = pos;
            byte = 0;
            fake += 8;
          }
        } else {
          ++pos;
        }
      }
      acc = (acc << 8) | byte;
      nbits += 8;
    }
  }
  uint32_t Peek(int n) {
#pragma HLS INLINE
    if (nbits < n) Fill();
    return static_cast<uint32_t>(acc >> (nbits - n)) & ((1u << n) - 1);
  }
  void Skip(int n) {
    nbits -= n;
    if (nbits < fake) {
      overrun = true;
      fake = nbits;
    }
  }
  uint32_t Get(int n) {
    if (n == 0) return 0;
    const uint32_t v = Peek(n);
    Skip(n);
    return v;
  }
  // Restart: drop buffered bits, then expect RSTn (after fill FFs) with no
  // extraneous bytes in between.
  bool Restart(int expected_rst) {
    // Everything buffered must be padding of the current byte: whole
    // unread data bytes before the marker are extraneous (corrupt).
    if (nbits - fake >= 8) return false;
    const uint32_t p0 = marker ? marker_pos : pos;
    uint32_t p = p0;
    if (p >= end || data[p] != 0xFF) return false;
    while (p < end && data[p] == 0xFF) ++p;
    if (p >= end || data[p] != 0xD0 + expected_rst) return false;
    pos = p + 1;
    acc = 0;
    nbits = 0;
    fake = 0;
    marker = false;
    overrun = false;
    return true;
  }
};

// Returns the symbol, or -1 for a bad code (libjpeg: JWRN_HUFF_BAD_CODE).
int DecodeHuff(BitReader& br, const HuffTable& t, uint64_t* symbols) {
#pragma HLS INLINE
  ++*symbols;
  const uint32_t look = br.Peek(9);
  const uint16_t e = t.look[look];
  if (e >> 8) {
    br.Skip(e >> 8);
    return e & 0xFF;
  }
  const uint32_t bits16 = br.Peek(16);
slow_loop:
  for (int l = 10; l <= 16; ++l) {
    const int32_t code = static_cast<int32_t>(bits16 >> (16 - l));
    if (code <= t.maxcode[l]) {
      br.Skip(l);
      const int idx = code + t.valoffset[l];
      if (idx < 0 || idx > 255) return -1;
      return t.vals[idx];
    }
  }
  return -1;
}

inline int Extend(uint32_t v, int s) {
  return v < (1u << (s - 1)) ? static_cast<int>(v) - (1 << s) + 1
                             : static_cast<int>(v);
}

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
inline int Track(int v, int* peak) {
  const int a = v < 0 ? -v : v;
  if (a > *peak) *peak = a;
  return v;
}
inline int TrackMul(int v, int* peak) {
  const int a = v < 0 ? -2 * v : 2 * v;  // must stay <= 16383 after doubling
  if (a > *peak) *peak = a;
  return v;
}

// One 1-D IFAST butterfly; in[] dequantised (pass 1) or workspace (pass 2).
inline void Idct1D(const int in[8], int out[8], int* peak) {
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

}  // namespace

void IfastMultipliers(const uint16_t qt[64], int16_t qmul[64]) {
  for (int i = 0; i < 64; ++i) {
    const int64_t p = static_cast<int64_t>(qt[i]) * kAanScales[i];
    // DESCALE(p, 14 - 2) with rounding, then libjpeg stores it in a short.
    qmul[i] = static_cast<int16_t>((p + (1 << 11)) >> 12);
  }
}

bool IdctIfast(const int16_t coef[64], const int16_t qmul[64], uint8_t* out,
               int stride) {
  int deq[64];
  int ws[64];
  int peak = 0;
#pragma HLS ARRAY_PARTITION variable = deq complete
#pragma HLS ARRAY_PARTITION variable = ws complete
  // The range checks run before each pass, not only at the end: with every
  // pass input within +-kSimdSafe no butterfly value can overflow int
  // (|values| stay below 2^25), so damaged coefficients (int16 * int16 can
  // reach 2^30) are refused before they could overflow. Blocks that pass
  // every check compute exactly as before; on refusal `out` is not written.
dequant:
  for (int i = 0; i < 64; ++i) {
#pragma HLS UNROLL
    deq[i] = Track(coef[i] * qmul[i], &peak);  // |int16 * int16| <= 2^30
  }
  if (peak > kSimdSafe) return false;
cols:
  for (int c = 0; c < 8; ++c) {
#pragma HLS PIPELINE II = 1
    int in[8], o[8];
    for (int r = 0; r < 8; ++r) in[r] = deq[r * 8 + c];
    Idct1D(in, o, &peak);
    for (int r = 0; r < 8; ++r) ws[r * 8 + c] = o[r];
  }
  if (peak > kSimdSafe) return false;
rows:
  for (int r = 0; r < 8; ++r) {
#pragma HLS PIPELINE II = 1
    int o[8];
    Idct1D(&ws[r * 8], o, &peak);
    for (int c = 0; c < 8; ++c) {
      out[r * stride + c] = IdctRangeLimit(o[c] >> (kPass1Bits + 3));
    }
  }
  return peak <= kSimdSafe;
}

uint32_t PeekJpegSize(const uint8_t* data, uint32_t size, int* height,
                      int* width, int* components) {
  if (size < 4 || data[0] != 0xFF || data[1] != 0xD8) return kStatusCorrupt;
  uint32_t p = 2;
  for (int guard = 0; guard < 100000; ++guard) {
    while (p < size && data[p] != 0xFF) ++p;  // tolerate junk; libjpeg warns
    while (p < size && data[p] == 0xFF) ++p;
    if (p >= size) return kStatusCorrupt;
    const int m = data[p++];
    if (m == 0xD8 || m == 0xD9 || (m >= 0xD0 && m <= 0xD7) || m == 0x01) continue;
    if (size - p < 2) return kStatusCorrupt;
    const int len = ReadU16(data + p);
    if (len < 2 || static_cast<uint32_t>(len) > size - p) return kStatusCorrupt;
    if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
      if (len < 8) return kStatusCorrupt;
      *height = ReadU16(data + p + 3);
      *width = ReadU16(data + p + 5);
      *components = data[p + 7];
      return kStatusOk;
    }
    p += len;
  }
  return kStatusCorrupt;
}

uint32_t ParseJpegHeaders(const uint8_t* data, uint32_t size, JpegInfo* info) {
  *info = JpegInfo();
  if (size < 4 || data[0] != 0xFF || data[1] != 0xD8) return kStatusCorrupt;
  uint32_t p = 2;
  bool have_sof = false;
markers:
  for (int guard = 0; guard < 65536; ++guard) {
    // libjpeg's next_marker warns (JWRN_EXTRANEOUS_DATA) on junk: corrupt.
    if (p >= size || data[p] != 0xFF) return kStatusCorrupt;
    while (p < size && data[p] == 0xFF) ++p;
    if (p >= size) return kStatusCorrupt;
    const int m = data[p++];
    if (m == 0xD8 || m == 0xD9 || (m >= 0xD0 && m <= 0xD7) || m == 0x01 ||
        m == 0x00) {
      return kStatusCorrupt;  // unexpected standalone marker before SOS
    }
    if (size - p < 2) return kStatusCorrupt;
    const uint32_t len = ReadU16(data + p);
    if (len < 2 || len > size - p) return kStatusCorrupt;
    const uint8_t* seg = data + p + 2;
    const uint32_t n = len - 2;
    switch (m) {
      case 0xC0:
      case 0xC1: {  // baseline / extended sequential Huffman
        if (have_sof) return kStatusCorrupt;
        have_sof = true;
        if (n < 6) return kStatusCorrupt;
        if (seg[0] != 8) return kStatusUnsupported;  // 12-bit
        info->height = ReadU16(seg + 1);
        info->width = ReadU16(seg + 3);
        info->ncomp = seg[5];
        if (info->height == 0 || info->width == 0) return kStatusCorrupt;
        if (info->ncomp == 0) return kStatusCorrupt;
        if (n != 6u + 3u * info->ncomp) return kStatusCorrupt;
        if (info->ncomp != 1 && info->ncomp != 3) return kStatusUnsupported;
        for (int c = 0; c < info->ncomp; ++c) {
          JpegComponent& jc = info->comp[c];
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
          if (q + 17 > n) return kStatusCorrupt;
          const int tc = seg[q] >> 4, th = seg[q] & 15;
          if (tc > 1 || th > 3) return kStatusCorrupt;
          HuffTable& t = tc == 0 ? info->dc[th] : info->ac[th];
          t = HuffTable();
          int count = 0;
          for (int l = 1; l <= 16; ++l) {
            t.bits[l] = seg[q + l];
            count += t.bits[l];
          }
          q += 17;
          if (count > 256 || q + count > n) return kStatusCorrupt;
          for (int i = 0; i < count; ++i) t.vals[i] = seg[q + i];
          q += count;
          if (!BuildHuffTable(&t, tc == 0)) return kStatusCorrupt;
        }
        break;
      }
      case 0xDB: {  // DQT
        uint32_t q = 0;
        while (q < n) {
          const int pq = seg[q] >> 4, tq = seg[q] & 15;
          if (tq > 3 || pq > 1) return kStatusCorrupt;
          const uint32_t need = 1 + 64 * (pq + 1);
          if (q + need > n) return kStatusCorrupt;
          for (int i = 0; i < 64; ++i) {
            const int v = pq ? ReadU16(seg + q + 1 + 2 * i) : seg[q + 1 + i];
            info->qt[tq][kNatural[i]] = static_cast<uint16_t>(v);
          }
          info->qt_present[tq] = true;
          q += need;
        }
        break;
      }
      case 0xDD:  // DRI
        if (n != 2) return kStatusCorrupt;
        info->restart_interval = ReadU16(seg);
        break;
      case 0xEE:  // APP14: Adobe
        // Byte compares, not memcmp: a library call has no hardware.
        if (n >= 12 && seg[0] == 'A' && seg[1] == 'd' && seg[2] == 'o' &&
            seg[3] == 'b' && seg[4] == 'e') {
          info->saw_adobe = true;
          info->adobe_transform = seg[11];
        }
        break;
      case 0xDA: {  // SOS
        if (!have_sof) return kStatusCorrupt;
        if (n < 1) return kStatusCorrupt;
        const int ns = seg[0];
        if (n != 4u + 2u * ns || ns < 1 || ns > 4) return kStatusCorrupt;
        if (ns != info->ncomp) return kStatusUnsupported;  // multi-scan
        for (int i = 0; i < ns; ++i) {
          const int cid = seg[1 + 2 * i];
          int c = -1;
          for (int k = 0; k < info->ncomp; ++k) {
            if (info->comp[k].id == cid) c = k;
          }
          if (c != i) return c < 0 ? kStatusCorrupt : kStatusUnsupported;
          info->comp[c].td = seg[2 + 2 * i] >> 4;
          info->comp[c].ta = seg[2 + 2 * i] & 15;
          if (info->comp[c].td > 3 || info->comp[c].ta > 3) return kStatusCorrupt;
        }
        const int ss = seg[1 + 2 * ns], se = seg[2 + 2 * ns],
                  ahal = seg[3 + 2 * ns];
        if (ss != 0 || se != 63 || ahal != 0) return kStatusCorrupt;
        info->scan_begin = p + len;
        // Checks that need the whole frame.
        for (int c = 0; c < info->ncomp; ++c) {
          const JpegComponent& jc = info->comp[c];
          if (!info->qt_present[jc.tq]) return kStatusUnsupported;
          if (!info->dc[jc.td].present || !info->ac[jc.ta].present) {
            return kStatusUnsupported;  // libjpeg substitutes std tables
          }
        }
        if (info->ncomp == 3) {
          if (info->saw_adobe && info->adobe_transform == 0) {
            return kStatusUnsupported;  // RGB JPEG
          }
          if (info->comp[0].id == 'R' && info->comp[1].id == 'G' &&
              info->comp[2].id == 'B') {
            return kStatusUnsupported;
          }
        }
        int hmax = 1, vmax = 1;
        for (int c = 0; c < info->ncomp; ++c) {
          if (info->comp[c].h > hmax) hmax = info->comp[c].h;
          if (info->comp[c].v > vmax) vmax = info->comp[c].v;
        }
        info->hmax = hmax;
        info->vmax = vmax;
        if (info->ncomp == 1) {
          info->sampling = kSamplingGray;
        } else {
          const JpegComponent &y = info->comp[0], &cb = info->comp[1],
                              &cr = info->comp[2];
          if (y.h != hmax || y.v != vmax || cb.h != cr.h || cb.v != cr.v) {
            return kStatusUnsupported;
          }
          if (hmax % cb.h || vmax % cb.v) return kStatusUnsupported;
          const int rh = hmax / cb.h, rv = vmax / cb.v;
          if (rh == 1 && rv == 1) {
            info->sampling = kSampling444;
          } else if (rh == 2 && rv == 1) {
            info->sampling = kSampling422;
          } else if (rh == 2 && rv == 2) {
            info->sampling = kSampling420;
          } else {
            return kStatusUnsupported;
          }
          int blocks = 0;
          for (int c = 0; c < 3; ++c) blocks += info->comp[c].h * info->comp[c].v;
          if (blocks > 10) return kStatusCorrupt;  // libjpeg: bad MCU size
        }
        for (int c = 0; c < info->ncomp; ++c) {
          JpegComponent& jc = info->comp[c];
          jc.ds_w = static_cast<int>(
              (static_cast<int64_t>(info->width) * jc.h + hmax - 1) / hmax);
          jc.ds_h = static_cast<int>(
              (static_cast<int64_t>(info->height) * jc.v + vmax - 1) / vmax);
        }
        info->interleaved = info->ncomp > 1;
        if (info->interleaved) {
          info->mcus_x = (info->width + 8 * hmax - 1) / (8 * hmax);
          info->mcus_y = (info->height + 8 * vmax - 1) / (8 * vmax);
          for (int c = 0; c < info->ncomp; ++c) {
            info->comp[c].wblocks = info->mcus_x * info->comp[c].h;
            info->comp[c].hblocks = info->mcus_y * info->comp[c].v;
          }
        } else {
          JpegComponent& jc = info->comp[0];
          jc.wblocks = (jc.ds_w + 7) / 8;
          jc.hblocks = (jc.ds_h + 7) / 8;
          info->mcus_x = jc.wblocks;
          info->mcus_y = jc.hblocks;
        }
        for (int c = 0; c < info->ncomp; ++c) {
          info->comp[c].stride = info->comp[c].wblocks * 8;
        }
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
    p += len;
  }
  return kStatusCorrupt;
}

uint64_t AssignPlanes(JpegInfo* info) {
  uint64_t off = 0;
  for (int c = 0; c < info->ncomp; ++c) {
    info->comp[c].plane_offset = off;
    off += static_cast<uint64_t>(info->comp[c].stride) * info->comp[c].hblocks * 8;
    off = (off + 63) & ~uint64_t{63};
  }
  return off;
}

uint64_t ScratchBytesNeeded(const JpegInfo& info) {
  JpegInfo copy = info;
  const uint64_t rgb = AssignPlanes(&copy);
  return rgb + static_cast<uint64_t>(info.width) * info.height * 3;
}

uint32_t DecodeScan(const uint8_t* data, uint32_t size, const JpegInfo& info,
                    uint8_t* scratch, DecodeCycles* cycles) {
  int16_t qmul[3][64];
  for (int c = 0; c < info.ncomp; ++c) {
    IfastMultipliers(info.qt[info.comp[c].tq], qmul[c]);
  }
  BitReader br{data, info.scan_begin, size};
  int pred[3] = {0, 0, 0};
  const int64_t total_mcus = static_cast<int64_t>(info.mcus_x) * info.mcus_y;
  int restarts_left = info.restart_interval;
  int next_rst = 0;
  uint64_t symbols = 0;
  uint64_t blocks = 0;
  int16_t coef[64];
  int mx = 0, my = 0;
mcu_loop:
  for (int64_t mcu = 0; mcu < total_mcus; ++mcu) {
    if (info.restart_interval) {
      if (restarts_left == 0) {
        if (!br.Restart(next_rst)) return kStatusCorrupt;
        next_rst = (next_rst + 1) & 7;
        restarts_left = info.restart_interval;
        pred[0] = pred[1] = pred[2] = 0;
        ++symbols;
      }
      --restarts_left;
    }
    for (int c = 0; c < info.ncomp; ++c) {
      const JpegComponent& jc = info.comp[c];
      const int bh = info.interleaved ? jc.h : 1;
      const int bv = info.interleaved ? jc.v : 1;
      for (int by = 0; by < bv; ++by) {
        for (int bx = 0; bx < bh; ++bx) {
        clear:
          for (int i = 0; i < 64; ++i) {
#pragma HLS UNROLL
            coef[i] = 0;
          }
          const int s = DecodeHuff(br, info.dc[jc.td], &symbols);
          if (s < 0) return kStatusCorrupt;
          if (s) {
            const int diff = Extend(br.Get(s), s);
            // libjpeg-turbo refuses a DC predictor that leaves int
            // (JERR_BAD_DCT_COEF); never overflow here either.
            const int64_t next = static_cast<int64_t>(pred[c]) + diff;
            if (next > INT32_MAX || next < INT32_MIN) return kStatusCorrupt;
            pred[c] = static_cast<int>(next);
          }
          coef[0] = static_cast<int16_t>(pred[c]);
        ac_loop:
          for (int k = 1; k < 64; ++k) {
#pragma HLS PIPELINE II = 1
            const int rs = DecodeHuff(br, info.ac[jc.ta], &symbols);
            if (rs < 0) return kStatusCorrupt;
            const int r = rs >> 4, sz = rs & 15;
            if (sz) {
              k += r;
              const int v = Extend(br.Get(sz), sz);
              coef[kNatural[k < 79 ? k : 79]] = static_cast<int16_t>(v);
            } else {
              if (r != 15) break;
              k += 15;
            }
          }
          if (br.overrun) return kStatusCorrupt;
          const int row = (my * bv + by) * 8;
          const int col = (mx * bh + bx) * 8;
          uint8_t* out = scratch + jc.plane_offset +
                         static_cast<uint64_t>(row) * jc.stride + col;
          if (!IdctIfast(coef, qmul[c], out, jc.stride)) return kStatusUnsupported;
          ++blocks;
        }
      }
    }
    ++symbols;  // MCU bookkeeping cycle
    if (++mx == info.mcus_x) {  // counters, not a 64-bit divide per MCU
      mx = 0;
      ++my;
    }
  }
  if (br.overrun) return kStatusCorrupt;
  // After the scan: only padding bits may remain, then EOI.
  if (br.nbits - br.fake >= 8) return kStatusCorrupt;  // extraneous bytes
  uint32_t p = br.marker ? br.marker_pos : br.pos;
  if (p >= size || data[p] != 0xFF) return kStatusCorrupt;
  while (p < size && data[p] == 0xFF) ++p;
  if (p >= size) return kStatusCorrupt;
  if (data[p] != 0xD9) {
    // Another scan (or DNL...) follows: not a single-scan baseline image.
    return data[p] == 0xDA ? kStatusUnsupported : kStatusCorrupt;
  }
  if (cycles) {
    cycles->entropy += symbols;
    cycles->idct += blocks * 8;
  }
  return kStatusOk;
}

namespace {

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

// h2v1 fancy upsampling of one row of `dsw` samples into out[0..2*dsw).
void FancyH2V1(const uint8_t* in, int dsw, uint8_t* out) {
  if (dsw <= 2) {  // libjpeg uses plain replication for narrow components
    for (int x = 0; x < dsw; ++x) out[2 * x] = out[2 * x + 1] = in[x];
    return;
  }
  out[0] = in[0];
  out[1] = static_cast<uint8_t>((in[0] * 3 + in[1] + 2) >> 2);
h2v1:
  for (int x = 1; x < dsw - 1; ++x) {
#pragma HLS PIPELINE II = 1
    const int v = in[x] * 3;
    out[2 * x] = static_cast<uint8_t>((v + in[x - 1] + 1) >> 2);
    out[2 * x + 1] = static_cast<uint8_t>((v + in[x + 1] + 2) >> 2);
  }
  const int last = dsw - 1;
  out[2 * last] = static_cast<uint8_t>((in[last] * 3 + in[last - 1] + 1) >> 2);
  out[2 * last + 1] = in[last];
}

// h2v2 fancy upsampling: `near` is the nearer input row, `far` the row above
// (even output rows) or below (odd output rows).
void FancyH2V2(const uint8_t* near, const uint8_t* far, int dsw, uint8_t* out) {
  if (dsw <= 2) {  // box replication (h2v2_upsample)
    for (int x = 0; x < dsw; ++x) out[2 * x] = out[2 * x + 1] = near[x];
    return;
  }
  int this_sum = near[0] * 3 + far[0];
  int next_sum = near[1] * 3 + far[1];
  out[0] = static_cast<uint8_t>((this_sum * 4 + 8) >> 4);
  out[1] = static_cast<uint8_t>((this_sum * 3 + next_sum + 7) >> 4);
  int last_sum = this_sum;
  this_sum = next_sum;
h2v2:
  for (int x = 2; x < dsw; ++x) {
#pragma HLS PIPELINE II = 1
    next_sum = near[x] * 3 + far[x];
    out[2 * (x - 1)] = static_cast<uint8_t>((this_sum * 3 + last_sum + 8) >> 4);
    out[2 * (x - 1) + 1] = static_cast<uint8_t>((this_sum * 3 + next_sum + 7) >> 4);
    last_sum = this_sum;
    this_sum = next_sum;
  }
  out[2 * (dsw - 1)] = static_cast<uint8_t>((this_sum * 3 + last_sum + 8) >> 4);
  out[2 * (dsw - 1) + 1] = static_cast<uint8_t>((this_sum * 4 + 7) >> 4);
}

}  // namespace

void PlanesToRgb(const JpegInfo& info, uint8_t* scratch, uint64_t rgb_offset,
                 DecodeCycles* cycles) {
  const int w = info.width, h = info.height;
  uint8_t* rgb = scratch + rgb_offset;
  const JpegComponent& yc = info.comp[0];
  if (info.ncomp == 1) {
    for (int y = 0; y < h; ++y) {
      const uint8_t* src = scratch + yc.plane_offset + static_cast<uint64_t>(y) * yc.stride;
      uint8_t* dst = rgb + static_cast<uint64_t>(y) * w * 3;
      for (int x = 0; x < w; ++x) dst[3 * x] = dst[3 * x + 1] = dst[3 * x + 2] = src[x];
    }
    if (cycles) cycles->color += static_cast<uint64_t>(w) * h;
    return;
  }
  if (w > kMaxWidth) return;  // callers check; never overrun the line buffers
  // Line buffers for upsampled chroma (2 * ds_w <= w + 1 <= kMaxWidth + 1).
  uint8_t cb_buf[kMaxWidth + 2];
  uint8_t cr_buf[kMaxWidth + 2];
#pragma HLS BIND_STORAGE variable = cb_buf type = ram_2p impl = uram
#pragma HLS BIND_STORAGE variable = cr_buf type = ram_2p impl = uram
rows:
  for (int y = 0; y < h; ++y) {
    const uint8_t* ys = scratch + yc.plane_offset + static_cast<uint64_t>(y) * yc.stride;
    const uint8_t* cbp;
    const uint8_t* crp;
    const JpegComponent& cb = info.comp[1];
    const JpegComponent& cr = info.comp[2];
    if (info.sampling == kSampling444) {
      // Copied into the line buffers like the other samplings, so that cbp
      // and crp always point to on-chip memory (one memory kind per pointer).
      const uint8_t* cbs = scratch + cb.plane_offset + static_cast<uint64_t>(y) * cb.stride;
      const uint8_t* crs = scratch + cr.plane_offset + static_cast<uint64_t>(y) * cr.stride;
    copy444:
      for (int x = 0; x < w; ++x) {
#pragma HLS PIPELINE II = 1
        cb_buf[x] = cbs[x];
        cr_buf[x] = crs[x];
      }
      cbp = cb_buf;
      crp = cr_buf;
    } else if (info.sampling == kSampling422) {
      FancyH2V1(scratch + cb.plane_offset + static_cast<uint64_t>(y) * cb.stride,
                cb.ds_w, cb_buf);
      FancyH2V1(scratch + cr.plane_offset + static_cast<uint64_t>(y) * cr.stride,
                cr.ds_w, cr_buf);
      cbp = cb_buf;
      crp = cr_buf;
    } else {  // 4:2:0
      const int in_row = y >> 1;
      int far_row = (y & 1) ? in_row + 1 : in_row - 1;
      if (far_row < 0) far_row = 0;                    // top context = row 0
      if (far_row > cb.ds_h - 1) far_row = cb.ds_h - 1;  // bottom replicated
      const uint64_t n_off = static_cast<uint64_t>(in_row) * cb.stride;
      const uint64_t f_off = static_cast<uint64_t>(far_row) * cb.stride;
      FancyH2V2(scratch + cb.plane_offset + n_off, scratch + cb.plane_offset + f_off,
                cb.ds_w, cb_buf);
      FancyH2V2(scratch + cr.plane_offset + n_off, scratch + cr.plane_offset + f_off,
                cr.ds_w, cr_buf);
      cbp = cb_buf;
      crp = cr_buf;
    }
    uint8_t* dst = rgb + static_cast<uint64_t>(y) * w * 3;
  cols:
    for (int x = 0; x < w; ++x) {
#pragma HLS PIPELINE II = 1
      const int yy = ys[x], cbv = cbp[x], crv = crp[x];
      dst[3 * x] = Clamp255(yy + CrToR(crv));
      dst[3 * x + 1] = Clamp255(yy + CbCrToG(cbv, crv));
      dst[3 * x + 2] = Clamp255(yy + CbToB(cbv));
    }
  }
  if (cycles) cycles->color += static_cast<uint64_t>(w) * h;
}



}  // namespace nearprep_fpga
