// StreamRegistry without gRPC: admission, draining, counters and stopping,
// over a real Pipeline with the fake backend.
#include "server/service/stream_registry.h"

#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "gtest/gtest.h"
#include "tests/unit/pipeline/fake_backend.h"

namespace nearprep {
namespace {

class StreamRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ds_ = testing_internal::MakeDummyDataset(40, 2);
    ASSERT_NE(ds_, nullptr);
    backend_ = std::make_shared<testing_internal::FakeBackend>();
    PipelineOptions o;
    o.workers = 2;
    pipeline_ = std::make_unique<Pipeline>(o, backend_);
  }

  StreamRequest Request() const {
    StreamRequest r;
    r.context.source = std::make_shared<const SampleSource>(*ds_);
    r.context.spec.height = 2;
    r.context.spec.width = 2;
    r.context.output.dtype = DType::kUint8;
    r.batch_size = 4;
    return r;
  }

  std::unique_ptr<Dataset> ds_;
  std::shared_ptr<testing_internal::FakeBackend> backend_;
  std::unique_ptr<Pipeline> pipeline_;
};

TEST_F(StreamRegistryTest, AdmitsUpToTheLimitAndCountsLiveStreams) {
  StreamRegistry registry(pipeline_.get(), 2);
  auto a = registry.Open(Request());
  auto b = registry.Open(Request());
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = registry.Open(Request());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(c.status().message(),
            "streams: 2 active, at the server limit max_concurrent_streams = 2");
  EXPECT_EQ(registry.counters().streams_started.load(), 2u);
  EXPECT_EQ(registry.counters().streams_active.load(), 2u);
  registry.Close(*a);
  EXPECT_EQ(registry.counters().streams_active.load(), 1u);
  registry.Close(*a);  // twice: no effect
  EXPECT_EQ(registry.counters().streams_active.load(), 1u);
  EXPECT_TRUE(registry.Open(Request()).ok());  // the slot is free again
  // The closed stream was cancelled.
  EXPECT_EQ((*a)->stream().NextBlocking().status().code(),
            absl::StatusCode::kCancelled);
}

TEST_F(StreamRegistryTest, DrainingRefusesNewStreamsAndWaitsForLiveOnes) {
  StreamRegistry registry(pipeline_.get(), 8);
  auto live = registry.Open(Request());
  ASSERT_TRUE(live.ok());
  EXPECT_FALSE(registry.draining());
  registry.BeginDrain();
  EXPECT_TRUE(registry.draining());
  auto refused = registry.Open(Request());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(registry.counters().streams_started.load(), 1u);
  EXPECT_FALSE(registry.WaitUntilEmpty(std::chrono::steady_clock::now() +
                                       std::chrono::milliseconds(20)));
  auto waiter = std::async(std::launch::async, [&] {
    return registry.WaitUntilEmpty(std::chrono::steady_clock::now() +
                                   std::chrono::seconds(10));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  registry.Close(*live);
  EXPECT_TRUE(waiter.get());
}

TEST_F(StreamRegistryTest, StopAllAnswersPendingNextsAndKeepsTheFirstStatus) {
  backend_->SetDelayUs(20000);  // nothing is ready for a while
  StreamRegistry registry(pipeline_.get(), 8);
  auto entry = registry.Open(Request());
  ASSERT_TRUE(entry.ok());
  auto answer = std::make_shared<std::promise<BatchStream::NextResult>>();
  (*entry)->stream().Next(
      [answer](BatchStream::NextResult r) { answer->set_value(std::move(r)); });
  EXPECT_FALSE((*entry)->stopped());
  registry.StopAll(absl::UnavailableError("server shutting down"));
  (*entry)->Stop(absl::CancelledError("stream cancelled"));  // too late
  auto f = answer->get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(f.get().status().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE((*entry)->stopped());
  EXPECT_EQ((*entry)->stop_status(),
            absl::UnavailableError("server shutting down"));
}

}  // namespace
}  // namespace nearprep
