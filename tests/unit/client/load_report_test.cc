// The pieces of `nearprep load` that need no daemon: the --verify check on
// synthetic deliveries (it must fail when it should), percentiles, Jain's
// index, stall attribution, the timeline and its PNG.
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "cli/contact_sheet.h"
#include "cli/load_report.h"
#include "cli/load_verify.h"
#include "cli/stall_report.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace nearprep {
namespace {

// ---- VerifyDelivery -------------------------------------------------------

EpochDelivery Deliver(const std::vector<uint64_t>& received,
                      const std::vector<uint64_t>& skipped,
                      uint64_t end_position) {
  EpochDelivery d;
  d.received = received;
  d.skipped = skipped;
  d.end_position = end_position;
  return d;
}

TEST(VerifyDeliveryTest, PassesWhenEveryIdArrivesOnceInShardOrder) {
  const std::vector<uint64_t> shard = {7, 2, 9, 4, 0};
  const VerifyResult r = VerifyDelivery(shard, Deliver({7, 2, 9, 4, 0}, {}, 5),
                                        /*whole_shard=*/true);
  EXPECT_TRUE(r.ok) << r.detail;
  EXPECT_EQ(r.expected, 5u);
  EXPECT_EQ(r.delivered, 5u);
  EXPECT_TRUE(r.detail.empty());
}

TEST(VerifyDeliveryTest, SkippedSamplesCountAsDelivered) {
  const std::vector<uint64_t> shard = {7, 2, 9, 4, 0};
  const VerifyResult r =
      VerifyDelivery(shard, Deliver({7, 9, 0}, {2, 4}, 5), true);
  EXPECT_TRUE(r.ok) << r.detail;
}

TEST(VerifyDeliveryTest, FailsOnAMissingId) {
  const std::vector<uint64_t> shard = {7, 2, 9, 4, 0};
  const VerifyResult r = VerifyDelivery(shard, Deliver({7, 2, 4, 0}, {}, 5), true);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.missing, 1u);
  EXPECT_NE(r.detail.find("1 missing (first: 9 (position 2))"), std::string::npos)
      << r.detail;
}

TEST(VerifyDeliveryTest, FailsOnADuplicate) {
  const std::vector<uint64_t> shard = {7, 2, 9, 4, 0};
  // 9 twice (once as an image, once as skipped): still a duplicate.
  const VerifyResult r =
      VerifyDelivery(shard, Deliver({7, 2, 9, 4, 0}, {9}, 5), true);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.duplicated, 1u);
  EXPECT_EQ(r.missing, 0u);
  EXPECT_NE(r.detail.find("duplicated (first: 9)"), std::string::npos);
}

TEST(VerifyDeliveryTest, FailsOnAnIdOfAnotherShard) {
  const std::vector<uint64_t> shard = {7, 2, 9};
  const VerifyResult r = VerifyDelivery(shard, Deliver({7, 2, 9, 5}, {}, 3), true);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.unexpected, 1u);
  EXPECT_NE(r.detail.find("not in the shard (first: 5)"), std::string::npos);
}

TEST(VerifyDeliveryTest, FailsOutOfShardOrder) {
  const std::vector<uint64_t> shard = {7, 2, 9, 4};
  const VerifyResult r = VerifyDelivery(shard, Deliver({7, 9, 2, 4}, {}, 4), true);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.out_of_order, 1u);
  EXPECT_EQ(r.missing + r.duplicated + r.unexpected, 0u);
}

TEST(VerifyDeliveryTest, PartialStreamIsCheckedUpToItsEndPosition) {
  const std::vector<uint64_t> shard = {7, 2, 9, 4, 0, 1};
  // max_batches / drop_remainder: the first 4 positions were consumed.
  EXPECT_TRUE(VerifyDelivery(shard, Deliver({7, 2, 4}, {9}, 4), false).ok);
  // ... but a gap inside them is still a failure,
  const VerifyResult gap = VerifyDelivery(shard, Deliver({7, 2, 4}, {}, 4), false);
  EXPECT_FALSE(gap.ok);
  EXPECT_EQ(gap.missing, 1u);
  // ... and the same delivery for a whole-shard request misses the tail.
  const VerifyResult whole =
      VerifyDelivery(shard, Deliver({7, 2, 4}, {9}, 4), true);
  EXPECT_FALSE(whole.ok);
  EXPECT_EQ(whole.missing, 2u);
}

