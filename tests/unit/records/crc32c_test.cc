#include "server/records/crc32c.h"

#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace nearprep::records {
namespace {

// Known answers: RFC 3720 (iSCSI) appendix B.4, and the classic check value
// of CRC-32C over "123456789".
struct Vector {
  std::string data;
  uint32_t crc;
};

std::vector<Vector> KnownAnswers() {
  std::string zeros(32, '\0'), ones(32, '\xff'), inc(32, 0), dec(32, 0);
  for (int i = 0; i < 32; ++i) {
    inc[i] = static_cast<char>(i);
    dec[i] = static_cast<char>(31 - i);
  }
  return {{"123456789", 0xE3069283u},
          {zeros, 0x8A9136AAu},
          {ones, 0x62A8AB43u},
          {inc, 0x46DD794Eu},
          {dec, 0x113FDB5Cu},
          {"", 0u}};
}

TEST(Crc32cTest, MatchesKnownAnswers) {
  for (const auto& v : KnownAnswers()) {
    EXPECT_EQ(Crc32c(v.data.data(), v.data.size()), v.crc) << v.data.size();
    EXPECT_EQ(internal::Crc32cExtendPortable(0, v.data.data(), v.data.size()),
              v.crc);
  }
}

TEST(Crc32cTest, ExtendEqualsWholeForEverySplit) {
  std::string s;
  for (int i = 0; i < 301; ++i) s.push_back(static_cast<char>(i * 37 + 11));
  const uint32_t whole = Crc32c(s.data(), s.size());
  EXPECT_EQ(internal::Crc32cExtendPortable(0, s.data(), s.size()), whole);
  for (size_t k = 0; k <= s.size(); k += 7) {
    EXPECT_EQ(Crc32cExtend(Crc32c(s.data(), k), s.data() + k, s.size() - k),
              whole)
        << k;
  }
}

TEST(Crc32cTest, MaskIsTfRecords) {
  // mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8.
  EXPECT_EQ(MaskCrc(0), 0xa282ead8u);
  EXPECT_EQ(MaskCrc(0xE3069283u),
            static_cast<uint32_t>(((0xE3069283u >> 15) | (0xE3069283u << 17)) +
                                  0xa282ead8u));
  for (uint32_t c : {0u, 1u, 0x80000000u, 0xE3069283u, 0xffffffffu}) {
    EXPECT_EQ(UnmaskCrc(MaskCrc(c)), c);
    EXPECT_NE(MaskCrc(c), c);
  }
}

}  // namespace
}  // namespace nearprep::records
