// Tests of the nearprepd executable as a subprocess: --port 0 --port-file,
// exit codes, SIGTERM drain, and a daemon killed (SIGKILL) mid-stream and
// restarted on the same port while nearprep::Client's BatchReader finishes
// the epoch with no sample lost or repeated.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "nearprep/client.h"
#include "tests/integration/test_util.h"

namespace nearprep {
namespace {

using testing_util::Canonical;
using testing_util::TempDir;

// A nearprepd child process.
class Daemon {
 public:
  ~Daemon() { Kill(SIGKILL); }

  // Starts nearprepd with `args` (plus --port-file) and waits until it
  // listens. Returns false if it exited first.
  bool Start(const std::vector<std::string>& args, const std::string& dir) {
    port_file_ = dir + "/port";
    std::vector<std::string> all = {NEARPREPD_PATH, "--port-file", port_file_,
                                    "--listen", "127.0.0.1",
                                    "--log-level", "warn"};
    all.insert(all.end(), args.begin(), args.end());
    int exit_code = 0;
    pid_ = testing_util::SpawnAndWaitForPort(all, port_file_, "", &port_,
                                             &exit_code);
    return pid_ > 0;
  }

  static pid_t Spawn(const std::vector<std::string>& args) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    return pid;
  }

  // Sends `sig` and returns the exit status (or -signal), -1000 on timeout.
  int Kill(int sig, std::chrono::seconds timeout = std::chrono::seconds(20)) {
    if (pid_ <= 0) return -1000;
    ::kill(pid_, sig);
    return WaitExit(timeout);
  }

  int WaitExit(std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        if (WIFEXITED(status)) return WEXITSTATUS(status);
        if (WIFSIGNALED(status)) return -WTERMSIG(status);
        return -999;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return -1000;
  }

  int port() const { return port_; }
  void Signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string port_file_;
};

int RunToExit(const std::vector<std::string>& args) {
  pid_t pid = Daemon::Spawn(args);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class DaemonIntegrationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new TempDir("daemon_data");
    testing_util::MakeDataset(data_->path(), 3, 8, false, 5);
  }
  static void TearDownTestSuite() { delete data_; }
  // nearprepd on the test dataset, one worker, prefetch depth 1, free port.
  void StartSmallDaemon(Daemon* d) {
    ASSERT_TRUE(d->Start({"--dataset", "synth=" + data_->path(), "--workers",
                          "1", "--prefetch-depth", "1", "--port", "0"},
                         work_.path()));
  }
  // 256x256 float32 batches (0.8 MB per image): far more than the transport
  // buffers hold, so a stream is always mid-way when something happens.
  static v1::StreamBatchesRequest LargeRequest(int batch_size) {
    v1::StreamBatchesRequest req =
        testing_util::BasicRequest("synth", batch_size);
    req.mutable_transform()->set_height(256);
    req.mutable_transform()->set_width(256);
    return req;
  }
  // Quick retries and keepalive every 0.5 s with a 0.5 s timeout.
  static ClientOptions FastKeepaliveOptions(int port) {
    ClientOptions opts;
    opts.target = "127.0.0.1:" + std::to_string(port);
    opts.initial_backoff = std::chrono::milliseconds(50);
    opts.max_backoff = std::chrono::milliseconds(200);
    opts.keepalive_time = std::chrono::milliseconds(500);
    opts.keepalive_timeout = std::chrono::milliseconds(500);
    return opts;
  }
  static TempDir* data_;
  TempDir work_{"daemon_work"};
};
TempDir* DaemonIntegrationTest::data_ = nullptr;

