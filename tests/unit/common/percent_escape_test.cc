// PercentEscape / PercentUnescape (common/percent_escape.h): the escaping of
// resume tokens and shard index files, whose bytes must not change.
#include "common/percent_escape.h"

#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace nearprep {
namespace {

std::string AllBytes() {
  std::string s;
  for (int c = 0; c < 256; ++c) s.push_back(static_cast<char>(c));
  return s;
}

TEST(PercentEscapeTest, RoundTripsEveryByte) {
  const std::string all = AllBytes();
  for (const char* also : {"", ";="}) {
    SCOPED_TRACE(also);
    const std::string escaped = PercentEscape(all, also);
    // One token: nothing a line or field splitter would cut at.
    for (char c : escaped) {
      const unsigned char u = static_cast<unsigned char>(c);
      EXPECT_TRUE(u > 0x20 && u < 0x7f) << static_cast<int>(u);
    }
    std::string back;
    ASSERT_TRUE(PercentUnescape(escaped, &back));
    EXPECT_EQ(back, all);
  }
}

TEST(PercentEscapeTest, EscapesExactlyTheseBytes) {
  // The shard index's set: controls, space, '%', DEL and above.
  std::string kept;
  for (int c = 0; c < 256; ++c) {
    const std::string one(1, static_cast<char>(c));
    const std::string e = PercentEscape(one);
    if (e == one) {
      kept += one;
    } else {
      char want[4];
      std::snprintf(want, sizeof(want), "%%%02X", c);
      EXPECT_EQ(e, want) << c;
    }
  }
  EXPECT_EQ(kept,
            "!\"#$&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ"
            "[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~");
  // The resume token's: the same, and ';' and '='.
  EXPECT_EQ(PercentEscape(";", ";="), "%3B");
  EXPECT_EQ(PercentEscape("=", ";="), "%3D");
  EXPECT_EQ(PercentEscape("a", ";="), "a");
}

TEST(PercentEscapeTest, ExactEscapedForms) {
  EXPECT_EQ(PercentEscape(""), "");
  EXPECT_EQ(PercentEscape("imagenet-val"), "imagenet-val");
  EXPECT_EQ(PercentEscape("caf\xc3\xa9 dir/50% off\x01"),
            "caf%C3%A9%20dir/50%25%20off%01");
  EXPECT_EQ(PercentEscape("a;b=c d\n"), "a;b=c%20d%0A");
  EXPECT_EQ(PercentEscape("a;b=c d\n", ";="), "a%3Bb%3Dc%20d%0A");
  EXPECT_EQ(PercentEscape(std::string("\0\x7f\xff", 3)), "%00%7F%FF");
}

TEST(PercentEscapeTest, UnescapesEitherHexCase) {
  std::string out;
  ASSERT_TRUE(PercentUnescape("a%3bb%3Dc%c3%A9", &out));
  EXPECT_EQ(out, "a;b=c\xc3\xa9");
  ASSERT_TRUE(PercentUnescape("", &out));
  EXPECT_EQ(out, "");
  ASSERT_TRUE(PercentUnescape("%00", &out));
  EXPECT_EQ(out, std::string(1, '\0'));
}

TEST(PercentEscapeTest, RefusesMalformedEscapes) {
  std::string out;
  for (const char* bad : {"%", "a%", "%4", "a%4", "%G1", "%1G", "%+1", "%-1",
                          "% 1", "%x1", "ok%2"}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(PercentUnescape(bad, &out));
  }
}

}  // namespace
}  // namespace nearprep
