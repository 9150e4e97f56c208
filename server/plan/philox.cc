// See philox.h and docs/protocol.md.
#include "server/plan/philox.h"

#include <cstring>

namespace nearprep {
namespace {

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;
constexpr int kPhiloxRounds = 10;

}  // namespace

std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> c,
                                   std::array<uint32_t, 2> k) {
  for (int round = 0; round < kPhiloxRounds; ++round) {
    if (round > 0) {  // Key schedule: Weyl sequence, bumped between rounds.
      k[0] += kPhiloxW0;
      k[1] += kPhiloxW1;
    }
    const uint64_t p0 = uint64_t{kPhiloxM0} * c[0];
    const uint64_t p1 = uint64_t{kPhiloxM1} * c[2];
    c = {Hi32(p1) ^ c[1] ^ k[0], Lo32(p1), Hi32(p0) ^ c[3] ^ k[1], Lo32(p0)};
  }
  return c;
}

float UniformFloat(uint32_t x) {
  const uint32_t bits = 0x3F800000u | (x & 0x7FFFFFu);
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f - 1.0f;
}

std::array<uint32_t, 2> PlanKey(uint64_t seed) {
  return {Lo32(seed), Hi32(seed)};
}

}  // namespace nearprep
