#include "common/tensor_codec.h"

// ZSTD_c_literalCompressionMode (stable in libzstd >= 1.4.5, still declared
// among the experimental parameters).
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"

namespace nearprep {
namespace {

struct CCtxFree {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DCtxFree {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

ZSTD_CCtx* ThreadCCtx() {
  thread_local std::unique_ptr<ZSTD_CCtx, CCtxFree> ctx(ZSTD_createCCtx());
  return ctx.get();
}

ZSTD_DCtx* ThreadDCtx() {
  thread_local std::unique_ptr<ZSTD_DCtx, DCtxFree> ctx(ZSTD_createDCtx());
  return ctx.get();
}

// Slack per frame on top of ZSTD_compressBound (frame header, checksum).
constexpr size_t kFrameSlack = 32;

// dst[i] = src[i] - src[i - c] along one row of `len` bytes (first pixel
// predicted by 0).
void SubRow(const uint8_t* src, uint8_t* dst, size_t len, size_t c) {
  const size_t head = c < len ? c : len;
  for (size_t i = 0; i < head; ++i) dst[i] = src[i];
  for (size_t i = head; i < len; ++i) {
    dst[i] = static_cast<uint8_t>(src[i] - src[i - c]);
  }
}

// r = x - left - up + upleft for a row with a previous row `prev`.
void GradientRow(const uint8_t* src, const uint8_t* prev, uint8_t* dst,
                 size_t len, size_t c) {
  const size_t head = c < len ? c : len;
  for (size_t i = 0; i < head; ++i) {
    dst[i] = static_cast<uint8_t>(src[i] - prev[i]);
  }
  for (size_t i = head; i < len; ++i) {
    dst[i] = static_cast<uint8_t>(src[i] - src[i - c] - prev[i] + prev[i - c]);
  }
}

#if defined(__SSE2__)
// Running sums with stride `c` (1 or 3) over 16-byte blocks: a log-step
// prefix sum inside the block (lane j adds lanes j-c, j-2c, ...), then the
// carry: lane j adds the running sum of its channel at the end of the
// previous block (lane 16-c + j % c), broadcast by shifts. Returns the
// number of bytes done (a multiple of 16); the caller finishes the tail.
size_t UnSubRowSse2(uint8_t* row, size_t len, size_t c) {
  __m128i carry = _mm_setzero_si128();  // the previous block's sums
  size_t i = 0;
  for (; i + 16 <= len; i += 16) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i));
    __m128i tail;
    if (c == 3) {
      v = _mm_add_epi8(v, _mm_slli_si128(v, 3));
      v = _mm_add_epi8(v, _mm_slli_si128(v, 6));
      v = _mm_add_epi8(v, _mm_slli_si128(v, 12));
      tail = _mm_srli_si128(carry, 13);  // lanes 13..15 -> 0..2
      tail = _mm_or_si128(tail, _mm_slli_si128(tail, 3));
      tail = _mm_or_si128(tail, _mm_slli_si128(tail, 6));
      tail = _mm_or_si128(tail, _mm_slli_si128(tail, 12));
    } else {  // c == 1
      v = _mm_add_epi8(v, _mm_slli_si128(v, 1));
      v = _mm_add_epi8(v, _mm_slli_si128(v, 2));
      v = _mm_add_epi8(v, _mm_slli_si128(v, 4));
      v = _mm_add_epi8(v, _mm_slli_si128(v, 8));
      tail = _mm_srli_si128(carry, 15);  // lane 15 -> 0
      tail = _mm_or_si128(tail, _mm_slli_si128(tail, 1));
      tail = _mm_or_si128(tail, _mm_slli_si128(tail, 2));
      tail = _mm_or_si128(tail, _mm_slli_si128(tail, 4));
      tail = _mm_or_si128(tail, _mm_slli_si128(tail, 8));
    }
    carry = _mm_add_epi8(v, tail);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(row + i), carry);
  }
  return i;
}
#endif

