// The service manager's watchdog, fed from the serving loop: a thread that,
// every half WatchdogSec, runs a liveness check (NearprepServer::
// CheckServing: a TCP connection through the real gRPC port, then a
// GetServerInfo call through the gRPC server) and sends WATCHDOG=1 only
// when it succeeds. A listener that stopped accepting or a hung gRPC server
// stops the pings, and systemd restarts the daemon after WatchdogSec.
//
// Thread-safety: construct and Stop from one thread; the check runs on the
// loop's own thread.
#ifndef NEARPREP_SERVER_DAEMON_WATCHDOG_LOOP_H_
#define NEARPREP_SERVER_DAEMON_WATCHDOG_LOOP_H_

#include <chrono>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"
#include "server/daemon/service_notifier.h"

namespace nearprep {

class WatchdogLoop {
 public:
  // `check(timeout)` must answer within `timeout`. Starts the thread only
  // when notifier->WatchdogInterval() > 0.
  WatchdogLoop(ServiceNotifier* notifier,
               std::function<absl::Status(std::chrono::milliseconds)> check);
  ~WatchdogLoop() { Stop(); }
  WatchdogLoop(const WatchdogLoop&) = delete;
  WatchdogLoop& operator=(const WatchdogLoop&) = delete;

  // Ends the loop (no more pings); idempotent.
  void Stop();
  // Pings sent so far (tests).
  int pings() const;

 private:
  void Run(std::chrono::microseconds interval);

  ServiceNotifier* notifier_;
  std::function<absl::Status(std::chrono::milliseconds)> check_;
  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int pings_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_DAEMON_WATCHDOG_LOOP_H_
