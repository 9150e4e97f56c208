// See batch_mix.h and docs/protocol.md ("MixUp and CutMix") (the normative algorithm; the
// Python twin is client/python/nearprep/batch_mix.py). Bit-exactness with
// that twin needs IEEE double arithmetic without fused multiply-add (the
// build sets -ffp-contract=off globally) and the same libm for log, exp, cos.
//
// The element conversions restate server/image's (tf_ops_internal.h:
// FloatToHalf, FloatToBFloat16, FloatToU8, U8ToFloatTable), which
// server/pipeline may not include (scripts/check_includes.py); the driver
// tests/unit/pipeline/batch_mix_apply.cc ("convcheck") compares them bit
// for bit.
#include "server/pipeline/batch_mix.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "server/plan/philox.h"

namespace nearprep {
namespace {

// Blocks 0 .. kMaxBlocks-1 of the counter; block 0 holds the choice and the
// CutMix centre, blocks 1.. the Beta draw's stream of words.
constexpr uint32_t kMaxBlocks = 64;
constexpr double kTwoPi = 6.283185307179586;  // double(2 pi)
constexpr double kTwoPow26 = 67108864.0;
constexpr double kTwoPowMinus53 = 1.0 / 9007199254740992.0;

std::array<uint32_t, 4> MixBlock(const std::array<uint32_t, 2>& key,
                                 uint64_t epoch, uint32_t shard_index,
                                 uint64_t batch_index, uint32_t block) {
  const uint32_t epoch_hi16 = static_cast<uint32_t>((epoch >> 32) & 0xFFFFu);
  return Philox4x32({Lo32(batch_index), shard_index, Lo32(epoch),
                     (epoch_hi16 << 16) | (block << 8) | kTagBatchMix},
                    key);
}

// The words of blocks 1, 2, ... in order; runs dry after block kMaxBlocks-1.
class WordStream {
 public:
  WordStream(const std::array<uint32_t, 2>& key, uint64_t epoch,
             uint32_t shard_index, uint64_t batch_index)
      : key_(key), epoch_(epoch), shard_(shard_index), batch_(batch_index) {}

  // False once the budget is spent (then *w is left alone).
  bool Next(uint32_t* w) {
    if (used_ == 4) {
      if (next_block_ >= kMaxBlocks) return false;
      words_ = MixBlock(key_, epoch_, shard_, batch_, next_block_++);
      used_ = 0;
    }
    *w = words_[used_++];
    return true;
  }

  // A uniform double in (0, 1]: ((a >> 5) * 2^26 + (b >> 6) + 1) * 2^-53 of
  // the next two words a, b (53 random bits; every step exact).
  bool Uniform53(double* u) {
    uint32_t a = 0, b = 0;
    if (!Next(&a) || !Next(&b)) return false;
    *u = (static_cast<double>(a >> 5) * kTwoPow26 +
          static_cast<double>(b >> 6) + 1.0) *
         kTwoPowMinus53;
    return true;
  }

  // A standard normal by Box-Muller (cosine branch only) from two uniforms.
  bool Normal(double* z) {
    double u1 = 0, u2 = 0;
    if (!Uniform53(&u1) || !Uniform53(&u2)) return false;
    *z = std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
    return true;
  }

 private:
  std::array<uint32_t, 2> key_;
  uint64_t epoch_;
  uint32_t shard_;
  uint64_t batch_;
  uint32_t next_block_ = 1;
  std::array<uint32_t, 4> words_{};
  int used_ = 4;
};

// Gamma(a, 1) for a >= 1 by Marsaglia and Tsang (2000), no round limit of
// its own: the stream's budget is the limit.
bool GammaAtLeastOne(double a, WordStream* s, double* g) {
  const double d = a - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double z = 0;
    if (!s->Normal(&z)) return false;
    double v = 1.0 + c * z;
    if (!(v > 0.0)) continue;
    v = v * v * v;
    double u = 0;
    if (!s->Uniform53(&u)) return false;
    const double zz = z * z;
    if (u < 1.0 - 0.0331 * (zz * zz) ||
        std::log(u) < 0.5 * zz + d * ((1.0 - v) + std::log(v))) {
      *g = d * v;
      return true;
    }
  }
}

// Beta(alpha, alpha) = X / (X + Y), X and Y ~ Gamma(alpha) drawn in that
// order. For alpha < 1 each is Gamma(alpha + 1) * U^(1/alpha), kept as a
// logarithm (log G + log U / alpha) so that tiny alphas, whose powers
// underflow, still give 0 or 1 instead of 0 / 0.
bool Beta(double alpha, WordStream* s, double* lam) {
  if (alpha >= 1.0) {
    double x = 0, y = 0;
    if (!GammaAtLeastOne(alpha, s, &x) || !GammaAtLeastOne(alpha, s, &y)) {
      return false;
    }
    *lam = x / (x + y);
    return true;
  }
  double log_g[2];
  for (double& lg : log_g) {
    double g = 0, u = 0;
    if (!GammaAtLeastOne(alpha + 1.0, s, &g) || !s->Uniform53(&u)) {
      return false;
    }
    lg = std::log(g) + std::log(u) / alpha;
  }
  *lam = 1.0 / (1.0 + std::exp(log_g[1] - log_g[0]));
  return true;
}

}  // namespace

