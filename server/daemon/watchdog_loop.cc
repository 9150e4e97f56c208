#include "server/daemon/watchdog_loop.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace nearprep {

WatchdogLoop::WatchdogLoop(
    ServiceNotifier* notifier,
    std::function<absl::Status(std::chrono::milliseconds)> check)
    : notifier_(notifier), check_(std::move(check)) {
  const std::chrono::microseconds interval = notifier_->WatchdogInterval();
  if (interval.count() > 0) {
    thread_ = std::thread([this, interval] { Run(interval); });
  }
}

void WatchdogLoop::Stop() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

int WatchdogLoop::pings() const {
  MutexLock l(&mu_);
  return pings_;
}

void WatchdogLoop::Run(std::chrono::microseconds interval) {
  // Ping at half the interval (systemd's advice); the check gets a quarter.
  const auto period = std::max<std::chrono::microseconds>(
      interval / 2, std::chrono::milliseconds(1));
  const auto timeout = std::max<std::chrono::milliseconds>(
      std::chrono::duration_cast<std::chrono::milliseconds>(interval / 4),
      std::chrono::milliseconds(1));
  mu_.Lock();
  while (!stop_) {
    mu_.Unlock();
    const absl::Status st = check_(timeout);
    mu_.Lock();
    if (stop_) break;
    if (st.ok()) {
      notifier_->Notify("WATCHDOG=1");
      ++pings_;
    } else {
      spdlog::warn("watchdog: serving check failed ({}); not pinging",
                   st.ToString());
    }
    // Until `period` has passed or Stop() is called.
    const auto until = std::chrono::steady_clock::now() + period;
    while (!stop_ && !cv_.WaitUntil(&mu_, until)) {
    }
  }
  mu_.Unlock();
}

}  // namespace nearprep
