// DisplayString: what the daemon puts into proto3 string fields from names
// that are bytes (file and folder names).
#include "server/service/display_string.h"

#include <string>

#include "gtest/gtest.h"
#include "nearprep/v1/nearprep.pb.h"

namespace nearprep {
namespace {

using namespace std::string_literals;

TEST(DisplayStringTest, ValidUtf8PassesThrough) {
  for (const std::string& s :
       {""s, "n01440764/ILSVRC2012_val_00000293.JPEG"s, "caf\xc3\xa9"s,
        "\xe2\x82\xac \xf0\x9f\x98\x80"s, "back\\slash"s, "nul\0in"s}) {
    EXPECT_TRUE(IsValidUtf8(s)) << s;
    EXPECT_EQ(DisplayString(s), s);
  }
}

TEST(DisplayStringTest, InvalidBytesAreEscaped) {
  EXPECT_FALSE(IsValidUtf8("caf\xe9"s));
  EXPECT_EQ(DisplayString("caf\xe9/x.jpg"s), "caf\\xe9/x.jpg");
  EXPECT_EQ(DisplayString("\xff.txt"s), "\\xff.txt");
  // A valid sequence beside an invalid byte is kept.
  EXPECT_EQ(DisplayString("\xc3\xa9\xe9"s), "\xc3\xa9\\xe9");
  // Truncated sequence at the end, lone continuation byte.
  EXPECT_EQ(DisplayString("a\xe2\x82"s), "a\\xe2\\x82");
  EXPECT_EQ(DisplayString("\x80"s), "\\x80");
  // Overlong forms, surrogates, above U+10FFFF: not UTF-8.
  EXPECT_EQ(DisplayString("\xc0\xaf"s), "\\xc0\\xaf");
  EXPECT_EQ(DisplayString("\xe0\x80\xaf"s), "\\xe0\\x80\\xaf");
  EXPECT_EQ(DisplayString("\xed\xa0\x80"s), "\\xed\\xa0\\x80");
  EXPECT_EQ(DisplayString("\xf4\x90\x80\x80"s), "\\xf4\\x90\\x80\\x80");
  EXPECT_TRUE(IsValidUtf8("\xf4\x8f\xbf\xbf"s));  // U+10FFFF itself.
}

TEST(DisplayStringTest, ResultAlwaysParsesAsProtoString) {
  // The point of it: a message holding the display form round-trips
  // through protobuf, which refuses invalid UTF-8 in string fields.
  for (int b = 0; b < 256; ++b) {
    const std::string name =
        "dir" + std::string(1, static_cast<char>(b)) + "\xe9x\xc3";
    v1::SampleError e;
    e.set_path(DisplayString(name));
    e.set_path_bytes(name);
    ASSERT_TRUE(IsValidUtf8(e.path())) << b;
    v1::SampleError back;
    ASSERT_TRUE(back.ParseFromString(e.SerializeAsString())) << b;
    EXPECT_EQ(back.path_bytes(), name);
  }
}

// Issue 37 item 4: a caller's string in a log record cannot end the record
// (a newline would forge the next one) nor carry terminal escapes.
TEST(LogSafeTest, EscapesControlBytesAndKeepsTheRest) {
  EXPECT_EQ(LogSafe("imagenet"), "imagenet");
  EXPECT_EQ(LogSafe("a\nb\rc\td"), "a\\nb\\rc\\td");
  EXPECT_EQ(LogSafe(std::string("x\0y\x1b[31m\x7f", 9)),
            "x\\x00y\\x1b[31m\\x7f");
  EXPECT_EQ(LogSafe("caf\xc3\xa9"), "caf\xc3\xa9");  // UTF-8 kept
  EXPECT_EQ(LogSafe("bad\xff"), "bad\\xff");         // DisplayString's form
  for (const std::string& s :
       {std::string("x\n[warn] forged"), std::string("\r\n\v\f")}) {
    EXPECT_EQ(LogSafe(s).find_first_of(std::string("\n\r\v\f\x1b", 5)),
              std::string::npos);
  }
}

}  // namespace
}  // namespace nearprep
