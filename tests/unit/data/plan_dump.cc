// nearprep_plan_dump: prints the epoch plan as JSON so that other
// implementations (client/python/nearprep/plan.py, tests/python/test_plan.py)
// can be compared with the C++ one bit for bit.
//
// Usage: nearprep_plan_dump key=value ...
//   n seed epoch shuffle(0|1) shard_index num_shards
//   crop (0 none | 1 center | 2 random resized | 3 resize center)
//   center_fraction fidelity (0 tf | 1 fast | 2 torchvision) resize_shorter
//   out_height out_width (the output size, for crop 3) scale_min
//   scale_max ratio_min ratio_max flip brightness sat_lower sat_upper
//   (saturation is enabled when sat_lower or sat_upper is non-zero)
//   con_lower con_upper hue (contrast likewise)
//   FIDELITY_TORCHVISION's augmentations (fidelity=2): jitter_brightness
//   jitter_contrast jitter_saturation jitter_hue, auto_augment (0 none |
//   1 TrivialAugmentWide | 2 RandAugment | 3 AutoAugment IMAGENET),
//   rand_ops rand_mag (RandAugment's num_ops and magnitude, as resolved),
//   erase_p erase_scale_min erase_scale_max erase_ratio_min erase_ratio_max
//   (out_height x out_width is the output the op tables and the erased box
//   are for)
//   params=K      parameters of sample ids first_id..first_id+K-1
//   first_id=I    (default 0)
//   block_samples=B open_blocks=K window=W   with B > 0: the block shuffle
//                 (server/data/block_shuffle.h) instead of the global one
//   sizes=HxW,HxW,...  image size of sample id i is sizes[i % len]
//   philox=c0,c1,c2,c3,k0,k1  (repeatable) raw Philox outputs
// Float arguments are decimal or 0x-prefixed float32 bit patterns; floats
// are printed as their bit patterns ("bits") to compare exactly.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "server/data/block_shuffle.h"
#include "server/data/epoch_plan.h"

namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

float ParseFloat(const std::string& v) {
  if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) {
    const uint32_t b =
        static_cast<uint32_t>(std::strtoul(v.c_str(), nullptr, 16));
    float f;
    std::memcpy(&f, &b, sizeof(f));
    return f;
  }
  return std::strtof(v.c_str(), nullptr);
}