TEST_F(DaemonIntegrationTest, BadConfigurationExitsWith2) {
  EXPECT_EQ(RunToExit({NEARPREPD_PATH, "--dataset", "x=/nonexistent/nearprep"}),
            2);
  EXPECT_EQ(RunToExit({NEARPREPD_PATH, "--no-such-flag"}), 2);
  EXPECT_EQ(RunToExit({NEARPREPD_PATH, "--port", "70000", "--dataset",
                       "x=" + data_->path()}),
            2);
  EXPECT_EQ(RunToExit({NEARPREPD_PATH}), 2);  // No dataset.
  const std::string cfg = work_.path() + "/bad.yaml";
  std::ofstream(cfg) << "datasets: [{name: a, root: /a, typo: 1}]\n";
  EXPECT_EQ(RunToExit({NEARPREPD_PATH, "--config", cfg}), 2);
}

TEST_F(DaemonIntegrationTest, ConfigFilePortZeroAndSigtermExitZero) {
  const std::string cfg = work_.path() + "/ok.yaml";
  std::ofstream(cfg) << "port: 7070\npipeline: {workers: 1}\n"
                     << "limits: {max_batch_size: 16}\n"
                     << "datasets: [{name: synth, root: " << data_->path()
                     << "}]\n";
  Daemon d;
  ASSERT_TRUE(d.Start({"--config", cfg, "--port", "0", "--drain-seconds", "5"},
                      work_.path()));
  EXPECT_NE(d.port(), 7070);  // The flag overrides the file.
  Client client({.target = "127.0.0.1:" + std::to_string(d.port())});
  auto info = client.Info();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->limits().max_batch_size(), 16u);
  EXPECT_EQ(info->workers(), 1u);
  auto datasets = client.ListDatasets();
  ASSERT_TRUE(datasets.ok()) << datasets.status();
  ASSERT_EQ(datasets->size(), 1u);
  EXPECT_EQ((*datasets)[0].name(), "synth");
  EXPECT_EQ((*datasets)[0].num_samples(), 24u);
  EXPECT_EQ(d.Kill(SIGTERM), 0);
}

TEST_F(DaemonIntegrationTest, ClientFinishesEpochAcrossKillAndRestart) {
  const std::vector<std::string> args = {
      "--dataset", "synth=" + data_->path(), "--workers", "1",
      "--prefetch-depth", "2"};
  Daemon d;
  ASSERT_TRUE(d.Start(args, work_.path()));
  const int port = d.port();

  // The kill lands mid-stream.
  const v1::StreamBatchesRequest req = LargeRequest(2);

  ClientOptions opts;
  opts.target = "127.0.0.1:" + std::to_string(port);
  opts.reconnect_deadline = std::chrono::seconds(20);
  opts.initial_backoff = std::chrono::milliseconds(50);
  opts.max_backoff = std::chrono::milliseconds(500);
  Client client(opts);
  auto reader = client.StreamBatches(req);
  std::vector<v1::Batch> got;
  v1::Batch b;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(reader->Next(&b)) << reader->status();
    got.push_back(b);
  }
  ASSERT_EQ(d.Kill(SIGKILL), -SIGKILL);
  // Restart on the same port.
  Daemon d2;
  std::vector<std::string> same_port = args;
  same_port.push_back("--port");
  same_port.push_back(std::to_string(port));
  ASSERT_TRUE(d2.Start(same_port, work_.path()));
  ASSERT_EQ(d2.port(), port);
  while (reader->Next(&b)) got.push_back(b);
  ASSERT_TRUE(reader->status().ok()) << reader->status();
  EXPECT_GE(reader->reconnects(), 1);

  ASSERT_EQ(got.size(), 12u);
  std::multiset<uint64_t> ids;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].batch_index(), i);
    for (uint64_t id : got[i].sample_ids()) ids.insert(id);
  }
  ASSERT_EQ(ids.size(), 24u);
  for (uint64_t id = 0; id < 24; ++id) EXPECT_EQ(ids.count(id), 1u);

  // And the bytes are those of an uninterrupted epoch.
  auto ref_reader = client.StreamBatches(req);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(ref_reader->Next(&b)) << ref_reader->status();
    EXPECT_TRUE(Canonical(b) == Canonical(got[i])) << "batch " << i;
  }
  EXPECT_FALSE(ref_reader->Next(&b));
  EXPECT_TRUE(ref_reader->status().ok());
  EXPECT_EQ(d2.Kill(SIGTERM), 0);
}