// Inverse of SubRow, in place: a running sum per channel.
void UnSubRow(uint8_t* row, size_t len, size_t c) {
#if defined(__SSE2__)
  // Stride 3 (NHWC): the scalar loop below, with three running sums in
  // registers, measured as fast as this; stride 1 (NCHW) is ~1.8x faster.
  if (c == 1 && len >= 16) {
    const size_t done = UnSubRowSse2(row, len, c);
    for (size_t i = done; i < len; ++i) {
      row[i] = static_cast<uint8_t>(row[i] + row[i - c]);
    }
    return;
  }
#endif
  if (c == 3) {
    if (len < 3) return;
    uint8_t a = row[0], b = row[1], d = row[2];
    size_t i = 3;
    for (; i + 3 <= len; i += 3) {
      a = static_cast<uint8_t>(a + row[i]);
      b = static_cast<uint8_t>(b + row[i + 1]);
      d = static_cast<uint8_t>(d + row[i + 2]);
      row[i] = a;
      row[i + 1] = b;
      row[i + 2] = d;
    }
    for (; i < len; ++i) row[i] = static_cast<uint8_t>(row[i] + row[i - 3]);
    return;
  }
  if (c == 1) {
    uint8_t a = 0;
    for (size_t i = 0; i < len; ++i) {
      a = static_cast<uint8_t>(a + row[i]);
      row[i] = a;
    }
    return;
  }
  for (size_t i = c; i < len; ++i) {
    row[i] = static_cast<uint8_t>(row[i] + row[i - c]);
  }
}

void AddRow(uint8_t* row, const uint8_t* prev, size_t len) {
  for (size_t i = 0; i < len; ++i) {
    row[i] = static_cast<uint8_t>(row[i] + prev[i]);
  }
}

absl::Status CheckCompression(TensorCompression c) {
  if (c == TensorCompression::kDeltaZstd ||
      c == TensorCompression::kGradientZstd) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "compressed tensor: unsupported compression ", static_cast<int>(c)));
}

absl::Status Damaged(uint64_t image, const std::string& what) {
  return absl::DataLossError(
      absl::StrCat("compressed tensor: image ", image, ": ", what));
}

}  // namespace

bool IsKnownCompression(int value) {
  return value == static_cast<int>(TensorCompression::kNone) ||
         value == static_cast<int>(TensorCompression::kDeltaZstd) ||
         value == static_cast<int>(TensorCompression::kGradientZstd);
}

size_t CompressedBound(const TensorGeometry& g) {
  return static_cast<size_t>(g.images) *
         (ZSTD_compressBound(static_cast<size_t>(g.image_bytes())) +
          kFrameSlack);
}

void FilterImage(const TensorGeometry& g, TensorCompression compression,
                 const uint8_t* src, uint8_t* dst) {
  const size_t row = static_cast<size_t>(g.cols * g.channels);
  const size_t c = static_cast<size_t>(g.channels);
  for (uint64_t p = 0; p < g.planes; ++p) {
    for (uint64_t r = 0; r < g.rows; ++r) {
      const size_t off = static_cast<size_t>((p * g.rows + r)) * row;
      if (compression == TensorCompression::kGradientZstd && r > 0) {
        GradientRow(src + off, src + off - row, dst + off, row, c);
      } else {
        SubRow(src + off, dst + off, row, c);
      }
    }
  }
}

void UnfilterImage(const TensorGeometry& g, TensorCompression compression,
                   uint8_t* image) {
  const size_t row = static_cast<size_t>(g.cols * g.channels);
  const size_t c = static_cast<size_t>(g.channels);
  for (uint64_t p = 0; p < g.planes; ++p) {
    for (uint64_t r = 0; r < g.rows; ++r) {
      uint8_t* cur = image + static_cast<size_t>((p * g.rows + r)) * row;
      UnSubRow(cur, row, c);
      if (compression == TensorCompression::kGradientZstd && r > 0) {
        AddRow(cur, cur - row, row);
      }
    }
  }
}

