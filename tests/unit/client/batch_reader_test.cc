// BatchReader against an in-process fake Preprocessor service over real
// loopback gRPC: resume after UNAVAILABLE / a vanished server with no batch
// lost or repeated, non-retryable statuses passed through, the reconnect
// deadline respected, out-of-order servers caught.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nearprep/client.h"

namespace nearprep {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Position token the fake server reports: not simply (index+1)*batch_size,
// so the test sees whether the reader passes the token back.
uint64_t TokenAfter(uint64_t batch_index) { return (batch_index + 1) * 10 + 3; }

// A token in the daemon's shape: what the reader reads of it is the last
// two fields (ResumePoint).
std::string FakeToken(uint64_t batch, uint64_t position) {
  return "nearprep-resume-1;dataset=fake;batch=" + std::to_string(batch) +
         ";position=" + std::to_string(position);
}

class FakePreprocessor final : public v1::Preprocessor::Service {
 public:
  uint64_t total_batches = 10;
  // Calls with index < failing_calls end with fail_code after fail_after
  // batches (fail_after_later for calls after the first).
  int failing_calls = 1;
  int fail_after = 3;
  int fail_after_later = -1;  // -1: same as fail_after.
  grpc::StatusCode fail_code = grpc::StatusCode::UNAVAILABLE;
  std::string fail_message = "injected failure";
  // A buggy server: on resume it starts one batch early.
  bool repeat_on_resume = false;
  milliseconds per_batch_delay{0};
  // After this many batches of a call the server goes silent (neither a
  // batch nor a status) until the client cancels: -1 never.
  int stall_after = -1;
  // Batches carry a resume_token (FakeToken), as the daemon's do.
  bool send_tokens = false;

  grpc::Status StreamBatches(grpc::ServerContext* ctx,
                             const v1::StreamBatchesRequest* req,
                             grpc::ServerWriter<v1::Batch>* writer) override {
    int call;
    {
      std::lock_guard<std::mutex> l(mu_);
      call = static_cast<int>(requests_.size());
      requests_.push_back(*req);
      const auto& md = ctx->client_metadata();
      const auto auth = md.find("authorization");
      authorizations_.push_back(
          auth == md.end()
              ? "(none)"
              : std::string(auth->second.data(), auth->second.size()));
    }
    const bool failing = call < failing_calls;
    const int limit =
        call == 0 || fail_after_later < 0 ? fail_after : fail_after_later;
    uint64_t begin = req->start_batch();
    if (repeat_on_resume && begin > 0) --begin;
    uint64_t end = total_batches;
    if (req->max_batches() > 0) {
      end = std::min(end, req->start_batch() + req->max_batches());
    }
    int sent = 0;
    for (uint64_t b = begin; b < end; ++b) {
      if (failing && sent == limit) {
        return grpc::Status(fail_code, fail_message);
      }
      if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
      if (sent == stall_after) {
        while (!ctx->IsCancelled())
          std::this_thread::sleep_for(milliseconds(5));
        return grpc::Status::CANCELLED;
      }
      if (per_batch_delay.count() > 0)
        std::this_thread::sleep_for(per_batch_delay);
      v1::Batch batch;
      batch.set_epoch(req->epoch());
      batch.set_batch_index(b);
      batch.set_next_position(TokenAfter(b));
      if (send_tokens) batch.set_resume_token(FakeToken(b + 1, TokenAfter(b)));
      batch.add_labels(static_cast<int64_t>(b));
      batch.add_sample_ids(b);
      batch.mutable_tensor()->set_data(std::string(1000, static_cast<char>(b)));
      if (!writer->Write(batch)) return grpc::Status::CANCELLED;
      ++sent;
    }
    if (failing && sent == limit) {
      return grpc::Status(fail_code, fail_message + " at the end");
    }
    return grpc::Status::OK;
  }

  std::vector<v1::StreamBatchesRequest> requests() {
    std::lock_guard<std::mutex> l(mu_);
    return requests_;
  }
  // The `authorization` metadata of each call ("(none)" without one).
  std::vector<std::string> authorizations() {
    std::lock_guard<std::mutex> l(mu_);
    return authorizations_;
  }