float BatchMixLoad(const uint8_t* p, DType dtype) {
  switch (dtype) {
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      const uint32_t sign = uint32_t{h & 0x8000u} << 16;
      const uint32_t exp = (h >> 10) & 0x1Fu;
      const uint32_t man = h & 0x3FFu;
      if (exp == 0) {  // Zero or subnormal: man * 2^-24, exact in float.
        const float mag = static_cast<float>(man) * 5.9604644775390625e-8f;
        return sign != 0 ? -mag : mag;
      }
      const uint32_t bits = exp == 0x1Fu
                                ? sign | 0x7F800000u | (man << 13)  // Inf, NaN.
                                : sign | ((exp + 112u) << 23) | (man << 13);
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case DType::kBFloat16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      const uint32_t bits = uint32_t{b} << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case DType::kUint8:
      // The value a uint8 output stands for: float(v) * float32(1/255).
      return static_cast<float>(*p) * (1.0f / 255.0f);
  }
  return 0.0f;
}

void BatchMixStore(float v, DType dtype, uint8_t* out) {
  uint32_t x;
  std::memcpy(&x, &v, 4);
  switch (dtype) {
    case DType::kFloat32:
      std::memcpy(out, &v, 4);
      return;
    case DType::kFloat16: {
      const uint32_t sign = (x >> 16) & 0x8000u;
      const uint32_t mag = x & 0x7FFFFFFFu;
      const float a = std::fabs(v);
      uint32_t h;
      if (mag > 0x7F800000u) {
        h = 0x7E00u;  // NaN: the quiet NaN.
      } else if (a >= 65520.0f) {
        h = 0x7C00u;  // Half-way to 2^16 and above round to infinity.
      } else if (a < 6.103515625e-5f) {
        // Below 2^-14: a multiple of 2^-24 (subnormal or zero); the scaling
        // is exact and rint rounds half to even (the default mode).
        h = static_cast<uint32_t>(std::rint(a * 16777216.0f));
      } else {
        const uint32_t keep = (mag >> 13) & 0x3FFu;
        const uint32_t rest = mag & 0x1FFFu;
        const uint32_t up =
            rest > 0x1000u || (rest == 0x1000u && (keep & 1u) != 0) ? 1u : 0u;
        const uint32_t exp = (mag >> 23) - 112u;  // Rebias 127 -> 15.
        h = (exp << 10) + keep + up;  // A carry may reach the exponent.
      }
      const uint16_t bits = static_cast<uint16_t>(sign | h);
      std::memcpy(out, &bits, 2);
      return;
    }
    case DType::kBFloat16: {
      uint32_t upper = x >> 16;
      const uint32_t lower = x & 0xFFFFu;
      if ((x & 0x7FFFFFFFu) > 0x7F800000u) {
        upper |= 0x40u;  // NaN: quieted, payload kept.
      } else if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u) != 0)) {
        ++upper;  // Round to nearest even (may carry up to infinity).
      }
      const uint16_t bits = static_cast<uint16_t>(upper);
      std::memcpy(out, &bits, 2);
      return;
    }
    case DType::kUint8: {
      // round(clip(v, 0, 1) * 255), halves away from zero; NaN gives 0.
      const float c = v >= 0.0f ? (v > 1.0f ? 1.0f : v) : 0.0f;
      *out = static_cast<uint8_t>(std::lround(c * 255.0f));
      return;
    }
  }
}

BatchMixParams DrawBatchMix(const BatchMixSpec& spec, uint64_t seed,
                            uint64_t epoch, uint32_t shard_index,
                            uint64_t batch_index, int height, int width) {
  BatchMixParams p;
  const bool mixup = spec.mixup_alpha > 0.0f;
  const bool cutmix = spec.cutmix_alpha > 0.0f;
  if (!mixup && !cutmix) return p;
  const std::array<uint32_t, 2> key = PlanKey(seed);
  const std::array<uint32_t, 4> b0 =
      MixBlock(key, epoch, shard_index, batch_index, 0);
  if (mixup && cutmix) {
    p.kind = UniformFloat(b0[0]) < 0.5f ? BatchMixKind::kMixUp
                                        : BatchMixKind::kCutMix;
  } else {
    p.kind = mixup ? BatchMixKind::kMixUp : BatchMixKind::kCutMix;
  }
  const double alpha = static_cast<double>(
      p.kind == BatchMixKind::kMixUp ? spec.mixup_alpha : spec.cutmix_alpha);
  WordStream stream(key, epoch, shard_index, batch_index);
  double lam = 0.5;  // The fallback when the stream runs dry.
  if (!Beta(alpha, &stream, &lam) || !(lam >= 0.0 && lam <= 1.0)) lam = 0.5;
  p.lambda = static_cast<float>(lam);
  if (p.kind == BatchMixKind::kMixUp) return p;

  // torchvision's box, from the float32 lambda as a double.
  const int w = std::max(width, 1), h = std::max(height, 1);
  const double r = 0.5 * std::sqrt(1.0 - static_cast<double>(p.lambda));
  const int rw_half = static_cast<int>(r * w);  // Truncation, r*w >= 0.
  const int rh_half = static_cast<int>(r * h);
  const int rx = static_cast<int>(b0[1] % static_cast<uint32_t>(w));
  const int ry = static_cast<int>(b0[2] % static_cast<uint32_t>(h));
  p.x1 = std::max(rx - rw_half, 0);
  p.y1 = std::max(ry - rh_half, 0);
  p.x2 = std::min(rx + rw_half, w);
  p.y2 = std::min(ry + rh_half, h);
  const int64_t box = int64_t{p.x2 - p.x1} * (p.y2 - p.y1);
  p.lambda = static_cast<float>(
      1.0 - static_cast<double>(box) / static_cast<double>(int64_t{w} * h));
  return p;
}

