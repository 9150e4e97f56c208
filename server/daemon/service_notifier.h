// Tells the service manager (systemd, Type=notify) what the daemon is doing:
// READY=1 once it listens, WATCHDOG=1 while the serving loop answers, and
// STOPPING=1 when it starts draining. The sd_notify protocol stays behind
// this interface so that a build without libsystemd (or a daemon started
// outside systemd: no $NOTIFY_SOCKET) gets a notifier that does nothing.
//
// Thread-safety: Notify may be called from any thread.
#ifndef NEARPREP_SERVER_DAEMON_SERVICE_NOTIFIER_H_
#define NEARPREP_SERVER_DAEMON_SERVICE_NOTIFIER_H_

#include <chrono>
#include <memory>
#include <string>

namespace nearprep {

class ServiceNotifier {
 public:
  virtual ~ServiceNotifier() = default;
  // Sends newline-separated assignments ("READY=1\nSTATUS=...").
  // Failures are ignored: the service manager notices missing messages.
  virtual void Notify(const std::string& state) = 0;
  // How often the manager expects WATCHDOG=1 (WatchdogSec=); zero when it
  // does not watch this process.
  virtual std::chrono::microseconds WatchdogInterval() const = 0;
  // True when messages go somewhere (a systemd notify socket).
  virtual bool active() const = 0;
};

// systemd's notifier when built with libsystemd and $NOTIFY_SOCKET is set;
// otherwise one that does nothing.
std::unique_ptr<ServiceNotifier> CreateServiceNotifier();

// A notifier that does nothing.
std::unique_ptr<ServiceNotifier> NullServiceNotifier();

}  // namespace nearprep

#endif  // NEARPREP_SERVER_DAEMON_SERVICE_NOTIFIER_H_
