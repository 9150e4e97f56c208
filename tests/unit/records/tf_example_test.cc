#include "server/records/tf_example.h"

#include <string>

#include "gtest/gtest.h"
#include "nearprep/v1/tf_example.pb.h"

namespace nearprep::records {
namespace {

namespace tfex = nearprep::tfexample;

std::string MakeExample(const std::string& image, int64_t label) {
  tfex::Example ex;
  auto& f = *ex.mutable_features()->mutable_feature();
  f["image/format"].mutable_bytes_list()->add_value("JPEG");
  f["image/encoded"].mutable_bytes_list()->add_value(image);
  f["image/filename"].mutable_bytes_list()->add_value("n01440764_10026.JPEG");
  f["image/height"].mutable_int64_list()->add_value(375);
  f["image/class/label"].mutable_int64_list()->add_value(label);
  return ex.SerializeAsString();
}

absl::StatusOr<ExampleFields> Locate(const std::string& s,
                                     const std::string& label_key =
                                         "image/class/label") {
  return LocateExampleFields(reinterpret_cast<const uint8_t*>(s.data()),
                             s.size(), "image/encoded", label_key);
}

TEST(TfExampleTest, LocatesImageBytesAndLabel) {
  std::string jpeg(5000, '\0');
  for (size_t i = 0; i < jpeg.size(); ++i) jpeg[i] = static_cast<char>(i * 7);
  const std::string s = MakeExample(jpeg, 417);
  auto f = Locate(s);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(s.substr(f->image_offset, f->image_size), jpeg);
  EXPECT_TRUE(f->has_label);
  EXPECT_EQ(f->label, 417);
}

TEST(TfExampleTest, NegativeAndLargeLabels) {
  for (int64_t label : {int64_t{-1}, int64_t{0}, int64_t{1} << 40}) {
    auto f = Locate(MakeExample("x", label));
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->label, label);
  }
}

TEST(TfExampleTest, UnpackedInt64ListIsAccepted) {
  // Features{feature{key:"image/encoded" value{bytes_list{value:"J"}}}
  //          feature{key:"l" value{int64_list{value: 5 (unpacked)}}}}
  tfex::Example ex;
  (*ex.mutable_features()->mutable_feature())["image/encoded"]
      .mutable_bytes_list()
      ->add_value("J");
  std::string s = ex.SerializeAsString();
  // Hand-encode the label entry: Int64List with field 1 as a varint.
  const std::string int64list = std::string("\x08\x05", 2);
  const std::string feature = "\x1a" + std::string(1, char(int64list.size())) + int64list;
  const std::string entry = std::string("\x0a\x01l", 3) + "\x12" +
                            std::string(1, char(feature.size())) + feature;
  const std::string features_entry =
      "\x0a" + std::string(1, char(entry.size())) + entry;
  // Append one more map entry to the Features message: rebuild Example.
  tfex::Features feats;
  ASSERT_TRUE(feats.ParseFromString(ex.features().SerializeAsString() +
                                    features_entry));
  // Serialize by hand so the unpacked form survives.
  const std::string body = ex.features().SerializeAsString() + features_entry;
  std::string raw = "\x0a";
  uint64_t n = body.size();
  while (n >= 0x80) {
    raw.push_back(static_cast<char>((n & 0x7f) | 0x80));
    n >>= 7;
  }
  raw.push_back(static_cast<char>(n));
  raw += body;
  auto f = Locate(raw, "l");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->label, 5);
  EXPECT_EQ(raw.substr(f->image_offset, f->image_size), "J");
  EXPECT_EQ(feats.feature().at("l").int64_list().value(0), 5);  // Oracle.
}

TEST(TfExampleTest, MissingImageKeyIsDataLoss) {
  tfex::Example ex;
  (*ex.mutable_features()->mutable_feature())["image/class/label"]
      .mutable_int64_list()
      ->add_value(3);
  auto f = Locate(ex.SerializeAsString());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(f.status().message().find("image/encoded"), std::string::npos);
}

TEST(TfExampleTest, NonIntegerLabelIsDataLoss) {
  tfex::Example ex;
  auto& m = *ex.mutable_features()->mutable_feature();
  m["image/encoded"].mutable_bytes_list()->add_value("J");
  m["image/class/label"].mutable_float_list()->add_value(3.0f);
  auto f = Locate(ex.SerializeAsString());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(f.status().message().find("not an int64_list"), std::string::npos);
  m["image/class/label"].mutable_bytes_list()->add_value("3");
  f = Locate(ex.SerializeAsString());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
}

TEST(TfExampleTest, AbsentLabelOrEmptyLabelKeyMeansUnlabeled) {
  tfex::Example ex;
  (*ex.mutable_features()->mutable_feature())["image/encoded"]
      .mutable_bytes_list()
      ->add_value("J");
  auto f = Locate(ex.SerializeAsString());
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->has_label);
  f = Locate(MakeExample("J", 9), "");
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->has_label);
}

TEST(TfExampleTest, GarbageIsNotAnExample) {
  for (std::string g : {std::string("\xff\xff\xff\xff\xff", 5),
                        std::string("\x0a\x50zz", 4),  // Length past the end.
                        std::string("\x0b\x00", 2),    // Group wire type.
                        std::string("\x00\x01", 2)}) {  // Field number 0.
    auto f = Locate(g);
    EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss) << g.size();
  }
}

TEST(TfExampleTest, LastDuplicateKeyWins) {
  tfex::Features a, b;
  (*a.mutable_feature())["image/encoded"].mutable_bytes_list()->add_value("old");
  (*b.mutable_feature())["image/encoded"].mutable_bytes_list()->add_value("new");
  tfex::Features merged;
  const std::string body = a.SerializeAsString() + b.SerializeAsString();
  ASSERT_TRUE(merged.ParseFromString(body));  // Oracle: protobuf's own rule.
  tfex::Example ex;
  *ex.mutable_features() = merged;
  std::string raw = "\x0a" + std::string(1, char(body.size())) + body;
  auto f = Locate(raw);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(raw.substr(f->image_offset, f->image_size),
            merged.feature().at("image/encoded").bytes_list().value(0));
}

}  // namespace
}  // namespace nearprep::records
