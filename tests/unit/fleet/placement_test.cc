// Fleet placements (server/fleet/placement.h): the text form (exact bytes,
// round trip, hash, malformed documents refused naming the line), the
// computation (every partition on exactly R distinct nodes, those with the
// highest rendezvous score; balanced; adding or removing a node moves only
// the partitions it gains or loses), the version check, and the shards a
// node must hold.
#include "server/fleet/placement.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/fleet/manifest.h"

namespace nearprep::fleet {
namespace {

const std::string kHash(64, 'a');

std::vector<std::string> Nodes(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back("10.0.0." + std::to_string(i + 1) + ":7070");
  return out;
}

// partition -> the nodes holding it.
std::map<uint32_t, std::set<std::string>> Holders(const Placement& p) {
  std::map<uint32_t, std::set<std::string>> out;
  for (const auto& [n, parts] : p.nodes) {
    for (uint32_t part : parts) out[part].insert(n);
  }
  return out;
}

TEST(PlacementTest, ScoreIsTheClients) {
  // Values from client/python/nearprep/fleet.py's rendezvous_score.
  EXPECT_EQ(RendezvousScore("10.0.0.1:7070", 5), 448703302220230949ull);
  EXPECT_EQ(RendezvousScore("a", 0), 15558117463293904936ull);
}

TEST(PlacementTest, ExactTextAndRoundTrip) {
  absl::StatusOr<Placement> p = ComputePlacement(kHash, 4, {"b", "a", "c"}, 2, 7);
  ASSERT_TRUE(p.ok()) << p.status();
  const std::string text = SerializePlacement(*p);
  // The layout, header by header (the node lines depend on the scores).
  const std::string head = "nearprep-placement 1\nversion 7\nmanifest " + kHash +
                           "\npartitions 4\nreplicas 2\nnode a ";
  EXPECT_EQ(text.substr(0, head.size()), head) << text;
  EXPECT_NE(text.find("\nnode b "), std::string::npos);
  EXPECT_NE(text.find("\nnode c "), std::string::npos);
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(p->hash, Sha256Hex(text));
  absl::StatusOr<Placement> q = ParsePlacement(text);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->version, 7u);
  EXPECT_EQ(q->manifest_hash, kHash);
  EXPECT_EQ(q->num_partitions, 4u);
  EXPECT_EQ(q->replicas, 2u);
  EXPECT_EQ(q->nodes, p->nodes);
  EXPECT_EQ(q->hash, p->hash);
  EXPECT_EQ(SerializePlacement(*q), text);
  // The hash is of the bytes: another version is another hash.
  absl::StatusOr<Placement> v8 = ComputePlacement(kHash, 4, {"b", "a", "c"}, 2, 8);
  ASSERT_TRUE(v8.ok());
  EXPECT_NE(v8->hash, p->hash);
  EXPECT_EQ(v8->nodes, p->nodes);
}

TEST(PlacementTest, NodeWithoutPartitionsIsADash) {
  // 1 partition, 1 replica, 3 nodes: two nodes hold nothing.
  absl::StatusOr<Placement> p = ComputePlacement(kHash, 1, {"x", "y", "z"}, 1, 1);
  ASSERT_TRUE(p.ok()) << p.status();
  const std::string text = SerializePlacement(*p);
  size_t dashes = 0;
  for (size_t i = text.find(" -\n"); i != std::string::npos; i = text.find(" -\n", i + 1)) {
    ++dashes;
  }
  EXPECT_EQ(dashes, 2u) << text;
  absl::StatusOr<Placement> q = ParsePlacement(text);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->nodes, p->nodes);
}

