#include "server/service/request_validation.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "server/pipeline/resume_token.h"

namespace nearprep {
namespace {

namespace fs = std::filesystem;

class RequestValidationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("nearprep_validation_" + std::to_string(::getpid())));
    fs::create_directories(*dir_ / "cls");
    // 40 samples (listed, never decoded here): room for resume positions.
    for (int i = 0; i < 40; ++i) {
      std::ofstream(*dir_ / "cls" / ("a" + std::to_string(100 + i) + ".jpg"))
          << "x";
    }
    DatasetConfig c;
    c.name = "ds";
    c.root = dir_->string();
    auto d = Dataset::Open(c);
    ASSERT_TRUE(d.ok()) << d.status();
    dataset_ = d->release();
  }
  static void TearDownTestSuite() {
    delete dataset_;
    fs::remove_all(*dir_);
    delete dir_;
  }

  static v1::StreamBatchesRequest Good() {
    v1::StreamBatchesRequest r;
    r.set_dataset("ds");
    r.set_batch_size(8);
    r.mutable_transform()->set_height(32);
    r.mutable_transform()->set_width(48);
    return r;
  }

  absl::StatusOr<StreamRequest> Validate(const v1::StreamBatchesRequest& r) {
    return ValidateStreamRequest(
        r,
        [](const std::string& n) -> const Dataset* {
          return n == "ds" ? dataset_ : nullptr;
        },
        limits_);
  }

  // Expects `code` and a message that starts with "field:".
  void ExpectError(const v1::StreamBatchesRequest& r, absl::StatusCode code,
                   const std::string& field) {
    absl::StatusOr<StreamRequest> v = Validate(r);
    ASSERT_FALSE(v.ok()) << "expected an error naming " << field;
    EXPECT_EQ(v.status().code(), code) << v.status();
    EXPECT_EQ(std::string(v.status().message()).rfind(field + ":", 0), 0u)
        << "message does not start with '" << field
        << ":': " << v.status().message();
  }

  static fs::path* dir_;
  static Dataset* dataset_;
  ServiceLimits limits_;
};

fs::path* RequestValidationTest::dir_ = nullptr;
Dataset* RequestValidationTest::dataset_ = nullptr;

TEST_F(RequestValidationTest, AcceptsMinimalRequestAndResolvesDefaults) {
  v1::StreamBatchesRequest r = Good();
  r.set_seed(7);
  r.set_epoch(3);
  r.set_start_batch(2);
  r.set_start_position(19);
  r.mutable_output()->set_dtype(v1::DTYPE_UINT8);
  r.mutable_output()->set_layout(v1::LAYOUT_NCHW);
  r.mutable_transform()->set_crop(v1::CROP_MODE_RANDOM_RESIZED);
  absl::StatusOr<StreamRequest> v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_NE(v->context.source, nullptr);
  EXPECT_EQ(&v->context.source->dataset(), dataset_);
  EXPECT_EQ(v->batch_size, 8u);
  EXPECT_EQ(v->context.seed, 7u);
  EXPECT_EQ(v->context.epoch, 3u);
  EXPECT_EQ(v->num_shards, 1u);  // 0 means 1.
  EXPECT_EQ(v->start_batch, 2u);
  EXPECT_EQ(v->start_position, 19u);
  EXPECT_EQ(v->context.spec.height, 32);
  EXPECT_EQ(v->context.spec.width, 48);
  EXPECT_EQ(v->context.spec.crop, CropMode::kRandomResized);
  EXPECT_FLOAT_EQ(v->context.spec.scale_min, 0.08f);
  EXPECT_FLOAT_EQ(v->context.spec.scale_max, 1.0f);
  EXPECT_FLOAT_EQ(v->context.spec.ratio_min, 0.75f);
  EXPECT_FLOAT_EQ(v->context.spec.ratio_max, 4.0f / 3.0f);
  EXPECT_FLOAT_EQ(v->context.spec.center_fraction, 0.875f);
  EXPECT_FALSE(v->context.spec.saturation_enabled);
  EXPECT_TRUE(v->context.spec.clip);
  EXPECT_FALSE(v->context.spec.normalize);
  EXPECT_EQ(v->context.output.dtype, DType::kUint8);
  EXPECT_EQ(v->context.output.layout, Layout::kNCHW);
  EXPECT_EQ(v->context.limits.max_decoded_values, limits_.max_decoded_pixels);
  EXPECT_EQ(v->memory_limit_bytes, limits_.per_stream_memory_bytes);
}

