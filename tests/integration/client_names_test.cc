// File and folder names that are not UTF-8, through nearprep::Client against
// an in-process NearprepServer: ListDatasets and a stream whose batch reports
// such a file must arrive whole, with the display form in the string fields
// and the exact bytes beside them. And a message the reader cannot parse (a
// server that does put invalid UTF-8 into a string field) must be an error
// for the caller that cancels the call, on Next and NextInto alike, never
// the end of the stream.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "nearprep/client.h"
#include "server/backend/cpu_backend.h"
#include "server/service/server.h"
#include "tests/integration/test_util.h"

namespace nearprep {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;
using testing_util::TempDir;

// "caf" + Latin-1 e-acute, and a file name with 0xFF: neither is UTF-8.
const std::string kOddClass = "caf\xe9"s;
const std::string kOddFile = "caf\xe9/bad\xff.jpg"s;

class ClientNamesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Two classes of 3 JPEGs; class_001 renamed to the odd name, plus a
    // non-JPEG with an odd name in it: 6 images, 1 sample that fails.
    testing_util::MakeDataset(dir_.path(), 2, 3, false, 7);
    fs::rename(dir_.dir() / "class_001", dir_.dir() / kOddClass);
    std::ofstream(dir_.dir() / kOddFile) << "not a JPEG at all\n";
    ServerOptions o;
    DatasetConfig d;
    d.name = "odd";
    d.root = dir_.path();
    o.datasets = {d};
    o.pipeline.workers = 2;
    auto s = NearprepServer::Create(o, std::make_shared<CpuBackend>());
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    ASSERT_TRUE(server_->Start("127.0.0.1", 0).ok());
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::milliseconds(0));
  }

  ClientOptions Options() const {
    ClientOptions o;
    o.target = "127.0.0.1:" + std::to_string(server_->BoundPort());
    o.reconnect_deadline = std::chrono::seconds(5);
    return o;
  }

  TempDir dir_{"client_names"};
  std::unique_ptr<NearprepServer> server_;
};

TEST_F(ClientNamesTest, ListDatasetsCarriesDisplayAndExactClassNames) {
  Client client(Options());
  absl::StatusOr<std::vector<v1::DatasetInfo>> ds = client.ListDatasets();
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ(ds->size(), 1u);
  const v1::DatasetInfo& info = (*ds)[0];
  // Sorted by name (bytes): "caf\xe9" before "class_000".
  ASSERT_EQ(info.class_names_size(), 2);
  EXPECT_EQ(info.class_names(0), "caf\\xe9");
  EXPECT_EQ(info.class_names(1), "class_000");
  ASSERT_EQ(info.class_name_bytes_size(), 2);
  EXPECT_EQ(info.class_name_bytes(0), kOddClass);
  EXPECT_EQ(info.class_name_bytes(1), "class_000");
  EXPECT_EQ(info.num_samples(), 7u);
}

TEST_F(ClientNamesTest, StreamWithNonUtf8PathDeliversEveryBatch) {
  for (bool into : {false, true}) {
    SCOPED_TRACE(into ? "NextInto" : "Next");
    Client client(Options());
    v1::StreamBatchesRequest req;
    req.set_dataset("odd");
    req.set_batch_size(2);
    req.mutable_transform()->set_height(8);
    req.mutable_transform()->set_width(8);
    req.mutable_output()->set_dtype(v1::DTYPE_UINT8);
    std::unique_ptr<BatchReader> reader = client.StreamBatches(req);
    v1::Batch batch;
    std::vector<uint8_t> buffer;
    int images = 0;
    std::vector<v1::SampleError> errors;
    for (;;) {
      const bool ok =
          into ? reader->NextInto(&batch,
                                  [&](size_t n) {
                                    buffer.resize(n);
                                    return buffer.data();
                                  })
               : reader->Next(&batch);
      if (!ok) break;
      images += batch.labels_size();
      for (const auto& e : batch.errors()) errors.push_back(e);
    }
    ASSERT_TRUE(reader->status().ok()) << reader->status();
    EXPECT_EQ(images, 6);
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_EQ(errors[0].path(), "caf\\xe9/bad\\xff.jpg");
    EXPECT_EQ(errors[0].path_bytes(), kOddFile);
  }
}