TEST(PlacementTest, MalformedTextIsRefusedNamingTheLine) {
  const std::string h = "nearprep-placement 1\nversion 3\nmanifest " + kHash +
                        "\npartitions 3\nreplicas 2\n";
  struct Case {
    std::string text, expected;
  };
  const Case cases[] = {
      {"", "empty or not newline-terminated"},
      {h + "node a 0,1,2\nnode b 0,1,2", "not newline-terminated"},
      {"nearprep-placement 2\n", "line 1:"},
      {"nearprep-placement 1\nversion 0\n", "line 2:"},
      {"nearprep-placement 1\nversion x\n", "line 2:"},
      {"nearprep-placement 1\nversion 3\nmanifest ABC\n", "line 3:"},
      {"nearprep-placement 1\nversion 3\nmanifest " + kHash + "\npartitions 0\n", "line 4:"},
      {"nearprep-placement 1\nversion 3\nmanifest " + kHash + "\npartitions 3\nreplica 2\n",
       "line 5:"},
      {h + "node a 0,1,2\nnode  b 0,1,2\n", "line 7:"},
      {h + "node b 0,1,2\nnode a 0,1,2\n", "line 7: nodes must be listed once each"},
      {h + "node a 0,1,2\nnode a 0,1,2\n", "line 7: nodes must be listed once each"},
      {h + "node a 0,1,2\nnode b 0,2,1\n", "line 7: partition '1'"},
      {h + "node a 0,1,2\nnode b 0,1,3\n", "line 7: partition '3'"},
      {h + "node a 0,1,1,2\nnode b 0,1,2\n", "line 6: partition '1'"},
      {h + "node a 0,,2\nnode b 0,1,2\n", "line 6: partition ''"},
      {h + "node a 0,1,2\nnode b 0,1\n", "partition 2 is on 1 nodes, replicas is 2"},
      {h + "node a 0,1,2\n", "replicas 2 is more than the 1 nodes"},
      {h, "no nodes"},
      {h + "node a 0,1,2\nnode b 0,1,2\nnode c -\nnode d \n", "line 9:"},
      {"nearprep-placement 1\nversion 03\nmanifest " + kHash +
           "\npartitions 3\nreplicas 2\nnode a 0,1,2\nnode b 0,1,2\n",
       "not in canonical form"},
      {h + "node a 0,1,2\nnode b 0,1,2\n\n", "line 8:"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    absl::StatusOr<Placement> p = ParsePlacement(c.text);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find(c.expected), std::string::npos) << p.status();
  }
  // The same document, well formed, parses.
  EXPECT_TRUE(ParsePlacement(h + "node a 0,1,2\nnode b 0,1,2\nnode c -\n").ok());
}

TEST(PlacementTest, EveryPartitionOnTheRNodesWithTheHighestScore) {
  const uint32_t kC = 256;
  for (int n : {1, 2, 3, 5, 8}) {
    for (uint32_t r = 1; r <= static_cast<uint32_t>(std::min(n, 3)); ++r) {
      SCOPED_TRACE(std::to_string(n) + " nodes, R = " + std::to_string(r));
      const std::vector<std::string> nodes = Nodes(n);
      absl::StatusOr<Placement> p = ComputePlacement(kHash, kC, nodes, r, 1);
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_EQ(p->nodes.size(), static_cast<size_t>(n));
      std::map<uint32_t, std::set<std::string>> holders = Holders(*p);
      ASSERT_EQ(holders.size(), kC);
      for (uint32_t part = 0; part < kC; ++part) {
        const std::set<std::string>& h = holders[part];
        ASSERT_EQ(h.size(), r) << "partition " << part;  // R distinct nodes
        // Every holder outscores every other node.
        uint64_t lowest_in = ~uint64_t{0}, highest_out = 0;
        for (const std::string& node : nodes) {
          const uint64_t s = RendezvousScore(node, part);
          if (h.count(node)) {
            lowest_in = std::min(lowest_in, s);
          } else {
            highest_out = std::max(highest_out, s);
          }
        }
        if (r < static_cast<uint32_t>(n)) {
          EXPECT_GT(lowest_in, highest_out) << part;
        }
      }
      // Balanced within reason: each node within 40% of C * R / n.
      const double mean = static_cast<double>(kC) * r / n;
      for (const auto& [node, parts] : p->nodes) {
        EXPECT_GE(parts.size(), 0.6 * mean) << node;
        EXPECT_LE(parts.size(), 1.4 * mean) << node;
      }
      // The text says the same.
      absl::StatusOr<Placement> q = ParsePlacement(SerializePlacement(*p));
      ASSERT_TRUE(q.ok()) << q.status();
    }
  }
}