TEST_F(RequestValidationTest, CopiesAugmentationFields) {
  v1::StreamBatchesRequest r = Good();
  v1::Transform* t = r.mutable_transform();
  t->set_flip_probability(0.5f);
  t->set_brightness_max_delta(0.25f);
  t->set_saturation_lower(0.5f);
  t->set_saturation_upper(1.5f);
  t->set_disable_clip(true);
  for (float m : {0.485f, 0.456f, 0.406f}) t->add_mean(m);
  for (float s : {0.229f, 0.224f, 0.225f}) t->add_std(s);
  t->set_fidelity(v1::FIDELITY_FAST);
  absl::StatusOr<StreamRequest> v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FLOAT_EQ(v->context.spec.flip_probability, 0.5f);
  EXPECT_FLOAT_EQ(v->context.spec.brightness_max_delta, 0.25f);
  EXPECT_TRUE(v->context.spec.saturation_enabled);
  EXPECT_FLOAT_EQ(v->context.spec.saturation_lower, 0.5f);
  EXPECT_FLOAT_EQ(v->context.spec.saturation_upper, 1.5f);
  EXPECT_FALSE(v->context.spec.clip);
  EXPECT_TRUE(v->context.spec.normalize);
  EXPECT_FLOAT_EQ(v->context.spec.mean[2], 0.406f);
  EXPECT_FLOAT_EQ(v->context.spec.std[1], 0.224f);
  EXPECT_EQ(v->context.spec.fidelity, Fidelity::kFast);
  EXPECT_FALSE(v->context.spec.contrast_enabled);
  EXPECT_EQ(v->context.spec.hue_max_delta, 0.0f);
  EXPECT_EQ(v->context.spec.gamma, 0.0f);
  EXPECT_EQ(v->context.spec.gain, 1.0f);
}

TEST_F(RequestValidationTest, CopiesContrastHueAndGamma) {
  v1::StreamBatchesRequest r = Good();
  v1::Transform* t = r.mutable_transform();
  t->set_contrast_lower(0.0f);  // lower 0 is allowed while upper > 0
  t->set_contrast_upper(1.5f);
  t->set_hue_max_delta(0.5f);
  t->set_gamma(2.2f);
  absl::StatusOr<StreamRequest> v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->context.spec.contrast_enabled);
  EXPECT_EQ(v->context.spec.contrast_lower, 0.0f);
  EXPECT_EQ(v->context.spec.contrast_upper, 1.5f);
  EXPECT_EQ(v->context.spec.hue_max_delta, 0.5f);
  EXPECT_EQ(v->context.spec.gamma, 2.2f);
  EXPECT_EQ(v->context.spec.gain, 1.0f);  // 0 means 1
  t->set_gain(0.8f);
  v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->context.spec.gain, 0.8f);
  EXPECT_TRUE(v->context.spec.color_ops.empty());
  for (auto op : {v1::COLOR_OP_HUE, v1::COLOR_OP_CONTRAST, v1::COLOR_OP_GAMMA}) {
    t->add_color_ops(op);
  }
  v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->context.spec.color_ops,
            (std::vector<ColorOp>{ColorOp::kHue, ColorOp::kContrast, ColorOp::kGamma}));
}

TEST_F(RequestValidationTest, TorchvisionResizeCenterResolvesShorterSide) {
  v1::StreamBatchesRequest r = Good();
  v1::Transform* t = r.mutable_transform();
  t->set_fidelity(v1::FIDELITY_TORCHVISION);
  t->set_crop(v1::CROP_MODE_RESIZE_CENTER);
  t->set_height(224);
  t->set_width(224);
  t->set_flip_probability(0.5f);
  absl::StatusOr<StreamRequest> v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->context.spec.fidelity, Fidelity::kTorchvision);
  EXPECT_EQ(v->context.spec.crop, CropMode::kResizeCenter);
  EXPECT_EQ(v->context.spec.resize_shorter, 256);  // 0 means 256.
  t->set_resize_shorter_side(224);  // Equal to the crop side: fits.
  v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->context.spec.resize_shorter, 224);
  // Every fidelity accepts the crop mode.
  for (v1::Fidelity f : {v1::FIDELITY_TF_COMPAT, v1::FIDELITY_FAST}) {
    t->set_fidelity(f);
    t->set_resize_shorter_side(320);
    v = Validate(r);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->context.spec.resize_shorter, 320);
    EXPECT_EQ(v->context.spec.fidelity, static_cast<Fidelity>(f));
  }
  // Another crop mode ignores a field that is in range, whatever its value.
  t->set_crop(v1::CROP_MODE_RANDOM_RESIZED);
  t->set_resize_shorter_side(8);
  EXPECT_TRUE(Validate(r).ok());
}

TEST_F(RequestValidationTest, BatchSizeZeroNamesFieldAndRange) {
  v1::StreamBatchesRequest r = Good();
  r.set_batch_size(0);
  absl::StatusOr<StreamRequest> v = Validate(r);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v.status().message(), "batch_size: must be in [1, 256], got 0");
}