absl::StatusOr<size_t> CompressTensor(const TensorGeometry& g,
                                      TensorCompression compression, int level,
                                      const uint8_t* src, uint8_t* dst,
                                      size_t dst_capacity) {
  if (absl::Status st = CheckCompression(compression); !st.ok()) return st;
  if (level < kMinCompressionLevel || level > kMaxCompressionLevel) {
    return absl::InvalidArgumentError(
        absl::StrCat("compressed tensor: level ", level, " out of range"));
  }
  if (dst_capacity < CompressedBound(g)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "compressed tensor: output capacity ", dst_capacity, " < bound ",
        CompressedBound(g)));
  }
  ZSTD_CCtx* cctx = ThreadCCtx();
  if (cctx == nullptr) return absl::InternalError("zstd: no context");
  ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
  if (ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel,
                                          level)) ||
      ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1)) ||
      // Entropy-coded literals at every level: zstd's negative (fast)
      // levels switch them off by default, which on filtered pixels (few
      // matches, skewed residuals) loses most of the gain.
      ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_literalCompressionMode,
                                          ZSTD_ps_enable)) ||
      ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1))) {
    return absl::InternalError("zstd: cannot set parameters");
  }
  const size_t image_bytes = static_cast<size_t>(g.image_bytes());
  thread_local std::vector<uint8_t> scratch;
  if (scratch.size() < image_bytes) scratch.resize(image_bytes);
  size_t out = 0;
  for (uint64_t i = 0; i < g.images; ++i) {
    FilterImage(g, compression, src + i * image_bytes, scratch.data());
    const size_t n = ZSTD_compress2(cctx, dst + out, dst_capacity - out,
                                    scratch.data(), image_bytes);
    if (ZSTD_isError(n)) {
      return absl::InternalError(
          absl::StrCat("zstd: image ", i, ": ", ZSTD_getErrorName(n)));
    }
    out += n;
  }
  return out;
}

absl::Status DecompressTensor(const TensorGeometry& g,
                              TensorCompression compression,
                              const uint8_t* src, size_t src_size,
                              uint8_t* dst) {
  if (absl::Status st = CheckCompression(compression); !st.ok()) return st;
  ZSTD_DCtx* dctx = ThreadDCtx();
  if (dctx == nullptr) return absl::InternalError("zstd: no context");
  const size_t image_bytes = static_cast<size_t>(g.image_bytes());
  size_t pos = 0;
  for (uint64_t i = 0; i < g.images; ++i) {
    if (pos >= src_size) {
      return Damaged(i, absl::StrCat("payload ends after ", i, " of ",
                                     g.images, " images"));
    }
    const size_t frame = ZSTD_findFrameCompressedSize(src + pos, src_size - pos);
    if (ZSTD_isError(frame)) {
      return Damaged(i, absl::StrCat("bad zstd frame (",
                                     ZSTD_getErrorName(frame), ")"));
    }
    const unsigned long long content =
        ZSTD_getFrameContentSize(src + pos, frame);
    if (content != image_bytes) {
      return Damaged(i, absl::StrCat("frame holds ",
                                     content == ZSTD_CONTENTSIZE_UNKNOWN ||
                                             content == ZSTD_CONTENTSIZE_ERROR
                                         ? std::string("an unknown size")
                                         : absl::StrCat(content, " bytes"),
                                     ", expected ", image_bytes));
    }
    uint8_t* out = dst + i * image_bytes;
    const size_t n =
        ZSTD_decompressDCtx(dctx, out, image_bytes, src + pos, frame);
    if (ZSTD_isError(n)) {
      ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
      return Damaged(i, absl::StrCat("zstd: ", ZSTD_getErrorName(n)));
    }
    if (n != image_bytes) {
      return Damaged(i, absl::StrCat("decoded ", n, " bytes, expected ",
                                     image_bytes));
    }
    UnfilterImage(g, compression, out);
    pos += frame;
  }
  if (pos != src_size) {
    return absl::DataLossError(absl::StrCat(
        "compressed tensor: ", src_size - pos, " trailing bytes after ",
        g.images, " images"));
  }
  return absl::OkStatus();
}

}  // namespace nearprep