std::vector<uint64_t> ParseList(const std::string& v) {
  std::vector<uint64_t> out;
  size_t pos = 0;
  while (pos <= v.size()) {
    const size_t comma = v.find(',', pos);
    const std::string item = v.substr(
        pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!item.empty()) out.push_back(std::strtoull(item.c_str(), nullptr, 0));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

void PrintList(const char* name, const std::vector<uint64_t>& v) {
  std::printf("\"%s\": [", name);
  for (size_t i = 0; i < v.size(); ++i) {
    std::printf("%s%" PRIu64, i ? ", " : "", v[i]);
  }
  std::printf("]");
}

}  // namespace

int main(int argc, char** argv) {
  using nearprep::CropMode;
  uint64_t n = 10, seed = 42, epoch = 0, params = 0, first_id = 0;
  bool shuffle = true;
  uint32_t shard_index = 0, num_shards = 1;
  nearprep::TransformSpec spec;
  std::vector<std::pair<int, int>> sizes = {{375, 500}};
  std::vector<std::vector<uint64_t>> philox;
  nearprep::BlockShuffleParams block;
  block.block_samples = 0;  // 0: global shuffle.
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "bad argument %s (want key=value)\n", argv[i]);
      return 2;
    }
    const std::string k = arg.substr(0, eq), v = arg.substr(eq + 1);
    const uint64_t u = std::strtoull(v.c_str(), nullptr, 0);
    if (k == "n")
      n = u;
    else if (k == "seed")
      seed = u;
    else if (k == "epoch")
      epoch = u;
    else if (k == "shuffle")
      shuffle = u != 0;
    else if (k == "shard_index")
      shard_index = static_cast<uint32_t>(u);
    else if (k == "num_shards")
      num_shards = static_cast<uint32_t>(u);
    else if (k == "params")
      params = u;
    else if (k == "first_id")
      first_id = u;
    else if (k == "crop")
      spec.crop = static_cast<CropMode>(u);
    else if (k == "center_fraction")
      spec.center_fraction = ParseFloat(v);
    else if (k == "fidelity")
      spec.fidelity = static_cast<nearprep::Fidelity>(u);
    else if (k == "resize_shorter")
      spec.resize_shorter = static_cast<int>(u);
    else if (k == "out_height")
      spec.height = static_cast<int>(u);
    else if (k == "out_width")
      spec.width = static_cast<int>(u);
    else if (k == "scale_min")
      spec.scale_min = ParseFloat(v);
    else if (k == "scale_max")
      spec.scale_max = ParseFloat(v);
    else if (k == "ratio_min")
      spec.ratio_min = ParseFloat(v);
    else if (k == "ratio_max")
      spec.ratio_max = ParseFloat(v);
    else if (k == "flip")
      spec.flip_probability = ParseFloat(v);
    else if (k == "brightness")
      spec.brightness_max_delta = ParseFloat(v);
    else if (k == "sat_lower")
      spec.saturation_lower = ParseFloat(v);
    else if (k == "sat_upper")
      spec.saturation_upper = ParseFloat(v);
    else if (k == "con_lower")
      spec.contrast_lower = ParseFloat(v);
    else if (k == "con_upper")
      spec.contrast_upper = ParseFloat(v);
    else if (k == "hue")
      spec.hue_max_delta = ParseFloat(v);
    else if (k == "jitter_brightness")
      spec.jitter_brightness = ParseFloat(v);
    else if (k == "jitter_contrast")
      spec.jitter_contrast = ParseFloat(v);
    else if (k == "jitter_saturation")
      spec.jitter_saturation = ParseFloat(v);
    else if (k == "jitter_hue")
      spec.jitter_hue = ParseFloat(v);
    else if (k == "auto_augment")
      spec.auto_augment = static_cast<nearprep::AugmentPolicy>(u);
    else if (k == "rand_ops")
      spec.rand_augment_num_ops = static_cast<int>(u);
    else if (k == "rand_mag")
      spec.rand_augment_magnitude = static_cast<int>(u);
    else if (k == "erase_p")
      spec.erase_probability = ParseFloat(v);
    else if (k == "erase_scale_min")
      spec.erase_scale_min = ParseFloat(v);
    else if (k == "erase_scale_max")
      spec.erase_scale_max = ParseFloat(v);
    else if (k == "erase_ratio_min")
      spec.erase_ratio_min = ParseFloat(v);
    else if (k == "erase_ratio_max")
      spec.erase_ratio_max = ParseFloat(v);
    else if (k == "block_samples")
      block.block_samples = u;
    else if (k == "open_blocks")
      block.open_blocks = static_cast<uint32_t>(u);
    else if (k == "window")
      block.window = static_cast<uint32_t>(u);
    else if (k == "philox")
      philox.push_back(ParseList(v));
    else if (k == "sizes") {
      sizes.clear();
      size_t pos = 0;
      while (pos < v.size()) {
        size_t comma = v.find(',', pos);
        if (comma == std::string::npos) comma = v.size();
        const std::string item = v.substr(pos, comma - pos);
        const size_t x = item.find('x');
        if (x == std::string::npos) {
          std::fprintf(stderr, "bad size %s\n", item.c_str());
          return 2;
        }
        sizes.emplace_back(std::atoi(item.substr(0, x).c_str()),
                           std::atoi(item.substr(x + 1).c_str()));
        pos = comma + 1;
      }
      if (sizes.empty()) sizes = {{375, 500}};
    } else {
      std::fprintf(stderr, "unknown key %s\n", k.c_str());
      return 2;
    }
  }
  spec.saturation_enabled =
      spec.saturation_lower != 0.0f || spec.saturation_upper != 0.0f;
  spec.contrast_enabled =
      spec.contrast_lower != 0.0f || spec.contrast_upper != 0.0f;

  const auto order =
      block.block_samples > 0 && shuffle
          ? nearprep::BlockShuffledOrder(n, seed, epoch, block)
          : nearprep::EpochOrder(n, seed, epoch, shuffle);
  std::printf("{");
  PrintList("order", order);
  std::printf(",\n");
  PrintList("shard", nearprep::ShardSamples(order, shard_index, num_shards));
  std::printf(",\n\"philox\": [");
  for (size_t i = 0; i < philox.size(); ++i) {
    const auto& p = philox[i];
    if (p.size() != 6) {
      std::fprintf(stderr, "philox needs 6 words\n");
      return 2;
    }
    const auto out = nearprep::Philox4x32(
        {static_cast<uint32_t>(p[0]), static_cast<uint32_t>(p[1]),
         static_cast<uint32_t>(p[2]), static_cast<uint32_t>(p[3])},
        {static_cast<uint32_t>(p[4]), static_cast<uint32_t>(p[5])});
    std::printf("%s[%u, %u, %u, %u]", i ? ", " : "", out[0], out[1], out[2],
                out[3]);
  }
  std::printf("],\n\"params\": [");
  for (uint64_t i = 0; i < params; ++i) {
    const uint64_t id = first_id + i;
    const auto& hw = sizes[id % sizes.size()];
    const auto p =
        nearprep::DrawSampleParams(spec, seed, epoch, id, hw.first, hw.second);
    std::printf("%s\n{\"id\": %" PRIu64
                ", \"flip\": %s, \"delta_bits\": %u, "
                "\"factor_bits\": %u, \"delta\": %.9g, \"factor\": %.9g, "
                "\"crop\": [%d, %d, %d, %d], \"source\": [%d, %d], "
                "\"contrast_bits\": %u, \"hue_bits\": %u",
                i ? "," : "", id, p.flip ? "true" : "false",
                Bits(p.brightness_delta), Bits(p.saturation_factor),
                static_cast<double>(p.brightness_delta),
                static_cast<double>(p.saturation_factor), p.crop.y, p.crop.x,
                p.crop.height, p.crop.width, p.source_height, p.source_width,
                Bits(p.contrast_factor), Bits(p.hue_delta));
    // The torchvision augmentations: ColorJitter's factors (bits) and order
    // (empty when off), the augment steps as [op, magnitude bits], and the
    // erased box [y, x, height, width] (null when nothing was erased).
    std::printf(", \"jitter_bits\": [%u, %u, %u, %u], \"jitter_order\": [",
                Bits(p.jitter_factor[0]), Bits(p.jitter_factor[1]),
                Bits(p.jitter_factor[2]), Bits(p.jitter_factor[3]));
    for (int j = 0; j < p.jitter_ops; ++j) {
      std::printf("%s%u", j ? ", " : "", unsigned{p.jitter_order[j]});
    }
    std::printf("], \"augment\": [");
    for (int j = 0; j < p.augment_steps; ++j) {
      std::printf("%s[%d, %u]", j ? ", " : "",
                  static_cast<int>(p.augment[j].op),
                  Bits(p.augment[j].magnitude));
    }
    std::printf("], \"erased\": ");
    if (p.erased) {
      std::printf("[%d, %d, %d, %d]}", p.erase_box.y, p.erase_box.x,
                  p.erase_box.height, p.erase_box.width);
    } else {
      std::printf("null}");
    }
  }
  std::printf("]}\n");
  return 0;
}
