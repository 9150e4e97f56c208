// CLI flag parsing: --shard i/n and the request built from the flags.
#include "cli/request_flags.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/vocabulary.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/dynamic_message.h"
#include "gtest/gtest.h"

namespace nearprep {
namespace {

TEST(ParseShardTest, AcceptsValidShards) {
  auto s = ParseShard("0/1");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->first, 0u);
  EXPECT_EQ(s->second, 1u);
  s = ParseShard("3/8");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->first, 3u);
  EXPECT_EQ(s->second, 8u);
}

TEST(ParseShardTest, RejectsInvalidShardsNamingTheFlag) {
  for (const char* bad : {"", "1", "/", "1/", "/2", "2/2", "5/2", "0/0", "a/b",
                          "-1/2", "1/-2", "1/2/3", "1.5/2", " 1/2", "+1/2",
                          "99999999999/99999999999"}) {
    auto s = ParseShard(bad);
    EXPECT_FALSE(s.ok()) << "'" << bad << "'";
    if (!s.ok()) {
      EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(s.status().message().find("--shard"), std::string::npos);
    }
  }
}

absl::StatusOr<v1::StreamBatchesRequest> Parse(std::vector<std::string> args) {
  CLI::App app("test");
  RequestFlags flags;
  flags.Register(&app);
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  return flags.ToRequest();
}

