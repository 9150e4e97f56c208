// A fleet dataset with a placement (DatasetConfig::placement / node,
// server/data/dataset_manifest.cc): the daemon reports what the placement
// assigns it next to what it holds, serves only what it holds, and refuses
// at open a placement for another manifest, a node the placement does not
// name, or one of the two keys without the other.
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nearprep/v1/tf_example.pb.h"
#include "server/data/dataset.h"
#include "server/fleet/manifest.h"
#include "server/fleet/placement.h"
#include "server/records/tfrecord.h"
#include "server/storage/mem_storage.h"

namespace nearprep {
namespace {

struct Fleet {
  std::shared_ptr<MemStorage> storage = std::make_shared<MemStorage>();
  fleet::Manifest manifest;
};

// 8 shards of 3 records, 4 partitions of 2 shards; every shard present.
Fleet Build() {
  Fleet f;
  std::vector<fleet::ManifestShard> shards;
  for (int s = 0; s < 8; ++s) {
    std::string shard;
    for (int r = 0; r < 3; ++r) {
      tfexample::Example ex;
      auto& feat = *ex.mutable_features()->mutable_feature();
      feat["image/encoded"].mutable_bytes_list()->add_value(std::string(50 + r, 'x'));
      feat["image/class/label"].mutable_int64_list()->add_value(r);
      records::AppendTfRecord(ex.SerializeAsString(), &shard);
    }
    fleet::ManifestShard m;
    m.name = "part-" + std::to_string(s) + ".tfrecord";
    m.records = 3;
    m.bytes = shard.size();
    shards.push_back(m);
    f.storage->AddFile(m.name, std::move(shard));
  }
  absl::StatusOr<fleet::Manifest> m = fleet::BuildManifest("tfrecord", shards, 4);
  EXPECT_TRUE(m.ok()) << m.status();
  f.manifest = *m;
  f.storage->AddFile("MANIFEST", fleet::SerializeManifest(*m));
  return f;
}

DatasetConfig Config(const std::string& placement, const std::string& node) {
  DatasetConfig c;
  c.name = "fleet";
  c.format = "tfrecord";
  c.manifest = "MANIFEST";
  c.shard_pattern = "*.tfrecord";
  c.placement = placement;
  c.node = node;
  return c;
}

TEST(PlacementDatasetTest, ReportsAssignedNextToHeld) {
  Fleet f = Build();
  absl::StatusOr<fleet::Placement> p =
      fleet::ComputePlacement(f.manifest.hash, 4, {"a", "b", "c"}, 2, 5);
  ASSERT_TRUE(p.ok()) << p.status();
  f.storage->AddFile("PLACEMENT", fleet::SerializePlacement(*p));
  const std::vector<uint32_t> assigned = *p->PartitionsOf("b");
  ASSERT_FALSE(assigned.empty());
  // Drop one shard of the first assigned partition: it is then missing.
  const uint32_t gone = assigned.front();
  f.storage->RemoveFile(f.manifest.shards[f.manifest.partition_shard[gone]].name);
  absl::StatusOr<std::unique_ptr<Dataset>> d = Dataset::Open(Config("PLACEMENT", "b"), f.storage);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_NE((*d)->placement(), nullptr);
  EXPECT_EQ((*d)->placement()->version, 5u);
  EXPECT_EQ((*d)->partitions_assigned(), assigned);
  EXPECT_EQ((*d)->partitions_missing(), std::vector<uint32_t>{gone});
  // What is held is what the files give: every partition but `gone`, the
  // placement notwithstanding (partitions not assigned are still served).
  std::vector<uint32_t> held;
  for (uint32_t q = 0; q < 4; ++q) {
    if (q != gone) held.push_back(q);
  }
  EXPECT_EQ((*d)->partitions_held(), held);
  EXPECT_FALSE((*d)->Holds(f.manifest.partition_start[gone]));
}

TEST(PlacementDatasetTest, WithoutAPlacementNothingIsAssigned) {
  Fleet f = Build();
  absl::StatusOr<std::unique_ptr<Dataset>> d = Dataset::Open(Config("", ""), f.storage);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->placement(), nullptr);
  EXPECT_TRUE((*d)->partitions_assigned().empty());
  EXPECT_TRUE((*d)->partitions_missing().empty());
  EXPECT_EQ((*d)->partitions_held().size(), 4u);
}

TEST(PlacementDatasetTest, RefusesAPlacementThatDoesNotFit) {
  Fleet f = Build();
  absl::StatusOr<fleet::Placement> good =
      fleet::ComputePlacement(f.manifest.hash, 4, {"a", "b"}, 1, 1);
  absl::StatusOr<fleet::Placement> other =
      fleet::ComputePlacement(std::string(64, 'e'), 4, {"a", "b"}, 1, 1);
  ASSERT_TRUE(good.ok() && other.ok());
  f.storage->AddFile("GOOD", fleet::SerializePlacement(*good));
  f.storage->AddFile("OTHER", fleet::SerializePlacement(*other));
  f.storage->AddFile("BROKEN", "nearprep-placement 1\nversion 0\n");
  struct Case {
    DatasetConfig config;
    std::string expected;
  };
  DatasetConfig no_manifest = Config("GOOD", "a");
  no_manifest.manifest.clear();
  const Case cases[] = {
      {Config("OTHER", "a"), "dataset 'fleet': placement: OTHER is for manifest eeee"},
      {Config("GOOD", "z"), "dataset 'fleet': node: 'z' is not in placement GOOD (version 1; "
                            "nodes: a, b)"},
      {Config("GOOD", ""), "dataset 'fleet': node: required with placement"},
      {Config("", "a"), "dataset 'fleet': placement: required with node"},
      {Config("MISSING", "a"), "dataset 'fleet': placement: MISSING"},
      {Config("BROKEN", "a"), "placement: BROKEN: placement line 2"},
      {no_manifest, "dataset 'fleet': placement: only with manifest"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expected);
    absl::StatusOr<std::unique_ptr<Dataset>> d = Dataset::Open(c.config, f.storage);
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(d.status().message().find(c.expected), std::string::npos) << d.status();
  }
  // The message for another manifest names both hashes.
  absl::StatusOr<std::unique_ptr<Dataset>> d = Dataset::Open(Config("OTHER", "a"), f.storage);
  EXPECT_NE(d.status().message().find(f.manifest.hash), std::string::npos) << d.status();
}

}  // namespace
}  // namespace nearprep