TEST_F(RequestValidationTest, NamesEachBadField) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  struct Case {
    const char* field;
    std::function<void(v1::StreamBatchesRequest*)> mutate;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Case> cases = {
      {"dataset", [](auto* r) { r->clear_dataset(); }},
      {"transform", [](auto* r) { r->clear_transform(); }},
      {"transform.height",
       [](auto* r) { r->mutable_transform()->set_height(0); }},
      {"transform.height",
       [](auto* r) { r->mutable_transform()->set_height(kMaxOutputSide + 1); }},
      {"transform.width",
       [](auto* r) { r->mutable_transform()->set_width(0); }},
      {"transform.crop",
       [](auto* r) {
         r->mutable_transform()->set_crop(static_cast<v1::CropMode>(7));
       }},
      {"transform.fidelity",
       [](auto* r) {
         r->mutable_transform()->set_fidelity(static_cast<v1::Fidelity>(3));
       }},
      {"transform.resize_shorter_side",
       [](auto* r) {
         r->mutable_transform()->set_resize_shorter_side(kMaxOutputSide + 1);
       }},
      {"transform.resize_shorter_side",
       [](auto* r) {  // The 48-wide centre crop does not fit a 40 side.
         r->mutable_transform()->set_crop(v1::CROP_MODE_RESIZE_CENTER);
         r->mutable_transform()->set_resize_shorter_side(40);
       }},
      {"transform.resize_shorter_side",
       [](auto* r) {  // 0 means 256 < 300.
         r->mutable_transform()->set_crop(v1::CROP_MODE_RESIZE_CENTER);
         r->mutable_transform()->set_height(300);
       }},
      {"transform.brightness_max_delta",
       [](auto* r) {
         r->mutable_transform()->set_fidelity(v1::FIDELITY_TORCHVISION);
         r->mutable_transform()->set_brightness_max_delta(0.1f);
       }},
      {"transform.saturation_lower",
       [](auto* r) {
         r->mutable_transform()->set_fidelity(v1::FIDELITY_TORCHVISION);
         r->mutable_transform()->set_saturation_lower(0.5f);
         r->mutable_transform()->set_saturation_upper(1.5f);
       }},
      {"transform.contrast_lower",
       [](auto* r) {
         r->mutable_transform()->set_fidelity(v1::FIDELITY_TORCHVISION);
         r->mutable_transform()->set_contrast_lower(0.5f);
         r->mutable_transform()->set_contrast_upper(1.5f);
       }},
      {"transform.hue_max_delta",
       [](auto* r) {
         r->mutable_transform()->set_fidelity(v1::FIDELITY_TORCHVISION);
         r->mutable_transform()->set_hue_max_delta(0.1f);
       }},
      {"transform.gamma",
       [](auto* r) {
         r->mutable_transform()->set_fidelity(v1::FIDELITY_TORCHVISION);
         r->mutable_transform()->set_gamma(0.9f);
       }},
      {"transform.contrast_lower",
       [](auto* r) {
         r->mutable_transform()->set_contrast_lower(-0.5f);
         r->mutable_transform()->set_contrast_upper(1.5f);
       }},
      {"transform.contrast_upper",  // TensorFlow: upper must be > lower
       [](auto* r) {
         r->mutable_transform()->set_contrast_lower(0.8f);
         r->mutable_transform()->set_contrast_upper(0.8f);
       }},
      {"transform.contrast_upper",
       [nan](auto* r) { r->mutable_transform()->set_contrast_upper(nan); }},
      {"transform.hue_max_delta",
       [](auto* r) { r->mutable_transform()->set_hue_max_delta(0.51f); }},
      {"transform.hue_max_delta",
       [](auto* r) { r->mutable_transform()->set_hue_max_delta(-0.1f); }},
      {"transform.gamma",
       [](auto* r) { r->mutable_transform()->set_gamma(-1.0f); }},
      {"transform.gain",
       [](auto* r) { r->mutable_transform()->set_gain(2.0f); }},  // gamma 0
      {"transform.color_ops[1]",  // listed twice
       [](auto* r) {
         r->mutable_transform()->set_brightness_max_delta(0.1f);
         r->mutable_transform()->add_color_ops(v1::COLOR_OP_BRIGHTNESS);
         r->mutable_transform()->add_color_ops(v1::COLOR_OP_BRIGHTNESS);
       }},
      {"transform.color_ops[0]",  // hue is not enabled
       [](auto* r) { r->mutable_transform()->add_color_ops(v1::COLOR_OP_HUE); }},
      {"transform.color_ops[0]",
       [](auto* r) { r->mutable_transform()->add_color_ops(v1::COLOR_OP_UNSPECIFIED); }},
      {"transform.color_ops",  // gamma enabled, not listed
       [](auto* r) {
         r->mutable_transform()->set_gamma(0.5f);
         r->mutable_transform()->set_hue_max_delta(0.1f);
         r->mutable_transform()->add_color_ops(v1::COLOR_OP_HUE);
       }},
      {"transform.center_fraction",
       [](auto* r) { r->mutable_transform()->set_center_fraction(1.5f); }},
      {"transform.center_fraction",
       [](auto* r) { r->mutable_transform()->set_center_fraction(-0.1f); }},
      {"transform.scale_min",
       [](auto* r) { r->mutable_transform()->set_scale_max(0.5f); }},
      {"transform.scale_max",
       [](auto* r) {
         r->mutable_transform()->set_scale_min(0.5f);
         r->mutable_transform()->set_scale_max(0.25f);
       }},
      {"transform.scale_max",
       [](auto* r) {
         r->mutable_transform()->set_scale_min(0.5f);
         r->mutable_transform()->set_scale_max(1.5f);
       }},
      {"transform.ratio_min",
       [](auto* r) { r->mutable_transform()->set_ratio_max(2.0f); }},
      {"transform.ratio_max",
       [](auto* r) {
         r->mutable_transform()->set_ratio_min(1.0f);
         r->mutable_transform()->set_ratio_max(0.5f);
       }},
      {"transform.flip_probability",
       [](auto* r) { r->mutable_transform()->set_flip_probability(1.01f); }},
      {"transform.flip_probability",
       [nan](auto* r) { r->mutable_transform()->set_flip_probability(nan); }},
      {"transform.brightness_max_delta",
       [](auto* r) {
         r->mutable_transform()->set_brightness_max_delta(-0.1f);
       }},
      {"transform.saturation_lower",
       [](auto* r) {
         r->mutable_transform()->set_saturation_lower(-1.0f);
         r->mutable_transform()->set_saturation_upper(1.0f);
       }},
      {"transform.saturation_upper",
       [](auto* r) {
         r->mutable_transform()->set_saturation_lower(1.0f);
         r->mutable_transform()->set_saturation_upper(0.5f);
       }},
      {"transform.mean",
       [](auto* r) {
         r->mutable_transform()->add_mean(0.5f);
         r->mutable_transform()->add_mean(0.5f);
       }},
      {"transform.std",
       [](auto* r) {
         for (int i = 0; i < 4; ++i) r->mutable_transform()->add_std(1.0f);
       }},
      {"transform.std[1]",
       [](auto* r) {
         r->mutable_transform()->add_std(1.0f);
         r->mutable_transform()->add_std(0.0f);
         r->mutable_transform()->add_std(1.0f);
       }},
      {"transform.mean[2]",
       [nan](auto* r) {
         r->mutable_transform()->add_mean(0.0f);
         r->mutable_transform()->add_mean(0.0f);
         r->mutable_transform()->add_mean(nan);
       }},
      {"shard_index",
       [](auto* r) {
         r->set_num_shards(2);
         r->set_shard_index(2);
       }},
      {"shard_index", [](auto* r) { r->set_shard_index(1); }},  // 0 shards = 1
      {"start_position", [](auto* r) { r->set_start_position(5); }},
      {"start_position",
       [](auto* r) {
         r->set_start_batch(10);
         r->set_start_position(3);
       }},
      {"error_policy",
       [](auto* r) { r->set_error_policy(static_cast<v1::ErrorPolicy>(9)); }},
      {"output.dtype",
       [](auto* r) {
         r->mutable_output()->set_dtype(static_cast<v1::DType>(4));
       }},
      {"output.layout",
       [](auto* r) {
         r->mutable_output()->set_layout(static_cast<v1::Layout>(-1));
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    v1::StreamBatchesRequest r = Good();
    c.mutate(&r);
    ExpectError(r, kInvalid, c.field);
  }
}

// Each enum field of the request, found by walking the descriptors (a field
// or enum added to the proto is covered without an edit here): one past its
// enum's largest value and -1 are refused, naming the field's path. Each
// field with a (nearprep.v1.range) option: just outside the range likewise,
// and its bounds themselves are accepted.
void CollectFields(
    const google::protobuf::Descriptor* d, const std::string& prefix,
    std::vector<std::pair<
        std::string, std::vector<const google::protobuf::FieldDescriptor*>>>*
        out,
    std::vector<const google::protobuf::FieldDescriptor*> path = {}) {
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->is_repeated()) continue;
    std::vector<const google::protobuf::FieldDescriptor*> p = path;
    p.push_back(f);
    if (f->message_type() != nullptr) {
      CollectFields(f->message_type(), prefix + f->name() + ".", out, p);
    } else if (f->enum_type() != nullptr ||
               f->options().HasExtension(v1::range)) {
      out->emplace_back(prefix + f->name(), p);
    }
  }
}

