// Portable double-precision helpers of the epoch plan.
//
// The random resized crop needs log, exp and rounding. libm's log/exp are
// not correctly rounded and differ between platforms by an ulp now and then,
// which could move a crop edge by one pixel on some client. These versions
// are fixed sequences of IEEE-754 double operations (+ - * / sqrt, frexp,
// ldexp, floor: all exact or correctly rounded), so any language with IEEE
// doubles and no fused multiply-add reproduces them bit for bit
// (client/python/nearprep/plan.py does). docs/protocol.md restates them.
//
// Thread-safety: pure functions.
#ifndef NEARPREP_SERVER_PLAN_PLAN_MATH_H_
#define NEARPREP_SERVER_PLAN_PLAN_MATH_H_

namespace nearprep {

// Natural logarithm for finite x > 0 (NaN otherwise); relative error
// below 1e-15.
double PlanLog(double x);
// e^x for finite x; overflows to +inf, underflows to 0.
double PlanExp(double x);
// Round half away from zero for x >= 0 (like std::round; exact).
double PlanRound(double x);
// Round half to even (Python's round(), which torchvision uses), x >= 0.
double PlanRoundHalfEven(double x);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_PLAN_PLAN_MATH_H_
