// .npy writer: header layout and alignment, round trip through the parser,
// dtype mapping, and refusal of inconsistent data.
#include "cli/npy.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace nearprep {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/" + name;
}

TEST(NpyTest, PreambleIsAlignedAndParsesBack) {
  for (const std::vector<uint64_t>& shape :
       std::vector<std::vector<uint64_t>>{{}, {7}, {2, 3}, {4, 224, 224, 3},
                                          {1234567, 1, 99, 3, 5}}) {
    auto pre = NpyPreamble("<f4", shape);
    ASSERT_TRUE(pre.ok()) << pre.status();
    EXPECT_EQ(pre->size() % 64, 0u);
    EXPECT_EQ(pre->back(), '\n');
    EXPECT_EQ(pre->substr(0, 6), std::string("\x93NUMPY"));
    EXPECT_EQ((*pre)[6], 1);
    EXPECT_EQ((*pre)[7], 0);
    auto h = ParseNpyHeader(*pre);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->descr, "<f4");
    EXPECT_FALSE(h->fortran_order);
    EXPECT_EQ(h->shape, shape);
    EXPECT_EQ(h->data_offset, pre->size());
  }
}

TEST(NpyTest, OneDimensionalShapeHasTrailingComma) {
  auto pre = NpyPreamble("|u1", {5});
  ASSERT_TRUE(pre.ok());
  EXPECT_NE(pre->find("'shape': (5,)"), std::string::npos) << *pre;
}

TEST(NpyTest, WriteTensorRoundTrip) {
  v1::Tensor t;
  t.add_shape(2);
  t.add_shape(2);
  t.add_shape(3);
  t.add_shape(3);
  t.set_dtype(v1::DTYPE_FLOAT32);
  std::vector<float> values(2 * 2 * 3 * 3);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * i - 1.0f;
  t.set_data(std::string(reinterpret_cast<const char*>(values.data()),
                         values.size() * 4));
  const std::string path = TempPath("rt.npy");
  ASSERT_TRUE(WriteTensorNpy(path, t).ok());
  const std::string file = ReadFile(path);
  auto h = ParseNpyHeader(file);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->descr, "<f4");
  EXPECT_EQ(h->shape, (std::vector<uint64_t>{2, 2, 3, 3}));
  ASSERT_EQ(file.size(), h->data_offset + values.size() * 4);
  std::vector<float> back(values.size());
  std::memcpy(back.data(), file.data() + h->data_offset, back.size() * 4);
  EXPECT_EQ(back, values);
}

TEST(NpyTest, DTypeMapping) {
  EXPECT_EQ(*NpyDescr(v1::DTYPE_FLOAT32), "<f4");
  EXPECT_EQ(*NpyDescr(v1::DTYPE_FLOAT16), "<f2");
  EXPECT_EQ(*NpyDescr(v1::DTYPE_BFLOAT16), "<u2");
  EXPECT_EQ(*NpyDescr(v1::DTYPE_UINT8), "|u1");
  EXPECT_FALSE(NpyDescr(static_cast<v1::DType>(42)).ok());
  v1::Tensor t;
  t.add_shape(1);
  t.add_shape(1);
  t.add_shape(2);
  t.add_shape(3);
  t.set_dtype(v1::DTYPE_BFLOAT16);
  t.set_data(std::string(12, '\x3f'));
  const std::string path = TempPath("bf16.npy");
  ASSERT_TRUE(WriteTensorNpy(path, t).ok());
  auto h = ParseNpyHeader(ReadFile(path));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->descr, "<u2");
}

TEST(NpyTest, RefusesDataThatDoesNotMatchTheShape) {
  v1::Tensor t;
  t.add_shape(2);
  t.add_shape(3);
  t.add_shape(3);
  t.add_shape(3);
  t.set_dtype(v1::DTYPE_UINT8);
  t.set_data(std::string(53, 'x'));  // 54 expected.
  absl::Status s = WriteTensorNpy(TempPath("bad.npy"), t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(WriteNpy(TempPath("bad2.npy"), "<zz", {1}, "x", 1).ok());
}

TEST(NpyTest, ParserRejectsMalformedHeadersWithoutCrashing) {
  auto good = NpyPreamble("<f2", {3, 4});
  ASSERT_TRUE(good.ok());
  EXPECT_FALSE(ParseNpyHeader("").ok());
  EXPECT_FALSE(ParseNpyHeader("\x93NUMP").ok());
  EXPECT_FALSE(ParseNpyHeader(good->substr(0, 20)).ok());  // Truncated.
  std::string bad_version = *good;
  bad_version[6] = 9;
  EXPECT_FALSE(ParseNpyHeader(bad_version).ok());
  std::string garbled = *good;
  garbled[12] = '#';
  EXPECT_FALSE(ParseNpyHeader(garbled).ok());
  // Every prefix and every single-byte corruption parses or fails cleanly.
  for (size_t i = 0; i < good->size(); ++i) {
    (void)ParseNpyHeader(good->substr(0, i));
    std::string c = *good;
    c[i] = static_cast<char>(c[i] ^ 0x5a);
    (void)ParseNpyHeader(c);
  }
}

}  // namespace
}  // namespace nearprep