google::protobuf::Message* Leaf(
    google::protobuf::Message* m,
    const std::vector<const google::protobuf::FieldDescriptor*>& p) {
  for (size_t i = 0; i + 1 < p.size(); ++i) {
    m = m->GetReflection()->MutableMessage(m, p[i]);
  }
  return m;
}

void SetNumber(google::protobuf::Message* m,
               const google::protobuf::FieldDescriptor* f, double v) {
  using FD = google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = m->GetReflection();
  switch (f->cpp_type()) {
    case FD::CPPTYPE_FLOAT:
      r->SetFloat(m, f, static_cast<float>(v));
      break;
    case FD::CPPTYPE_DOUBLE:
      r->SetDouble(m, f, v);
      break;
    case FD::CPPTYPE_UINT32:
      r->SetUInt32(m, f, static_cast<uint32_t>(v));
      break;
    case FD::CPPTYPE_UINT64:
      r->SetUInt64(m, f, static_cast<uint64_t>(v));
      break;
    case FD::CPPTYPE_INT32:
      r->SetInt32(m, f, static_cast<int32_t>(v));
      break;
    case FD::CPPTYPE_INT64:
      r->SetInt64(m, f, static_cast<int64_t>(v));
      break;
    default:
      FAIL() << f->full_name() << ": a range on a non-numeric field";
  }
}

