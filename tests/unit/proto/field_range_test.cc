// CheckFieldRange / NumericFieldValue (proto/options/field_range.h): the one
// (nearprep.v1.range) check of the daemon and the CLI, on a field of each
// numeric type with min only, max only and both bounds.
#include "proto/options/field_range.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "field_range_test.pb.h"
#include "gtest/gtest.h"
#include "nearprep/v1/nearprep.pb.h"

namespace nearprep {
namespace {

using test::RangeFields;

const google::protobuf::FieldDescriptor& Field(const std::string& name) {
  const google::protobuf::FieldDescriptor* f =
      RangeFields::descriptor()->FindFieldByName(name);
  EXPECT_NE(f, nullptr) << name;
  return *f;
}

FieldRangeCheck Check(const RangeFields& m, const std::string& name) {
  std::optional<FieldRangeCheck> c = CheckFieldRange(m, Field(name));
  EXPECT_TRUE(c.has_value()) << name;
  return c.value_or(FieldRangeCheck{});
}

TEST(FieldRangeTest, ReadsEachNumericTypeAsDouble) {
  RangeFields m;
  m.set_f(0.25f);
  m.set_d(-0.125);
  m.set_i32(-7);
  m.set_i64(-(int64_t{1} << 40));
  m.set_u32(4000000000u);
  m.set_u64(uint64_t{1} << 63);
  EXPECT_EQ(NumericFieldValue(m, Field("f")), 0.25);
  EXPECT_EQ(NumericFieldValue(m, Field("d")), -0.125);
  EXPECT_EQ(NumericFieldValue(m, Field("i32")), -7.0);
  EXPECT_EQ(NumericFieldValue(m, Field("i64")), -std::ldexp(1.0, 40));
  EXPECT_EQ(NumericFieldValue(m, Field("u32")), 4e9);
  EXPECT_EQ(NumericFieldValue(m, Field("u64")), std::ldexp(1.0, 63));
  EXPECT_EQ(NumericFieldValue(m, Field("plain")), 0.0);
  for (const char* other : {"s", "b", "r", "e"}) {
    SCOPED_TRACE(other);
    EXPECT_FALSE(NumericFieldValue(m, Field(other)).has_value());
    // A range there means nothing.
    EXPECT_FALSE(CheckFieldRange(m, Field(other)).has_value());
  }
  // No option: nothing to check.
  EXPECT_FALSE(CheckFieldRange(m, Field("plain")).has_value());
}

TEST(FieldRangeTest, BothBounds) {
  RangeFields m;
  for (float v : {0.0f, 0.5f, 1.0f}) {
    m.set_f(v);
    EXPECT_TRUE(Check(m, "f").in_range) << v;
  }
  m.set_f(1.5f);
  FieldRangeCheck c = Check(m, "f");
  EXPECT_FALSE(c.in_range);
  EXPECT_EQ(c.rule, "in [0, 1]");
  EXPECT_EQ(c.value_text, "1.5");
  EXPECT_EQ(c.value, 1.5);
  m.set_f(-0.0001f);
  EXPECT_FALSE(Check(m, "f").in_range);
  // The float's own shortest digits, not its double's ("1.10000002").
  m.set_f(1.1f);
  EXPECT_EQ(Check(m, "f").value_text, "1.1");

  m.set_i64(3);
  EXPECT_TRUE(Check(m, "i64").in_range);
  m.set_i64(-3);
  EXPECT_TRUE(Check(m, "i64").in_range);
  m.set_i64(-4);
  c = Check(m, "i64");
  EXPECT_FALSE(c.in_range);
  EXPECT_EQ(c.rule, "in [-3, 3]");
  EXPECT_EQ(c.value_text, "-4");

  m.set_u32(1);
  c = Check(m, "u32");
  EXPECT_FALSE(c.in_range);
  // An integer bound is written out, not as 1.04858e+06.
  EXPECT_EQ(c.rule, "in [2, 1048576]");
  m.set_u32(1048576);
  EXPECT_TRUE(Check(m, "u32").in_range);
  m.set_u32(1048577);
  EXPECT_FALSE(Check(m, "u32").in_range);
  EXPECT_EQ(Check(m, "u32").value_text, "1048577");
}

TEST(FieldRangeTest, MinOnly) {
  RangeFields m;
  m.set_d(-0.5);
  EXPECT_TRUE(Check(m, "d").in_range);
  m.set_d(1e300);
  EXPECT_TRUE(Check(m, "d").in_range);
  m.set_d(-0.75);
  FieldRangeCheck c = Check(m, "d");
  EXPECT_FALSE(c.in_range);
  EXPECT_EQ(c.rule, ">= -0.5");
  EXPECT_EQ(c.value_text, "-0.75");
}

TEST(FieldRangeTest, MaxOnly) {
  RangeFields m;
  m.set_i32(5);
  EXPECT_TRUE(Check(m, "i32").in_range);
  m.set_i32(std::numeric_limits<int32_t>::min());
  EXPECT_TRUE(Check(m, "i32").in_range);
  m.set_i32(6);
  FieldRangeCheck c = Check(m, "i32");
  EXPECT_FALSE(c.in_range);
  EXPECT_EQ(c.rule, "<= 5");
  EXPECT_EQ(c.value_text, "6");

  // A fractional bound in its shortest form (not 0.10000000000000001); the
  // value exactly, not rounded through a double.
  m.set_u64(0);
  EXPECT_TRUE(Check(m, "u64").in_range);
  m.set_u64(std::numeric_limits<uint64_t>::max());
  c = Check(m, "u64");
  EXPECT_FALSE(c.in_range);
  EXPECT_EQ(c.rule, "<= 0.1");
  EXPECT_EQ(c.value_text, "18446744073709551615");
}

TEST(FieldRangeTest, NaNIsInNoRange) {
  RangeFields m;
  m.set_f(std::numeric_limits<float>::quiet_NaN());
  FieldRangeCheck c = Check(m, "f");
  EXPECT_FALSE(c.in_range);
  EXPECT_TRUE(std::isnan(c.value));
  EXPECT_EQ(c.value_text, "nan");
  m.set_d(std::numeric_limits<double>::quiet_NaN());
  EXPECT_FALSE(Check(m, "d").in_range);  // min only, too
  m.set_f(std::numeric_limits<float>::infinity());
  EXPECT_FALSE(Check(m, "f").in_range);
  m.set_d(std::numeric_limits<double>::infinity());
  EXPECT_TRUE(Check(m, "d").in_range);  // >= -0.5
}

TEST(FieldRangeTest, FormatsBoundsInTheFewestDigits) {
  EXPECT_EQ(FormatBound(0), "0");
  EXPECT_EQ(FormatBound(1), "1");
  EXPECT_EQ(FormatBound(1048576), "1048576");
  EXPECT_EQ(FormatBound(-0.5), "-0.5");
  EXPECT_EQ(FormatBound(0.1), "0.1");
  EXPECT_EQ(FormatBound(1.0 / 3), "0.3333333333333333");     // 16 digits
  EXPECT_EQ(FormatBound(0.1 + 0.2), "0.30000000000000004");  // 17
  EXPECT_EQ(FormatBound(1e300), "1e+300");
}

}  // namespace
}  // namespace nearprep
