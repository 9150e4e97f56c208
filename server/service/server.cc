#include "server/service/server.h"

#include <algorithm>
#include <cstdint>
#include <future>
#include <thread>
#include <utility>

#include <grpc/grpc.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/server_posix.h>
#include <spdlog/spdlog.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/pem.h"
#include "server/service/preprocessor_service.h"
#include "server/service/service_core.h"

namespace nearprep {
namespace {

// The listening credentials: insecure when no TLS is configured.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerOptions::TlsOptions& tls) {
  if (tls.cert_file.empty() && tls.key_file.empty() &&
      tls.client_ca_file.empty()) {
    return grpc::InsecureServerCredentials();
  }
  if (tls.cert_file.empty()) {
    return absl::InvalidArgumentError(
        "tls.cert: required when tls.key or tls.client_ca is set");
  }
  if (tls.key_file.empty()) {
    return absl::InvalidArgumentError("tls.key: required with tls.cert");
  }
  absl::StatusOr<std::string> cert = ReadPemFile(tls.cert_file, "tls.cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPemFile(tls.key_file, "tls.key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions o;
  o.pem_key_cert_pairs.push_back({*key, *cert});
  if (!tls.client_ca_file.empty()) {
    absl::StatusOr<std::string> ca =
        ReadPemFile(tls.client_ca_file, "tls.client_ca");
    if (!ca.ok()) return ca.status();
    o.pem_root_certs = *ca;
    o.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  } else {
    o.client_certificate_request = GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
  }
  return grpc::SslServerCredentials(o);
}

}  // namespace

absl::StatusOr<std::unique_ptr<NearprepServer>> NearprepServer::Create(
    const ServerOptions& options, std::shared_ptr<Backend> backend,
    std::string backend_why) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError("NearprepServer: no backend");
  }
  std::unique_ptr<NearprepServer> s(new NearprepServer());
  for (const DatasetConfig& c : options.datasets) {
    for (const auto& d : s->datasets_) {
      if (d->name() == c.name) {
        return absl::InvalidArgumentError(
            absl::StrCat("dataset '", c.name, "' is configured twice"));
      }
    }
    absl::StatusOr<std::unique_ptr<Dataset>> d = Dataset::Open(c);
    if (!d.ok()) {
      if (absl::StrContains(d.status().message(), "'" + c.name + "'")) {
        return d.status();
      }
      return absl::Status(d.status().code(),
                          absl::StrCat("dataset '", c.name, "' (root ", c.root,
                                       "): ", d.status().message()));
    }
    s->datasets_.push_back(std::move(*d));
  }
  const std::string& why = backend_why;
  spdlog::info("backend: {}{}{}", backend->name(), why.empty() ? "" : " (",
               why.empty() ? std::string() : why + ")");
  std::vector<const Dataset*> ptrs;
  std::vector<std::string> names;
  for (const auto& d : s->datasets_) {
    ptrs.push_back(d.get());
    names.push_back(d->name());
  }
  absl::StatusOr<std::unique_ptr<authz::Authorizer>> authorizer =
      authz::Authorizer::Create(options.authorization, std::move(names));
  if (!authorizer.ok()) return authorizer.status();
  s->authorizer_ = std::move(*authorizer);
  if (options.authorization.enabled) {
    spdlog::info("authorization: {} rule(s); whatever no rule allows is denied",
                 options.authorization.rules.size());
  }
  s->pipeline_ = std::make_unique<Pipeline>(options.pipeline, backend);
  s->core_ = std::make_unique<ServiceCore>(std::move(ptrs), s->pipeline_.get(),
                                           options.limits, why);
  s->service_ = std::make_unique<PreprocessorService>(s->core_.get(),
                                                      s->authorizer_.get());
  s->tls_ = options.tls;
  s->grpc_memory_bytes_ = options.grpc_memory_bytes;
  s->max_connections_ = options.max_connections;
  s->handshake_timeout_seconds_ = options.handshake_timeout_seconds;
  s->idle_timeout_seconds_ = options.idle_timeout_seconds;
  return s;
}

NearprepServer::~NearprepServer() {
  Shutdown(std::chrono::milliseconds(0));
  // Order: the gRPC server first (no more callbacks into the service), then
  // the service, the pipeline (joins workers) and the datasets.
  {
    MutexLock l(&mu_);
    server_.reset();
  }
  service_.reset();
  core_.reset();
  pipeline_.reset();
}