// The output sides' range is the proto's (nearprep.v1.range) on
// transform.height / width; kMaxOutputSide (resize_shorter_side's bound) is
// the same number.
TEST_F(RequestValidationTest, OutputSideRangeIsTheProtos) {
  for (const char* side : {"height", "width"}) {
    SCOPED_TRACE(side);
    const google::protobuf::FieldDescriptor* f =
        v1::Transform::descriptor()->FindFieldByName(side);
    ASSERT_NE(f, nullptr);
    ASSERT_TRUE(f->options().HasExtension(v1::range));
    const v1::FieldRange& range = f->options().GetExtension(v1::range);
    EXPECT_EQ(range.min(), 1);
    EXPECT_EQ(range.max(), kMaxOutputSide);
  }
  v1::StreamBatchesRequest r = Good();
  r.mutable_transform()->set_width(kMaxOutputSide + 1);
  ExpectError(r, absl::StatusCode::kInvalidArgument, "transform.width");
  EXPECT_NE(Validate(r).status().message().find(
                absl::StrCat("must be in [1, ", kMaxOutputSide, "], got ",
                             kMaxOutputSide + 1)),
            std::string::npos)
      << Validate(r).status();
}

TEST_F(RequestValidationTest, EveryEnumAndRangeOfTheProtoIsChecked) {
  std::vector<std::pair<std::string,
                        std::vector<const google::protobuf::FieldDescriptor*>>>
      fields;
  CollectFields(v1::StreamBatchesRequest::descriptor(), "", &fields);
  int enums = 0, ranges = 0;
  for (const auto& [name, path] : fields) {
    SCOPED_TRACE(name);
    const google::protobuf::FieldDescriptor* f = path.back();
    if (f->enum_type() != nullptr) {
      ++enums;
      const google::protobuf::EnumDescriptor* e = f->enum_type();
      int max = 0;
      for (int i = 0; i < e->value_count(); ++i)
        max = std::max(max, e->value(i)->number());
      for (int bad : {max + 1, -1}) {
        v1::StreamBatchesRequest r = Good();
        google::protobuf::Message* m = Leaf(&r, path);
        m->GetReflection()->SetEnumValue(m, f, bad);
        ExpectError(r, absl::StatusCode::kInvalidArgument, name);
        EXPECT_NE(Validate(r).status().message().find(absl::StrCat(
                      "unknown enum value ", bad, " (valid: 0..", max, ")")),
                  std::string::npos)
            << Validate(r).status();
      }
      continue;
    }
    ++ranges;
    const v1::FieldRange& range = f->options().GetExtension(v1::range);
    const bool is_float =
        f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_FLOAT ||
        f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE;
    const double step = is_float ? 0.5 : 1;
    std::vector<std::pair<double, bool>> cases;  // (value, accepted)
    if (range.has_min()) {
      cases.push_back({range.min(), true});
      // Below 0 cannot be set in an unsigned field.
      if (is_float || range.min() > 0)
        cases.push_back({range.min() - step, false});
    }
    if (range.has_max()) {
      cases.push_back({range.max(), true});
      cases.push_back({range.max() + step, false});
    }
    ASSERT_FALSE(cases.empty());
    for (const auto& [value, accepted] : cases) {
      SCOPED_TRACE(value);
      v1::StreamBatchesRequest r = Good();
      // torchvision's augmentations need their fidelity (and RandAugment's
      // knobs their policy) for a value in range to be accepted.
      if (absl::StartsWith(name, "transform.jitter_") ||
          absl::StartsWith(name, "transform.erase_") ||
          absl::StartsWith(name, "transform.rand_augment_")) {
        r.mutable_transform()->set_fidelity(v1::FIDELITY_TORCHVISION);
        if (absl::StartsWith(name, "transform.rand_augment_")) {
          r.mutable_transform()->set_auto_augment(v1::AUTO_AUGMENT_RAND_AUGMENT);
        }
      }
      SetNumber(Leaf(&r, path), f, value);
      if (accepted) {
        EXPECT_TRUE(Validate(r).ok()) << Validate(r).status();
      } else {
        ExpectError(r, absl::StatusCode::kInvalidArgument, name);
      }
    }
  }
  // The proto's table as of this test: crop, fidelity, dtype, layout,
  // compression, error_policy, shuffle_mode; flip_probability,
  // brightness_max_delta, open_blocks, window.
  EXPECT_GE(enums, 7);
  EXPECT_GE(ranges, 4);
}

