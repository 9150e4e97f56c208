// nearprepd under a service manager's eyes: the sd_notify messages it sends
// to $NOTIFY_SOCKET (READY=1 once it listens, WATCHDOG=1 at half of
// $WATCHDOG_USEC while it serves, STOPPING=1 on SIGTERM), received here on
// a real AF_UNIX datagram socket; and WatchdogLoop with a fake notifier (no
// ping while the serving check fails).
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/daemon/service_notifier.h"
#include "server/daemon/watchdog_loop.h"
#include "tests/integration/test_util.h"

namespace nearprep {
namespace {

using testing_util::TempDir;

// A bound AF_UNIX datagram socket: the service manager's end.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    bound_ = fd_ >= 0 &&
             ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    timeval tv{0, 200000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~NotifySocket() {
    if (fd_ >= 0) ::close(fd_);
    ::unlink(path_.c_str());
  }
  bool bound() const { return bound_; }
  // Messages received until `pred` holds for one of them or `timeout`.
  template <typename Pred>
  std::vector<std::string> ReceiveUntil(Pred pred,
                                        std::chrono::milliseconds timeout) {
    std::vector<std::string> got;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buf[4096];
    while (std::chrono::steady_clock::now() < deadline) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) continue;
      got.emplace_back(buf, static_cast<size_t>(n));
      if (pred(got.back())) break;
    }
    return got;
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
};

TEST(ServiceNotifyTest, DaemonSendsReadyWatchdogAndStopping) {
  if (!NEARPREP_HAVE_LIBSYSTEMD_TEST) GTEST_SKIP() << "built without libsystemd";
  TempDir dir("notify");
  testing_util::MakeDataset(dir.path() + "/data", 2, 3, false);
  NotifySocket sock(dir.path() + "/notify");
  ASSERT_TRUE(sock.bound());
  ::setenv("NOTIFY_SOCKET", (dir.path() + "/notify").c_str(), 1);
  ::setenv("WATCHDOG_USEC", "400000", 1);  // Ping every 200 ms.
  int port = 0, exit_code = 0;
  const pid_t pid = testing_util::SpawnAndWaitForPort(
      {NEARPREPD_PATH, "--listen", "127.0.0.1", "--port", "0", "--port-file",
       dir.path() + "/port", "--log-level", "warn", "--dataset",
       "d=" + dir.path() + "/data"},
      dir.path() + "/port", "", &port, &exit_code);
  ::unsetenv("NOTIFY_SOCKET");
  ::unsetenv("WATCHDOG_USEC");
  ASSERT_GT(pid, 0) << "exit code " << exit_code;

  std::vector<std::string> got = sock.ReceiveUntil(
      [](const std::string& m) { return absl::StrContains(m, "READY=1"); },
      std::chrono::seconds(10));
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back(),
            "READY=1\nSTATUS=serving on port " + std::to_string(port));
  int pings = 0;
  got = sock.ReceiveUntil(
      [&pings](const std::string& m) { return m == "WATCHDOG=1" && ++pings == 3; },
      std::chrono::seconds(10));
  EXPECT_EQ(pings, 3);

  ::kill(pid, SIGTERM);
  got = sock.ReceiveUntil(
      [](const std::string& m) { return absl::StartsWith(m, "STOPPING=1"); },
      std::chrono::seconds(10));
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back(), "STOPPING=1\nSTATUS=draining streams");
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(ServiceNotifyTest, NoNotifySocketMeansNoNotifier) {
  ::unsetenv("NOTIFY_SOCKET");
  EXPECT_FALSE(CreateServiceNotifier()->active());
  EXPECT_EQ(CreateServiceNotifier()->WatchdogInterval().count(), 0);
}

class FakeNotifier : public ServiceNotifier {
 public:
  explicit FakeNotifier(std::chrono::microseconds interval)
      : interval_(interval) {}
  void Notify(const std::string& state) override {
    std::lock_guard<std::mutex> l(mu_);
    messages_.push_back(state);
  }
  std::chrono::microseconds WatchdogInterval() const override {
    return interval_;
  }
  bool active() const override { return true; }
  std::vector<std::string> messages() {
    std::lock_guard<std::mutex> l(mu_);
    return messages_;
  }

 private:
  std::chrono::microseconds interval_;
  std::mutex mu_;
  std::vector<std::string> messages_;
};

TEST(WatchdogLoopTest, PingsOnlyWhileTheCheckPasses) {
  FakeNotifier n(std::chrono::milliseconds(40));
  std::atomic<bool> healthy{true};
  std::atomic<int> checks{0};
  WatchdogLoop loop(&n, [&](std::chrono::milliseconds timeout) {
    EXPECT_EQ(timeout.count(), 10);
    ++checks;
    return healthy ? absl::OkStatus() : absl::UnavailableError("hung");
  });
  while (loop.pings() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  healthy = false;
  const int before = loop.pings();
  const int checks_before = checks;
  while (checks < checks_before + 3) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // At most one ping whose check had already passed.
  EXPECT_LE(loop.pings(), before + 1);
  loop.Stop();
  const int after_stop = static_cast<int>(n.messages().size());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(static_cast<int>(n.messages().size()), after_stop);
  for (const std::string& m : n.messages()) EXPECT_EQ(m, "WATCHDOG=1");
}

TEST(WatchdogLoopTest, NoThreadWithoutAWatchdog) {
  FakeNotifier n(std::chrono::microseconds(0));
  bool called = false;
  WatchdogLoop loop(&n, [&](std::chrono::milliseconds) {
    called = true;
    return absl::OkStatus();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  loop.Stop();
  EXPECT_FALSE(called);
  EXPECT_TRUE(n.messages().empty());
}

}  // namespace
}  // namespace nearprep