// Keepalive: a daemon that stops answering (SIGSTOP: the connection stays
// open, nothing is sent) must not block Next() forever: the client's pings
// go unanswered, the connection is declared dead, and the reader gives up at
// its reconnect deadline with UNAVAILABLE.
TEST_F(DaemonIntegrationTest, HungDaemonDoesNotBlockReaderForever) {
  Daemon d;
  StartSmallDaemon(&d);
  ClientOptions opts = FastKeepaliveOptions(d.port());
  opts.reconnect_deadline = std::chrono::seconds(2);
  Client client(opts);
  auto reader = client.StreamBatches(LargeRequest(2));
  v1::Batch b;
  ASSERT_TRUE(reader->Next(&b)) << reader->status();
  d.Signal(SIGSTOP);
  const auto t0 = std::chrono::steady_clock::now();
  // The batches already in transport buffers may still arrive; then Next()
  // must fail rather than hang.
  int more = 0;
  while (reader->Next(&b)) ++more;
  const double waited = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - t0)
                            .count();
  d.Signal(SIGCONT);
  EXPECT_LT(more, 11) << "a stopped daemon cannot have sent the whole epoch";
  EXPECT_EQ(reader->status().code(), absl::StatusCode::kUnavailable)
      << reader->status();
  EXPECT_LT(waited, 15.0);
  EXPECT_EQ(d.Kill(SIGTERM), 0);
}

// A daemon that is slow to answer (paused for 0.5 s before the client's
// first call): the unary call waits for the connection within rpc_timeout
// instead of giving up when the first connection attempt has not seen the
// daemon's HTTP/2 SETTINGS frame after initial_backoff (100 ms).
TEST_F(DaemonIntegrationTest, UnaryCallWaitsForDaemonPausedHalfASecond) {
  Daemon d;
  StartSmallDaemon(&d);
  ClientOptions opts;
  opts.target = "127.0.0.1:" + std::to_string(d.port());
  Client client(opts);  // Connects on the first call.
  d.Signal(SIGSTOP);
  const auto t0 = std::chrono::steady_clock::now();
  std::thread resume([&d] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    d.Signal(SIGCONT);
  });
  absl::StatusOr<std::vector<v1::DatasetInfo>> ds = client.ListDatasets();
  const double waited = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - t0)
                            .count();
  resume.join();
  ASSERT_TRUE(ds.ok()) << ds.status() << " after " << waited << " s";
  ASSERT_EQ(ds->size(), 1u);
  EXPECT_EQ((*ds)[0].name(), "synth");
  EXPECT_GE(waited, 0.4);
  EXPECT_EQ(d.Kill(SIGTERM), 0);
}

// A reader slower than keepalive_time + keepalive_timeout (the sync client
// reads the connection only inside Next(), so its pings go unacknowledged
// meanwhile) may see its connection dropped; it must still receive the whole
// epoch, in order, exactly once.
TEST_F(DaemonIntegrationTest, SlowReaderWithShortKeepaliveLosesNothing) {
  Daemon d;
  StartSmallDaemon(&d);
  Client client(FastKeepaliveOptions(d.port()));
  auto reader = client.StreamBatches(LargeRequest(8));
  v1::Batch b;
  std::multiset<uint64_t> ids;
  uint64_t expect_index = 0;
  while (reader->Next(&b)) {
    EXPECT_EQ(b.batch_index(), expect_index++);
    for (uint64_t id : b.sample_ids()) ids.insert(id);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  }
  EXPECT_TRUE(reader->status().ok()) << reader->status();
  EXPECT_EQ(expect_index, 3u);
  ASSERT_EQ(ids.size(), 24u);
  for (uint64_t id = 0; id < 24; ++id) EXPECT_EQ(ids.count(id), 1u);
  EXPECT_EQ(d.Kill(SIGTERM), 0);
}