TEST(RequestFlagsTest, BuildsTheRequest) {
  auto r = Parse({"--dataset", "imagenet", "--batch-size", "16", "--batches",
                  "3", "--seed", "42", "--epoch", "2", "--shuffle", "--shard",
                  "1/4", "--height", "128", "--width", "96", "--crop", "rrc",
                  "--flip", "0.5", "--brightness", "0.125", "--saturation",
                  "0.5", "1.5", "--dtype", "bfloat16", "--layout", "nchw",
                  "--fidelity", "fast", "--policy", "fail", "--params"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->dataset(), "imagenet");
  EXPECT_EQ(r->batch_size(), 16u);
  EXPECT_EQ(r->max_batches(), 3u);
  EXPECT_EQ(r->seed(), 42u);
  EXPECT_EQ(r->epoch(), 2u);
  EXPECT_TRUE(r->shuffle());
  EXPECT_EQ(r->shard_index(), 1u);
  EXPECT_EQ(r->num_shards(), 4u);
  EXPECT_EQ(r->transform().height(), 128u);
  EXPECT_EQ(r->transform().width(), 96u);
  EXPECT_EQ(r->transform().crop(), v1::CROP_MODE_RANDOM_RESIZED);
  EXPECT_EQ(r->transform().flip_probability(), 0.5f);
  EXPECT_EQ(r->transform().brightness_max_delta(), 0.125f);
  EXPECT_EQ(r->transform().saturation_lower(), 0.5f);
  EXPECT_EQ(r->transform().saturation_upper(), 1.5f);
  EXPECT_EQ(r->transform().fidelity(), v1::FIDELITY_FAST);
  EXPECT_EQ(r->output().dtype(), v1::DTYPE_BFLOAT16);
  EXPECT_EQ(r->output().layout(), v1::LAYOUT_NCHW);
  EXPECT_EQ(r->error_policy(), v1::ERROR_POLICY_FAIL_STREAM);
  EXPECT_TRUE(r->include_params());
}

TEST(RequestFlagsTest, TorchvisionEvalCrop) {
  auto r = Parse({"--dataset", "d", "--fidelity", "torchvision", "--crop",
                  "resize-center", "--resize-shorter", "288"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transform().fidelity(), v1::FIDELITY_TORCHVISION);
  EXPECT_EQ(r->transform().crop(), v1::CROP_MODE_RESIZE_CENTER);
  EXPECT_EQ(r->transform().resize_shorter_side(), 288u);
  EXPECT_FALSE(Parse({"--dataset", "d", "--fidelity", "pil"}).ok());
}

// torchvision's classification reference recipe, in its own flag names
// (references/classification/train.py) and in the proto's.
TEST(RequestFlagsTest, TorchvisionRecipeFlags) {
  auto r = Parse({"--dataset", "d", "--fidelity", "torchvision", "--auto-augment",
                  "ta_wide", "--random-erase", "0.25", "--mixup-alpha", "0.2",
                  "--cutmix-alpha", "1.0", "--erase-value", "0.5", "--jitter-hue", "0.1"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transform().auto_augment(), v1::AUTO_AUGMENT_TRIVIAL_AUGMENT_WIDE);
  EXPECT_EQ(r->transform().erase_probability(), 0.25f);
  EXPECT_EQ(r->transform().mixup_alpha(), 0.2f);
  EXPECT_EQ(r->transform().cutmix_alpha(), 1.0f);
  EXPECT_EQ(r->transform().jitter_hue(), 0.1f);
  ASSERT_EQ(r->transform().erase_value_size(), 1);
  r = Parse({"--dataset", "d", "--auto-augment", "ra", "--ra-magnitude", "12",
             "--ra-num-ops", "3"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transform().auto_augment(), v1::AUTO_AUGMENT_RAND_AUGMENT);
  EXPECT_EQ(r->transform().rand_augment_magnitude(), 12u);
  EXPECT_EQ(r->transform().rand_augment_num_ops(), 3u);
  r = Parse({"--dataset", "d", "--auto-augment", "rand_augment", "--rand-augment-magnitude",
             "5"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transform().rand_augment_magnitude(), 5u);
  EXPECT_EQ(r->transform().auto_augment(), v1::AUTO_AUGMENT_RAND_AUGMENT);
  auto bad = Parse({"--dataset", "d", "--auto-augment", "augmix"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--auto-augment"), std::string::npos)
      << bad.status();
  EXPECT_FALSE(Parse({"--dataset", "d", "--erase-value", "1", "2"}).ok());
}

TEST(RequestFlagsTest, Defaults) {
  auto r = Parse({"--dataset", "d"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->num_shards(), 1u);
  EXPECT_EQ(r->shard_index(), 0u);
  EXPECT_EQ(r->transform().crop(), v1::CROP_MODE_NONE);
  EXPECT_EQ(r->output().dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(r->output().layout(), v1::LAYOUT_NHWC);
  EXPECT_EQ(r->error_policy(), v1::ERROR_POLICY_SKIP);
  EXPECT_EQ(r->transform().saturation_lower(), 0.0f);
}

TEST(RequestFlagsTest, RejectsBadValues) {
  EXPECT_FALSE(Parse({"--dataset", "d", "--shard", "4/4"}).ok());
  EXPECT_FALSE(Parse({"--dataset", "d", "--crop", "diagonal"}).ok());
  EXPECT_FALSE(Parse({"--dataset", "d", "--dtype", "int7"}).ok());
  EXPECT_FALSE(Parse({"--dataset", "d", "--saturation", "1.5", "0.5"}).ok());
  EXPECT_FALSE(Parse({"--dataset", "d", "--flip", "1.5"}).ok());
  // The proto's ranges, named by the flag.
  EXPECT_EQ(Parse({"--dataset", "d", "--flip", "1.5"}).status().message(),
            "--flip-probability: must be in [0, 1], got 1.5");
  EXPECT_EQ(Parse({"--dataset", "d", "--brightness-max-delta", "-0.5"})
                .status()
                .message(),
            "--brightness-max-delta: must be >= 0, got -0.5");
  // The same rule and digits as the daemon's (proto/options/field_range.h);
  // NaN is out of every range here.
  EXPECT_EQ(Parse({"--dataset", "d", "--flip", "1.1"}).status().message(),
            "--flip-probability: must be in [0, 1], got 1.1");
  EXPECT_EQ(Parse({"--dataset", "d", "--flip", "nan"}).status().message(),
            "--flip-probability: must be in [0, 1], got nan");
  EXPECT_TRUE(
      Parse({"--dataset", "d", "--flip", "1", "--brightness", "0"}).ok());
  EXPECT_FALSE(Parse({"--dataset", "d", "--batch-size", "0"}).ok());
  EXPECT_FALSE(Parse({"--dataset", "d", "--mean", "0.5", "0.5", "0.5"}).ok());
  EXPECT_FALSE(Parse({}).ok());  // --dataset is required.
  auto shard = Parse({"--dataset", "d", "--shard", "2/1"});
  ASSERT_FALSE(shard.ok());
  EXPECT_NE(shard.status().message().find("--shard"), std::string::npos);
}

TEST(RequestFlagsTest, RefusesUnsignedValuesOutOfRangeAsTyped) {
  // CLI11 alone took -1 and 2^64 for a uint64_t flag and saturated both to
  // 2^64-1 (issue 26): refused, the message naming the flag and the text.
  for (const char* flag : {"--seed", "--epoch", "--start-batch", "--max-batches",
                           "--block-samples"}) {
    for (const char* bad : {"-1", "18446744073709551616", "99999999999999999999999", "1e3",
                            "+5", "", "0x10"}) {
      auto r = Parse({"--dataset", "d", flag, bad});
      ASSERT_FALSE(r.ok()) << flag << " " << bad;
      const std::string m(r.status().message());
      EXPECT_NE(m.find(flag), std::string::npos) << m;
      EXPECT_NE(m.find(std::string("got '") + bad + "'"), std::string::npos) << m;
    }
  }
  auto r = Parse({"--dataset", "d", "--seed", "18446744073709551615", "--epoch", "0"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->seed(), ~uint64_t{0});
}

TEST(VocabularyTest, NamesComeFromTheProtoEnums) {
  EXPECT_EQ(EnumValueNames(v1::CropMode_descriptor()),
            (std::vector<std::string>{"none", "center", "random_resized", "resize_center"}));
  EXPECT_EQ(EnumValueNames(v1::Fidelity_descriptor()),
            (std::vector<std::string>{"tf_compat", "fast", "torchvision"}));
  EXPECT_EQ(EnumValueNames(v1::Compression_descriptor()),
            (std::vector<std::string>{"none", "delta_zstd", "gradient_zstd"}));
  EXPECT_EQ(EnumValueNames(v1::ErrorPolicy_descriptor()),
            (std::vector<std::string>{"skip", "fail_stream"}));
  EXPECT_EQ(EnumValueName(v1::DType_descriptor(), v1::DTYPE_BFLOAT16), "bfloat16");
  EXPECT_EQ(*ParseEnumValue(v1::CropMode_descriptor(), "--crop", "RANDOM-RESIZED"),
            v1::CROP_MODE_RANDOM_RESIZED);
  EXPECT_EQ(*ParseEnumValue(v1::Fidelity_descriptor(), "--fidelity", "tf"),
            v1::FIDELITY_TF_COMPAT);
  auto bad = ParseEnumValue(v1::Fidelity_descriptor(), "--fidelity", "pil");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "--fidelity: one of tf_compat, fast, torchvision; got 'pil'");
}

TEST(RequestFlagsTest, TakesTheProtoNamesAndTheOlderSpellings) {
  auto r = Parse({"--dataset", "d", "--crop", "random_resized", "--fidelity", "tf_compat",
                  "--dtype", "uint8", "--compression", "gradient_zstd", "--error-policy",
                  "fail_stream", "--flip-probability", "0.25", "--brightness-max-delta", "0.5",
                  "--max-batches", "4", "--include-params"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transform().crop(), v1::CROP_MODE_RANDOM_RESIZED);
  EXPECT_EQ(r->transform().fidelity(), v1::FIDELITY_TF_COMPAT);
  EXPECT_EQ(r->output().compression(), v1::COMPRESSION_GRADIENT_ZSTD);
  EXPECT_EQ(r->error_policy(), v1::ERROR_POLICY_FAIL_STREAM);
  EXPECT_EQ(r->transform().flip_probability(), 0.25f);
  EXPECT_EQ(r->transform().brightness_max_delta(), 0.5f);
  EXPECT_EQ(r->max_batches(), 4u);
  EXPECT_TRUE(r->include_params());
  auto old = Parse({"--dataset", "d", "--crop", "rrc", "--fidelity", "tf", "--dtype", "uint8",
                    "--compression", "gradient", "--policy", "fail", "--flip", "0.25",
                    "--brightness", "0.5", "--batches", "4", "--params"});
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->SerializeAsString(), r->SerializeAsString());
}

// nearprep.proto plus a Transform field and a CropMode value (with an older
// spelling), built into a pool of its own: the CLI's flag machinery takes
// both without an edit (the compiled-in proto has no field left over, so
// RequestFlags registers none of these today).
TEST(RequestFlagsTest, AFieldAndAValueAddedToTheProtoNeedNoEdit) {
  google::protobuf::FileDescriptorProto descriptor_proto, fdp;
  google::protobuf::FileDescriptorProto::descriptor()->file()->CopyTo(
      &descriptor_proto);
  v1::Transform::descriptor()->file()->CopyTo(&fdp);
  for (google::protobuf::DescriptorProto& m : *fdp.mutable_message_type()) {
    if (m.name() != "Transform") continue;
    google::protobuf::FieldDescriptorProto* f = m.add_field();
    f->set_name("contrast_max_delta");
    f->set_number(99);
    f->set_type(google::protobuf::FieldDescriptorProto::TYPE_FLOAT);
    f->set_label(google::protobuf::FieldDescriptorProto::LABEL_OPTIONAL);
  }
  for (google::protobuf::EnumDescriptorProto& e : *fdp.mutable_enum_type()) {
    if (e.name() != "CropMode") continue;
    google::protobuf::EnumValueDescriptorProto* v = e.add_value();
    v->set_name("CROP_MODE_ZOOM");
    v->set_number(4);
    v->mutable_options()->AddExtension(v1::deprecated_spelling, "zm");
  }
  google::protobuf::DescriptorPool pool;
  ASSERT_NE(pool.BuildFile(descriptor_proto), nullptr);
  ASSERT_NE(pool.BuildFile(fdp), nullptr);
  const google::protobuf::Descriptor* d =
      pool.FindMessageTypeByName("nearprep.v1.Transform");
  ASSERT_NE(d, nullptr);
  // The crop's new value: its name and its older spelling.
  EXPECT_EQ(EnumValueNames(d->FindFieldByName("crop")->enum_type()).back(),
            "zoom");
  EXPECT_EQ(
      *ParseEnumValue(d->FindFieldByName("crop")->enum_type(), "--crop", "zm"),
      4);

  for (const bool hand_crop : {true, false}) {
    SCOPED_TRACE(hand_crop);
    CLI::App app("test");
    std::string crop;
    if (hand_crop)
      app.add_option("--crop", crop);  // a flag of its own: left alone
    std::map<std::string, std::string> values;
    RegisterFieldFlags(&app, d, {"scale_min", "disable_clip"}, &values);
    EXPECT_NE(app.get_option_no_throw("--contrast-max-delta"), nullptr);
    EXPECT_NE(app.get_option_no_throw("--scale-max"), nullptr);
    EXPECT_EQ(app.get_option_no_throw("--scale-min"), nullptr);     // skipped
    EXPECT_EQ(app.get_option_no_throw("--disable-clip"), nullptr);  // skipped
    EXPECT_EQ(app.get_option_no_throw("--mean"), nullptr);          // repeated
    EXPECT_EQ(values.count("crop"), hand_crop ? 0u : 1u);
    std::vector<std::string> args = {"prog", "--contrast-max-delta", "0.25"};
    if (values.count("crop") != 0) args.insert(args.end(), {"--crop", "zm"});
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    app.parse(static_cast<int>(argv.size()), argv.data());
    google::protobuf::DynamicMessageFactory factory(&pool);
    std::unique_ptr<google::protobuf::Message> t(
        factory.GetPrototype(d)->New());
    ASSERT_TRUE(ApplyFieldFlags(values, t.get()).ok());
    const google::protobuf::Reflection* r = t->GetReflection();
    EXPECT_EQ(r->GetFloat(*t, d->FindFieldByName("contrast_max_delta")), 0.25f);
    if (values.count("crop") != 0) {
      EXPECT_EQ(r->GetEnumValue(*t, d->FindFieldByName("crop")), 4);
    }
    values["contrast_max_delta"] = "x";
    absl::Status st = ApplyFieldFlags(values, t.get());
    EXPECT_EQ(st.message(), "--contrast-max-delta: must be a number, got 'x'");
  }
}

TEST(RequestFlagsTest, EveryTransformFieldHasAFlag) {
  CLI::App app("test");
  RequestFlags flags;
  flags.Register(&app);
  // The fields before issue 36 have flags of their own (the older names
  // kept); issue 36's scalar fields come from the descriptor (the generic
  // mechanism), color_ops and erase_value (repeated) have their own
  // --color-ops and --erase-value, and auto_augment, erase_probability and
  // rand_augment_* explicit flags that also take torchvision's reference
  // spellings (--auto-augment ta_wide, --random-erase, --ra-magnitude).
  std::vector<std::string> generic;
  for (const auto& [name, value] : flags.more_transform) generic.push_back(name);
  EXPECT_EQ(generic,
            (std::vector<std::string>{
                "contrast_lower", "contrast_upper", "cutmix_alpha", "erase_ratio_max",
                "erase_ratio_min", "erase_scale_max", "erase_scale_min", "gain", "gamma",
                "hue_max_delta", "jitter_brightness", "jitter_contrast", "jitter_hue",
                "jitter_saturation", "mixup_alpha"}));
  const google::protobuf::Descriptor* d = v1::Transform::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    std::string name = d->field(i)->name();
    for (char& c : name) c = c == '_' ? '-' : c;
    const std::map<std::string, std::string> pairs = {
        {"scale-min", "scale"},
        {"scale-max", "scale"},
        {"ratio-min", "ratio"},
        {"ratio-max", "ratio"},
        {"saturation-lower", "saturation"},
        {"saturation-upper", "saturation"},
        {"disable-clip", "no-clip"}};
    if (pairs.count(name) != 0) name = pairs.at(name);
    EXPECT_NE(app.get_option_no_throw("--" + name), nullptr) << name;
  }
}

TEST(TargetFlagTest, RefusesATargetWithoutAPortAtParseTime) {
  auto r = Parse({"--dataset", "d", "--target", "127.0.0.1"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("has no port"), std::string::npos) << r.status();
  EXPECT_TRUE(Parse({"--dataset", "d", "--target", "127.0.0.1:7079"}).ok());
}

}  // namespace
}  // namespace nearprep
