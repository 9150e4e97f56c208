#include "server/metrics/http_endpoint.h"

#include <sys/socket.h>

#include <cctype>
#include <chrono>
#include <utility>

#include <httplib.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace nearprep {
namespace metrics {

absl::StatusOr<HostPort> ParseHostPort(const std::string& text,
                                       const std::string& field) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": ", why, " (expected HOST:PORT, e.g. 0.0.0.0:9464, "
                          "127.0.0.1:0 or [::]:9464), got '", text, "'"));
  };
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) return bad("no port");
  HostPort hp;
  hp.host = text.substr(0, colon);
  const std::string port = text.substr(colon + 1);
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  } else if (hp.host.find(':') != std::string::npos) {
    return bad("an IPv6 address must be in brackets");
  }
  if (hp.host.empty()) hp.host = "0.0.0.0";
  for (char c : hp.host) {
    if (std::isspace(static_cast<unsigned char>(c))) return bad("space in host");
  }
  int value = 0;
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos ||
      !absl::SimpleAtoi(port, &value) || value > 65535) {
    return bad("port must be a number in [0, 65535]");
  }
  hp.port = value;
  return hp;
}

MetricsHttpServer::MetricsHttpServer(const MetricsRegistry* registry)
    : registry_(registry) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

absl::Status MetricsHttpServer::Start(const std::string& host, int port) {
  if (server_ != nullptr) {
    return absl::FailedPreconditionError("metrics server already started");
  }
  auto server = std::make_unique<httplib::Server>();
  // Two threads are plenty for a scraper or two (httplib's default pool is
  // max(8, cores - 1)).
  server->new_task_queue = [] { return new httplib::ThreadPool(2); };
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, which would let
  // two daemons silently share (and split) one metrics port.
  server->set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server->set_read_timeout(5);
  server->set_write_timeout(5);
  server->set_payload_max_length(4096);  // only GETs here
  const MetricsRegistry* registry = registry_;
  server->Get("/metrics", [registry](const httplib::Request&,
                                     httplib::Response& res) {
    res.set_content(registry->Render(), kContentType);
  });
  server->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain; charset=utf-8");
  });
  server->Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("nearprepd\n/metrics  Prometheus metrics\n/healthz  "
                    "liveness\n",
                    "text/plain; charset=utf-8");
  });
  int bound = -1;
  if (port == 0) {
    bound = server->bind_to_any_port(host);
  } else if (server->bind_to_port(host, port)) {
    bound = port;
  }
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", host, ":", port,
                     " (address in use or not available?)"));
  }
  port_ = bound;
  server_ = std::move(server);
  httplib::Server* s = server_.get();
  thread_ = std::thread([s] { s->listen_after_bind(); });
  // httplib's stop() does nothing until the serving loop has begun: wait
  // for it, so that a Stop right after Start cannot leave the thread
  // serving forever.
  for (int i = 0; i < 5000 && !s->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return absl::OkStatus();
}

void MetricsHttpServer::Stop() {
  if (server_ == nullptr) return;
  server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

}  // namespace metrics
}  // namespace nearprep