TEST_F(RequestValidationTest, RangeMessagesKeepTheirWording) {
  v1::StreamBatchesRequest r = Good();
  r.mutable_transform()->set_flip_probability(2.0f);
  EXPECT_EQ(Validate(r).status().message(),
            "transform.flip_probability: must be in [0, 1], got 2");
  // The float's shortest digits (proto/options/field_range.h), as the CLI
  // writes them; the daemon once wrote "1.10000002".
  r = Good();
  r.mutable_transform()->set_flip_probability(1.1f);
  EXPECT_EQ(Validate(r).status().message(),
            "transform.flip_probability: must be in [0, 1], got 1.1");
  // NaN is out of every range, but the daemon words it as not finite.
  r = Good();
  r.mutable_transform()->set_flip_probability(
      std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(Validate(r).status().message(),
            "transform.flip_probability: must be finite, got nan");
  r = Good();
  r.mutable_transform()->set_brightness_max_delta(-0.25f);
  EXPECT_EQ(Validate(r).status().message(),
            "transform.brightness_max_delta: must be >= 0, got -0.25");
  r = Good();
  r.mutable_block_shuffle()->set_open_blocks(1025);
  EXPECT_EQ(Validate(r).status().message(),
            "block_shuffle.open_blocks: must be in [0, 1024], got 1025");
  r = Good();
  r.mutable_block_shuffle()->set_window((1u << 20) + 1);
  EXPECT_EQ(Validate(r).status().message(),
            "block_shuffle.window: must be in [0, 1048576], got 1048577");
  r = Good();
  r.mutable_transform()->set_crop(static_cast<v1::CropMode>(7));
  EXPECT_EQ(Validate(r).status().message(),
            "transform.crop: unknown enum value 7 (valid: 0..3)");
}

TEST_F(RequestValidationTest, UnknownDatasetIsNotFound) {
  v1::StreamBatchesRequest r = Good();
  r.set_dataset("nope");
  ExpectError(r, absl::StatusCode::kNotFound, "dataset");
}

TEST_F(RequestValidationTest, LimitsAreResourceExhausted) {
  limits_.max_batch_size = 4;
  limits_.max_output_pixels = 1000;
  v1::StreamBatchesRequest r = Good();
  ExpectError(r, absl::StatusCode::kResourceExhausted, "batch_size");
  r.set_batch_size(4);
  // 32 * 48 = 1536 > 1000.
  ExpectError(r, absl::StatusCode::kResourceExhausted,
              "transform.height * transform.width");
  r.mutable_transform()->set_width(31);  // 992 pixels: fits.
  EXPECT_TRUE(Validate(r).ok());
  // 4 samples x 992 x 3 x 4 bytes = 47616 bytes per batch.
  limits_.per_stream_memory_bytes = 47615;
  ExpectError(r, absl::StatusCode::kResourceExhausted, "batch_size");
  limits_.per_stream_memory_bytes = 47616;
  EXPECT_TRUE(Validate(r).ok());
}

TEST_F(RequestValidationTest, CompressionNeedsUint8AndAKnownCodec) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  v1::StreamBatchesRequest r = Good();
  r.mutable_output()->set_compression(v1::COMPRESSION_GRADIENT_ZSTD);
  // float32 (the default dtype): refused, naming the field.
  ExpectError(r, kInvalid, "output.compression");
  auto v = Validate(r);
  EXPECT_NE(v.status().message().find("DTYPE_UINT8"), std::string::npos)
      << v.status();
  r.mutable_output()->set_dtype(v1::DTYPE_FLOAT16);
  ExpectError(r, kInvalid, "output.compression");
  r.mutable_output()->set_dtype(v1::DTYPE_UINT8);
  v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->compression, TensorCompression::kGradientZstd);
  EXPECT_EQ(v->compression_level, kDefaultCompressionLevel);
  r.mutable_output()->set_compression_level(7);
  v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->compression_level, 7);
  r.mutable_output()->set_compression_level(20);
  ExpectError(r, kInvalid, "output.compression_level");
  r.mutable_output()->set_compression_level(-1001);
  ExpectError(r, kInvalid, "output.compression_level");
  r.mutable_output()->set_compression_level(-200);
  v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->compression_level, -200);
  r.mutable_output()->set_compression_level(0);
  r.mutable_output()->set_compression(static_cast<v1::Compression>(3));
  ExpectError(r, kInvalid, "output.compression");
  // A level without a compression is a mistake, not a no-op.
  r.mutable_output()->set_compression(v1::COMPRESSION_NONE);
  r.mutable_output()->set_compression_level(3);
  ExpectError(r, kInvalid, "output.compression_level");
  r.mutable_output()->set_compression_level(0);
  v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->compression, TensorCompression::kNone);
}

TEST_F(RequestValidationTest, CompressedCopyCountsAgainstStreamMemory) {
  v1::StreamBatchesRequest r = Good();
  r.mutable_output()->set_dtype(v1::DTYPE_UINT8);
  // 8 samples x 32 x 48 x 3 bytes = 36864 bytes per batch.
  limits_.per_stream_memory_bytes = 36864;
  EXPECT_TRUE(Validate(r).ok());
  r.mutable_output()->set_compression(v1::COMPRESSION_DELTA_ZSTD);
  ExpectError(r, absl::StatusCode::kResourceExhausted, "output.compression");
  StreamRequest probe;
  probe.batch_size = 8;
  probe.context.spec.height = 32;
  probe.context.spec.width = 48;
  probe.context.output.dtype = DType::kUint8;
  probe.compression = TensorCompression::kDeltaZstd;
  EXPECT_GT(BatchMemoryBytes(probe), 2u * 36864);
  limits_.per_stream_memory_bytes = BatchMemoryBytes(probe);
  EXPECT_TRUE(Validate(r).ok());
}

TEST_F(RequestValidationTest, MalformedFieldWinsOverUnknownDataset) {
  // A request that is wrong is INVALID_ARGUMENT whatever the server holds.
  v1::StreamBatchesRequest r = Good();
  r.set_dataset("nope");
  r.set_batch_size(0);
  ExpectError(r, absl::StatusCode::kInvalidArgument, "batch_size");
}

