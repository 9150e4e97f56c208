// Fuzz target: the CPU JPEG decoder and the fused preprocess on arbitrary
// bytes. Checks, besides "no crash" (and, under ASan/UBSan, no memory or UB
// error):
//  - every error is one of the codes jpeg_decoder.h documents, with a message;
//  - ReadJpegHeader / DecodeJpegTfCompat agree (an OK decode has the header's
//    size and height*width*3 bytes; a refused header refuses the decode);
//  - a TF_COMPAT decode that succeeds implies FAST and PreprocessJpeg (both
//    fidelities) succeed on the same bytes with a crop inside the image;
//  - PreprocessJpeg(TF_COMPAT) == TransformDecoded(DecodeJpegTfCompat), byte
//    for byte, and clipped float output lies in [0, 1].
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/spec/types.h"
#include "server/image/jpeg_decoder.h"
#include "server/image/preprocess.h"
#include "tests/fuzz/fuzz_targets.h"

namespace nearprep {
namespace fuzz {
namespace {

constexpr char kTarget[] = "jpeg_decode";

#define CHECK_JPEG(cond, msg) NEARPREP_FUZZ_CHECK(kTarget, cond, msg)

// FNV-1a of the input: the source of every "random" choice, so that a given
// input always takes the same path (reproducible crashes).
uint64_t Hash(const uint8_t* data, size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) {
    h = (h ^ data[i]) * 1099511628211ull;
  }
  return h;
}

uint64_t Next(uint64_t* s) {  // splitmix64
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int Pick(uint64_t* s, int lo, int hi) {  // inclusive
  return lo + static_cast<int>(Next(s) % static_cast<uint64_t>(hi - lo + 1));
}

// A crop inside an h x w image.
CropBox PickCrop(uint64_t* s, int h, int w) {
  CropBox c;
  c.height = Pick(s, 1, h);
  c.width = Pick(s, 1, w);
  c.y = Pick(s, 0, h - c.height);
  c.x = Pick(s, 0, w - c.width);
  return c;
}

bool DecoderCode(absl::StatusCode c) {
  return c == absl::StatusCode::kInvalidArgument ||
         c == absl::StatusCode::kDataLoss ||
         c == absl::StatusCode::kResourceExhausted;
}

std::string Describe(const absl::Status& s) { return s.ToString(); }

}  // namespace

int FuzzJpegDecode(const uint8_t* data, size_t size) {
  DecodeLimits limits;
  limits.max_decoded_values = kFuzzMaxDecodedValues;
  uint64_t rng = Hash(data, size);

  const absl::StatusOr<JpegHeader> header = ReadJpegHeader(data, size, limits);
  if (header.ok()) {
    CHECK_JPEG(header->height > 0 && header->width > 0,
               absl::StrCat("header ", header->height, "x", header->width));
    CHECK_JPEG(header->components == 1 || header->components == 3 ||
                   header->components == 4,
               absl::StrCat("components ", header->components));
    CHECK_JPEG(static_cast<uint64_t>(header->height) * header->width *
                       header->components <
                   limits.max_decoded_values,
               "header over the limit accepted");
  } else {
    CHECK_JPEG(header.status().code() == absl::StatusCode::kInvalidArgument ||
                   header.status().code() ==
                       absl::StatusCode::kResourceExhausted,
               Describe(header.status()));
    CHECK_JPEG(!header.status().message().empty(), "empty message");
  }

  const absl::StatusOr<RgbImage> tf = DecodeJpegTfCompat(data, size, limits);
  if (tf.ok()) {
    CHECK_JPEG(header.ok(), "decode OK but header refused: " +
                                Describe(header.status()));
    if (header.ok()) {
      CHECK_JPEG(tf->height == header->height && tf->width == header->width,
                 absl::StrCat("decoded ", tf->height, "x", tf->width,
                              ", header ", header->height, "x",
                              header->width));
    }
    CHECK_JPEG(tf->pixels.size() ==
                   static_cast<size_t>(tf->height) * tf->width * 3,
               absl::StrCat("pixels ", tf->pixels.size()));
  } else {
    CHECK_JPEG(DecoderCode(tf.status().code()), Describe(tf.status()));
    CHECK_JPEG(!tf.status().message().empty(), "empty message");
    if (!header.ok()) {
      CHECK_JPEG(tf.status().code() == header.status().code(),
                 "header " + Describe(header.status()) + " but decode " +
                     Describe(tf.status()));
    }
  }
  CountOutcome(kTarget, !header.ok() ? "header refused"
                        : tf.ok()   ? "decoded"
                                    : "decode refused");
  if (!header.ok()) return 0;
  const int h = header->height;
  const int w = header->width;

  // FAST decode of a crop.
  {
    const CropBox crop = PickCrop(&rng, h, w);
    const int th = Pick(&rng, 1, 48);
    const int tw = Pick(&rng, 1, 48);
    CropBox scaled;
    const absl::StatusOr<RgbImage> fast =
        DecodeJpegFast(data, size, limits, crop, th, tw, &scaled);
    if (fast.ok()) {
      CHECK_JPEG(fast->height > 0 && fast->width > 0 &&
                     fast->pixels.size() ==
                         static_cast<size_t>(fast->height) * fast->width * 3,
                 absl::StrCat("FAST image ", fast->height, "x", fast->width,
                              " with ", fast->pixels.size(), " bytes"));
      CHECK_JPEG(scaled.height > 0 && scaled.width > 0 && scaled.y >= 0 &&
                     scaled.x >= 0 && scaled.y + scaled.height <= fast->height &&
                     scaled.x + scaled.width <= fast->width,
                 absl::StrCat("scaled crop (", scaled.y, ",", scaled.x, ",",
                              scaled.height, "x", scaled.width,
                              ") outside the returned ", fast->height, "x",
                              fast->width));
    } else {
      CHECK_JPEG(DecoderCode(fast.status().code()), Describe(fast.status()));
      CHECK_JPEG(!tf.ok(), "TF_COMPAT decodes but FAST fails: " +
                               Describe(fast.status()));
    }
  }

  // The fused preprocess, both fidelities.
  TransformSpec spec;
  spec.height = Pick(&rng, 1, 24);
  spec.width = Pick(&rng, 1, 24);
  spec.crop = static_cast<CropMode>(Pick(&rng, 0, 2));
  spec.flip_probability = 0.5f;
  spec.brightness_max_delta = 0.25f;
  spec.saturation_enabled = Pick(&rng, 0, 1) == 1;
  spec.saturation_lower = 0.5f;
  spec.saturation_upper = 1.5f;
  spec.clip = true;
  OutputSpec output;  // float32 NHWC: values are checked below.
  SampleParams wanted;
  wanted.flip = Pick(&rng, 0, 1) == 1;
  wanted.brightness_delta = static_cast<float>(Pick(&rng, -25, 25)) / 100.0f;
  wanted.saturation_factor =
      spec.saturation_enabled ? static_cast<float>(Pick(&rng, 50, 150)) / 100.0f
                              : 1.0f;
  wanted.crop = spec.crop == CropMode::kNone ? CropBox{0, 0, h, w}
                                             : PickCrop(&rng, h, w);
  const ParamsFn draw = [&](int ph, int pw) {
    SampleParams p = wanted;
    p.source_height = ph;
    p.source_width = pw;
    if (spec.crop == CropMode::kNone) p.crop = CropBox{0, 0, ph, pw};
    return p;
  };
  const size_t bytes = output.SampleBytes(spec);
  std::vector<uint8_t> out_tf(bytes), out_fast(bytes);
  for (Fidelity fidelity : {Fidelity::kTfCompat, Fidelity::kFast}) {
    spec.fidelity = fidelity;
    std::vector<uint8_t>& out =
        fidelity == Fidelity::kTfCompat ? out_tf : out_fast;
    SampleParams used;
    StageTimes times;
    const absl::Status st = PreprocessJpeg(data, size, spec, output, limits,
                                           draw, &used, out.data(), &times);
    const char* name = fidelity == Fidelity::kTfCompat ? "TF_COMPAT" : "FAST";
    if (!st.ok()) {
      CHECK_JPEG(DecoderCode(st.code()),
                 absl::StrCat(name, ": ", Describe(st)));
      CHECK_JPEG(!tf.ok(), absl::StrCat("TF_COMPAT decodes but PreprocessJpeg(",
                                        name, ") fails: ", Describe(st)));
      continue;
    }
    if (fidelity == Fidelity::kTfCompat) {
      CHECK_JPEG(tf.ok(), "PreprocessJpeg(TF_COMPAT) OK but decode fails: " +
                              Describe(tf.status()));
    }
    for (size_t i = 0; i + 4 <= bytes; i += 4) {
      float v;
      std::memcpy(&v, out.data() + i, 4);
      if (!(v >= 0.0f && v <= 1.0f)) {
        CHECK_JPEG(false, absl::StrCat(name, ": clipped output value ", v,
                                       " at byte ", i));
        break;
      }
    }
    if (fidelity == Fidelity::kTfCompat && tf.ok()) {
      std::vector<uint8_t> ref(bytes);
      TransformDecoded(tf->pixels.data(), tf->height, tf->width, spec, output,
                       used, ref.data());
      {
        CHECK_JPEG(ref == out_tf,
                   absl::StrCat("PreprocessJpeg(TF_COMPAT) differs from "
                                "TransformDecoded of the TF_COMPAT decode (",
                                header->progressive ? "progressive" : "baseline",
                                ", crop ", used.crop.y, ",", used.crop.x, ",",
                                used.crop.height, "x", used.crop.width, " of ",
                                h, "x", w, ")"));
      }
    }
  }

  // FIDELITY_TORCHVISION (PIL's decode and resize): no colour augmentation,
  // any crop mode including the resize-centre one. Errors are decoder
  // errors; values are x / 255 of a byte, so in [0, 1].
  TransformSpec tv = spec;
  tv.fidelity = Fidelity::kTorchvision;
  tv.brightness_max_delta = 0.0f;
  tv.saturation_enabled = false;
  tv.crop = static_cast<CropMode>(Pick(&rng, 0, 3));
  tv.resize_shorter = std::max(tv.height, tv.width) + Pick(&rng, 0, 8);
  const ParamsFn tv_draw = [&](int ph, int pw) {
    SampleParams p;
    p.flip = wanted.flip;
    p.source_height = ph;
    p.source_width = pw;
    p.crop = (tv.crop == CropMode::kNone || tv.crop == CropMode::kResizeCenter)
                 ? CropBox{0, 0, ph, pw}
                 : wanted.crop;
    return p;
  };
  std::vector<uint8_t> out_tv(output.SampleBytes(tv));
  const absl::Status st_tv = PreprocessJpeg(data, size, tv, output, limits,
                                            tv_draw, nullptr, out_tv.data(),
                                            nullptr);
  if (!st_tv.ok()) {
    CHECK_JPEG(DecoderCode(st_tv.code()), "TORCHVISION: " + Describe(st_tv));
  } else {
    for (size_t i = 0; i + 4 <= out_tv.size(); i += 4) {
      float v;
      std::memcpy(&v, out_tv.data() + i, 4);
      if (!(v >= 0.0f && v <= 1.0f)) {
        CHECK_JPEG(false, absl::StrCat("TORCHVISION: output value ", v,
                                       " at byte ", i));
        break;
      }
    }
  }
  return 0;
}

}  // namespace fuzz
}  // namespace nearprep

#ifdef NEARPREP_LIBFUZZER_MAIN
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return nearprep::fuzz::FuzzJpegDecode(data, size);
}
#endif
