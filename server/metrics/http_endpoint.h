// MetricsHttpServer: nearprepd's plain-HTTP side door for operators, on its
// own port (--metrics-listen):
//   GET /metrics   the registry in the Prometheus text format
//   GET /healthz   liveness: "ok" while the process serves HTTP at all
//   GET /          a two-line index
// HEAD works on the same paths; anything else is 404, another method 405.
// It knows nothing of gRPC or of what the collectors read; the gRPC health
// service stays the readiness signal (it turns NOT_SERVING while draining,
// /healthz does not: a draining daemon is alive).
//
// A small strict HTTP/1.1 server of our own (cpp-httplib 0.11, Debian's,
// bounded neither the header count nor a request's total time, and queued
// connections without limit behind two threads: issue 23, items 3 and 4).
// One thread runs an epoll loop over non-blocking sockets, so a slow or
// idle client never holds a worker that a scrape needs:
//   - a request's line and headers together are at most max_header_bytes
//     and max_header_lines; beyond either the answer is 431 and the
//     connection closes: memory is bounded by max_connections x
//     max_header_bytes plus the responses being written;
//   - each connection has one deadline for its whole request (not per
//     read), then one for writing the answer; one request per connection
//     (Connection: close);
//   - a connection is accepted once its first bytes arrived (TCP_DEFER_ACCEPT,
//     or after a 2 s grace): silent ones wait in the kernel, not in a slot;
//   - at most max_connections are open; a new one past the cap closes the
//     oldest connection that has not finished sending its request and has
//     been open for at least 500 ms (an idle or trickling one). When there
//     is none (every slot holds a request still on its way, or an answer
//     being written) new connections are not accepted: they wait in the
//     kernel's listen backlog until a slot frees, so a scrape accepted just
//     before its request arrived is never dropped for a newer one (issue 37
//     item 9: 200 scrapers at once lost up to 21 answers). Each closing is
//     counted and logged (at most once per 10 s), each wait counted;
//   - a spare descriptor is kept, so that accept failing with EMFILE closes
//     the waiting connection instead of leaving it in the backlog (and the
//     loop spinning).
//
// Thread-safety: Start, BoundPort and Stop may be called from any thread;
// Start once. stats() and Collect() from any thread, but not concurrently
// with Start or Stop (Collect is meant as a collector of the registry this
// server serves, run on its own thread). Requests are served on the
// server's own thread.
#ifndef NEARPREP_SERVER_METRICS_HTTP_ENDPOINT_H_
#define NEARPREP_SERVER_METRICS_HTTP_ENDPOINT_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/metrics/exposition.h"
#include "server/metrics/registry.h"

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

struct MetricsHttpOptions {
  // Open connections at most (see the header comment).
  int max_connections = 64;
  // From accept to the end of the request's headers.
  std::chrono::milliseconds request_timeout{5000};
  // Writing the answer.
  std::chrono::milliseconds write_timeout{10000};
  // Request line + header lines, bytes and lines.
  size_t max_header_bytes = 16 * 1024;
  int max_header_lines = 100;
  // Where warnings go (the cap reached, accept failing); default stderr.
  std::function<void(const std::string&)> log_warning;
};

// The endpoint's own counters (Collect exports them).
struct MetricsHttpStats {
  int64_t connections_active = 0;
  int64_t connections_limit = 0;
  uint64_t connections_accepted = 0;
  // Closed because of the cap: new ones refused and old ones evicted, and
  // ones accept could not take for want of descriptors.
  uint64_t connections_rejected = 0;
  uint64_t requests_served = 0;
  uint64_t rejected_header_too_large = 0;  // 431
  uint64_t rejected_timeout = 0;           // request or write deadline
  uint64_t rejected_bad_request = 0;       // 400, 405, 505
  // Times the cap made new connections wait in the listen backlog.
  uint64_t accept_waits = 0;
};

class MetricsHttpServer {
 public:
  // `registry` outlives the server.
  explicit MetricsHttpServer(const MetricsRegistry* registry,
                             MetricsHttpOptions options = {});
  ~MetricsHttpServer();  // Stop()
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Binds host:port (port 0: a free one) and serves on a background thread.
  // UNAVAILABLE when the address cannot be bound (no SO_REUSEPORT: a port
  // in use is an error, not a shared port).
  absl::Status Start(const std::string& host, int port);
  int BoundPort() const { return port_.load(); }
  // Stops listening, closes every connection and joins the serving thread.
  // Idempotent.
  void Stop();

  MetricsHttpStats stats() const;
  // Appends nearprep_metrics_http_* families (a collector for the registry
  // this server serves: it runs on the serving thread).
  void Collect(std::vector<MetricFamily>* out) const;

 private:
  class Loop;
  const MetricsRegistry* const registry_;
  const MetricsHttpOptions options_;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
  std::atomic<int> port_{0};
  MetricsHttpStats last_stats_;  // after Stop
};

}  // namespace metrics
}  // namespace nearprep

#endif  // NEARPREP_SERVER_METRICS_HTTP_ENDPOINT_H_