absl::Status NearprepServer::Start(const std::string& address, int port) {
  MutexLock l(&mu_);
  if (server_ != nullptr || shut_down_) {
    return absl::FailedPreconditionError("server already started");
  }
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port: must be in [0, 65535], got ", port));
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds =
      MakeServerCredentials(tls_);
  if (!creds.ok()) return creds.status();
  const bool tls = !tls_.cert_file.empty();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const bool ipv6 = address.find(':') != std::string::npos &&
                    address.front() != '[';
  const std::string target = ipv6 ? absl::StrCat("[", address, "]:", port)
                                  : absl::StrCat(address, ":", port);
  int selected = 0;
  if (tls) {
    // gRPC 1.51 takes no accepted TLS socket: its own listener, uncapped
    // (connection_listener.h).
    builder.AddListeningPort(target, *creds, &selected);
  } else {
    // Plaintext: the daemon's own listener (survives EMFILE, caps the
    // connections), bound before gRPC starts so a port in use fails here.
    ConnectionListener::Options lo;
    lo.max_connections = max_connections_;
    lo.handshake_timeout =
        std::chrono::milliseconds(handshake_timeout_seconds_ * 1000);
    lo.idle_timeout = std::chrono::milliseconds(idle_timeout_seconds_ * 1000);
    lo.log_warning = [](const std::string& m) { spdlog::warn("{}", m); };
    absl::StatusOr<std::unique_ptr<ConnectionListener>> listener =
        ConnectionListener::Listen(address, port, std::move(lo));
    if (!listener.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "cannot listen on ", target, " (port ", port,
          " in use by another process, or the address is not available; "
          "to run a second daemon give it another --port): ",
          listener.status().message()));
    }
    listener_ = std::move(*listener);
    selected = listener_->port();
  }
  builder.RegisterService(service_.get());
  // Requests are small; batches may be large (no send limit on the server).
  builder.SetMaxReceiveMessageSize(1 << 20);
  // Clients ping to detect a hung daemon (nearprep::Client every 20 s by
  // default); accept pings down to every 0.5 s, also while a stream is idle
  // (waiting for the client to read), instead of answering GOAWAY
  // "too_many_pings".
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             500);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  // Silent connections (issue 37 item 2). TLS: gRPC's own handshake
  // deadline (default 120 s). Idle: connections without calls get a GOAWAY
  // after idle_timeout (clients reconnect on their next call), and those
  // with calls are pinged often enough that a live client (its transport
  // answers pings) is never idle for the plaintext listener's hard check.
  // Plaintext: the listener closes (and counts) connections that owe the
  // preface, sweeping each second; gRPC's deadline is only a backstop there,
  // set later so that it never takes the listener's place (it closed them
  // first under load, uncounted).
  if (handshake_timeout_seconds_ > 0) {
    const int64_t hs_ms = int64_t{handshake_timeout_seconds_} * 1000;
    builder.AddChannelArgument(
        GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
        static_cast<int>(std::min<int64_t>(
            tls ? hs_ms : 2 * hs_ms + 5000, INT32_MAX)));
  }
  if (idle_timeout_seconds_ > 0) {
    const int idle_ms = static_cast<int>(idle_timeout_seconds_ * 1000);
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, idle_ms);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                               std::max(1000, idle_ms / 3));
  }
  // One port, one daemon: gRPC sets SO_REUSEPORT by default, which lets a
  // second daemon bind the same port and take half of the connections.
  // Without it a port in use fails here (BuildAndStart returns null).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // gRPC's own buffers (not the batches: those count against each stream's
  // per_stream_memory until gRPC releases them) stay under this quota.
  if (grpc_memory_bytes_ > 0) {
    grpc::ResourceQuota quota("nearprepd");
    quota.Resize(static_cast<size_t>(grpc_memory_bytes_));
    builder.SetResourceQuota(quota);
  }
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || selected == 0) {
    server_.reset();
    listener_.reset();
    if (tls) {
      return absl::UnavailableError(absl::StrCat(
          "cannot listen on ", target,
          " (address in use or not available, or tls.cert '", tls_.cert_file,
          "' / tls.key '", tls_.key_file, "' not a valid certificate and "
          "matching private key?)"));
    }
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", target, " (port ", port,
        " in use by another process, or the address is not available; "
        "to run a second daemon give it another --port)"));
  }
  bound_port_ = selected;
  probe_host_ = address;
  if (listener_ != nullptr) {
    grpc::Server* server = server_.get();
    listener_->Start([server](int fd) {
      // gRPC owns the descriptor from here (and closes it).
      grpc::AddInsecureChannelFromFd(server, fd);
    });
  }
  if (auto* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(true);
  }
  const bool loopback = absl::StartsWith(address, "127.") ||
                        address == "::1" || address == "[::1]" ||
                        address == "localhost";
  if (!tls && !loopback) {
    spdlog::warn(
        "serving PLAINTEXT on {}:{}, a non-loopback address: anyone who "
        "reaches this port can read every dataset it may list, and no "
        "client certificate identifies callers; configure tls (and an "
        "authorization section), or listen on 127.0.0.1 behind a "
        "TLS-terminating proxy (docs/operations.md, \"Access control\")",
        address, selected);
  }
  spdlog::info("nearprepd listening on {}:{} ({})", address, selected,
               !tls                            ? "plaintext"
               : tls_.client_ca_file.empty() ? "TLS"
                                             : "TLS, client certificates "
                                               "required");
  return absl::OkStatus();
}