 private:
  std::mutex mu_;
  std::vector<v1::StreamBatchesRequest> requests_;
  std::vector<std::string> authorizations_;
};

std::unique_ptr<grpc::Server> StartServer(FakePreprocessor* service,
                                          int* port) {
  grpc::ServerBuilder builder;
  const int want = *port;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(want),
                           grpc::InsecureServerCredentials(), port);
  builder.RegisterService(service);
  return builder.BuildAndStart();
}

ClientOptions FastOptions(int port) {
  ClientOptions o;
  o.target = "127.0.0.1:" + std::to_string(port);
  o.initial_backoff = milliseconds(10);
  o.max_backoff = milliseconds(80);
  o.reconnect_deadline = milliseconds(5000);
  return o;
}

v1::StreamBatchesRequest Request() {
  v1::StreamBatchesRequest r;
  r.set_dataset("fake");
  r.set_batch_size(10);
  r.set_epoch(7);
  return r;
}

// Reads to the end; returns the batch indices seen.
std::vector<uint64_t> ReadAll(BatchReader* reader) {
  std::vector<uint64_t> seen;
  v1::Batch b;
  while (reader->Next(&b)) {
    EXPECT_EQ(b.labels_size(), 1);
    EXPECT_EQ(b.tensor().data().size(), 1000u);
    seen.push_back(b.batch_index());
  }
  return seen;
}

std::vector<uint64_t> Range(uint64_t begin, uint64_t end) {
  std::vector<uint64_t> v;
  for (uint64_t i = begin; i < end; ++i) v.push_back(i);
  return v;
}

TEST(BatchReaderTest, ResumesAfterUnavailableWithoutLossOrRepeat) {
  FakePreprocessor fake;
  int port = 0;
  auto server = StartServer(&fake, &port);
  ASSERT_NE(server, nullptr);
  Client client(FastOptions(port));
  auto reader = client.StreamBatches(Request());
  EXPECT_EQ(ReadAll(reader.get()), Range(0, 10));
  EXPECT_TRUE(reader->status().ok()) << reader->status();
  EXPECT_EQ(reader->reconnects(), 1);
  auto reqs = fake.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].start_batch(), 3u);
  EXPECT_EQ(reqs[1].start_position(), TokenAfter(2));
  EXPECT_EQ(reqs[1].max_batches(), 0u);
  EXPECT_EQ(reqs[1].epoch(), 7u);
  EXPECT_EQ(reqs[1].dataset(), "fake");
  server->Shutdown();
}

TEST(BatchReaderTest, ResumeReducesMaxBatchesAndKeepsStartBatch) {
  FakePreprocessor fake;
  fake.fail_after = 2;
  int port = 0;
  auto server = StartServer(&fake, &port);
  Client client(FastOptions(port));
  v1::StreamBatchesRequest req = Request();
  req.set_start_batch(2);
  req.set_start_position(23);
  req.set_max_batches(6);
  auto reader = client.StreamBatches(req);
  EXPECT_EQ(ReadAll(reader.get()), Range(2, 8));
  EXPECT_TRUE(reader->status().ok()) << reader->status();
  auto reqs = fake.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].start_position(), 23u);
  EXPECT_EQ(reqs[1].start_batch(), 4u);
  EXPECT_EQ(reqs[1].start_position(), TokenAfter(3));
  EXPECT_EQ(reqs[1].max_batches(), 4u);
  server->Shutdown();
}

// A stream started from a resume token reconnects with the token of the
// last batch it received, not its own (the daemon refuses a token whose
// batch differs from start_batch).
TEST(BatchReaderTest, ReconnectSendsTheLastBatchsResumeToken) {
  FakePreprocessor fake;
  fake.send_tokens = true;
  int port = 0;
  auto server = StartServer(&fake, &port);
  Client client(FastOptions(port));
  v1::StreamBatchesRequest req = Request();
  // Only the token: the reader starts where it says (batch 2).
  req.set_resume_token(FakeToken(2, TokenAfter(1)));
  auto reader = client.StreamBatches(req);
  EXPECT_EQ(ReadAll(reader.get()), Range(2, 10));
  EXPECT_TRUE(reader->status().ok()) << reader->status();
  auto reqs = fake.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].resume_token(), FakeToken(2, TokenAfter(1)));
  EXPECT_EQ(reqs[0].start_batch(), 2u);
  EXPECT_EQ(reqs[1].start_batch(), 5u);
  EXPECT_EQ(reqs[1].resume_token(), FakeToken(5, TokenAfter(4)));
  server->Shutdown();
}