// Issue 20: a dataset-name typo is answered with the closest served name.
TEST(ClosestNameTest, SuggestsOnlyLikelyTypos) {
  const std::vector<std::string> served = {"imagenet", "coco", "imagenet-val"};
  EXPECT_EQ(ClosestName("imagnet", served), "imagenet");    // deletion
  EXPECT_EQ(ClosestName("imagenett", served), "imagenet");  // insertion
  EXPECT_EQ(ClosestName("imaegnet", served), "imagenet");   // swap
  EXPECT_EQ(ClosestName("ImageNet", served), "imagenet");   // case
  EXPECT_EQ(ClosestName("imagenet-vel", served), "imagenet-val");
  EXPECT_EQ(ClosestName("cocoa", served), "coco");
  EXPECT_EQ(ClosestName("mnist", served), "");
  EXPECT_EQ(ClosestName("x", served), "");
  EXPECT_EQ(ClosestName("", served), "");
  EXPECT_EQ(ClosestName("imagnet", {}), "");
}

TEST_F(RequestValidationTest, UnknownDatasetSuggestsTheClosestServedName) {
  v1::StreamBatchesRequest r = Good();
  r.set_dataset("dz");
  const auto lookup = [](const std::string& n) -> const Dataset* {
    return n == "ds" ? dataset_ : nullptr;
  };
  absl::StatusOr<StreamRequest> v =
      ValidateStreamRequest(r, lookup, limits_, {"ds", "other"});
  ASSERT_EQ(v.status().code(), absl::StatusCode::kNotFound) << v.status();
  EXPECT_EQ(v.status().message(),
            "dataset: no dataset 'dz'; did you mean 'ds'? (this daemon "
            "serves: ds, other)");
  r.set_dataset("zzzzzz");
  v = ValidateStreamRequest(r, lookup, limits_, {"ds", "other"});
  ASSERT_EQ(v.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(v.status().message()).find("did you mean"),
            std::string::npos);
}

// Issue 23 item 8: resume tokens are bound to their stream.

TEST_F(RequestValidationTest, ResumeTokenResumesItsOwnStream) {
  v1::StreamBatchesRequest r = Good();
  r.set_seed(5);
  r.set_epoch(2);
  r.set_shuffle(true);
  absl::StatusOr<StreamRequest> v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_FALSE(v->resume_binding.empty());
  const std::string token = ResumeToken(v->resume_binding, 3, 25);
  r.set_resume_token(token);
  absl::StatusOr<StreamRequest> resumed = Validate(r);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->start_batch, 3u);
  EXPECT_EQ(resumed->start_position, 25u);
  // start_batch / start_position may repeat the token's values.
  r.set_start_batch(3);
  r.set_start_position(25);
  EXPECT_TRUE(Validate(r).ok());
  r.set_start_position(24);
  ExpectError(r, absl::StatusCode::kInvalidArgument, "start_position");
}

// The dataset name in a binding, escaped as tokens already handed out have
// it (common/percent_escape.h with ';' and '='): tokens are compared as
// text, so other bytes would refuse every token of a daemon before the change.
TEST_F(RequestValidationTest, ResumeBindingKeepsTheEscapedDatasetName) {
  DatasetConfig c;
  c.name = "my ds;v=2%-\xc3\xa9";
  c.root = dir_->string();
  auto d = Dataset::Open(c);
  ASSERT_TRUE(d.ok()) << d.status();
  StreamRequest s;
  s.context.source = std::make_shared<const SampleSource>(**d);
  s.batch_size = 8;
  const std::string binding = ResumeBinding(s);
  EXPECT_EQ(
      binding.rfind(
          "nearprep-resume-1;dataset=my%20ds%3Bv%3D2%25-%C3%A9;listing=", 0),
      0u)
      << binding;
}

TEST_F(RequestValidationTest, ForeignResumeTokenIsRefusedNamingTheField) {
  v1::StreamBatchesRequest base = Good();
  base.set_seed(5);
  base.set_epoch(2);
  base.set_shuffle(true);
  absl::StatusOr<StreamRequest> v = Validate(base);
  ASSERT_TRUE(v.ok());
  const std::string token = ResumeToken(v->resume_binding, 3, 25);
  struct Case {
    std::string field;
    std::function<void(v1::StreamBatchesRequest*)> change;
  };
  const std::vector<Case> cases = {
      {"seed", [](auto* r) { r->set_seed(6); }},
      {"epoch", [](auto* r) { r->set_epoch(3); }},
      {"shuffle", [](auto* r) { r->set_shuffle(false); }},
      {"shuffle", [](auto* r) { r->set_shuffle_mode(v1::SHUFFLE_MODE_BLOCK); }},
      {"batch_size", [](auto* r) { r->set_batch_size(9); }},
      {"shard", [](auto* r) { r->set_num_shards(2); }},
  };
  for (const Case& c : cases) {
    v1::StreamBatchesRequest r = base;
    c.change(&r);
    r.set_resume_token(token);
    absl::StatusOr<StreamRequest> got = Validate(r);
    ASSERT_FALSE(got.ok()) << c.field;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string msg(got.status().message());
    EXPECT_EQ(msg.rfind("resume_token:", 0), 0u) << msg;
    EXPECT_NE(msg.find("another stream: " + c.field + " is"), std::string::npos)
        << c.field << ": " << msg;
  }
  // Another dataset, or the same name with other samples (listing).
  for (const std::string& field :
       {std::string("dataset"), std::string("listing")}) {
    std::string forged = token;
    const size_t at = forged.find(";" + field + "=") + field.size() + 2;
    forged.insert(at, "x");
    v1::StreamBatchesRequest r = base;
    r.set_resume_token(forged);
    absl::StatusOr<StreamRequest> got = Validate(r);
    ASSERT_FALSE(got.ok()) << field;
    EXPECT_NE(got.status().message().find("another stream: " + field),
              std::string::npos)
        << got.status();
  }
  for (const std::string& junk :
       {std::string("12"), std::string("nearprep-resume-1;seed=5"),
        token + ";x=1", std::string(token, 0, token.rfind('=') + 1) + "abc"}) {
    v1::StreamBatchesRequest r = base;
    r.set_resume_token(junk);
    ExpectError(r, absl::StatusCode::kInvalidArgument, "resume_token");
  }
  v1::StreamBatchesRequest ids = base;
  ids.set_shuffle(false);
  ids.add_sample_ids(0);
  ids.set_resume_token(token);
  ExpectError(ids, absl::StatusCode::kInvalidArgument, "resume_token");
}

