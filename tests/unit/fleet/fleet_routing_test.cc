// Replica routing in the C++ FleetClient (FleetChooseReplica, the
// "first" / "spread" rule of docs/protocol.md "The client"): the same picks
// as the Python nearprep.fleet.choose for the same inputs (the table below
// was printed by it; tests/python/test_fleet_simulate.py pins the same
// table on the Python side), whatever the order of the holders; spread
// rotates a partition over all its live holders; the option parser.
// tests/python/test_fleet_daemons.py reads real daemons with both routings.
#include <map>
#include <string>
#include <vector>

#include "client/cpp/fleet/fleet_client.h"
#include "gtest/gtest.h"

namespace nearprep {
namespace {

constexpr int64_t kFirstRouting = -1;  // the table's "first" (Python: spread_key None)

struct Pick {
  uint32_t partition;
  int64_t g;
  const char* all5;   // among the five names
  const char* first3;  // among the first three
  const char* last2;   // among the last two
};

std::string Choose(uint32_t p, std::vector<absl::string_view> names, int64_t g) {
  const int k = FleetChooseReplica(
      p, names, g < 0 ? FleetReplicaRouting::kFirst : FleetReplicaRouting::kSpread,
      g < 0 ? 0 : static_cast<uint64_t>(g));
  return k < 0 ? "" : std::string(names[static_cast<size_t>(k)]);
}

TEST(FleetRoutingTest, SamePicksAsPython) {
  const std::vector<absl::string_view> names = {"127.0.0.1:7001", "127.0.0.1:7002",
                                                "127.0.0.1:7003", "node-a", "node-b"};
  const Pick picks[] = {
      {0, kFirstRouting, "node-a", "127.0.0.1:7002", "node-a"},
      {0, 0, "node-a", "127.0.0.1:7002", "node-a"},
      {0, 1, "127.0.0.1:7002", "127.0.0.1:7001", "node-b"},
      {0, 2, "127.0.0.1:7001", "127.0.0.1:7003", "node-a"},
      {0, 3, "node-b", "127.0.0.1:7002", "node-b"},
      {0, 7, "127.0.0.1:7001", "127.0.0.1:7001", "node-b"},
      {1, kFirstRouting, "127.0.0.1:7003", "127.0.0.1:7003", "node-a"},
      {1, 0, "node-a", "127.0.0.1:7001", "node-b"},
      {1, 1, "127.0.0.1:7001", "127.0.0.1:7002", "node-a"},
      {1, 2, "127.0.0.1:7002", "127.0.0.1:7003", "node-b"},
      {1, 3, "node-b", "127.0.0.1:7001", "node-a"},
      {1, 7, "127.0.0.1:7002", "127.0.0.1:7002", "node-a"},
      {5, kFirstRouting, "node-b", "127.0.0.1:7002", "node-b"},
      {5, 0, "node-b", "127.0.0.1:7001", "node-a"},
      {5, 1, "127.0.0.1:7002", "127.0.0.1:7002", "node-b"},
      {5, 2, "127.0.0.1:7003", "127.0.0.1:7003", "node-a"},
      {5, 3, "node-a", "127.0.0.1:7001", "node-b"},
      {5, 7, "127.0.0.1:7003", "127.0.0.1:7002", "node-b"},
      {17, kFirstRouting, "node-b", "127.0.0.1:7003", "node-b"},
      {17, 0, "node-a", "127.0.0.1:7001", "node-a"},
      {17, 1, "127.0.0.1:7002", "127.0.0.1:7003", "node-b"},
      {17, 2, "127.0.0.1:7001", "127.0.0.1:7002", "node-a"},
      {17, 3, "node-b", "127.0.0.1:7001", "node-b"},
      {17, 7, "127.0.0.1:7001", "127.0.0.1:7003", "node-b"},
  };
  for (const Pick& pk : picks) {
    SCOPED_TRACE("partition " + std::to_string(pk.partition) + " g " + std::to_string(pk.g));
    EXPECT_EQ(Choose(pk.partition, names, pk.g), pk.all5);
    // Any order of the holders: the same pick.
    EXPECT_EQ(Choose(pk.partition, {names.rbegin(), names.rend()}, pk.g), pk.all5);
    EXPECT_EQ(Choose(pk.partition, {names.begin(), names.begin() + 3}, pk.g), pk.first3);
    EXPECT_EQ(Choose(pk.partition, {names[4], names[3]}, pk.g), pk.last2);
  }
  EXPECT_EQ(FleetChooseReplica(3, {}, FleetReplicaRouting::kSpread, 5), -1);
  EXPECT_EQ(FleetChooseReplica(3, {}, FleetReplicaRouting::kFirst, 0), -1);
}

TEST(FleetRoutingTest, SpreadRotatesOverEveryHolder) {
  const std::vector<absl::string_view> names = {"a:1", "b:1", "c:1"};
  for (uint32_t p = 0; p < 50; ++p) {
    // "first" is spread's index 0: at g with (g + p) mod 3 = 0.
    const std::string first = Choose(p, names, kFirstRouting);
    std::map<std::string, int> served;
    for (int64_t g = 0; g < 30; ++g) {
      const std::string s = Choose(p, names, g);
      ++served[s];
      EXPECT_EQ(s, Choose(p, names, g + 3)) << "period: the holders' count";
      if ((g + p) % 3 == 0) {
        EXPECT_EQ(s, first);
      }
    }
    ASSERT_EQ(served.size(), 3u) << p;
    for (const auto& [n, c] : served) EXPECT_EQ(c, 10) << n;
  }
}

TEST(FleetRoutingTest, ParseNamesTheChoices) {
  EXPECT_EQ(*ParseFleetReplicaRouting("first"), FleetReplicaRouting::kFirst);
  EXPECT_EQ(*ParseFleetReplicaRouting("spread"), FleetReplicaRouting::kSpread);
  absl::StatusOr<FleetReplicaRouting> bad = ParseFleetReplicaRouting("round-robin");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("first or spread"), std::string::npos);
}

}  // namespace
}  // namespace nearprep