TEST(BatchReaderTest, ResumePointReadsTheTokensLastTwoFields) {
  uint64_t batch = 0, position = 0;
  ASSERT_TRUE(ResumePoint(FakeToken(7, 61), &batch, &position).ok());
  EXPECT_EQ(batch, 7u);
  EXPECT_EQ(position, 61u);
  for (const char* bad : {"", "12", "x;batch=1", "x;position=3;batch=1",
                          "x;batch=a;position=3", "x;batch=1;y=2;position=3"}) {
    absl::Status st = ResumePoint(bad, &batch, &position);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(std::string(st.message()).rfind("resume_token:", 0), 0u) << st;
  }
}

TEST(BatchReaderTest, SurvivesRepeatedFailuresIncludingEmptyAttempts) {
  FakePreprocessor fake;
  fake.failing_calls = 5;
  fake.fail_after = 2;
  fake.fail_after_later = 0;  // Calls 1..4 fail before sending anything.
  fake.fail_code = grpc::StatusCode::CANCELLED;
  int port = 0;
  auto server = StartServer(&fake, &port);
  Client client(FastOptions(port));
  auto reader = client.StreamBatches(Request());
  EXPECT_EQ(ReadAll(reader.get()), Range(0, 10));
  EXPECT_TRUE(reader->status().ok()) << reader->status();
  EXPECT_EQ(reader->reconnects(), 5);
  auto reqs = fake.requests();
  ASSERT_EQ(reqs.size(), 6u);
  for (size_t i = 1; i < reqs.size(); ++i) {
    EXPECT_EQ(reqs[i].start_batch(), 2u) << "call " << i;
    EXPECT_EQ(reqs[i].start_position(), TokenAfter(1)) << "call " << i;
  }
  server->Shutdown();
}

TEST(BatchReaderTest, NonRetryableStatusIsReturnedAsIs) {
  FakePreprocessor fake;
  fake.fail_code = grpc::StatusCode::INVALID_ARGUMENT;
  fake.fail_after = 2;
  int port = 0;
  auto server = StartServer(&fake, &port);
  Client client(FastOptions(port));
  auto reader = client.StreamBatches(Request());
  EXPECT_EQ(ReadAll(reader.get()), Range(0, 2));
  EXPECT_EQ(reader->status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reader->status().message(), "injected failure");
  EXPECT_EQ(reader->reconnects(), 0);
  EXPECT_EQ(fake.requests().size(), 1u);
  v1::Batch b;
  EXPECT_FALSE(reader->Next(&b));  // Stays finished.
  server->Shutdown();
}

// Retries follow the status code only: a message that reads like a transport
// failure does not make INTERNAL or UNKNOWN retryable (UNAVAILABLE with any
// message is retried: ResumesAfterUnavailableWithoutLossOrRepeat).
TEST(BatchReaderTest, RetryDependsOnTheCodeNotTheMessage) {
  for (const auto& [code, message] :
       {std::pair{grpc::StatusCode::INTERNAL, "Stream removed"},
        std::pair{grpc::StatusCode::UNKNOWN, "Socket closed"},
        std::pair{grpc::StatusCode::INTERNAL, "Connection reset by peer"}}) {
    FakePreprocessor fake;
    fake.fail_code = code;
    fake.fail_message = message;
    fake.fail_after = 2;
    int port = 0;
    auto server = StartServer(&fake, &port);
    Client client(FastOptions(port));
    auto reader = client.StreamBatches(Request());
    EXPECT_EQ(ReadAll(reader.get()), Range(0, 2)) << message;
    EXPECT_EQ(static_cast<int>(reader->status().code()), static_cast<int>(code))
        << reader->status();
    EXPECT_EQ(reader->status().message(), message);
    EXPECT_EQ(reader->reconnects(), 0) << message;
    EXPECT_EQ(fake.requests().size(), 1u) << message;
    server->Shutdown();
  }
}

TEST(BatchReaderTest, NotFoundBeforeAnyBatch) {
  FakePreprocessor fake;
  fake.fail_code = grpc::StatusCode::NOT_FOUND;
  fake.fail_after = 0;
  int port = 0;
  auto server = StartServer(&fake, &port);
  Client client(FastOptions(port));
  auto reader = client.StreamBatches(Request());
  EXPECT_TRUE(ReadAll(reader.get()).empty());
  EXPECT_EQ(reader->status().code(), absl::StatusCode::kNotFound);
  server->Shutdown();
}