TEST(PlacementTest, AddingOrRemovingANodeMovesOnlyItsPartitions) {
  const uint32_t kC = 512;
  for (uint32_t r : {1u, 2u, 3u}) {
    SCOPED_TRACE("R = " + std::to_string(r));
    const std::vector<std::string> five = Nodes(5);
    std::vector<std::string> six = Nodes(6);
    absl::StatusOr<Placement> a = ComputePlacement(kHash, kC, five, r, 1);
    absl::StatusOr<Placement> b = ComputePlacement(kHash, kC, six, r, 2);
    ASSERT_TRUE(a.ok() && b.ok());
    const std::string added = six.back();
    // Adding: the new node gains; every other node only loses, and only
    // partitions the new node gained; each partition changes at most one
    // replica.
    uint64_t lost = 0;
    std::vector<PlacementMove> moves = DiffPlacements(*a, *b);
    const std::vector<uint32_t>& gained = *b->PartitionsOf(added);
    EXPECT_GT(gained.size(), 0u);
    for (const PlacementMove& m : moves) {
      if (m.node == added) {
        EXPECT_EQ(m.gains, gained);
        EXPECT_TRUE(m.losses.empty());
        continue;
      }
      EXPECT_TRUE(m.gains.empty()) << m.node;
      for (uint32_t part : m.losses) {
        EXPECT_TRUE(std::binary_search(gained.begin(), gained.end(), part)) << part;
      }
      lost += m.losses.size();
    }
    EXPECT_EQ(lost, gained.size());
    std::map<uint32_t, std::set<std::string>> ha = Holders(*a), hb = Holders(*b);
    for (uint32_t part = 0; part < kC; ++part) {
      std::vector<std::string> kept;
      std::set_intersection(ha[part].begin(), ha[part].end(), hb[part].begin(),
                            hb[part].end(), std::back_inserter(kept));
      EXPECT_GE(kept.size(), r - 1) << part;
    }
    // Removing a node (the second): only its partitions move, each to
    // exactly one node that did not hold it; nobody else loses anything.
    std::vector<std::string> four = five;
    const std::string removed = four[1];
    four.erase(four.begin() + 1);
    absl::StatusOr<Placement> c = ComputePlacement(kHash, kC, four, r, 3);
    ASSERT_TRUE(c.ok());
    const std::vector<uint32_t>& had = *a->PartitionsOf(removed);
    uint64_t gains = 0;
    for (const PlacementMove& m : DiffPlacements(*a, *c)) {
      if (m.node == removed) {
        EXPECT_EQ(m.losses, had);
        continue;
      }
      EXPECT_TRUE(m.losses.empty()) << m.node;
      for (uint32_t part : m.gains) {
        EXPECT_TRUE(std::binary_search(had.begin(), had.end(), part)) << part;
      }
      gains += m.gains.size();
    }
    EXPECT_EQ(gains, had.size());
  }
}

TEST(PlacementTest, ComputeRefusesBadParameters) {
  struct Case {
    std::vector<std::string> nodes;
    uint32_t replicas;
    uint64_t version;
    std::string hash, expected;
  };
  const Case cases[] = {
      {{"a", "b", "c"}, 4, 1, kHash, "replicas: R = 4 must be in [1, 3]"},
      {{"a", "b"}, 0, 1, kHash, "replicas:"},
      {{}, 1, 1, kHash, "nodes: none given"},
      {{"a", "a"}, 1, 1, kHash, "nodes: 'a' is listed twice"},
      {{"a", "b c"}, 1, 1, kHash, "nodes: 'b c' is not a node name"},
      {{"a", ""}, 1, 1, kHash, "nodes: '' is not a node name"},
      {{"a", "b,c"}, 1, 1, kHash, "nodes: 'b,c'"},
      {{"a"}, 1, 0, kHash, "version: must be >= 1"},
      {{"a"}, 1, 1, "abc", "manifest hash"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expected);
    absl::StatusOr<Placement> p = ComputePlacement(c.hash, 8, c.nodes, c.replicas, c.version);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find(c.expected), std::string::npos) << p.status();
  }
}

