// The C++ FleetClient's hedged requests and verification, the parts that
// need no daemon (tests/python/test_fleet_hedge.py and test_fleet_verify.py
// run both clients against real daemons):
// - FleetVerifyScore is the Python nearprep.fleet.verify_score: the first 8
//   bytes of sha256("SEED/EPOCH/POSITION") big endian, over 2^64. The
//   expected digests and scores below were computed with Python's hashlib
//   (python3 -c "import hashlib; ...", the formula of docs/protocol.md), not
//   with this code.
// - FleetHedgeAfter picks the ceil(p * n)-th smallest latency, at least the
//   minimum, and nothing below hedge_samples latencies.
// - FleetHedgeClass is floor(log2(samples)); FleetSplitHedge cuts a hedge's
//   positions into contiguous near-equal chunks over the other live
//   replicas (the case below is also in tests/python/test_fleet_simulate.py,
//   against nearprep.fleet.split_hedge: both give the hand-computed answer).
// - FleetClient::Create refuses bad hedge and verify options, naming them.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client/cpp/fleet/fleet_client.h"
#include "gtest/gtest.h"

namespace nearprep {
namespace {

// 2^-64 * the 16 hex digits' value, as Python's int / float computes it.
double FromHex(const char* hex16) {
  return static_cast<double>(std::stoull(hex16, nullptr, 16)) / 18446744073709551616.0;
}

TEST(FleetVerifyScore, IsTheDocumentedHash) {
  struct Case {
    uint64_t seed, epoch, position;
    const char* sha256_first8;  // hashlib.sha256(b"SEED/EPOCH/POSITION").hexdigest()[:16]
    double python_score;        // repr(nearprep.fleet.verify_score(...))
  };
  const Case cases[] = {
      {11, 0, 5, "d5dcdca9bcb674e2", 0.8354013361356126},
      {0, 0, 0, "54b54709d08c3814", 0.3308910750352404},
      {1, 2, 3, "9de93caf7d8d2a94", 0.6168401649898},
      {UINT64_MAX, 16777215, 123456789012, "6b5a70582c3cf41b", 0.4193487372651708},
  };
  for (const Case& c : cases) {
    const double s = FleetVerifyScore(c.seed, c.epoch, c.position);
    EXPECT_EQ(s, FromHex(c.sha256_first8)) << c.seed << "/" << c.epoch << "/" << c.position;
    EXPECT_EQ(s, c.python_score) << c.seed << "/" << c.epoch << "/" << c.position;
  }
}

TEST(FleetVerifyScore, FractionSelectsAboutThatShare) {
  int below = 0;
  for (uint64_t p = 0; p < 2000; ++p) {
    const double s = FleetVerifyScore(1, 2, p);
    ASSERT_GE(s, 0.0);
    ASSERT_LT(s, 1.0);
    below += s < 0.1;
  }
  // sum(verify_score(1, 2, p) < 0.1 for p in range(2000)) in Python: 196.
  EXPECT_EQ(below, 196);
}

TEST(FleetHedgeAfter, PercentileOfTheWindowAtLeastTheMinimum) {
  const std::vector<double> lat = {0.010, 0.009, 0.008, 0.007, 0.006,
                                   0.005, 0.004, 0.003, 0.002, 0.001};
  // Fewer latencies than hedge_samples: not yet.
  EXPECT_EQ(FleetHedgeAfter(lat, 0.5, 0.0, 11), std::nullopt);
  EXPECT_EQ(FleetHedgeAfter({}, 0.5, 0.0, 1), std::nullopt);
  // ceil(0.5 * 10) = 5th smallest; ceil(0.95 * 10) = 10th; ceil(0.01 * 10) = 1st.
  EXPECT_EQ(FleetHedgeAfter(lat, 0.5, 0.0, 10), 0.005);
  EXPECT_EQ(FleetHedgeAfter(lat, 0.95, 0.0, 10), 0.010);
  EXPECT_EQ(FleetHedgeAfter(lat, 0.01, 0.0, 4), 0.001);
  EXPECT_EQ(FleetHedgeAfter(lat, 0.51, 0.0, 4), 0.006);
  // Never sooner than the minimum.
  EXPECT_EQ(FleetHedgeAfter(lat, 0.5, 0.05, 10), 0.05);
}

TEST(FleetHedgeClass, IsFloorLog2) {
  const std::pair<uint64_t, int> cases[] = {{0, 0},  {1, 0},  {2, 1},  {3, 1},  {4, 2},
                                            {63, 5}, {64, 6}, {127, 6}, {128, 7}};
  for (const auto& [n, c] : cases) EXPECT_EQ(FleetHedgeClass(n), c) << n;
}

TEST(FleetSplitHedge, ContiguousNearEqualChunksOverTheOtherReplicas) {
  // Partitions 0 and 1 on a, b, c; 2 on a, c; 3 on a only; the hedged
  // request was a's.
  const std::map<uint32_t, std::vector<std::string>> holders = {
      {0, {"c", "a", "b"}}, {1, {"b", "c", "a"}}, {2, {"a", "c"}}, {3, {"a"}}};
  const std::vector<std::pair<uint32_t, uint64_t>> items = {
      {0, 6}, {0, 1}, {0, 4}, {1, 9}, {1, 2}, {2, 3}, {2, 5}, {2, 7}, {3, 8}};
  std::vector<uint32_t> orphans;
  const auto split =
      FleetSplitHedge(items, [&](uint32_t p) { return holders.at(p); }, "a", &orphans);
  // {b, c}: positions 1 2 4 6 9, 5 over 2 nodes: b the first 3, c the last 2;
  // {c}: 3 5 7; partition 3 has no other replica.
  const std::map<std::string, std::vector<uint64_t>> want = {{"b", {1, 2, 4}},
                                                             {"c", {3, 5, 6, 7, 9}}};
  EXPECT_EQ(split, want);
  EXPECT_EQ(orphans, std::vector<uint32_t>({3}));
  // One position over two replicas: one request (no empty one).
  const auto one = FleetSplitHedge({{0, 7}}, [&](uint32_t p) { return holders.at(p); }, "c");
  EXPECT_EQ(one, (std::map<std::string, std::vector<uint64_t>>{{"a", {7}}}));
  // No other live replica at all: no request.
  EXPECT_TRUE(FleetSplitHedge({{3, 1}}, [&](uint32_t p) { return holders.at(p); }, "a").empty());
}

TEST(FleetClientOptions, HedgingIsOnByDefault) {
  // The Python FleetClient's default too (nearprep.fleet.HEDGE_DEFAULT).
  EXPECT_EQ(FleetClientOptions().hedge, 0.95);
  // hedge_min 50 ms, and 4 latencies of a size class before hedging (the
  // simulator's warm-up: docs/benchmarks.md, "All of issue 31's targets").
  EXPECT_EQ(FleetClientOptions().hedge_min, std::chrono::milliseconds(50));
  EXPECT_EQ(FleetClientOptions().hedge_samples, 4);
}

absl::Status CreateWith(void (*set)(FleetClientOptions*)) {
  FleetClientOptions o;
  o.targets = {"127.0.0.1:1"};
  o.dataset = "ds";
  o.plan.global_batch = 4;
  set(&o);
  return FleetClient::Create(o).status();
}

TEST(FleetClientOptions, BadHedgeAndVerifyOptionsAreRefusedByName) {
  struct Case {
    void (*set)(FleetClientOptions*);
    const char* field;
  };
  const Case cases[] = {
      {[](FleetClientOptions* o) { o->hedge = 1.0; }, "hedge:"},
      {[](FleetClientOptions* o) { o->hedge = -0.5; }, "hedge:"},
      {[](FleetClientOptions* o) { o->hedge = std::nan(""); }, "hedge:"},
      {[](FleetClientOptions* o) { o->hedge_min = std::chrono::milliseconds(-1); },
       "hedge_min:"},
      {[](FleetClientOptions* o) { o->hedge_samples = 0; }, "hedge_samples:"},
      {[](FleetClientOptions* o) { o->hedge_samples = kFleetHedgeWindow + 1; },
       "hedge_samples:"},
      {[](FleetClientOptions* o) { o->verify_fraction = 1.5; }, "verify_fraction:"},
      {[](FleetClientOptions* o) { o->verify_fraction = -0.1; }, "verify_fraction:"},
      {[](FleetClientOptions* o) { o->verify_fraction = std::nan(""); }, "verify_fraction:"},
  };
  for (const Case& c : cases) {
    const absl::Status s = CreateWith(c.set);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(std::string(s.message()).rfind(c.field, 0), 0u) << s;
  }
}

}  // namespace
}  // namespace nearprep
