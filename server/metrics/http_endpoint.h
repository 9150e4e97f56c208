// MetricsHttpServer: nearprepd's plain-HTTP side door for operators, on its
// own port (--metrics-listen), served by cpp-httplib (Debian's
// libcpp-httplib-dev) on a small thread pool of its own:
//   GET /metrics   the registry in the Prometheus text format
//   GET /healthz   liveness: "ok" while the process serves HTTP at all
//   GET /          a two-line index
// Anything else is 404. It knows nothing of gRPC or of what the collectors
// read; the gRPC health service stays the readiness signal (it turns
// NOT_SERVING while draining, /healthz does not: a draining daemon is alive).
//
// Thread-safety: Start, BoundPort and Stop may be called from any thread;
// Start once. Requests are served on the server's own threads.
#ifndef NEARPREP_SERVER_METRICS_HTTP_ENDPOINT_H_
#define NEARPREP_SERVER_METRICS_HTTP_ENDPOINT_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/metrics/registry.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace nearprep {
namespace metrics {

// A HOST:PORT address: "0.0.0.0:9464", "127.0.0.1:0", "[::]:9464",
// ":9464" (all IPv4 addresses).
struct HostPort {
  std::string host;
  int port = 0;
};
// INVALID_ARGUMENT naming `field` when `text` is not HOST:PORT with a port
// in [0, 65535].
absl::StatusOr<HostPort> ParseHostPort(const std::string& text,
                                       const std::string& field);

class MetricsHttpServer {
 public:
  // `registry` outlives the server.
  explicit MetricsHttpServer(const MetricsRegistry* registry);
  ~MetricsHttpServer();  // Stop()
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Binds host:port (port 0: a free one) and serves on a background thread.
  // UNAVAILABLE when the address cannot be bound (no SO_REUSEPORT: a port
  // in use is an error, not a shared port).
  absl::Status Start(const std::string& host, int port);
  int BoundPort() const { return port_.load(); }
  // Stops listening and joins the serving thread. Idempotent.
  void Stop();

 private:
  const MetricsRegistry* const registry_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<int> port_{0};
};

}  // namespace metrics
}  // namespace nearprep

#endif  // NEARPREP_SERVER_METRICS_HTTP_ENDPOINT_H_