void NearprepServer::Shutdown(std::chrono::milliseconds drain) {
  // server_ no longer changes once shut_down_ is set (Start refuses to run,
  // the destructor resets it after this returns): use it without the lock.
  grpc::Server* server = nullptr;
  {
    MutexLock l(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    if (server_ == nullptr) return;
    server = server_.get();
  }
  const auto deadline = std::chrono::steady_clock::now() + drain;
  StreamRegistry& streams = core_->streams();
  // While the streams drain the server keeps listening: the health service
  // answers NOT_SERVING (load balancers and probes see the drain), new
  // streams are refused with UNAVAILABLE by the registry (clients resume
  // elsewhere), unary calls are answered. Only then does gRPC stop.
  streams.BeginDrain();
  if (auto* health = server->GetHealthCheckService()) {
    health->SetServingStatus(false);
  }
  if (!streams.WaitUntilEmpty(deadline)) {
    spdlog::warn("drain deadline reached; cancelling the remaining streams");
    streams.StopAll(absl::UnavailableError("server shutting down"));
    // Give the UNAVAILABLE statuses a moment to reach the clients.
    streams.WaitUntilEmpty(std::chrono::steady_clock::now() +
                           std::chrono::milliseconds(200));
  }
  // grpc::Server::Shutdown stops listening and blocks until every call is
  // done *and* every client connection is closed, which idle clients never
  // do by themselves; so the remaining connections are closed with
  // grpc_server_cancel_all_calls, repeated until Shutdown returns (it must
  // run after Shutdown has begun, which another thread does).
  // No new connections from here (gRPC's own listener, with TLS, stops in
  // Shutdown below).
  if (listener_ != nullptr) listener_->Stop();
  const auto grpc_deadline =
      std::chrono::system_clock::now() + std::chrono::milliseconds(500);
  std::promise<void> stopped;
  std::future<void> stopped_future = stopped.get_future();
  std::thread stopper([server, grpc_deadline, &stopped] {
    server->Shutdown(grpc_deadline);
    stopped.set_value();
  });
  while (stopped_future.wait_for(std::chrono::milliseconds(50)) !=
         std::future_status::ready) {
    grpc_server_cancel_all_calls(server->c_server());
  }
  stopper.join();
  server->Wait();
  spdlog::info("nearprepd stopped");
}

absl::Status NearprepServer::CheckServing(std::chrono::milliseconds timeout) {
  grpc::Server* server = nullptr;
  {
    MutexLock l(&mu_);
    if (server_ == nullptr || shut_down_) {
      return absl::FailedPreconditionError("not serving");
    }
    server = server_.get();
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (absl::Status st = ProbeListener(probe_host_, bound_port_.load(),
                                      timeout / 2);
      !st.ok()) {
    return st;
  }
  grpc::ChannelArguments args;
  std::unique_ptr<v1::Preprocessor::Stub> stub =
      v1::Preprocessor::NewStub(server->InProcessChannel(args));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   (deadline - std::chrono::steady_clock::now()));
  // The server asking itself: not subject to the authorization policy.
  ctx.AddMetadata(PreprocessorService::kInternalKeyHeader,
                  service_->internal_key());
  v1::GetServerInfoRequest request;
  v1::ServerInfo info;
  const grpc::Status st = stub->GetServerInfo(&ctx, request, &info);
  if (st.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                      absl::StrCat("GetServerInfo: ", st.error_message()));
}

ConnectionStats NearprepServer::connection_stats() const {
  const ConnectionListener* l = listener_.get();
  return l != nullptr ? l->stats() : ConnectionStats{};
}

void NearprepServer::Wait() {
  grpc::Server* server = nullptr;
  {
    MutexLock l(&mu_);
    server = server_.get();
  }
  if (server != nullptr) server->Wait();
}

}  // namespace nearprep
