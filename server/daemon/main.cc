// nearprepd: the nearprep daemon. Parses the config (daemon_config.h),
// opens the datasets and the backend, serves nearprep.v1.Preprocessor until
// SIGTERM or SIGINT, then drains streams for --drain-seconds, cancels the
// rest and exits 0. Under systemd (Type=notify) it reports READY=1 once it
// listens, WATCHDOG=1 while the gRPC port accepts and the server answers
// (WatchdogSec=) and
// STOPPING=1 when it starts draining. Exit status 2: bad flags or configuration (including a
// dataset that cannot be opened or a backend that cannot start); 1: the
// address (gRPC or --metrics-listen) cannot be bound or a port file cannot
// be written.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/daemon/backend_choice.h"
#include "server/daemon/daemon_config.h"
#include "server/daemon/service_notifier.h"
#include "server/daemon/watchdog_loop.h"
#include "server/metrics/http_endpoint.h"
#include "server/metrics/process_metrics.h"
#include "server/metrics/registry.h"
#include "server/service/server.h"
#include "server/service/server_metrics.h"

namespace {

// Writes the port to `path` atomically (temp file + rename), so a reader
// never sees a partial number.
absl::Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    out.flush();
    if (!out) return absl::UnavailableError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::UnavailableError("cannot rename " + tmp + " to " + path);
  }
  return absl::OkStatus();
}

// Raises the soft descriptor limit to the hard one: every connection is a
// descriptor, and the listeners' caps follow the soft limit
// (server/service/connection_listener.h). Under the systemd unit both are
// LimitNOFILE= already; where setrlimit is refused, the caps follow the
// limit as it is.
void RaiseDescriptorLimit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) {
    return;
  }
  const rlim_t before = rl.rlim_cur;
  rl.rlim_cur = rl.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) {
    spdlog::warn("descriptor limit: cannot raise the soft limit {} to the "
                 "hard limit {}: {}",
                 before, rl.rlim_max, std::strerror(errno));
    return;
  }
  spdlog::info("descriptor limit: soft limit raised from {} to {}", before,
               rl.rlim_max);
}

}  // namespace

