// See plan_math.h. Every operation below is spelled out in the order it is
// evaluated; the file is compiled with -ffp-contract=off (global option), so
// no multiply-add is fused. Do not "simplify" an expression: the exact
// sequence is part of the protocol (docs/protocol.md, "Portable math").
#include "server/plan/plan_math.h"

#include <cmath>
#include <limits>

namespace nearprep {
namespace {

// ln 2 split in two (Cody & Waite): kLn2Hi has 32 significant bits, so
// k * kLn2Hi is exact for |k| < 2^21.
constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 0x3FE62E42FEE00000
constexpr double kLn2Lo = 1.90821492927058770002e-10;  // 0x3DEA39EF35793C76
constexpr double kInvLn2 = 1.4426950408889634;    // nearest double to 1/ln 2
constexpr double kSqrtHalf = 0.7071067811865476;  // nearest double to sqrt(1/2)
constexpr int kLogTerms = 12;                     // atanh series terms
constexpr int kExpTerms = 20;                     // Taylor terms

}  // namespace

double PlanLog(double x) {
  if (!(x > 0.0) || !std::isfinite(x)) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  int e = 0;
  double m = std::frexp(x, &e);  // x = m * 2^e, m in [0.5, 1): exact.
  if (m < kSqrtHalf) {
    m = m * 2.0;  // exact
    e = e - 1;
  }
  // m in [sqrt(1/2), sqrt(2)): log m = 2 atanh(s), s = (m-1)/(m+1).
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  // p = sum_{k=0}^{K-1} s2^k / (2k+1), Horner from the highest term.
  double p = 1.0 / static_cast<double>(2 * (kLogTerms - 1) + 1);
  for (int k = kLogTerms - 2; k >= 0; --k) {
    p = p * s2 + 1.0 / static_cast<double>(2 * k + 1);
  }
  const double log_m = 2.0 * s * p;  // (2.0 * s) * p
  const double ed = static_cast<double>(e);
  return ed * kLn2Hi + (ed * kLn2Lo + log_m);
}

double PlanExp(double x) {
  if (std::isnan(x)) return x;
  if (x > 710.0) return std::numeric_limits<double>::infinity();
  if (x < -746.0) return 0.0;
  // x = k ln2 + r, |r| <= ~0.35.
  const double k = std::floor(x * kInvLn2 + 0.5);
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;
  // e^r = 1 + r/1 (1 + r/2 (1 + r/3 (...))), innermost first.
  double p = 1.0;
  for (int i = kExpTerms; i >= 1; --i) {
    p = 1.0 + p * r / static_cast<double>(i);  // ((p * r) / i) + 1
  }
  return std::ldexp(p, static_cast<int>(k));
}

double PlanRound(double x) {
  const double f = std::floor(x);
  return (x - f >= 0.5) ? f + 1.0 : f;
}

double PlanRoundHalfEven(double x) {
  const double f = std::floor(x);
  const double d = x - f;  // Exact.
  if (d != 0.5) return d > 0.5 ? f + 1.0 : f;
  return std::fmod(f, 2.0) == 0.0 ? f : f + 1.0;
}

}  // namespace nearprep