TEST(PlacementTest, VersionMustGrow) {
  absl::StatusOr<Placement> v3 = ComputePlacement(kHash, 8, {"a", "b"}, 1, 3);
  absl::StatusOr<Placement> v3b = ComputePlacement(kHash, 8, {"a", "b", "c"}, 1, 3);
  absl::StatusOr<Placement> v2 = ComputePlacement(kHash, 8, {"a", "b", "c"}, 1, 2);
  absl::StatusOr<Placement> v4 = ComputePlacement(kHash, 8, {"a", "b", "c"}, 1, 4);
  ASSERT_TRUE(v3.ok() && v3b.ok() && v2.ok() && v4.ok());
  EXPECT_TRUE(CheckSuccessor(*v3, *v4).ok());
  absl::Status same = CheckSuccessor(*v3, *v3b);
  EXPECT_EQ(same.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(same.message().find("version 3 is not greater than the previous placement's 3"),
            std::string::npos)
      << same;
  EXPECT_FALSE(CheckSuccessor(*v3, *v2).ok());
}

TEST(PlacementTest, ShardsForANode) {
  std::vector<ManifestShard> shards;
  for (int i = 0; i < 10; ++i) {
    ManifestShard s;
    s.name = "s" + std::to_string(i) + ".tfrecord";
    s.records = 10 + i;
    s.bytes = 1000;
    shards.push_back(s);
  }
  absl::StatusOr<Manifest> m = BuildManifest("tfrecord", shards, 4);
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<Placement> p = ComputePlacement(m->hash, m->num_partitions, {"a", "b", "c"}, 2, 1);
  ASSERT_TRUE(p.ok()) << p.status();
  std::map<std::string, int> copies;
  for (const auto& [node, parts] : p->nodes) {
    absl::StatusOr<std::vector<std::string>> names = ShardsFor(*p, *m, node);
    ASSERT_TRUE(names.ok()) << names.status();
    std::set<uint32_t> want(parts.begin(), parts.end());
    for (const ManifestShard& s : m->shards) {
      const bool listed = std::count(names->begin(), names->end(), s.name) == 1;
      EXPECT_EQ(listed, want.count(s.partition) == 1) << node << " " << s.name;
    }
    for (const std::string& n : *names) ++copies[n];
  }
  // Every shard is on exactly R nodes.
  ASSERT_EQ(copies.size(), m->shards.size());
  for (const auto& [name, k] : copies) EXPECT_EQ(k, 2) << name;

  absl::StatusOr<std::vector<std::string>> unknown = ShardsFor(*p, *m, "d");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("node 'd' is not in the placement (nodes: a, b, c)"),
            std::string::npos)
      << unknown.status();
  absl::StatusOr<Placement> other = ComputePlacement(kHash, m->num_partitions, {"a"}, 1, 1);
  ASSERT_TRUE(other.ok());
  absl::StatusOr<std::vector<std::string>> wrong = ShardsFor(*other, *m, "a");
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(wrong.status().message().find("is for manifest " + kHash), std::string::npos)
      << wrong.status();
}


// Bounded-load rendezvous (ComputePlacement's max_load): checks the rule by
// replaying the placement partition by partition, not by recomputing it.
// Returns the largest number of partitions a node holds.
size_t CheckBounded(const Placement& p, const std::vector<std::string>& nodes, uint64_t cap) {
  std::map<uint32_t, std::set<std::string>> holders = Holders(p);
  std::map<std::string, uint64_t> load;
  for (uint32_t part = 0; part < p.num_partitions; ++part) {
    const std::set<std::string>& h = holders[part];
    EXPECT_EQ(h.size(), p.replicas) << "partition " << part;  // R distinct nodes
    // A node with room that outranks a holder with room must hold it: the
    // holders with room are the top-ranked nodes with room.
    const auto key = [&](const std::string& n) {
      return std::make_pair(RendezvousScore(n, part), n);
    };
    for (const std::string& n : nodes) {
      if (h.count(n) || load[n] >= cap) continue;
      for (const std::string& x : h) {
        // Past-the-cap holders only when no node with room was left out.
        EXPECT_FALSE(load[x] >= cap) << "partition " << part << ": " << x
                                     << " is full and " << n << " has room";
        EXPECT_LT(key(n), key(x)) << "partition " << part << ": " << n << " has room and "
                                  << "outranks holder " << x;
      }
    }
    for (const std::string& x : h) ++load[x];
  }
  size_t most = 0;
  for (const auto& [n, parts] : p.nodes) most = std::max(most, parts.size());
  return most;
}

