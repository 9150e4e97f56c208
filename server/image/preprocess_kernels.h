// Row kernels of the fused preprocessing path, with optional AVX2 versions
// (preprocess_avx2.cc, compiled with -mavx2 and used only when the CPU has
// AVX2) and an AVX-512 row colour kernel (preprocess_avx512.cc). Not a
// public interface.
//
// Thread-safety: pure functions on caller-owned memory.
#ifndef NEARPREP_SERVER_IMAGE_PREPROCESS_KERNELS_H_
#define NEARPREP_SERVER_IMAGE_PREPROCESS_KERNELS_H_

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "server/spec/types.h"

namespace nearprep {
namespace internal {

using Clock = std::chrono::steady_clock;

// Whole microseconds from a to b (stage timings).
inline uint64_t MicrosBetween(Clock::time_point a, Clock::time_point b) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(b - a).count());
}

// Hands a finished sample's parameters and its decode (t0 to t1) and
// transform (t1 to now) times to the caller's optional outputs.
inline void ReportSample(const SampleParams& p, Clock::time_point t0,
                         Clock::time_point t1, SampleParams* params,
                         StageTimes* times) {
  const Clock::time_point t2 = Clock::now();
  if (params != nullptr) *params = p;
  if (times != nullptr) {
    times->decode_us += MicrosBetween(t0, t1);
    times->transform_us += MicrosBetween(t1, t2);
  }
}

// A per-thread decode buffer keeps at most this much memory between images:
// one huge image must not pin its decode size in every worker thread for
// good (issue 12). glibc serves blocks of this size with mmap, so freeing
// one returns it to the system at once.
inline constexpr size_t kKeepScratchBytes = size_t{32} << 20;

// Frees `buf`'s memory when its capacity is over kKeepScratchBytes (on
// every return path: hold one of these while the buffer is in use).
template <typename Vec>
class ScratchTrim {
 public:
  explicit ScratchTrim(Vec* buf) : buf_(buf) {}
  ~ScratchTrim() {
    if (buf_->capacity() * sizeof(typename Vec::value_type) >
        kKeepScratchBytes) {
      Vec().swap(*buf_);
    }
  }
  ScratchTrim(const ScratchTrim&) = delete;
  ScratchTrim& operator=(const ScratchTrim&) = delete;

 private:
  Vec* const buf_;
};

// The per-row colour work after the vertical lerp.
struct RowOps {
  bool brightness = false;
  float delta = 0;
  bool saturation = false;
  float factor = 1;
  // FAST fidelity: the closed form of the HSV round trip (see
  // SaturateFastPixel in preprocess.cc) instead of TensorFlow's exact ops.
  bool fast_saturation = false;
  bool clip = false;
  bool normalize = false;
  float mean[3] = {0, 0, 0};
  float std[3] = {1, 1, 1};
};

// Where one output row goes. Source column x lands at output pixel
// flip ? w-1-x : x. NHWC: the row's interleaved elements start at dst[0];
// NCHW: channel c's row starts at dst[c].
struct PackTarget {
  bool flip = false;
  DType dtype = DType::kFloat32;
  Layout layout = Layout::kNHWC;
  uint8_t* dst[3] = {nullptr, nullptr, nullptr};
};

// Planar rows (R|G|B, each `w` floats): lerp(lo, hi, wy), then brightness,
// saturation, clip, normalize, and the converted store into `pack`.
// Processes source columns [0, n), n a multiple of 8, and returns n; the
// caller finishes the rest.
int RowColorAvx2(const float* lo, const float* hi, float wy, int w,
                 const RowOps& ops, const PackTarget& pack);
// The same, 16 columns at a time (preprocess_avx512.cc, compiled with
// AVX-512 F/DQ/BW/VL and used only when the CPU has them); equal bytes.
int RowColorAvx512(const float* lo, const float* hi, float wy, int w,
                   const RowOps& ops, const PackTarget& pack);

// Horizontal taps from uint8 RGB for columns [0, w) (a prefix is done and
// its length returned). Columns [0, n) read 4 bytes at each tap offset, so
// the caller limits n to taps with offset + 4 <= row bytes; the columns
// after them read the 4 bytes ending with the tap's pixel (when their lower
// taps are past pixel 0). dst planar, stride w.
int HorizontalRowAvx2(const uint8_t* row, const int32_t* x_lo,
                      const int32_t* x_hi, const float* x_lerp, int n,
                      float* dst, int w);

// Converts and stores source columns [0, n) of the planar row `planes`
// (R|G|B, each w floats) into `pack`; n, a multiple of 8, is returned.
// Conversions equal FloatToHalf/FloatToBFloat16/FloatToU8 bit for bit.
int PackRowAvx2(const float* planes, int w, const PackTarget& pack);

// FAST saturation of one pixel: the HSV round trip with hue and value kept
// and s' = clamp(s * factor, 0, 1) is x' = v - (v - x) * clamp(factor, 0,
// v / range) per channel (v = max, range = max - min; v <= 0 gives grey v,
// as TensorFlow does). Equal to TF_COMPAT up to float rounding.
inline void SaturateFastPixel(float* p, float factor) {
  const float v = std::max(p[0], std::max(p[1], p[2]));
  const float range = v - std::min(p[0], std::min(p[1], p[2]));
  float ratio = 0.0f;
  if (v > 0.0f) ratio = std::max(std::min(factor, v / range), 0.0f);
  for (int c = 0; c < 3; ++c) p[c] = v - (v - p[c]) * ratio;
}

// True when the AVX2 kernels were built and the CPU supports them.
bool HaveAvx2Kernels();
// True when the AVX-512 row colour kernel was built and the CPU supports
// AVX-512 F, DQ, BW and VL (and AVX2: every such CPU has it).
bool HaveAvx512Kernels();
// Which kernels the fused path uses: the best the CPU supports (kAuto), or
// a lower level for tests (a level the CPU lacks falls back to the next
// lower one). kAvx512 uses RowColorAvx512 and the AVX2 kernels for the
// rest. Process-wide; meant for tests.
enum class KernelLevel { kAuto, kScalar, kAvx2, kAvx512 };
void SetKernelLevelForTesting(KernelLevel level);
// The level in effect: the forced one capped by what the CPU has.
KernelLevel ActiveKernelLevel();

// PIL BILINEAR (pil_resample.cc), AVX2 versions with PIL's integer
// arithmetic per lane (int32 sums of uint8 * 22-bit weights, rounding
// constant, arithmetic shift, clamp to [0, 255]), so the bytes equal the
// scalar path's.
//
// Horizontal pass of outputs [0, count): output x reads the `size[x]`
// pixels of `in` (RGB, pixel `origin` first) from pixel start[x], weights at k + x * ksize; it
// reads up to 2 bytes past its last tap, so the caller passes only outputs
// whose last tap is followed by at least one more pixel in memory. Writes
// 3 bytes per output to `out`.
void PilHorizontalAvx2(const uint8_t* in, int origin, const int32_t* start,
                       const int32_t* size, const int32_t* k, int ksize,
                       int count, uint8_t* out);
// Vertical pass of bytes [0, n) (a multiple of 8 is done and returned; the
// caller finishes the rest): out[i] from taps[t][i] * k[t], t < ntaps.
size_t PilVerticalAvx2(const uint8_t* const* taps, const int32_t* k,
                       int ntaps, size_t n, uint8_t* out);

}  // namespace internal
}  // namespace nearprep

#endif  // NEARPREP_SERVER_IMAGE_PREPROCESS_KERNELS_H_