int main(int argc, char** argv) {
  // Block the termination signals in every thread (gRPC's and the pool's
  // threads inherit the mask); the main thread takes them with sigwait.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigset_t blocked = signals;  // SIGHUP too: taken by the loop below.
  sigaddset(&blocked, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &blocked, nullptr);

  nearprep::CommandLine cl = nearprep::ParseCommandLine(argc, argv);
  if (cl.exit_now) {
    (cl.exit_code == 0 ? std::cout : std::cerr) << cl.message << std::endl;
    return cl.exit_code;
  }
  for (const std::string& w : cl.warnings) {
    std::cerr << "nearprepd: warning: " << w << std::endl;
  }
  const nearprep::DaemonConfig& config = cl.config;
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] [nearprepd] %v");
  RaiseDescriptorLimit();

  // The backend first: choosing it is this program's wiring (cpu, fpga or
  // auto, with the reason shown in ServerInfo.backend_detail).
  std::string backend_why;
  auto backend = nearprep::CreateBackend(config.backend, &backend_why);
  if (!backend.ok()) {
    std::cerr << "nearprepd: bad configuration: " << backend.status().message()
              << std::endl;
    return 2;
  }
  auto server = nearprep::NearprepServer::Create(
      config.server, std::move(backend).value(), backend_why);
  if (!server.ok()) {
    std::cerr << "nearprepd: bad configuration: " << server.status().message()
              << std::endl;
    return 2;
  }
  if (absl::Status st = (*server)->Start(config.listen_address, config.port);
      !st.ok()) {
    // A TLS file that cannot be used is a configuration error (exit 2);
    // a port that cannot be bound is a run-time one (exit 1).
    if (absl::IsInvalidArgument(st)) {
      std::cerr << "nearprepd: bad configuration: " << st.message()
                << std::endl;
      return 2;
    }
    std::cerr << "nearprepd: " << st.message() << std::endl;
    return 1;
  }
  if (!config.port_file.empty()) {
    if (absl::Status st =
            WritePortFile(config.port_file, (*server)->BoundPort());
        !st.ok()) {
      std::cerr << "nearprepd: --port-file: " << st.message() << std::endl;
      (*server)->Shutdown(std::chrono::milliseconds(0));
      return 1;
    }
  }

  // Metrics over HTTP (--metrics-listen): the registry reads the server's
  // counters at scrape time. Declared after the server, so destroyed first.
  nearprep::metrics::MetricsRegistry registry;
  nearprep::metrics::MetricsHttpOptions metrics_options;
  metrics_options.log_warning = [](const std::string& m) {
    spdlog::warn("{}", m);
  };
  nearprep::metrics::MetricsHttpServer metrics_http(&registry,
                                                    metrics_options);
  if (!config.metrics_listen.empty()) {
    nearprep::NearprepServer* s = server->get();
    registry.AddCollector(
        [s](std::vector<nearprep::metrics::MetricFamily>* out) {
          nearprep::CollectServerMetrics(*s, out);
        });
    registry.AddCollector(&nearprep::metrics::CollectProcessMetrics);
    // Runs on metrics_http's own thread, during its scrapes.
    registry.AddCollector(
        [&metrics_http](std::vector<nearprep::metrics::MetricFamily>* out) {
          metrics_http.Collect(out);
        });
    // Validated with the configuration: parses.
    const nearprep::metrics::HostPort hp =
        *nearprep::metrics::ParseHostPort(config.metrics_listen,
                                          "metrics.listen");
    absl::Status st = metrics_http.Start(hp.host, hp.port);
    if (st.ok() && !config.metrics_port_file.empty()) {
      st = WritePortFile(config.metrics_port_file, metrics_http.BoundPort());
    }
    if (!st.ok()) {
      std::cerr << "nearprepd: " << st.message() << std::endl;
      (*server)->Shutdown(std::chrono::milliseconds(0));
      return 1;
    }
    spdlog::info("metrics on http://{}:{}/metrics", hp.host,
                 metrics_http.BoundPort());
  }

  std::unique_ptr<nearprep::ServiceNotifier> notifier =
      nearprep::CreateServiceNotifier();
  notifier->Notify(absl::StrCat("READY=1\nSTATUS=serving on port ",
                                (*server)->BoundPort()));
  nearprep::WatchdogLoop watchdog(
      notifier.get(), [&server](std::chrono::milliseconds timeout) {
        return (*server)->CheckServing(timeout);
      });

  int sig = 0;
  for (;;) {
    sigwait(&blocked, &sig);
    if (sig != SIGHUP) break;
    // Streams already open keep running; new calls see the new policy.
    if (absl::Status st = nearprep::ReloadAuthorization(
            config.config_file, &(*server)->authorizer());
        st.ok()) {
      spdlog::info("SIGHUP: authorization policy reloaded from {}",
                   config.config_file);
    } else {
      spdlog::error("SIGHUP: authorization policy NOT reloaded, the previous "
                    "one stays in force: {}", std::string(st.message()));
    }
  }
  notifier->Notify("STOPPING=1\nSTATUS=draining streams");
  watchdog.Stop();
  spdlog::info("{} received: draining streams for up to {} s",
               sig == SIGTERM ? "SIGTERM" : "SIGINT", config.drain_seconds);
  // A second signal while draining stops at once.
  std::thread second([signals]() mutable {
    int again = 0;
    sigwait(&signals, &again);
    spdlog::warn("second signal: exiting without draining");
    std::_Exit(130);
  });
  second.detach();
  (*server)->Shutdown(std::chrono::milliseconds(
      static_cast<int64_t>(config.drain_seconds * 1000.0)));
  metrics_http.Stop();  // before the server its collector reads
  server->reset();
  return 0;
}