TEST(PlacementTest, BoundedLoadKeepsNodesUnderTheCap) {
  const uint32_t kC = 512;
  for (int n : {5, 16, 37}) {
    for (uint32_t r : {1u, 2u, 3u}) {
      for (double f : {1.0, 1.1, 1.5}) {
        SCOPED_TRACE(std::to_string(n) + " nodes, R = " + std::to_string(r) +
                     ", F = " + std::to_string(f));
        const std::vector<std::string> nodes = Nodes(n);
        absl::StatusOr<Placement> p = ComputePlacement(kHash, kC, nodes, r, 1, f);
        ASSERT_TRUE(p.ok()) << p.status();
        const uint64_t cap = PlacementCap(f, kC, r, n);
        EXPECT_EQ(cap, static_cast<uint64_t>(std::ceil(f * kC * r / n)));
        const size_t most = CheckBounded(*p, nodes, cap);
        // The documented guarantee: no node past the cap when
        // cap * (n - R) >= (C - 1) * R.
        if (cap * (n - r) >= uint64_t{kC - 1} * r) {
          EXPECT_LE(most, cap);
        }
        // Pure rendezvous' most loaded node.
        absl::StatusOr<Placement> pure = ComputePlacement(kHash, kC, nodes, r, 1);
        size_t pure_most = 0;
        for (const auto& [node, parts] : pure->nodes) {
          pure_most = std::max(pure_most, parts.size());
        }
        if (pure_most <= cap) {
          // The cap never binds: pure rendezvous exactly.
          EXPECT_EQ(SerializePlacement(*p), SerializePlacement(*pure));
        } else if (cap * (n - r) >= uint64_t{kC - 1} * r) {
          EXPECT_LT(most, pure_most);
        }
        // Parses; deterministic, whatever the order of the nodes.
        absl::StatusOr<Placement> q = ParsePlacement(SerializePlacement(*p));
        ASSERT_TRUE(q.ok()) << q.status();
        std::vector<std::string> reversed(nodes.rbegin(), nodes.rend());
        absl::StatusOr<Placement> again = ComputePlacement(kHash, kC, reversed, r, 1, f);
        ASSERT_TRUE(again.ok());
        EXPECT_EQ(SerializePlacement(*again), SerializePlacement(*p));
      }
    }
  }
}

TEST(PlacementTest, BoundedLoadSpillsPastTheCapOnlyWhenItMust) {
  // Small shapes where the cap can leave fewer than R nodes with room for
  // the last partitions: the placement is still R distinct nodes each, and
  // the rule (CheckBounded) holds; some shape spills.
  int spilled = 0;
  for (int n = 3; n <= 7; ++n) {
    for (uint32_t r = 2; r <= 3 && r <= static_cast<uint32_t>(n); ++r) {
      for (uint32_t c = 1; c <= 24; ++c) {
        SCOPED_TRACE(std::to_string(n) + " nodes, R = " + std::to_string(r) + ", C = " +
                     std::to_string(c));
        const std::vector<std::string> nodes = Nodes(n);
        absl::StatusOr<Placement> p = ComputePlacement(kHash, c, nodes, r, 1, 1.0);
        ASSERT_TRUE(p.ok()) << p.status();
        const uint64_t cap = PlacementCap(1.0, c, r, n);
        const size_t most = CheckBounded(*p, nodes, cap);
        if (cap * (n - r) >= uint64_t{c - 1} * r) {
          EXPECT_LE(most, cap);
        }
        spilled += most > cap;
      }
    }
  }
  EXPECT_GT(spilled, 0);
}

TEST(PlacementTest, LargeMaxLoadIsPureRendezvous) {
  const std::vector<std::string> nodes = Nodes(8);
  for (uint32_t r : {1u, 3u}) {
    absl::StatusOr<Placement> pure = ComputePlacement(kHash, 300, nodes, r, 4);
    ASSERT_TRUE(pure.ok());
    // cap >= C: never binds.
    for (double f : {8.0 / r, 100.0, 1e300}) {
      absl::StatusOr<Placement> big = ComputePlacement(kHash, 300, nodes, r, 4, f);
      ASSERT_TRUE(big.ok()) << big.status();
      EXPECT_EQ(SerializePlacement(*big), SerializePlacement(*pure)) << f;
      EXPECT_EQ(big->hash, pure->hash);
    }
    // A binding cap changes it.
    absl::StatusOr<Placement> tight = ComputePlacement(kHash, 300, nodes, r, 4, 1.0);
    ASSERT_TRUE(tight.ok());
    EXPECT_NE(tight->hash, pure->hash);
  }
}

TEST(PlacementTest, MaxLoadBelowOneIsRefused) {
  for (double f : {0.5, 0.999, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    absl::StatusOr<Placement> p = ComputePlacement(kHash, 16, Nodes(4), 2, 1, f);
    ASSERT_FALSE(p.ok()) << f;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find("max-load: F = "), std::string::npos) << p.status();
    EXPECT_NE(p.status().message().find("must be >= 1"), std::string::npos) << p.status();
  }
}

}  // namespace
}  // namespace nearprep::fleet