// A bare start_position (no resume_token) is refused where the request
// itself shows it cannot be a Batch.next_position of this stream: before
// start_batch full batches, past the end of the shard, or (no sample can be
// skipped under fail_stream) anywhere but start_batch * batch_size.
TEST_F(RequestValidationTest, BareStartPositionIsCheckedAgainstTheRequest) {
  v1::StreamBatchesRequest r = Good();  // batch_size 8, 40 samples
  r.set_start_batch(2);
  for (uint64_t ok : {16u, 19u, 40u}) {
    r.set_start_position(ok);
    absl::StatusOr<StreamRequest> v = Validate(r);
    ASSERT_TRUE(v.ok()) << ok << ": " << v.status();
    EXPECT_EQ(v->start_position, ok);
  }
  for (uint64_t bad : {15u, 41u, 1000u}) {
    r.set_start_position(bad);
    ExpectError(r, absl::StatusCode::kInvalidArgument, "start_position");
  }
  // Shard 1 of 2 holds 20 positions.
  r.set_num_shards(2);
  r.set_shard_index(1);
  r.set_start_position(20);
  EXPECT_TRUE(Validate(r).ok());
  r.set_start_position(21);
  ExpectError(r, absl::StatusCode::kInvalidArgument, "start_position");
  absl::StatusOr<StreamRequest> past = Validate(r);
  EXPECT_NE(
      std::string(past.status().message()).find("past the end of shard 1 of 2"),
      std::string::npos)
      << past.status();
  // fail_stream: nothing is skipped, so batch 2 starts at exactly 16.
  r.set_num_shards(1);
  r.set_shard_index(0);
  r.set_error_policy(v1::ERROR_POLICY_FAIL_STREAM);
  r.set_start_position(16);
  EXPECT_TRUE(Validate(r).ok());
  r.set_start_position(19);
  ExpectError(r, absl::StatusCode::kInvalidArgument, "start_position");
  // The end of the shard after a short last batch: 40 samples in batches of
  // 16 end with batch 2 (8 samples), whose token resumes at batch 3,
  // position 40 (< 3 * 16); batch 4 cannot begin there. Both policies.
  r.set_batch_size(16);
  for (auto policy : {v1::ERROR_POLICY_FAIL_STREAM, v1::ERROR_POLICY_SKIP}) {
    r.set_error_policy(policy);
    r.set_start_batch(3);
    r.set_start_position(40);
    EXPECT_TRUE(Validate(r).ok()) << Validate(r).status();
    r.set_start_batch(4);
    ExpectError(r, absl::StatusCode::kInvalidArgument, "start_position");
    r.set_start_batch(3);
    r.set_start_position(39);
    ExpectError(r, absl::StatusCode::kInvalidArgument, "start_position");
  }
  r.set_batch_size(8);
  // start_batch * batch_size overflowing is refused, not wrapped.
  r.set_error_policy(v1::ERROR_POLICY_SKIP);
  r.set_start_batch(uint64_t{1} << 62);
  r.set_start_position(20);
  ExpectError(r, absl::StatusCode::kInvalidArgument, "start_position");
}

// A token whose point no stream hands out (forged: past the end of the
// shard, or before its batch) is refused naming resume_token, not served as
// an empty stream (issue 37 item 10).
TEST_F(RequestValidationTest, ResumeTokenPastTheEndIsRefused) {
  v1::StreamBatchesRequest r = Good();  // batch_size 8, 40 samples
  r.set_seed(5);
  absl::StatusOr<StreamRequest> v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  r.set_resume_token(ResumeToken(v->resume_binding, 5, 40));  // the end: valid
  EXPECT_TRUE(Validate(r).ok());
  r.set_resume_token(ResumeToken(v->resume_binding, 6, 48));
  ExpectError(r, absl::StatusCode::kInvalidArgument, "resume_token");
  r.set_resume_token(ResumeToken(v->resume_binding, 3, 20));
  ExpectError(r, absl::StatusCode::kInvalidArgument, "resume_token");
}

}  // namespace
}  // namespace nearprep
