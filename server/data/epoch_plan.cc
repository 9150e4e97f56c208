// See epoch_plan.h and docs/protocol.md (the normative description; keep the
// two in step, and client/python/nearprep/plan.py too).
#include "server/data/epoch_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>

#include "server/spec/augment_space.h"
#include "server/spec/resize_center.h"
#include "server/plan/plan_math.h"

namespace nearprep {
uint64_t PermutationDraw(uint64_t seed, uint64_t epoch, uint64_t i) {
  const uint32_t w3 = ((Hi32(epoch) & 0xFFFFFFu) << 8) | kTagPermutation;
  return Draw64(
      Philox4x32({Lo32(i), Hi32(i), Lo32(epoch), w3}, PlanKey(seed)));
}

std::array<uint32_t, 4> SampleParamWords(uint64_t seed, uint64_t epoch,
                                         uint64_t sample_id, uint32_t block) {
  const uint32_t w3 = ((Hi32(epoch) & 0xFFFFu) << 16) | ((block & 0xFFu) << 8) |
                      kTagSampleParams;
  return Philox4x32({Lo32(sample_id), Hi32(sample_id), Lo32(epoch), w3},
                    PlanKey(seed));
}

std::vector<uint64_t> EpochOrder(uint64_t num_samples, uint64_t seed,
                                 uint64_t epoch, bool shuffle) {
  std::vector<uint64_t> order(num_samples);
  std::iota(order.begin(), order.end(), uint64_t{0});
  if (!shuffle) return order;
  PlanShuffle(order.data(), num_samples,
              [&](uint64_t i) { return PermutationDraw(seed, epoch, i); });
  return order;
}

std::vector<uint64_t> ShardSamples(const std::vector<uint64_t>& order,
                                   uint32_t shard_index, uint32_t num_shards) {
  if (num_shards == 0) num_shards = 1;
  std::vector<uint64_t> out;
  if (shard_index >= num_shards) return out;
  out.reserve(order.size() / num_shards + 1);
  for (uint64_t p = shard_index; p < order.size(); p += num_shards) {
    out.push_back(order[p]);
  }
  return out;
}

CropBox CenterCropBox(int height, int width, float fraction) {
  CropBox box{0, 0, height, width};
  if (height <= 0 || width <= 0) return CropBox{0, 0, 0, 0};
  const double f = static_cast<double>(fraction);
  if (!(f > 0.0 && f < 1.0)) return box;  // 1, invalid, NaN: whole image.
  // tf.image.central_crop: start = int((n - n*f) / 2) in float64,
  // size = n - 2*start; at least one pixel.
  auto side = [f](int n, int* start, int* size) {
    const double nd = static_cast<double>(n);
    int s = static_cast<int>((nd - nd * f) / 2.0);
    int len = n - 2 * s;
    if (len < 1) {
      len = 1;
      s = (n - 1) / 2;
    }
    *start = s;
    *size = len;
  };
  side(height, &box.y, &box.height);
  side(width, &box.x, &box.width);
  return box;
}

CropBox RandomResizedCropBox(const TransformSpec& spec, uint64_t seed,
                             uint64_t epoch, uint64_t sample_id, int height,
                             int width) {
  if (height <= 0 || width <= 0) return CropBox{0, 0, 0, 0};
  const double hd = static_cast<double>(height);
  const double wd = static_cast<double>(width);
  const double area = hd * wd;
  const double s_lo = static_cast<double>(spec.scale_min);
  const double s_hi = static_cast<double>(spec.scale_max);
  const double r_lo = static_cast<double>(spec.ratio_min);
  const double r_hi = static_cast<double>(spec.ratio_max);
  const double log_lo = PlanLog(r_lo);
  const double log_hi = PlanLog(r_hi);
  // torchvision rounds with Python's round() (halves to even).
  double (*round_side)(double) = spec.fidelity == Fidelity::kTorchvision
                                ? &PlanRoundHalfEven
                                : &PlanRound;
  for (int attempt = 1; attempt <= kRandomResizedCropAttempts; ++attempt) {
    const auto w = SampleParamWords(seed, epoch, sample_id,
                                    static_cast<uint32_t>(attempt));
    const double u_scale = static_cast<double>(UniformFloat(w[0]));
    const double u_ratio = static_cast<double>(UniformFloat(w[1]));
    const double target_area = area * (s_lo + u_scale * (s_hi - s_lo));
    const double aspect = PlanExp(log_lo + u_ratio * (log_hi - log_lo));
    const double cw = round_side(std::sqrt(target_area * aspect));
    const double ch = round_side(std::sqrt(target_area / aspect));
    // Written so that NaN fails the test.
    if (cw > 0.0 && cw <= wd && ch > 0.0 && ch <= hd) {
      CropBox box;
      box.width = static_cast<int>(cw);
      box.height = static_cast<int>(ch);
      const auto rows = static_cast<uint32_t>(height - box.height + 1);
      const auto cols = static_cast<uint32_t>(width - box.width + 1);
      box.y = static_cast<int>(w[2] % rows);
      box.x = static_cast<int>(w[3] % cols);
      return box;
    }
  }
  // Fallback: central crop, aspect ratio clamped into [r_lo, r_hi].
  const double in_ratio = wd / hd;
  double cw = wd, ch = hd;
  if (in_ratio < r_lo) {
    ch = round_side(wd / r_lo);
  } else if (in_ratio > r_hi) {
    cw = round_side(hd * r_hi);
  }
  if (!(ch >= 1.0)) ch = 1.0;
  if (!(cw >= 1.0)) cw = 1.0;
  if (ch > hd) ch = hd;
  if (cw > wd) cw = wd;
  CropBox box;
  box.height = static_cast<int>(ch);
  box.width = static_cast<int>(cw);
  box.y = (height - box.height) / 2;
  box.x = (width - box.width) / 2;
  return box;
}

void DrawTorchvisionAugmentations(const TransformSpec& spec, uint64_t seed,
                                  uint64_t epoch, uint64_t sample_id,
                                  SampleParams* p) {
  const auto words = [&](uint32_t block) {
    return SampleParamWords(seed, epoch, sample_id, block);
  };
  // ColorJitter: factor uniform in [max(0, 1 - v), 1 + v) (hue: [-v, v)),
  // lo + u * (hi - lo) in float32; order = randperm(4) by Fisher-Yates.
  const float jitter[4] = {spec.jitter_brightness, spec.jitter_contrast,
                           spec.jitter_saturation, spec.jitter_hue};
  if (jitter[0] != 0.0f || jitter[1] != 0.0f || jitter[2] != 0.0f ||
      jitter[3] != 0.0f) {
    const auto w = words(kJitterBlock);
    for (int k = 0; k < 4; ++k) {
      if (jitter[k] == 0.0f) continue;
      const float lo = k == 3 ? -jitter[k] : std::max(0.0f, 1.0f - jitter[k]);
      const float hi = k == 3 ? jitter[k] : 1.0f + jitter[k];
      p->jitter_factor[k] = lo + UniformFloat(w[k]) * (hi - lo);
    }
    const auto o = words(kJitterOrderBlock);
    uint8_t order[4] = {0, 1, 2, 3};
    PlanShuffle(order, 4, [&o](uint64_t i) { return uint64_t{o[3 - i]}; });
    std::copy(order, order + 4, p->jitter_order);
    p->jitter_ops = 4;
  }
  // auto_augment: indices into torchvision's tables (server/spec/
  // augment_space.h) for the output size.
  if (spec.auto_augment != AugmentPolicy::kNone) {
    const std::vector<AugmentOpMeta> space =
        AugmentSpace(spec.auto_augment, spec.height, spec.width);
    const auto add = [p](AugmentOp op, float magnitude) {
      SampleParams::AugmentStep& s = p->augment[p->augment_steps++];
      s.op = op;
      s.magnitude = magnitude;
    };
    if (spec.auto_augment == AugmentPolicy::kAutoAugmentImagenet) {
      // Word 0: the sub-policy; words 1, 2: each step's probability draw
      // (applied when u <= p); word 3 bits 0, 1: each step's sign (bit 0:
      // negated, as torchvision's signs[i] == 0).
      const auto w = words(kAugmentBlock);
      const auto& policy = AutoAugmentImagenetPolicies()[w[0] % 25];
      for (int k = 0; k < 2; ++k) {
        const AutoAugmentStep& step = policy[static_cast<size_t>(k)];
        if (!(UniformFloat(w[1 + k]) <= step.probability)) continue;
        const AugmentOpMeta* meta = nullptr;
        for (const AugmentOpMeta& m : space) {
          if (m.op == step.op) meta = &m;
        }
        float magnitude = 0.0f;
        if (step.magnitude_id >= 0 && meta != nullptr &&
            !meta->magnitudes.empty()) {
          magnitude = meta->magnitudes[static_cast<size_t>(step.magnitude_id)];
        }
        if (meta != nullptr && meta->is_signed && ((w[3] >> k) & 1u) == 0) {
          magnitude = -magnitude;
        }
        add(step.op, magnitude);
      }
    } else {
      // TrivialAugmentWide: one op; RandAugment: num_ops. Block
      // kAugmentBlock + k: word 0 the op, word 1 the bin (TrivialAugmentWide;
      // RandAugment's is the request's), word 2 bit 0 the sign (1: negated).
      const bool ta = spec.auto_augment == AugmentPolicy::kTrivialAugmentWide;
      const int ops = ta ? 1 : spec.rand_augment_num_ops;
      for (int k = 0; k < ops && k < SampleParams::kMaxAugmentSteps; ++k) {
        const auto w = words(kAugmentBlock + static_cast<uint32_t>(k));
        const AugmentOpMeta& meta = space[w[0] % space.size()];
        float magnitude = 0.0f;
        if (!meta.magnitudes.empty()) {
          const size_t bin =
              ta ? w[1] % meta.magnitudes.size()
                 : static_cast<size_t>(spec.rand_augment_magnitude);
          magnitude = meta.magnitudes[bin];
        }
        if (meta.is_signed && (w[2] & 1u) != 0) magnitude = -magnitude;
        add(meta.op, magnitude);
      }
    }
  }
  // RandomErasing on the height x width output: word 0 of the erase block
  // decides (u < p); attempt a: scale u (word 0), log-ratio u (word 1), the
  // row (word 2) and column (word 3) offsets.
  if (spec.erase_probability > 0.0f &&
      UniformFloat(words(kEraseBlock)[0]) < spec.erase_probability) {
    const double area = static_cast<double>(spec.height) * spec.width;
    const double s_lo = static_cast<double>(spec.erase_scale_min);
    const double s_hi = static_cast<double>(spec.erase_scale_max);
    const double log_lo = PlanLog(static_cast<double>(spec.erase_ratio_min));
    const double log_hi = PlanLog(static_cast<double>(spec.erase_ratio_max));
    for (int a = 0; a < kEraseAttempts; ++a) {
      const auto w = words(kEraseAttemptBlock + static_cast<uint32_t>(a));
      // The random resized crop's arithmetic (portable log/exp), with
      // torchvision's comparison: the box must be strictly smaller.
      const double erase_area =
          area * (s_lo + static_cast<double>(UniformFloat(w[0])) * (s_hi - s_lo));
      const double aspect = PlanExp(
          log_lo + static_cast<double>(UniformFloat(w[1])) * (log_hi - log_lo));
      const double hd = PlanRoundHalfEven(std::sqrt(erase_area * aspect));
      const double wd = PlanRoundHalfEven(std::sqrt(erase_area / aspect));
      if (!(hd < spec.height && wd < spec.width)) continue;
      const int h = static_cast<int>(hd), wi = static_cast<int>(wd);
      p->erased = true;
      p->erase_box = CropBox{
          static_cast<int>(w[2] % static_cast<uint32_t>(spec.height - h + 1)),
          static_cast<int>(w[3] % static_cast<uint32_t>(spec.width - wi + 1)),
          h, wi};
      break;
    }
  }
}

SampleParams DrawSampleParams(const TransformSpec& spec, uint64_t seed,
                              uint64_t epoch, uint64_t sample_id, int height,
                              int width) {
  SampleParams p;
  p.source_height = height;
  p.source_width = width;
  const auto w = SampleParamWords(seed, epoch, sample_id, 0);
  if (spec.flip_probability > 0.0f) {
    p.flip = UniformFloat(w[0]) < spec.flip_probability;
  }
  if (spec.brightness_max_delta > 0.0f) {
    const float m = spec.brightness_max_delta;
    const float range = m + m;  // maxval - minval of random_uniform
    p.brightness_delta = UniformFloat(w[1]) * range - m;
  }
  if (spec.saturation_enabled) {
    const float range = spec.saturation_upper - spec.saturation_lower;
    p.saturation_factor = UniformFloat(w[2]) * range + spec.saturation_lower;
  }
  if (spec.contrast_enabled) {
    const float range = spec.contrast_upper - spec.contrast_lower;
    p.contrast_factor = UniformFloat(w[3]) * range + spec.contrast_lower;
  }
  if (spec.hue_max_delta > 0.0f) {
    const auto c = SampleParamWords(seed, epoch, sample_id, kColorBlock);
    const float m = spec.hue_max_delta;
    const float range = m + m;
    p.hue_delta = UniformFloat(c[0]) * range - m;
  }
  if (spec.fidelity == Fidelity::kTorchvision) {
    DrawTorchvisionAugmentations(spec, seed, epoch, sample_id, &p);
  }
  switch (spec.crop) {
    case CropMode::kNone:
      p.crop = CropBox{0, 0, height > 0 ? height : 0, width > 0 ? width : 0};
      break;
    case CropMode::kCenter:
      p.crop = CenterCropBox(height, width, spec.center_fraction);
      break;
    case CropMode::kRandomResized:
      p.crop =
          RandomResizedCropBox(spec, seed, epoch, sample_id, height, width);
      break;
    case CropMode::kResizeCenter:
      // TORCHVISION resizes the whole image and crops afterwards; the other
      // fidelities resample the corresponding box of the decoded image.
      if (spec.fidelity == Fidelity::kTorchvision || height <= 0 ||
          width <= 0) {
        p.crop = CropBox{0, 0, height > 0 ? height : 0, width > 0 ? width : 0};
      } else {
        p.crop = ResizeCenterSourceBox(height, width, spec.resize_shorter,
                                       spec.height, spec.width);
      }
      break;
  }
  return p;
}

}  // namespace nearprep
