// `nearprep load` against a real nearprepd on loopback (both as
// subprocesses): --verify over several streams and epochs, --split,
// --duration with slow consumers, streams refused by the daemon's limit,
// the exit statuses, and exactly-once delivery across a daemon killed and
// restarted mid-load (resumes).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_util.h"

namespace nearprep {
namespace {

using testing_util::TempDir;

// nearprepd as a child process on a free (or given) loopback port.
class DaemonProcess {
 public:
  ~DaemonProcess() { Stop(SIGKILL); }
  bool Start(const std::string& dir, std::vector<std::string> args) {
    std::vector<std::string> all = {NEARPREPD_PATH, "--listen", "127.0.0.1",
                                    "--port-file", dir + "/port",
                                    "--log-level", "warn"};
    // A free port unless one is given: the default 7070 is shared
    // (SO_REUSEPORT) with every other daemon on the machine.
    if (std::find(args.begin(), args.end(), "--port") == args.end()) {
      all.insert(all.end(), {"--port", "0"});
    }
    all.insert(all.end(), args.begin(), args.end());
    int exit_code = 0;
    pid_ = testing_util::SpawnAndWaitForPort(all, dir + "/port",
                                             dir + "/daemon.log", &port_,
                                             &exit_code);
    return pid_ > 0;
  }
  void Stop(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

struct LoadRun {
  int exit_code = -1;
  nlohmann::json report;  // null when --json was not written.
  std::string stdout_text, stderr_text;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs `nearprep load ARGS --json DIR/tag.json` and collects what it wrote.
LoadRun RunLoad(const std::string& dir, const std::string& tag,
                const std::string& args) {
  const std::string json = dir + "/" + tag + ".json";
  const std::string cmd = std::string(NEARPREP_CLI_PATH) + " load --quiet " +
                          args + " --json " + json + " > " + dir + "/" + tag +
                          ".out 2> " + dir + "/" + tag + ".err";
  LoadRun r;
  const int st = std::system(cmd.c_str());
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.stdout_text = Slurp(dir + "/" + tag + ".out");
  r.stderr_text = Slurp(dir + "/" + tag + ".err");
  const std::string text = Slurp(json);
  if (!text.empty()) r.report = nlohmann::json::parse(text, nullptr, false);
  return r;
}

class LoadIntegrationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new TempDir("load_data");
    // 3 classes x 8 images, plus bad files (skipped samples).
    testing_util::MakeDataset(data_->path(), 3, 8, /*with_bad_files=*/true, 7);
  }
  static void TearDownTestSuite() { delete data_; }
  std::string Dataset() const { return "--dataset d "; }
  std::vector<std::string> DaemonArgs() const {
    return {"--dataset", "d=" + data_->path(), "--workers", "2"};
  }
  static TempDir* data_;
  TempDir work_{"load_work"};
};
TempDir* LoadIntegrationTest::data_ = nullptr;

constexpr char kSmall[] = " --height 16 --width 16 --batch-size 4 ";

TEST_F(LoadIntegrationTest, VerifiesEveryStreamAndEpoch) {
  DaemonProcess d;
  ASSERT_TRUE(d.Start(work_.path(), DaemonArgs()));
  const LoadRun r = RunLoad(
      work_.path(), "verify",
      "--target " + d.target() + " --dataset d --streams 5 --epochs 2 "
      "--shuffle --seed 11 --verify" + kSmall);
  ASSERT_EQ(r.exit_code, 0) << r.stdout_text << r.stderr_text;
  ASSERT_TRUE(r.report.is_object());
  EXPECT_EQ(r.report["ok"], true);
  EXPECT_EQ(r.report["verify"]["epochs_verified"], 10);
  EXPECT_EQ(r.report["verify"]["failures"], 0);
  EXPECT_EQ(r.report["per_stream"].size(), 5u);
  // Every stream reads the whole dataset: 24 good images per epoch.
  EXPECT_EQ(r.report["images"], 5 * 2 * 24);
  for (const auto& s : r.report["per_stream"]) {
    EXPECT_EQ(s["images"], 2 * 24);
    EXPECT_EQ(s["epochs_completed"], 2);
    EXPECT_EQ(s["status"], "OK");
  }
  EXPECT_TRUE(r.report["stream_errors"].empty());
  // The bad files were skipped and counted by code, every epoch, every stream.
  uint64_t skipped = 0;
  for (const auto& [code, n] : r.report["sample_errors"].items()) {
    skipped += n.get<uint64_t>();
  }
  EXPECT_EQ(skipped, r.report["skipped_samples"].get<uint64_t>());
  EXPECT_GT(skipped, 0u);
  EXPECT_EQ(skipped % 10, 0u);
  EXPECT_GT(r.report["images_per_s"].get<double>(), 0);
  const auto& lat = r.report["inter_batch_latency_ms"];
  EXPECT_LE(lat["p50"].get<double>(), lat["p99"].get<double>());
  EXPECT_LE(lat["p99"].get<double>(), lat["max"].get<double>());
  EXPECT_GT(r.report["fairness"]["jain_index"].get<double>(), 0.2);
  EXPECT_NE(r.stdout_text.find("verify: 10 (stream, epoch) passed"),
            std::string::npos)
      << r.stdout_text;
}

TEST_F(LoadIntegrationTest, SplitStreamsPartitionTheDataset) {
  DaemonProcess d;
  ASSERT_TRUE(d.Start(work_.path(), DaemonArgs()));
  const LoadRun r = RunLoad(work_.path(), "split",
                            "--target " + d.target() +
                                " --dataset d --streams 3 --split --shuffle "
                                "--verify --plot " + work_.path() +
                                "/plot.png" + kSmall);
  ASSERT_EQ(r.exit_code, 0) << r.stdout_text << r.stderr_text;
  EXPECT_EQ(r.report["images"], 24);  // Once over the dataset, together.
  std::vector<std::string> shards;
  for (const auto& s : r.report["per_stream"]) shards.push_back(s["shard"]);
  EXPECT_EQ(shards, (std::vector<std::string>{"0/3", "1/3", "2/3"}));
  EXPECT_TRUE(std::ifstream(work_.path() + "/plot.png").good());
}

TEST_F(LoadIntegrationTest, DurationWithSlowConsumers) {
  DaemonProcess d;
  ASSERT_TRUE(d.Start(work_.path(), DaemonArgs()));
  const auto t0 = std::chrono::steady_clock::now();
  const LoadRun r = RunLoad(work_.path(), "duration",
                            "--target " + d.target() +
                                " --dataset d --streams 4 --duration 2 "
                                "--slow 2 --consumer-delay 200 --ramp-up 0.5" +
                                kSmall);
  const double took = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.exit_code, 0) << r.stdout_text << r.stderr_text;
  EXPECT_GE(r.report["wall_s"].get<double>(), 2.0);
  EXPECT_LT(took, 30.0);
  const auto& s = r.report["per_stream"];
  // Slow consumers (streams 0 and 1) get at most 4 images per 200 ms.
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(s[i]["slow"], true);
    EXPECT_LE(s[i]["images_per_s"].get<double>(), 4 / 0.2 + 1e-6);
  }
  // The fast ones loop over epochs until the time is up.
  for (int i = 2; i < 4; ++i) {
    EXPECT_GT(s[i]["images_per_s"].get<double>(),
              s[0]["images_per_s"].get<double>());
  }
  // Slow consumers barely wait for data; their stall is small.
  EXPECT_LT(s[0]["stall"]["stall_fraction"].get<double>(), 0.5);
}

TEST_F(LoadIntegrationTest, RefusedStreamsMakeTheExitStatusNonZero) {
  DaemonProcess d;
  std::vector<std::string> args = DaemonArgs();
  args.insert(args.end(), {"--max-concurrent-streams", "1"});
  ASSERT_TRUE(d.Start(work_.path(), args));
  // Long streams (slow consumers) so that they overlap.
  const LoadRun r = RunLoad(work_.path(), "refused",
                            "--target " + d.target() +
                                " --dataset d --streams 3 --slow 3 "
                                "--consumer-delay 100" + kSmall);
  EXPECT_EQ(r.exit_code, 1) << r.stdout_text << r.stderr_text;
  EXPECT_EQ(r.report["ok"], false);
  EXPECT_GE(r.report["stream_errors"]["RESOURCE_EXHAUSTED"].get<int>(), 1);
  EXPECT_NE(r.stderr_text.find("FAILED (stream errors)"), std::string::npos);
}

TEST_F(LoadIntegrationTest, BadFlagsAndUnknownDataset) {
  DaemonProcess d;
  ASSERT_TRUE(d.Start(work_.path(), DaemonArgs()));
  const std::string t = "--target " + d.target();
  EXPECT_EQ(RunLoad(work_.path(), "a", t + " --dataset d --streams 2 --slow 3")
                .exit_code, 2);
  EXPECT_EQ(RunLoad(work_.path(), "b", t + " --dataset d --shard 3/2").exit_code,
            2);
  EXPECT_EQ(RunLoad(work_.path(), "c", t + " --dataset d --streams 0").exit_code,
            2);
  EXPECT_EQ(RunLoad(work_.path(), "d", t + " --dataset d --verify "
                                         "--start-batch 2").exit_code, 2);
  const LoadRun unknown = RunLoad(work_.path(), "e", t + " --dataset nope");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.stderr_text.find("no dataset 'nope'"), std::string::npos);
}

