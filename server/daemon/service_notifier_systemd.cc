// ServiceNotifier over libsystemd's sd_notify (built when libsystemd is
// found; see CMakeLists.txt).
#include <systemd/sd-daemon.h>

#include <cstdint>
#include <cstdlib>

#include "server/daemon/service_notifier.h"

namespace nearprep {
namespace {

class SystemdNotifier : public ServiceNotifier {
 public:
  SystemdNotifier() {
    uint64_t usec = 0;
    // > 0: WATCHDOG_USEC is set (and WATCHDOG_PID, if set, is us).
    if (sd_watchdog_enabled(/*unset_environment=*/0, &usec) > 0) {
      interval_ = std::chrono::microseconds(usec);
    }
  }
  void Notify(const std::string& state) override {
    (void)sd_notify(/*unset_environment=*/0, state.c_str());
  }
  std::chrono::microseconds WatchdogInterval() const override {
    return interval_;
  }
  bool active() const override { return true; }

 private:
  std::chrono::microseconds interval_{0};
};

}  // namespace

std::unique_ptr<ServiceNotifier> CreateServiceNotifier() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  if (socket == nullptr || *socket == '\0') {
    return NullServiceNotifier();
  }
  return std::make_unique<SystemdNotifier>();
}

}  // namespace nearprep
