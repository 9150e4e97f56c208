// ServiceCore without gRPC: what GetServerInfo, ListDatasets and
// StreamBatches answer and count, driven directly (the adapter only parses,
// authorizes and writes), over a real Pipeline with the fake backend.
#include "server/service/service_core.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/pipeline/fake_backend.h"

namespace nearprep {
namespace {

class ServiceCoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ds_ = testing_internal::MakeDummyDataset(40, 2);
    ASSERT_NE(ds_, nullptr);
    PipelineOptions o;
    o.workers = 2;
    o.prefetch_depth = 3;
    pipeline_ = std::make_unique<Pipeline>(
        o, std::make_shared<testing_internal::FakeBackend>());
    limits_.max_batch_size = 100;
    limits_.max_concurrent_streams = 1;
    core_ = std::make_unique<ServiceCore>(
        std::vector<const Dataset*>{ds_.get()}, pipeline_.get(), limits_,
        "chosen by test");
  }

  static v1::StreamBatchesRequest Good() {
    v1::StreamBatchesRequest r;
    r.set_dataset("dummy");
    r.set_batch_size(8);
    r.mutable_transform()->set_height(4);
    r.mutable_transform()->set_width(4);
    r.mutable_output()->set_dtype(v1::DTYPE_UINT8);
    return r;
  }

  v1::ServerInfo Info() const {
    v1::ServerInfo info;
    core_->FillServerInfo(&info);
    return info;
  }

  std::unique_ptr<Dataset> ds_;
  std::unique_ptr<Pipeline> pipeline_;
  ServiceLimits limits_;
  std::unique_ptr<ServiceCore> core_;
};

TEST_F(ServiceCoreTest, ServerInfoDescribesTheDaemon) {
  const v1::ServerInfo info = Info();
  EXPECT_FALSE(info.version().empty());
  EXPECT_EQ(info.backend(), "fake");
  EXPECT_EQ(info.backend_detail(), "chosen by test");
  EXPECT_EQ(info.workers(), 2u);
  EXPECT_EQ(info.limits().max_batch_size(), 100u);
  EXPECT_EQ(info.limits().max_concurrent_streams(), 1u);
  EXPECT_EQ(info.limits().prefetch_depth(), 3u);
  EXPECT_EQ(info.compressions_size(), 2);
  EXPECT_EQ(info.counters().streams_started(), 0u);
  EXPECT_EQ(info.counters().requests_rejected(), 0u);
}

TEST_F(ServiceCoreTest, ListsOnlyWhatTheFilterShows) {
  v1::ListDatasetsResponse all;
  core_->FillDatasetList({}, &all);
  ASSERT_EQ(all.datasets_size(), 1);
  EXPECT_EQ(all.datasets(0).name(), "dummy");
  EXPECT_EQ(all.datasets(0).num_samples(), 40u);
  EXPECT_EQ(all.datasets(0).num_classes(), 2u);
  v1::ListDatasetsResponse none;
  core_->FillDatasetList([](const std::string&) { return false; }, &none);
  EXPECT_EQ(none.datasets_size(), 0);
}

TEST_F(ServiceCoreTest, OpensCountsAndRefuses) {
  // Invalid: refused naming the field, counted as a request error.
  v1::StreamBatchesRequest bad = Good();
  bad.set_batch_size(101);
  auto refused = core_->OpenStream(bad, "peer");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("batch_size"), std::string::npos);
  EXPECT_EQ(core_->counters().requests_rejected.load(), 1u);
  EXPECT_EQ(core_->counters().request_errors.load(), 1u);

  auto opened = core_->OpenStream(Good(), "peer");
  ASSERT_TRUE(opened.ok()) << opened.status();
  ASSERT_NE(opened->dataset, nullptr);
  EXPECT_EQ(opened->dataset->streams_started.load(), 1u);
  EXPECT_EQ(core_->dataset_counters().at("dummy").get(), opened->dataset);

  // max_concurrent_streams = 1: the registry refuses; not a request error.
  auto full = core_->OpenStream(Good(), "peer");
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(core_->counters().requests_rejected.load(), 2u);
  EXPECT_EQ(core_->counters().request_errors.load(), 1u);

  // What the adapter counts for the batches it wrote.
  core_->CountBatchSent(opened->dataset, 1000, 8, 0.01);
  core_->CountBatchSent(opened->dataset, 500, 4, 0.02);
  core_->CountRejected(/*invalid=*/false);
  const v1::ServerInfo info = Info();
  EXPECT_EQ(info.counters().streams_started(), 1u);
  EXPECT_EQ(info.counters().streams_active(), 1u);
  EXPECT_EQ(info.counters().batches_sent(), 2u);
  EXPECT_EQ(info.counters().bytes_sent(), 1500u);
  EXPECT_EQ(info.counters().requests_rejected(), 3u);
  EXPECT_EQ(opened->dataset->batches_sent.load(), 2u);
  EXPECT_EQ(opened->dataset->samples_sent.load(), 12u);
  EXPECT_EQ(opened->dataset->bytes_sent.load(), 1500u);
  EXPECT_EQ(core_->counters().batch_bytes.Value().count, 2u);
  EXPECT_DOUBLE_EQ(core_->counters().send_seconds.Value().sum, 0.03);

  opened->entry->Stop(absl::CancelledError("test"));
  core_->streams().Close(opened->entry);
  EXPECT_EQ(Info().counters().streams_active(), 0u);
}

}  // namespace
}  // namespace nearprep
