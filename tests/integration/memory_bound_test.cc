// nearprepd's resident memory against its documented bound, streams x
// prefetch_depth x batch bytes + overhead (docs/architecture.md), under a
// load that would exceed it if batches held by gRPC were not counted: slow
// consumers of large batches, so each stream's daemon side holds its window
// of ready batches plus the batch gRPC is still writing (issue 12, item 2).
//
// The daemon and `nearprep load` run as subprocesses; a thread samples the
// daemon's VmRSS every 10 ms.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/test_util.h"

namespace nearprep {
namespace {

using testing_util::TempDir;

// VmRSS of `pid` in bytes (0 when unreadable).
uint64_t RssBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      uint64_t kb = 0;
      in >> kb;
      return kb * 1024;
    }
    std::string rest;
    std::getline(in, rest);
  }
  return 0;
}

constexpr double kMiB = 1024.0 * 1024.0;

TEST(MemoryBoundTest, DaemonRssStaysWithinTheStreamBound) {
  TempDir data("membound_data");
  // 100 images: five full batches per epoch.
  testing_util::MakeDataset(data.path(), 4, 25, /*with_bad_files=*/false, 3);
  TempDir work("membound_work");
  // 2 streams x depth 2 x (20 x 224 x 224 x 3 float32 = 12.04 MB) = 48.2 MB.
  constexpr int kStreams = 2, kDepth = 2, kBatch = 20, kSide = 224;
  const double batch_bytes = double(kBatch) * kSide * kSide * 3 * 4;
  const double bound = kStreams * kDepth * batch_bytes;
  const std::vector<std::string> args = {
      NEARPREPD_PATH, "--listen", "127.0.0.1", "--port", "0",
      "--port-file", work.path() + "/port", "--log-level", "warn",
      "--dataset", "d=" + data.path(), "--workers", "2",
      "--prefetch-depth", std::to_string(kDepth)};
  int port = 0, exit_code = 0;
  const pid_t pid = testing_util::SpawnAndWaitForPort(
      args, work.path() + "/port", work.path() + "/daemon.log", &port,
      &exit_code);
  ASSERT_GT(pid, 0) << "nearprepd exited with " << exit_code;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const uint64_t idle = RssBytes(pid);
  ASSERT_GT(idle, 0u);

  std::atomic<bool> done{false};
  std::atomic<uint64_t> peak{idle};
  std::thread sampler([&] {
    while (!done.load()) {
      const uint64_t r = RssBytes(pid);
      if (r > peak.load()) peak.store(r);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  // Slow consumers: each sleeps 400 ms after every batch, so the daemon is
  // always ahead and every stream sits at its window.
  const std::string cmd =
      std::string(NEARPREP_CLI_PATH) + " load --quiet --target 127.0.0.1:" +
      std::to_string(port) + " --dataset d --streams " +
      std::to_string(kStreams) + " --slow " + std::to_string(kStreams) +
      " --consumer-delay 400 --duration 4 --ramp-up 0 --height " +
      std::to_string(kSide) + " --width " + std::to_string(kSide) +
      " --batch-size " + std::to_string(kBatch) + " > " + work.path() +
      "/load.out 2>&1";
  const int st = std::system(cmd.c_str());
  done.store(true);
  sampler.join();
  const uint64_t hwm_after = RssBytes(pid);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
      << "nearprep load failed; see " << work.path() << "/load.out";

  const double grew = (double(peak.load()) - double(idle)) / kMiB;
  // Overhead beyond the batches: gRPC's transport buffers for two calls,
  // the workers' decode scratch for 80-pixel images, allocator slack.
  const double slack = 16.0;
  std::printf("daemon RSS: idle %.1f MiB, peak +%.1f MiB (end +%.1f MiB); "
              "bound %.1f MiB + %.0f MiB slack\n",
              idle / kMiB, grew, (double(hwm_after) - double(idle)) / kMiB,
              bound / kMiB, slack);
  EXPECT_LE(grew, bound / kMiB + slack)
      << "the daemon held more than streams x prefetch_depth x batch bytes";
  // The load did fill the windows (else the test proves nothing).
  EXPECT_GE(grew, 0.75 * bound / kMiB);
}

}  // namespace
}  // namespace nearprep
