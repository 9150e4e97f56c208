// Fuzz target: the bytes of a StreamBatchesRequest as they arrive on the
// wire -> protobuf parse (what PreprocessorService does with the raw
// ByteBuffer) -> ValidateStreamRequest. Checks:
//  - an error is INVALID_ARGUMENT, NOT_FOUND or RESOURCE_EXHAUSTED and its
//    message starts with the field it is about ("transform.height: ...");
//    NOT_FOUND is about "dataset";
//  - an accepted request is really within every documented range and limit;
//  - validation is deterministic and survives a serialize/parse round trip.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nearprep/v1/nearprep.pb.h"
#include "server/data/dataset.h"
#include "server/service/request_validation.h"
#include "tests/fuzz/fuzz_targets.h"

namespace nearprep {
namespace fuzz {
namespace {

constexpr char kTarget[] = "stream_request";
#define CHECK_REQ(cond, msg) NEARPREP_FUZZ_CHECK(kTarget, cond, msg)

// One real (tiny) dataset named "imagenet", opened once.
const Dataset* ServedDataset() {
  static const Dataset* dataset = [] {
    const std::string root =
        (std::filesystem::temp_directory_path() /
         ("nearprep_fuzz_req_" + std::to_string(::getpid())))
            .string();
    std::filesystem::create_directories(root + "/cls");
    std::ofstream(root + "/cls/a.jpg") << "not decoded here";
    DatasetConfig c;
    c.name = "imagenet";
    c.root = root;
    auto ds = Dataset::Open(c);
    static std::string root_copy = root;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(root_copy, ec);
    });
    return ds.ok() ? ds->release() : nullptr;
  }();
  return dataset;
}

bool InRange(float v, float lo, float hi) {
  return std::isfinite(v) && v >= lo && v <= hi;
}

void CheckAccepted(const StreamRequest& r, const ServiceLimits& limits) {
  const TransformSpec& s = r.context.spec;
  const OutputSpec& output = r.context.output;
  CHECK_REQ(r.context.source != nullptr && &r.context.source->dataset() == ServedDataset(),
            "wrong dataset");
  CHECK_REQ(r.batch_size >= 1 && r.batch_size <= limits.max_batch_size,
            absl::StrCat("batch_size ", r.batch_size));
  CHECK_REQ(r.num_shards >= 1 && r.shard_index < r.num_shards,
            absl::StrCat("shard ", r.shard_index, "/", r.num_shards));
  CHECK_REQ(s.height >= 1 && s.height <= static_cast<int>(kMaxOutputSide) &&
                s.width >= 1 && s.width <= static_cast<int>(kMaxOutputSide),
            absl::StrCat("size ", s.height, "x", s.width));
  CHECK_REQ(static_cast<uint64_t>(s.height) * s.width <=
                limits.max_output_pixels,
            "over max_output_pixels");
  CHECK_REQ(static_cast<uint64_t>(r.batch_size) * output.SampleBytes(s) <=
                limits.per_stream_memory_bytes,
            "over per_stream_memory_bytes");
  CHECK_REQ(r.memory_limit_bytes == limits.per_stream_memory_bytes,
            "memory limit not copied");
  CHECK_REQ(static_cast<int>(s.crop) >= 0 && static_cast<int>(s.crop) <= 3,
            "crop enum");
  CHECK_REQ(static_cast<int>(s.fidelity) >= 0 &&
                static_cast<int>(s.fidelity) <= 2,
            "fidelity enum");
  CHECK_REQ(s.resize_shorter >= 1 &&
                s.resize_shorter <= static_cast<int>(kMaxOutputSide),
            absl::StrCat("resize_shorter ", s.resize_shorter));
  if (s.crop == CropMode::kResizeCenter) {
    CHECK_REQ(s.resize_shorter >= std::max(s.height, s.width),
              "resize-centre window larger than the resized image");
  }
  if (s.fidelity == Fidelity::kTorchvision) {
    CHECK_REQ(s.brightness_max_delta == 0.0f && !s.saturation_enabled,
              "colour augmentation accepted with FIDELITY_TORCHVISION");
  }
  CHECK_REQ(static_cast<int>(output.dtype) >= 0 &&
                static_cast<int>(output.dtype) <= 3 &&
                static_cast<int>(output.layout) >= 0 &&
                static_cast<int>(output.layout) <= 1,
            "output enums");
  CHECK_REQ(static_cast<int>(r.error_policy) >= 0 &&
                static_cast<int>(r.error_policy) <= 1,
            "error_policy enum");
  CHECK_REQ(InRange(s.center_fraction, 1e-45f, 1.0f) && s.center_fraction > 0,
            absl::StrCat("center_fraction ", s.center_fraction));
  CHECK_REQ(InRange(s.scale_min, 0.0f, 1.0f) && s.scale_min > 0 &&
                InRange(s.scale_max, s.scale_min, 1.0f),
            absl::StrCat("scale [", s.scale_min, ", ", s.scale_max, "]"));
  CHECK_REQ(std::isfinite(s.ratio_min) && s.ratio_min > 0 &&
                std::isfinite(s.ratio_max) && s.ratio_max >= s.ratio_min,
            absl::StrCat("ratio [", s.ratio_min, ", ", s.ratio_max, "]"));
  CHECK_REQ(InRange(s.flip_probability, 0.0f, 1.0f), "flip_probability");
  CHECK_REQ(std::isfinite(s.brightness_max_delta) &&
                s.brightness_max_delta >= 0,
            "brightness_max_delta");
  if (s.saturation_enabled) {
    CHECK_REQ(std::isfinite(s.saturation_lower) && s.saturation_lower >= 0 &&
                  std::isfinite(s.saturation_upper) &&
                  s.saturation_upper >= s.saturation_lower,
              "saturation range");
  }
  for (int c = 0; c < 3; ++c) {
    CHECK_REQ(std::isfinite(s.mean[c]), "mean not finite");
    CHECK_REQ(std::isfinite(s.std[c]) && s.std[c] > 0, "std not > 0");
  }
  CHECK_REQ(r.context.limits.max_decoded_values == limits.max_decoded_pixels,
            "decode limit not copied");
  CHECK_REQ(r.start_position == 0 || r.start_position >= r.start_batch,
            "start_position < start_batch");
}

}  // namespace