TEST_F(LoadIntegrationTest, ExactlyOnceAcrossDaemonRestart) {
  DaemonProcess d;
  std::vector<std::string> args = {"--dataset", "d=" + data_->path(),
                                   "--workers", "1", "--prefetch-depth", "1"};
  ASSERT_TRUE(d.Start(work_.path(), args));
  const int port = d.port();
  // 2 streams x (24 good + bad samples) / 2 per batch, 150 ms per batch:
  // a few seconds, killed after one. Large float batches (6 MB), so
  // HTTP/2 flow control keeps most of the epoch on the daemon's side.
  auto load = std::async(std::launch::async, [&] {
    return RunLoad(work_.path(), "restart",
                   "--target " + d.target() +
                       " --dataset d --streams 2 --shuffle --verify --slow 2 "
                       "--consumer-delay 150 --height 512 --width 512 "
                       "--batch-size 2");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  d.Stop(SIGKILL);
  DaemonProcess d2;
  args.insert(args.end(), {"--port", std::to_string(port)});
  ASSERT_TRUE(d2.Start(work_.path(), args));
  const LoadRun r = load.get();
  ASSERT_EQ(r.exit_code, 0) << r.stdout_text << r.stderr_text;
  EXPECT_GE(r.report["resumes"].get<int>(), 1);
  EXPECT_GE(r.report["reconnects"].get<int>(), r.report["resumes"].get<int>());
  EXPECT_EQ(r.report["verify"]["failures"], 0);
  EXPECT_EQ(r.report["verify"]["epochs_verified"], 2);
  EXPECT_EQ(r.report["images"], 2 * 24);
}

}  // namespace
}  // namespace nearprep