// A server that sends one good batch, then one whose SampleError.path holds
// invalid UTF-8 (C++ serialization only logs that), then more until the
// client cancels.
class BadUtf8Server final : public v1::Preprocessor::Service {
 public:
  std::atomic<bool> cancelled{false};

  // A listing with a class name that is not UTF-8.
  grpc::Status ListDatasets(grpc::ServerContext*,
                            const v1::ListDatasetsRequest*,
                            v1::ListDatasetsResponse* response) override {
    v1::DatasetInfo* d = response->add_datasets();
    d->set_name("any");
    d->add_class_names(kOddClass);
    return grpc::Status::OK;
  }
  grpc::Status GetServerInfo(grpc::ServerContext*,
                             const v1::GetServerInfoRequest*,
                             v1::ServerInfo* info) override {
    info->set_version("fake");
    return grpc::Status::OK;
  }

  grpc::Status StreamBatches(grpc::ServerContext* ctx,
                             const v1::StreamBatchesRequest* req,
                             grpc::ServerWriter<v1::Batch>* writer) override {
    for (uint64_t i = 0; !ctx->IsCancelled(); ++i) {
      v1::Batch b;
      b.set_epoch(req->epoch());
      b.set_batch_index(i);
      b.set_next_position(i + 1);
      if (i == 1) {
        v1::SampleError* e = b.add_errors();
        e->set_path(kOddFile);  // Invalid UTF-8 in a string field.
      }
      if (!writer->Write(b)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(i == 0 ? 0 : 20));
    }
    cancelled = ctx->IsCancelled();
    return grpc::Status::OK;
  }
};

// `service` on a free loopback port; *target gets "127.0.0.1:PORT".
std::unique_ptr<grpc::Server> StartFakeServer(grpc::Service* service,
                                              std::string* target) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  *target = "127.0.0.1:" + std::to_string(port);
  return server;
}

TEST(ClientParseFailureTest, UnparseableMessageIsDataLossAndCancels) {
  for (bool into : {false, true}) {
    SCOPED_TRACE(into ? "NextInto" : "Next");
    BadUtf8Server service;
    ClientOptions o;
    std::unique_ptr<grpc::Server> server = StartFakeServer(&service, &o.target);
    ASSERT_NE(server, nullptr);
    o.reconnect_deadline = std::chrono::seconds(5);
    {
      Client client(o);
      v1::StreamBatchesRequest req;
      req.set_dataset("any");
      req.set_batch_size(1);
      std::unique_ptr<BatchReader> reader = client.StreamBatches(req);
      v1::Batch batch;
      std::vector<uint8_t> buffer;
      auto next = [&]() {
        return into ? reader->NextInto(&batch,
                                       [&](size_t n) {
                                         buffer.resize(n);
                                         return buffer.data();
                                       })
                    : reader->Next(&batch);
      };
      ASSERT_TRUE(next()) << reader->status();
      EXPECT_EQ(batch.batch_index(), 0u);
      EXPECT_FALSE(next());
      EXPECT_EQ(reader->status().code(), absl::StatusCode::kDataLoss)
          << reader->status();
      EXPECT_NE(reader->status().message().find("malformed"),
                std::string::npos)
          << reader->status();
      EXPECT_FALSE(next());  // Stays failed; not a fresh stream.
    }
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!service.cancelled && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(service.cancelled) << "the reader did not cancel the call";
    server->Shutdown(std::chrono::system_clock::now());
  }
}

TEST(ClientParseFailureTest, UnparseableUnaryAnswerIsDataLoss) {
  BadUtf8Server service;
  ClientOptions o;
  std::unique_ptr<grpc::Server> server = StartFakeServer(&service, &o.target);
  ASSERT_NE(server, nullptr);
  Client client(o);
  absl::StatusOr<std::vector<v1::DatasetInfo>> ds = client.ListDatasets();
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kDataLoss) << ds.status();
  EXPECT_NE(ds.status().message().find(
                "malformed nearprep.v1.ListDatasetsResponse"),
            std::string::npos)
      << ds.status();
  // A well-formed answer still arrives through the same path.
  absl::StatusOr<v1::ServerInfo> info = client.Info();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->version(), "fake");
  server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace nearprep