TEST(BatchReaderTest, GivesUpAtReconnectDeadline) {
  FakePreprocessor fake;
  fake.failing_calls = 1 << 30;
  fake.fail_after = 1;
  fake.fail_after_later = 0;
  int port = 0;
  auto server = StartServer(&fake, &port);
  ClientOptions o = FastOptions(port);
  o.reconnect_deadline = milliseconds(600);
  o.initial_backoff = milliseconds(20);
  o.max_backoff = milliseconds(100);
  Client client(o);
  auto reader = client.StreamBatches(Request());
  v1::Batch b;
  ASSERT_TRUE(reader->Next(&b));
  const Clock::time_point t0 = Clock::now();
  EXPECT_FALSE(reader->Next(&b));
  const double ms =
      std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_EQ(reader->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_GE(ms, 550.0);
  EXPECT_LT(ms, 3000.0);  // Slack for a loaded CI machine.
  // Backoff 20, 40, 80, 100, 100, ...: a handful of attempts, not a spin.
  const size_t calls = fake.requests().size();
  EXPECT_GE(calls, 4u);
  EXPECT_LE(calls, 12u);
  server->Shutdown();
}

TEST(BatchReaderTest, DeadlineWhenNoServerListens) {
  int port = 0;
  {
    FakePreprocessor fake;
    auto server = StartServer(&fake, &port);  // Find a free port, then close.
    server->Shutdown();
  }
  ClientOptions o = FastOptions(port);
  o.reconnect_deadline = milliseconds(400);
  Client client(o);
  auto reader = client.StreamBatches(Request());
  const Clock::time_point t0 = Clock::now();
  v1::Batch b;
  EXPECT_FALSE(reader->Next(&b));
  const double ms =
      std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_EQ(reader->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(ms, 2000.0);
}

TEST(ValidateTargetTest, RefusesATargetWithoutAUsablePort) {
  for (const char* bad :
       {"", "127.0.0.1", "localhost:", ":7070", "127.0.0.1:0",
        "127.0.0.1:65536", "127.0.0.1:http", "::1", "[::1]", "[::1",
        "dns:///localhost", "ipv4:127.0.0.1:1,127.0.0.2", "unix:"}) {
    const absl::Status st = ValidateTarget(bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument)
        << "'" << bad << "'";
    EXPECT_EQ(st.message().rfind("target: ", 0), 0u) << st;
  }
  for (const char* good :
       {"localhost:7070", "127.0.0.1:1", "[::1]:7070", "node-1.example:65535",
        "dns:///localhost:7070", "dns://8.8.8.8/host:7070",
        "ipv4:127.0.0.1:1,127.0.0.2:2", "ipv6:[::1]:7070", "unix:/tmp/sock",
        "unix-abstract:name"}) {
    EXPECT_TRUE(ValidateTarget(good).ok())
        << good << ": " << ValidateTarget(good);
  }
}

TEST(ValidateTargetTest, ClientWithABadTargetFailsAtOnceNamingIt) {
  ClientOptions o;
  o.target = "127.0.0.1";  // gRPC would dial a default port and retry silently
  Client client(o);
  const Clock::time_point t0 = Clock::now();
  EXPECT_EQ(client.Info().status().code(), absl::StatusCode::kInvalidArgument);
  auto reader = client.StreamBatches(Request());
  v1::Batch b;
  EXPECT_FALSE(reader->Next(&b));
  EXPECT_EQ(reader->status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(reader->status().message().find("has no port"), std::string::npos)
      << reader->status();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
}

TEST(BatchReaderTest, ReportsWhatItWaitsForWhileReconnecting) {
  int port = 0;
  {
    FakePreprocessor fake;
    auto server = StartServer(&fake, &port);  // Find a free port, then close.
    server->Shutdown();
  }
  ClientOptions o = FastOptions(port);
  o.reconnect_deadline = milliseconds(1300);
  o.reconnect_wait_interval = milliseconds(200);
  std::vector<ReconnectWait> waits;
  o.on_reconnect_wait = [&waits](const ReconnectWait& w) {
    waits.push_back(w);
  };
  Client client(o);
  auto reader = client.StreamBatches(Request());
  v1::Batch b;
  EXPECT_FALSE(reader->Next(&b));
  EXPECT_EQ(reader->status().code(), absl::StatusCode::kUnavailable);
  // The final message states the time really spent (not "after 0 ms").
  EXPECT_NE(reader->status().message().find("gave up reconnecting to " +
                                            o.target + " after 1"),
            std::string::npos)
      << reader->status();
  // Once at the start, then about every 200 ms of the 1.3 s.
  ASSERT_GE(waits.size(), 4u);
  EXPECT_LE(waits.size(), 12u);
  for (size_t i = 0; i < waits.size(); ++i) {
    EXPECT_EQ(waits[i].target, o.target);
    EXPECT_EQ(waits[i].reason, "connection refused") << waits[i].status;
    EXPECT_EQ(waits[i].deadline, milliseconds(1300));
    if (i > 0) {
      EXPECT_GE(waits[i].waited, waits[i - 1].waited);
    }
  }
  EXPECT_GE(waits.back().waited, milliseconds(800));
}

TEST(BatchReaderTest, ZeroReconnectDeadlineEndsWithTheFailure) {
  int port = 0;
  {
    FakePreprocessor fake;
    auto server = StartServer(&fake, &port);
    server->Shutdown();
  }
  ClientOptions o = FastOptions(port);
  o.reconnect_deadline = milliseconds(0);
  bool waited = false;
  o.on_reconnect_wait = [&waited](const ReconnectWait&) { waited = true; };
  Client client(o);
  auto reader = client.StreamBatches(Request());
  v1::Batch b;
  EXPECT_FALSE(reader->Next(&b));
  EXPECT_EQ(reader->status().code(), absl::StatusCode::kUnavailable);
  // gRPC's own reason, not "gave up reconnecting after 0 ms".
  EXPECT_EQ(reader->status().message().find("gave up"), std::string::npos)
      << reader->status();
  EXPECT_FALSE(waited);
}

TEST(BatchReaderTest, CancelEndsAWaitForTheConnection) {
  int port = 0;
  {
    FakePreprocessor fake;
    auto server = StartServer(&fake, &port);
    server->Shutdown();
  }
  ClientOptions o = FastOptions(port);
  o.reconnect_deadline = milliseconds(30000);
  o.reconnect_wait_interval = milliseconds(100);
  Client client(o);
  auto reader = client.StreamBatches(Request());
  std::thread canceller([&reader] {
    std::this_thread::sleep_for(milliseconds(300));
    reader->Cancel();
  });
  const Clock::time_point t0 = Clock::now();
  v1::Batch b;
  EXPECT_FALSE(reader->Next(&b));
  canceller.join();
  EXPECT_EQ(reader->status().code(), absl::StatusCode::kCancelled);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
}

TEST(BatchReaderTest, DetectsServerThatRepeatsABatch) {
  FakePreprocessor fake;
  fake.repeat_on_resume = true;
  int port = 0;
  auto server = StartServer(&fake, &port);
  Client client(FastOptions(port));
  auto reader = client.StreamBatches(Request());
  EXPECT_EQ(ReadAll(reader.get()), Range(0, 3));
  EXPECT_EQ(reader->status().code(), absl::StatusCode::kDataLoss);
  server->Shutdown();
}

TEST(BatchReaderTest, ResumesWhenTheServerGoesAwayAndComesBack) {
  FakePreprocessor fake;
  fake.failing_calls = 0;
  fake.total_batches = 30;
  fake.per_batch_delay = milliseconds(15);
  int port = 0;
  auto server = StartServer(&fake, &port);
  ASSERT_NE(server, nullptr);
  ClientOptions o = FastOptions(port);
  Client client(o);
  auto reader = client.StreamBatches(Request());
  std::vector<uint64_t> seen;
  v1::Batch b;
  std::thread restarter;
  std::unique_ptr<grpc::Server> second;
  FakePreprocessor fake2;  // A service object registers with one server.
  fake2.failing_calls = 0;
  fake2.total_batches = 30;
  while (reader->Next(&b)) {
    seen.push_back(b.batch_index());
    if (seen.size() == 5) {
      // Kill the server mid-stream; bring a new one up on the same port
      // 300 ms later.
      server->Shutdown(std::chrono::system_clock::now() + milliseconds(10));
      restarter = std::thread([&] {
        std::this_thread::sleep_for(milliseconds(300));
        int p = port;
        second = StartServer(&fake2, &p);
      });
    }
  }
  restarter.join();
  EXPECT_TRUE(reader->status().ok()) << reader->status();
  EXPECT_EQ(seen, Range(0, 30));
  EXPECT_GE(reader->reconnects(), 1);
  ASSERT_NE(second, nullptr);
  auto reqs = fake2.requests();
  ASSERT_FALSE(reqs.empty());
  // Batches already in flight when the server died count as received.
  EXPECT_GE(reqs[0].start_batch(), 5u);
  EXPECT_LT(reqs[0].start_batch(), 30u);
  EXPECT_EQ(reqs[0].start_position(), TokenAfter(reqs[0].start_batch() - 1));
  second->Shutdown();
}

}  // namespace
}  // namespace nearprep

namespace nearprep {
namespace {

TEST(BatchReaderTest, NextIntoCopiesTensorIntoCallerMemoryAcrossResume) {
  FakePreprocessor fake;  // Fails once after 3 batches: NextInto resumes too.
  int port = 0;
  auto server = StartServer(&fake, &port);
  Client client(FastOptions(port));
  auto reader = client.StreamBatches(Request());
  std::vector<uint64_t> seen;
  std::vector<std::vector<uint8_t>> buffers;
  v1::Batch b;
  while (reader->NextInto(&b, [&](size_t bytes) {
    buffers.emplace_back(bytes, 0xEE);
    return buffers.back().data();
  })) {
    EXPECT_TRUE(b.tensor().data().empty());
    EXPECT_EQ(b.labels(0), static_cast<int64_t>(b.batch_index()));
    ASSERT_EQ(buffers.size(), seen.size() + 1);
    EXPECT_EQ(buffers.back(), std::vector<uint8_t>(
                                  1000, static_cast<uint8_t>(b.batch_index())));
    seen.push_back(b.batch_index());
  }
  EXPECT_TRUE(reader->status().ok()) << reader->status();
  EXPECT_EQ(seen, Range(0, 10));
  EXPECT_EQ(reader->reconnects(), 1);
  server->Shutdown();
}

TEST(BatchReaderTest, NextIntoWithoutMemoryFailsCleanly) {
  FakePreprocessor fake;
  fake.failing_calls = 0;
  int port = 0;
  auto server = StartServer(&fake, &port);
  Client client(FastOptions(port));
  auto reader = client.StreamBatches(Request());
  v1::Batch b;
  EXPECT_FALSE(reader->NextInto(&b, [](size_t) { return nullptr; }));
  EXPECT_EQ(reader->status().code(), absl::StatusCode::kResourceExhausted)
      << reader->status();
  EXPECT_FALSE(reader->Next(&b));
  server->Shutdown();
}

TEST(BatchReaderTest, CancelFromAnotherThreadUnblocksNext) {
  FakePreprocessor fake;
  fake.failing_calls = 0;
  fake.per_batch_delay = milliseconds(3000);
  int port = 0;
  auto server = StartServer(&fake, &port);
  Client client(FastOptions(port));
  auto reader = client.StreamBatches(Request());
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(200));
    reader->Cancel();
  });
  const Clock::time_point start = Clock::now();
  v1::Batch b;
  EXPECT_FALSE(reader->Next(&b));
  canceller.join();
  EXPECT_LT(Clock::now() - start, milliseconds(2500));
  EXPECT_EQ(reader->status().code(), absl::StatusCode::kCancelled)
      << reader->status();
  EXPECT_EQ(reader->reconnects(), 0);
  server->Shutdown();
}

