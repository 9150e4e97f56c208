#include "server/fleet/manifest.h"

#include <numeric>

#include "gtest/gtest.h"

namespace nearprep::fleet {
namespace {

TEST(BalancePartitions, ContiguousBalancedAtLeastOneShardEach) {
  const std::vector<uint64_t> recs = {10, 10, 10, 10, 10, 10, 10, 10};
  EXPECT_EQ(BalancePartitions(recs, 4),
            (std::vector<uint32_t>{0, 0, 1, 1, 2, 2, 3, 3}));
  // Capped by the shard count.
  EXPECT_EQ(BalancePartitions({5, 5}, 256), (std::vector<uint32_t>{0, 1}));
  // One huge shard still leaves every partition a shard.
  const std::vector<uint32_t> p = BalancePartitions({1000, 1, 1, 1}, 3);
  EXPECT_EQ(p, (std::vector<uint32_t>{0, 1, 2, 2}));  // nearest boundaries, kept increasing
  // Uneven shards: partitions near N / C each.
  std::vector<uint64_t> many;
  for (int i = 0; i < 100; ++i) many.push_back(7 + (i * 37) % 13);
  const uint64_t total = std::accumulate(many.begin(), many.end(), uint64_t{0});
  const std::vector<uint32_t> q = BalancePartitions(many, 10);
  std::vector<uint64_t> sums(10, 0);
  for (size_t i = 0; i < many.size(); ++i) {
    if (i > 0) {
      ASSERT_TRUE(q[i] == q[i - 1] || q[i] == q[i - 1] + 1);
    }
    sums[q[i]] += many[i];
  }
  for (uint64_t s : sums) EXPECT_NEAR(static_cast<double>(s), total / 10.0, 20.0);
}

std::vector<ManifestShard> Shards() {
  std::vector<ManifestShard> s;
  for (int i = 5; i >= 0; --i) {  // unsorted on purpose
    ManifestShard m;
    m.name = "shard-0" + std::to_string(i) + ".tfrecord";
    m.records = 3 + i;
    m.bytes = 1000 + i;
    m.crc32c = 0xabc00000u + i;
    s.push_back(m);
  }
  return s;
}

TEST(Manifest, BuildSerializeParseRoundTrip) {
  absl::StatusOr<Manifest> m = BuildManifest("tfrecord", Shards(), 3);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->num_partitions, 3u);
  EXPECT_EQ(m->num_samples, 3u + 4 + 5 + 6 + 7 + 8);
  EXPECT_EQ(m->shards[0].name, "shard-00.tfrecord");
  EXPECT_EQ(m->shards[2].first_sample, 7u);
  EXPECT_EQ(m->partition_start.front(), 0u);
  EXPECT_EQ(m->partition_start.back(), m->num_samples);
  const std::string text = SerializeManifest(*m);
  EXPECT_NE(text.find("shard 0 3 1000 abc00000 shard-00.tfrecord\n"), std::string::npos)
      << text;
  absl::StatusOr<Manifest> back = ParseManifest(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->hash, m->hash);
  EXPECT_EQ(back->hash, Sha256Hex(text));
  EXPECT_EQ(back->partition_start, m->partition_start);
  for (uint64_t id = 0; id < m->num_samples; ++id) {
    const uint32_t p = m->PartitionOf(id);
    EXPECT_GE(id, m->partition_start[p]);
    EXPECT_LT(id, m->partition_start[p + 1]);
  }
  // Any change of content changes the version.
  Manifest other = *m;
  other.shards[1].crc32c ^= 1;
  EXPECT_NE(Sha256Hex(SerializeManifest(other)), m->hash);
}

TEST(Manifest, Sha256KnownAnswer) {
  EXPECT_EQ(Sha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Manifest, ParseRefusesMalformedNamingTheLine) {
  absl::StatusOr<Manifest> m = BuildManifest("tar", Shards(), 2);
  ASSERT_TRUE(m.ok());
  const std::string good = SerializeManifest(*m);
  const auto err = [](const std::string& t) {
    absl::StatusOr<Manifest> r = ParseManifest(t);
    EXPECT_FALSE(r.ok()) << t;
    return r.ok() ? std::string() : std::string(r.status().message());
  };
  EXPECT_NE(err("nearprep-manifest 2\n" + good.substr(good.find('\n') + 1)).find("line 1"),
            std::string::npos);
  std::string bad_samples = good;
  bad_samples.replace(bad_samples.find("samples 33"), 10, "samples 34");
  EXPECT_NE(err(bad_samples).find("samples"), std::string::npos);
  std::string bad_crc = good;
  bad_crc.replace(bad_crc.find("abc00000"), 8, "abc0000z");
  EXPECT_NE(err(bad_crc).find("line 5"), std::string::npos);
  EXPECT_FALSE(err(good.substr(0, good.size() - 1)).empty());  // no final newline
  EXPECT_FALSE(BuildManifest("tfrecord", {}, 4).ok());
  std::vector<ManifestShard> dup = Shards();
  dup[1].name = dup[0].name;
  EXPECT_FALSE(BuildManifest("tfrecord", dup, 4).ok());
}

TEST(Manifest, DigestsLineRoundTripsAndIsPartOfTheVersion) {
  absl::StatusOr<Manifest> m = BuildManifest("tar", Shards(), 2);
  ASSERT_TRUE(m.ok());
  const std::string plain = SerializeManifest(*m);
  Manifest d = *m;
  d.digests_sha256 = std::string(64, 'a');
  d.digests_file = "m.digests";
  const std::string text = SerializeManifest(d);
  // The line sits right after `samples`, before the first shard.
  EXPECT_NE(text.find("samples 33\ndigests sha256 " + std::string(64, 'a') +
                      " m.digests\nshard 0 "),
            std::string::npos)
      << text;
  absl::StatusOr<Manifest> back = ParseManifest(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->digests_sha256, d.digests_sha256);
  EXPECT_EQ(back->digests_file, "m.digests");
  EXPECT_EQ(back->shards.size(), m->shards.size());
  EXPECT_NE(back->hash, Sha256Hex(plain));
  // Malformed: an upper-case or short hash, another algorithm, a path.
  for (const std::string& line :
       {"digests sha256 " + std::string(64, 'A') + " m.digests",
        "digests sha256 " + std::string(63, 'a') + " m.digests",
        "digests md5 " + std::string(64, 'a') + " m.digests",
        "digests sha256 " + std::string(64, 'a') + " ../m.digests",
        "digests sha256 " + std::string(64, 'a')}) {
    std::string bad = text;
    const size_t at = bad.find("digests ");
    bad.replace(at, bad.find('\n', at) - at, line);
    absl::StatusOr<Manifest> r = ParseManifest(bad);
    ASSERT_FALSE(r.ok()) << line;
    EXPECT_NE(r.status().message().find("line 5"), absl::string_view::npos) << r.status();
  }
}

TEST(Manifest, SampleDigestFileIsCheckedForItsSampleCount) {
  const std::string body(3 * kSampleDigestBytes, '\x5a');
  absl::StatusOr<std::string> ok = ParseSampleDigests(SampleDigestsHeader(3) + body, 3);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, body);
  EXPECT_FALSE(ParseSampleDigests(SampleDigestsHeader(3) + body, 4).ok());
  EXPECT_FALSE(ParseSampleDigests(SampleDigestsHeader(3) + body.substr(1), 3).ok());
  EXPECT_FALSE(ParseSampleDigests("nearprep-digests 1 md5 3\n" + body, 3).ok());
  uint8_t abc[32];
  Sha256(reinterpret_cast<const uint8_t*>("abc"), 3, abc);
  EXPECT_EQ(abc[0], 0xba);
  EXPECT_EQ(abc[31], 0xad);
}

}  // namespace
}  // namespace nearprep::fleet