TEST(VerifyDeliveryTest, ExpectedShardsPartitionTheEpoch) {
  // The plan's shards of one (seed, epoch) together hold every id once.
  const uint64_t n = 103;
  std::vector<int> count(n, 0);
  for (uint32_t k = 0; k < 4; ++k) {
    for (uint64_t id : ExpectedShard(n, 99, 3, true, k, 4)) ++count[id];
  }
  for (uint64_t id = 0; id < n; ++id) EXPECT_EQ(count[id], 1) << id;
  // Unshuffled shard k of m: ids k, k+m, ...
  EXPECT_EQ(ExpectedShard(10, 1, 0, false, 1, 3),
            (std::vector<uint64_t>{1, 4, 7}));
  // Shuffled orders differ between epochs.
  EXPECT_NE(ExpectedShard(n, 99, 3, true, 0, 1),
            ExpectedShard(n, 99, 4, true, 0, 1));
}

// ---- Percentile, Jain -----------------------------------------------------

TEST(LoadStatsTest, NearestRankPercentiles) {
  std::vector<double> v(1000);
  std::iota(v.begin(), v.end(), 1.0);  // 1..1000, shuffled below.
  std::reverse(v.begin(), v.end());
  EXPECT_EQ(Percentile(v, 50), 500);
  EXPECT_EQ(Percentile(v, 90), 900);
  EXPECT_EQ(Percentile(v, 99), 990);
  EXPECT_EQ(Percentile(v, 99.9), 999);
  EXPECT_EQ(Percentile(v, 100), 1000);
  EXPECT_EQ(Percentile(v, 0), 1);
  EXPECT_EQ(Percentile({3.0, 1.0}, 50), 1.0);
  EXPECT_EQ(Percentile({}, 50), 0.0);
}

TEST(LoadStatsTest, JainIndex) {
  EXPECT_DOUBLE_EQ(JainIndex({5, 5, 5, 5}), 1.0);
  EXPECT_DOUBLE_EQ(JainIndex({8, 0, 0, 0}), 0.25);
  // (1+2+3)^2 / (3 * 14)
  EXPECT_DOUBLE_EQ(JainIndex({1, 2, 3}), 36.0 / 42.0);
}

// ---- Stall attribution ----------------------------------------------------

BatchRecord Batch(double t, double wait, uint64_t read, uint64_t decode,
                  uint64_t transform, uint64_t queue, uint32_t images = 8) {
  BatchRecord b;
  b.t_s = t;
  b.wait_s = wait;
  b.read_us = read;
  b.decode_us = decode;
  b.transform_us = transform;
  b.queue_wait_us = queue;
  b.images = images;
  return b;
}

TEST(StallReportTest, WaitWithAQueuedBatchIsTheTransport) {
  std::array<double, kNumStallStages> by{};
  // Waited 10 ms; the batch sat ready in the queue for 30 ms.
  AttributeWait(Batch(1, 0.010, 100, 800, 100, 30000), &by);
  EXPECT_DOUBLE_EQ(by[kStageQueueNetwork], 0.010);
  EXPECT_EQ(by[kStageRead] + by[kStageDecode] + by[kStageTransform], 0.0);
}

TEST(StallReportTest, WaitOnProductionSplitsByWorkerTime) {
  std::array<double, kNumStallStages> by{};
  // Waited 20 ms, 4 ms of it with the batch already queued; the other
  // 16 ms split 10/70/20.
  AttributeWait(Batch(1, 0.020, 1000, 7000, 2000, 4000), &by);
  EXPECT_NEAR(by[kStageQueueNetwork], 0.004, 1e-12);
  EXPECT_NEAR(by[kStageRead], 0.0016, 1e-12);
  EXPECT_NEAR(by[kStageDecode], 0.0112, 1e-12);
  EXPECT_NEAR(by[kStageTransform], 0.0032, 1e-12);
}

TEST(StallReportTest, BoundStageAndComputeBoundTrainer) {
  // Read-heavy batches, trainer waits half of its 1 s.
  std::vector<BatchRecord> io = {Batch(0.3, 0.25, 9000, 500, 500, 0),
                                 Batch(0.6, 0.25, 9000, 500, 500, 0)};
  StallSummary s = AnalyzeStalls(io, 1.0);
  EXPECT_DOUBLE_EQ(s.stall_fraction, 0.5);
  EXPECT_EQ(s.bound_stage, kStageRead);
  EXPECT_EQ(s.Bound(), "read");
  // The same batches with a 1 ms wait over 1 s: compute-bound.
  std::vector<BatchRecord> fed = {Batch(0.3, 0.0005, 9000, 500, 500, 0),
                                  Batch(0.6, 0.0005, 9000, 500, 500, 0)};
  s = AnalyzeStalls(fed, 1.0);
  EXPECT_LT(s.stall_fraction, kStallNegligible);
  EXPECT_EQ(s.Bound(), "none (compute-bound)");
}

