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
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int WatchdogLoop::pings() const {
  std::lock_guard<std::mutex> l(mu_);
  return pings_;
}

void WatchdogLoop::Run(std::chrono::microseconds interval) {
  // Ping at half the interval (systemd's advice); the check gets a quarter.
  const auto period = std::max<std::chrono::microseconds>(
      interval / 2, std::chrono::milliseconds(1));
  const auto timeout = std::max<std::chrono::milliseconds>(
      std::chrono::duration_cast<std::chrono::milliseconds>(interval / 4),
      std::chrono::milliseconds(1));
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    l.unlock();
    const absl::Status st = check_(timeout);
    l.lock();
    if (stop_) break;
    if (st.ok()) {
      notifier_->Notify("WATCHDOG=1");
      ++pings_;
    } else {
      spdlog::warn("watchdog: serving check failed ({}); not pinging",
                   st.ToString());
    }
    cv_.wait_for(l, period, [this] { return stop_; });
  }
}

}  // namespace nearprep