// Compressed uint8 batches (OutputFormat.compression): the C++ client's two
// receive paths (Next and NextInto) hand out exactly the tensors of the
// uncompressed stream with the same draws, in both layouts and with both
// filters; the daemon advertises the codecs and refuses them for float32.
TEST_F(DaemonIntegrationTest, CompressedStreamsEqualUncompressedOnes) {
  Daemon d;
  StartSmallDaemon(&d);
  Client client({.target = "127.0.0.1:" + std::to_string(d.port())});
  auto info = client.Info();
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->compressions_size(), 2);
  EXPECT_EQ(info->compressions(0), v1::COMPRESSION_DELTA_ZSTD);
  EXPECT_EQ(info->compressions(1), v1::COMPRESSION_GRADIENT_ZSTD);

  for (v1::Layout layout : {v1::LAYOUT_NHWC, v1::LAYOUT_NCHW}) {
    v1::StreamBatchesRequest req = testing_util::BasicRequest("synth", 5);
    req.mutable_transform()->set_width(17);  // odd rows
    req.mutable_output()->set_dtype(v1::DTYPE_UINT8);
    req.mutable_output()->set_layout(layout);
    std::vector<v1::Batch> plain;
    {
      auto reader = client.StreamBatches(req);
      v1::Batch b;
      while (reader->Next(&b)) plain.push_back(b);
      ASSERT_TRUE(reader->status().ok()) << reader->status();
    }
    ASSERT_EQ(plain.size(), 5u);  // 24 samples: 4 x 5 + 4
    for (v1::Compression comp :
         {v1::COMPRESSION_DELTA_ZSTD, v1::COMPRESSION_GRADIENT_ZSTD}) {
      SCOPED_TRACE(::testing::Message() << "layout " << layout << " "
                                        << v1::Compression_Name(comp));
      v1::StreamBatchesRequest creq = req;
      creq.mutable_output()->set_compression(comp);
      auto reader = client.StreamBatches(creq);
      v1::Batch b;
      for (size_t i = 0; i < plain.size(); ++i) {
        ASSERT_TRUE(reader->Next(&b)) << reader->status();
        EXPECT_EQ(b.tensor().compression(), v1::COMPRESSION_NONE);
        EXPECT_TRUE(Canonical(b) == Canonical(plain[i])) << "batch " << i;
      }
      EXPECT_FALSE(reader->Next(&b));
      EXPECT_TRUE(reader->status().ok()) << reader->status();

      // NextInto: one copy of the decoded bytes into caller memory.
      creq.mutable_output()->set_compression_level(5);
      auto into = client.StreamBatches(creq);
      std::string buf;
      for (size_t i = 0; i < plain.size(); ++i) {
        ASSERT_TRUE(into->NextInto(&b, [&buf](size_t n) {
          buf.assign(n, '\0');
          return reinterpret_cast<uint8_t*>(buf.data());
        })) << into->status();
        EXPECT_EQ(buf, plain[i].tensor().data()) << "batch " << i;
        v1::Batch header = plain[i];
        header.mutable_tensor()->clear_data();
        EXPECT_TRUE(Canonical(b) == Canonical(header)) << "batch " << i;
      }
    }
  }
  v1::StreamBatchesRequest bad = testing_util::BasicRequest("synth", 5);
  bad.mutable_output()->set_compression(v1::COMPRESSION_DELTA_ZSTD);
  auto reader = client.StreamBatches(bad);
  v1::Batch b;
  EXPECT_FALSE(reader->Next(&b));
  EXPECT_EQ(reader->status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(reader->status().message().find("output.compression"),
            std::string::npos)
      << reader->status();
  EXPECT_EQ(d.Kill(SIGTERM), 0);
}

}  // namespace
}  // namespace nearprep
