// The per-batch JSON manifest written by `nearprep fetch`.
#include "cli/batch_json.h"

#include <nlohmann/json.hpp>

#include "gtest/gtest.h"

namespace nearprep {
namespace {

TEST(BatchJsonTest, CarriesIdsLabelsParamsErrorsAndTimings) {
  v1::Batch b;
  b.set_epoch(3);
  b.set_batch_index(17);
  b.set_next_position(150);
  b.add_sample_ids(41);
  b.add_sample_ids(7);
  b.add_labels(2);
  b.add_labels(-1);
  v1::SampleParams* p = b.add_params();
  p->set_flipped(true);
  p->set_brightness_delta(-0.125f);
  p->set_saturation_factor(1.25f);
  p->mutable_crop()->set_x(5);
  p->mutable_crop()->set_height(99);
  p->set_source_width(640);
  p->add_jitter_order(2);
  p->add_jitter_order(0);
  v1::AugmentStep* step = p->add_augment();
  step->set_op(v1::AUGMENT_OP_SHEAR_X);
  step->set_magnitude(-0.25f);
  b.mutable_mix()->set_kind(v1::BatchMix::KIND_CUTMIX);
  b.mutable_mix()->set_y2(7);
  b.add_mix_labels(-1);
  b.add_mix_labels(2);
  v1::SampleError* e = b.add_errors();
  e->set_sample_id(9);
  e->set_path("bad/\xff\xfe.jpg");  // Not UTF-8: must not throw.
  e->set_code("DATA_LOSS");
  b.mutable_timings()->set_decode_us(1234);
  b.mutable_tensor()->add_shape(2);
  b.mutable_tensor()->set_dtype(v1::DTYPE_BFLOAT16);
  const std::string text = BatchToJson(b, "batch_00017.npy");
  nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["epoch"], 3);
  EXPECT_EQ(j["batch_index"], 17);
  EXPECT_EQ(j["next_position"], 150);
  EXPECT_EQ(j["sample_ids"], nlohmann::json({41, 7}));
  EXPECT_EQ(j["labels"], nlohmann::json({2, -1}));
  EXPECT_EQ(j["params"][0]["flipped"], true);
  EXPECT_EQ(j["params"][0]["brightness_delta"].get<float>(), -0.125f);
  EXPECT_EQ(j["params"][0]["crop"]["x"], 5);
  EXPECT_EQ(j["params"][0]["crop"]["height"], 99);
  EXPECT_EQ(j["params"][0]["source_width"], 640);
  // Repeated fields as arrays, enums by name, an absent message as null.
  EXPECT_EQ(j["params"][0]["jitter_order"], nlohmann::json({2, 0}));
  EXPECT_EQ(j["params"][0]["augment"][0]["op"], "shear_x");
  EXPECT_EQ(j["params"][0]["augment"][0]["magnitude"].get<float>(), -0.25f);
  EXPECT_TRUE(j["params"][0]["erased"].is_null());
  EXPECT_EQ(j["mix"]["kind"], "cutmix");
  EXPECT_EQ(j["mix"]["y2"], 7);
  EXPECT_EQ(j["mix_labels"], nlohmann::json({-1, 2}));
  // Every SampleParams field by its proto name, from the descriptor.
  const google::protobuf::Descriptor* d = v1::SampleParams::descriptor();
  ASSERT_EQ(j["params"][0].size(), static_cast<size_t>(d->field_count()));
  for (int i = 0; i < d->field_count(); ++i) {
    EXPECT_TRUE(j["params"][0].contains(d->field(i)->name()))
        << d->field(i)->name();
  }
  EXPECT_EQ(j["errors"][0]["sample_id"], 9);
  EXPECT_EQ(j["errors"][0]["code"], "DATA_LOSS");
  EXPECT_EQ(j["timings_us"]["decode"], 1234);
  EXPECT_EQ(j["tensor"]["file"], "batch_00017.npy");
  EXPECT_EQ(j["tensor"]["dtype"], "bfloat16");
  EXPECT_EQ(j["tensor"]["npy_descr"], "<u2");
  EXPECT_TRUE(j["tensor"].contains("note"));
}

}  // namespace
}  // namespace nearprep
