// The StreamBatches reactor over real gRPC, with a slow fake backend so that
// the call ends while the server waits for the pipeline (a Next is pending):
// the client's cancellation and the daemon's drain deadline must both end
// the call once, with the right status, and release the stream.
#include <chrono>
#include <memory>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "gtest/gtest.h"
#include "nearprep/v1/nearprep.grpc.pb.h"
#include "server/service/server.h"
#include "tests/integration/test_util.h"
#include "tests/unit/pipeline/fake_backend.h"

namespace nearprep {
namespace {

using testing_util::BasicRequest;
using testing_util::Connect;

class StreamReactorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(testing_internal::MakeDummyDataset(dir_.path(), 16, 2), nullptr);
    backend_ = std::make_shared<testing_internal::FakeBackend>();
    backend_->SetDelayUs(5000);  // 5 to 20 ms per sample
    ServerOptions o;
    DatasetConfig d;
    d.name = "d";
    d.root = dir_.path();
    o.datasets = {d};
    o.pipeline.workers = 2;
    o.pipeline.chunk_size = 1;
    auto s = NearprepServer::Create(o, backend_);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    ASSERT_TRUE(server_->Start("127.0.0.1", 0).ok());
    stub_ = v1::Preprocessor::NewStub(Connect(server_->BoundPort()));
  }

  uint64_t ActiveStreams() {
    grpc::ClientContext ctx;
    v1::ServerInfo info;
    EXPECT_TRUE(stub_->GetServerInfo(&ctx, {}, &info).ok());
    return info.counters().streams_active();
  }

  testing_common::TempDir dir_{"reactor"};
  std::shared_ptr<testing_internal::FakeBackend> backend_;
  std::unique_ptr<NearprepServer> server_;
  std::unique_ptr<v1::Preprocessor::Stub> stub_;
};

TEST_F(StreamReactorTest, ClientCancelWhileTheServerWaitsEndsTheCall) {
  for (int i = 0; i < 6; ++i) {
    grpc::ClientContext ctx;
    // A batch of 8 takes at least 20 ms on two workers: nothing is ready
    // when the client gives up, so the server's Next is pending.
    auto reader = stub_->StreamBatches(&ctx, BasicRequest("d", 8));
    std::this_thread::sleep_for(std::chrono::milliseconds(2 * i));
    ctx.TryCancel();
    v1::Batch b;
    while (reader->Read(&b)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ActiveStreams() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(ActiveStreams(), 0u);
  // And the server still serves whole streams.
  auto r = testing_util::ReadAll(stub_.get(), BasicRequest("d", 8));
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.batches.size(), 2u);
}

TEST_F(StreamReactorTest, DrainDeadlineEndsAWaitingStreamWithUnavailable) {
  grpc::ClientContext ctx;
  auto reader = stub_->StreamBatches(&ctx, BasicRequest("d", 16));
  // Wait until the stream is running on the server (its Next pending).
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (backend_->processed() == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GT(backend_->processed(), 0u);
  server_->Shutdown(std::chrono::milliseconds(0));
  v1::Batch b;
  EXPECT_FALSE(reader->Read(&b));  // 16 samples take >= 40 ms
  grpc::Status st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE)
      << st.error_code() << " " << st.error_message();
  EXPECT_EQ(st.error_message(), "server shutting down");
}

}  // namespace
}  // namespace nearprep