TEST(StallReportTest, TimelineBinsThroughputAndStall) {
  // One trainer running 0..2 s: 16 images in the first second, waiting the
  // whole first second; 8 images in the second, waiting 0.25 s.
  std::vector<BatchRecord> b = {Batch(0.5, 0.5, 1, 1, 1, 0, 8),
                                Batch(1.0, 0.5, 1, 1, 1, 0, 8),
                                Batch(1.75, 0.25, 1, 1, 1, 0, 8)};
  std::vector<TrainerSpan> spans = {{0.0, 2.0, &b}};
  std::vector<TimelineBin> t = BuildTimeline(spans, 2.0, 1.0);
  ASSERT_EQ(t.size(), 2u);
  // Arrival at exactly 1.0 s lands in the second bin.
  EXPECT_DOUBLE_EQ(t[0].images_per_s, 8);
  EXPECT_DOUBLE_EQ(t[1].images_per_s, 16);
  EXPECT_DOUBLE_EQ(t[0].stall_fraction, 1.0);
  EXPECT_DOUBLE_EQ(t[1].stall_fraction, 0.25);
  // A second, idle trainer over the second half halves that bin's stall.
  std::vector<BatchRecord> none;
  spans.push_back({1.0, 2.0, &none});
  t = BuildTimeline(spans, 2.0, 1.0);
  EXPECT_DOUBLE_EQ(t[1].stall_fraction, 0.125);
}

TEST(StallReportTest, PlotIsAPng) {
  testing_common::TempDir dir("stall_plot");
  std::vector<TimelineBin> t(30);
  for (size_t i = 0; i < t.size(); ++i) {
    t[i].start_s = i * 0.5;
    t[i].images_per_s = 100 + 10 * i;
    t[i].stall_fraction = i % 2 ? 0.8 : 0.1;
  }
  const std::string path = dir.path() + "/plot.png";
  ASSERT_TRUE(WriteStallPlot(path, t, 0.5, "TEST").ok());
  absl::StatusOr<RgbImage> img = ReadPng(path);
  ASSERT_TRUE(img.ok()) << img.status();
  EXPECT_GT(img->width, 400);
  // Both series are drawn: blue and red pixels exist.
  int blue = 0, red = 0;
  for (int y = 0; y < img->height; ++y) {
    for (int x = 0; x < img->width; ++x) {
      const uint8_t* p = img->at(y, x);
      blue += p[0] == 31 && p[1] == 119 && p[2] == 180;
      red += p[0] == 214 && p[1] == 39 && p[2] == 40;
    }
  }
  EXPECT_GT(blue, 100);
  EXPECT_GT(red, 100);
  EXPECT_FALSE(WriteStallPlot(path, {}, 0.5, "EMPTY").ok());
}

// ---- Summary --------------------------------------------------------------

TEST(LoadSummaryTest, FairnessErrorsAndExitStatus) {
  std::vector<StreamRecord> r(3);
  for (int i = 0; i < 3; ++i) {
    r[i].index = i;
    r[i].start_s = 0;
    r[i].end_s = 2;
    r[i].images = 100 * (i + 1);
    r[i].first_batch_s = 0.1 * (i + 1);
    r[i].inter_batch_s = {0.01 * (i + 1)};
  }
  LoadSummary s = Summarize(r, 2.0, /*verify=*/true);
  EXPECT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s.images_per_s, 300);
  EXPECT_DOUBLE_EQ(s.stream_ips_min, 50);
  EXPECT_DOUBLE_EQ(s.stream_ips_median, 100);
  EXPECT_DOUBLE_EQ(s.stream_ips_max, 150);
  EXPECT_DOUBLE_EQ(s.jain_index, 36.0 / 42.0);
  EXPECT_NEAR(s.ttfb_p50_ms, 200, 1e-9);
  EXPECT_NEAR(s.inter_batch_ms[4], 30, 1e-9);

  r[1].status_code = "RESOURCE_EXHAUSTED";
  r[2].verify_failures = {"epoch 0: 1 missing"};
  s = Summarize(r, 2.0, true);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.stream_errors.at("RESOURCE_EXHAUSTED"), 1u);
  EXPECT_EQ(s.verify_failures, 1u);
  const nlohmann::json j = ReportJson(s, r);
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["stream_errors"]["RESOURCE_EXHAUSTED"], 1);
  EXPECT_EQ(j["per_stream"].size(), 3u);
  EXPECT_NE(ReportText(s, r).find("1 FAILED"), std::string::npos);
  // Nothing received is a failure too.
  EXPECT_FALSE(Summarize({}, 1.0, false).ok());
}

}  // namespace
}  // namespace nearprep