TEST(BatchReaderTest, StreamDeadlineEndsASilentServersCall) {
  FakePreprocessor fake;
  fake.failing_calls = 0;
  fake.stall_after = 2;
  int port = 0;
  auto server = StartServer(&fake, &port);
  Client client(FastOptions(port));
  StreamOptions so;
  so.timeout = milliseconds(700);
  const Clock::time_point t0 = Clock::now();
  auto reader = client.StreamBatches(Request(), so);
  // The deadline is the whole call's: two batches arrive, then silence.
  EXPECT_EQ(ReadAll(reader.get()), Range(0, 2));
  const double ms =
      std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_EQ(reader->status().code(), absl::StatusCode::kDeadlineExceeded)
      << reader->status();
  EXPECT_NE(reader->status().message().find("stream deadline of 700 ms"),
            std::string::npos)
      << reader->status();
  EXPECT_GE(ms, 650.0);
  EXPECT_LT(ms, 2500.0);  // Slack for a loaded CI machine.
  EXPECT_EQ(reader->reconnects(), 0);
  EXPECT_EQ(fake.requests().size(), 1u);  // never retried
  server->Shutdown();
}

TEST(BatchReaderTest, StreamDeadlineCutsReconnectingShort) {
  FakePreprocessor fake;
  fake.failing_calls = 1 << 30;
  fake.fail_after = 1;
  fake.fail_after_later = 0;
  int port = 0;
  auto server = StartServer(&fake, &port);
  ClientOptions o = FastOptions(port);
  o.reconnect_deadline = milliseconds(20000);
  o.initial_backoff = milliseconds(20);
  o.max_backoff = milliseconds(100);
  Client client(o);
  StreamOptions so;
  so.timeout = milliseconds(600);
  const Clock::time_point t0 = Clock::now();
  auto reader = client.StreamBatches(Request(), so);
  v1::Batch b;
  ASSERT_TRUE(reader->Next(&b));
  EXPECT_FALSE(reader->Next(&b));
  const double ms =
      std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_EQ(reader->status().code(), absl::StatusCode::kDeadlineExceeded)
      << reader->status();
  EXPECT_GE(ms, 550.0);
  EXPECT_LT(ms, 3000.0);
  EXPECT_GE(fake.requests().size(), 2u);  // it did retry until then
  server->Shutdown();
}