namespace {

// own[k] = own[k] * w_own + partner[k] * w_partner over float32 elements
// (each product rounded to float32, then the sum: no fused multiply-add,
// the project compiles with -ffp-contract=off).
void MixFloat32(uint8_t* own, const uint8_t* partner, size_t elems,
                float w_own, float w_partner) {
  constexpr size_t kChunk = 1024;
  float a[kChunk], b[kChunk];
  for (size_t k0 = 0; k0 < elems; k0 += kChunk) {
    const size_t m = std::min(kChunk, elems - k0);
    std::memcpy(a, own + k0 * 4, m * 4);
    std::memcpy(b, partner + k0 * 4, m * 4);
    for (size_t k = 0; k < m; ++k) a[k] = a[k] * w_own + b[k] * w_partner;
    std::memcpy(own + k0 * 4, a, m * 4);
  }
}

}  // namespace

void ApplyBatchMix(const BatchMixParams& p, DType dtype, Layout layout, int n,
                   int height, int width, uint8_t* tensor,
                   std::vector<uint8_t>* scratch) {
  if (p.kind == BatchMixKind::kNone || n <= 0 || height <= 0 || width <= 0) {
    return;
  }
  const size_t es = DTypeSize(dtype);
  const size_t h = static_cast<size_t>(height), w = static_cast<size_t>(width);
  const size_t elems = 3 * h * w;
  const size_t image_bytes = elems * es;
  if (p.kind == BatchMixKind::kCutMix && (p.x2 <= p.x1 || p.y2 <= p.y1)) {
    return;  // Empty box.
  }
  // Image n-1 is overwritten before image 0 reads it as its partner.
  const uint8_t* last = tensor + static_cast<size_t>(n - 1) * image_bytes;
  scratch->assign(last, last + image_bytes);

  const float w_own = p.lambda;
  const float w_partner = static_cast<float>(1.0 - static_cast<double>(p.lambda));
  for (int i = n - 1; i >= 0; --i) {  // Descending: partner i-1 is intact.
    uint8_t* own = tensor + static_cast<size_t>(i) * image_bytes;
    const uint8_t* partner =
        i == 0 ? scratch->data()
               : tensor + static_cast<size_t>(BatchMixPartner(i, n)) * image_bytes;
    if (p.kind == BatchMixKind::kMixUp && dtype == DType::kFloat32) {
      // The same arithmetic without the per-element dtype switch, so that
      // the compiler vectorizes it (float32 is the common case; ~10x).
      MixFloat32(own, partner, elems, w_own, w_partner);
      continue;
    }
    if (p.kind == BatchMixKind::kMixUp) {
      for (size_t k = 0; k < elems; ++k) {
        const float a = BatchMixLoad(own + k * es, dtype);
        const float b = BatchMixLoad(partner + k * es, dtype);
        const float own_scaled = a * w_own;        // batch.mul_(lam)
        const float partner_scaled = b * w_partner;  // rolled.mul_(1 - lam)
        BatchMixStore(own_scaled + partner_scaled, dtype, own + k * es);
      }
      continue;
    }
    const size_t x1 = static_cast<size_t>(p.x1), x2 = static_cast<size_t>(p.x2);
    const size_t y1 = static_cast<size_t>(p.y1), y2 = static_cast<size_t>(p.y2);
    if (layout == Layout::kNHWC) {
      const size_t row_bytes = (x2 - x1) * 3 * es;
      for (size_t y = y1; y < y2; ++y) {
        const size_t off = (y * w + x1) * 3 * es;
        std::memcpy(own + off, partner + off, row_bytes);
      }
    } else {
      const size_t row_bytes = (x2 - x1) * es;
      for (size_t c = 0; c < 3; ++c) {
        for (size_t y = y1; y < y2; ++y) {
          const size_t off = ((c * h + y) * w + x1) * es;
          std::memcpy(own + off, partner + off, row_bytes);
        }
      }
    }
  }
}

}  // namespace nearprep