int FuzzStreamRequest(const uint8_t* data, size_t size) {
  v1::StreamBatchesRequest request;
  if (size > static_cast<size_t>(INT32_MAX) ||
      !request.ParseFromArray(data, static_cast<int>(size))) {
    CountOutcome(kTarget, "unparsable");
    return 0;  // The service answers INVALID_ARGUMENT "request: ...".
  }
  const Dataset* served = ServedDataset();
  CHECK_REQ(served != nullptr, "could not open the fuzz dataset");
  const DatasetLookup lookup = [served](const std::string& name) {
    return name == "imagenet" ? served : nullptr;
  };
  ServiceLimits limits;
  limits.max_batch_size = 256;
  limits.max_output_pixels = uint64_t{1024} * 1024;
  limits.per_stream_memory_bytes = uint64_t{256} << 20;

  const absl::StatusOr<StreamRequest> r =
      ValidateStreamRequest(request, lookup, limits);
  CountOutcome(kTarget, r.ok() ? "accepted" : "refused");
  if (r.ok()) {
    CheckAccepted(*r, limits);
  } else {
    const absl::Status& s = r.status();
    // FAILED_PRECONDITION is the fleet's answer when the request was planned
    // against another manifest (manifest_hash) or names a sample of a
    // partition this daemon does not hold (sample_ids[i]); nothing else.
    CHECK_REQ(s.code() == absl::StatusCode::kInvalidArgument ||
                  s.code() == absl::StatusCode::kNotFound ||
                  s.code() == absl::StatusCode::kResourceExhausted ||
                  s.code() == absl::StatusCode::kFailedPrecondition,
              s.ToString());
    CHECK_REQ(MessageNamesField(s), "message names no field: " + s.ToString());
    if (s.code() == absl::StatusCode::kNotFound) {
      CHECK_REQ(s.message().rfind("dataset: ", 0) == 0, s.ToString());
    }
    if (s.code() == absl::StatusCode::kFailedPrecondition) {
      CHECK_REQ(s.message().rfind("manifest_hash: ", 0) == 0 ||
                    s.message().rfind("sample_ids[", 0) == 0,
                s.ToString());
    }
  }

  // Same answer again, and after a round trip through the wire format.
  const absl::StatusOr<StreamRequest> again =
      ValidateStreamRequest(request, lookup, limits);
  CHECK_REQ(again.status() == r.status(), "validation not deterministic");
  v1::StreamBatchesRequest reparsed;
  const std::string wire = request.SerializeAsString();
  CHECK_REQ(reparsed.ParseFromString(wire), "re-serialized request unparsable");
  const absl::StatusOr<StreamRequest> round =
      ValidateStreamRequest(reparsed, lookup, limits);
  CHECK_REQ(round.status() == r.status(),
            "round trip changed the verdict: " + r.status().ToString() +
                " vs " + round.status().ToString());
  return 0;
}

}  // namespace fuzz
}  // namespace nearprep

#ifdef NEARPREP_LIBFUZZER_MAIN
#include "google/protobuf/stubs/logging.h"
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // invalid UTF-8 is logged
  return 0;
}
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return nearprep::fuzz::FuzzStreamRequest(data, size);
}
#endif