TEST(BatchReaderTest, ServersDeadlineExceededIsPassedThroughAsIs) {
  FakePreprocessor fake;
  fake.fail_code = grpc::StatusCode::DEADLINE_EXCEEDED;
  fake.fail_message = "the server's own";
  int port = 0;
  auto server = StartServer(&fake, &port);
  Client client(FastOptions(port));
  StreamOptions so;
  so.timeout = milliseconds(60000);
  auto reader = client.StreamBatches(Request(), so);
  EXPECT_EQ(ReadAll(reader.get()), Range(0, 3));
  EXPECT_EQ(reader->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(reader->status().message(), "the server's own");
  server->Shutdown();
}

// Issue 25: the bearer token from bearer_token_file goes with every call,
// the resumed ones included; a bad file or token fails every call with
// INVALID_ARGUMENT naming the file, never echoing the token.
TEST(BearerTokenTest, SentOnEveryCallIncludingResumes) {
  FakePreprocessor fake;
  int port = 0;
  auto server = StartServer(&fake, &port);
  const std::string path = ::testing::TempDir() + "/np_token";
  std::ofstream(path, std::ios::trunc) << "  s3cr3t-Token_1  \nsecond line\n";
  ClientOptions o = FastOptions(port);
  o.bearer_token_file = path;
  Client client(o);
  auto reader = client.StreamBatches(Request());
  EXPECT_EQ(ReadAll(reader.get()), Range(0, 10));
  EXPECT_EQ(reader->reconnects(), 1);  // the fake fails the first call once
  EXPECT_EQ(fake.authorizations(),
            (std::vector<std::string>{"Bearer s3cr3t-Token_1",
                                      "Bearer s3cr3t-Token_1"}));
  Client plain(FastOptions(port));
  auto r2 = plain.StreamBatches(Request());
  ReadAll(r2.get());
  EXPECT_EQ(fake.authorizations().back(), "(none)");
  server->Shutdown();
}

TEST(BearerTokenTest, BadTokenFileOrTokenFailsNamingTheFile) {
  ClientOptions o;
  o.target = "127.0.0.1:1";
  o.bearer_token_file = "/nonexistent/np-token";
  Client missing(o);
  absl::Status st = missing.Info().status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("/nonexistent/np-token"), std::string::npos)
      << st;

  const std::string empty = ::testing::TempDir() + "/np_token_empty";
  std::ofstream(empty, std::ios::trunc) << "\n";
  o.bearer_token_file = empty;
  EXPECT_NE(Client(o).Info().status().message().find("no token"),
            std::string::npos);

  ClientOptions spaced;
  spaced.target = "127.0.0.1:1";
  spaced.bearer_token = "two words";
  st = Client(spaced).Info().status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message().find("two words"), std::string::npos) << st;

  ClientOptions both = spaced;
  both.bearer_token = "t";
  both.bearer_token_file = empty;
  EXPECT_NE(Client(both).Info().status().message().find("not both"),
            std::string::npos);
}

}  // namespace
}  // namespace nearprep
