// NearprepServer: the daemon's server lifecycle, usable in-process (tests,
// benchmarks) as well as by nearprepd. Modelled on tf.data's server_lib:
//
//   auto server = NearprepServer::Create(options, backend);  // datasets
//   (*server)->Start("127.0.0.1", 0);                // port 0: pick one
//   int port = (*server)->BoundPort();
//   ...
//   (*server)->Shutdown(std::chrono::seconds(10));  // drain, then cancel
//
// Shutdown refuses new streams (UNAVAILABLE) while it keeps listening and
// answering unary calls and the health service (NOT_SERVING), lets active
// streams run to their end until the drain deadline, then ends the rest with
// UNAVAILABLE (a nearprep::Client resumes elsewhere) and stops the server.
// gRPC's standard health service (SERVING while up, NOT_SERVING while
// draining) and server reflection are enabled.
//
// Thread-safety: Start, Shutdown and Wait may be called from different
// threads (Shutdown from a signal-watching thread, Wait from main); Start
// once, Shutdown is idempotent.
#ifndef NEARPREP_SERVER_SERVICE_SERVER_H_
#define NEARPREP_SERVER_SERVICE_SERVER_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "server/authz/authorizer.h"
#include "server/authz/policy.h"
#include "server/data/dataset.h"
#include "server/backend/backend.h"
#include "server/pipeline/pipeline.h"
#include "server/service/connection_listener.h"
#include "server/service/request_validation.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace nearprep {

class PreprocessorService;
class ServiceCore;

struct ServerOptions {
  std::vector<DatasetConfig> datasets;
  PipelineOptions pipeline;
  ServiceLimits limits;
  // Optional TLS. Paths of PEM files; all empty = plaintext. cert_file and
  // key_file go together; client_ca_file set = mutual TLS (every client must
  // present a certificate signed by one of these CAs).
  struct TlsOptions {
    std::string cert_file;       // Server certificate chain.
    std::string key_file;        // Its private key.
    std::string client_ca_file;  // Roots for client certificates (mTLS).
  };
  TlsOptions tls;
  // Most connections open on the gRPC port at once (plaintext only:
  // connection_listener.h); 0: derived from the descriptor limit.
  int64_t max_connections = 0;
  // Connections that have not sent the HTTP/2 preface this long after they
  // were accepted are closed (plaintext: connection_listener.h; TLS: gRPC's
  // server handshake timeout). 0: never.
  int64_t handshake_timeout_seconds = 10;
  // Connections from which nothing came for this long are closed (gRPC
  // first closes those without calls gracefully, GOAWAY; the plaintext
  // listener then shuts down any still silent). 0: never.
  int64_t idle_timeout_seconds = 300;
  // Who may read what (server/authz/policy.h; the config's authorization
  // section). Disabled (the default): every caller may do everything.
  authz::PolicyConfig authorization;
  // Memory gRPC itself may use for its buffers (a grpc::ResourceQuota on the
  // server: read buffers, frames being assembled, per-call arenas); near it,
  // gRPC pushes back (smaller reads; at the quota its reclaimers close idle
  // connections and cancel calls) instead of growing, so keep it generous
  // (256M cancelled calls under 64 streams; docs/architecture.md). The
  // batches the pipeline hands to gRPC are counted by the per-stream bound,
  // not here. 0: no quota (gRPC's default: unbounded).
  uint64_t grpc_memory_bytes = uint64_t{1} << 30;
};

class NearprepServer {
 public:
  // Opens every dataset (errors name the dataset), loads the authorization
  // policy (its token file and audit log: errors name the key) and builds the pipeline
  // over `backend` (chosen by the caller: nearprepd with CreateBackend of
  // server/daemon/backend_choice.h, tests and benchmarks directly).
  // `backend_why` says why that backend (ServerInfo.backend_detail; may be
  // empty). Nothing listens yet.
  static absl::StatusOr<std::unique_ptr<NearprepServer>> Create(
      const ServerOptions& options, std::shared_ptr<Backend> backend,
      std::string backend_why = "");
  ~NearprepServer();  // Shutdown with no drain time if still running.
  NearprepServer(const NearprepServer&) = delete;
  NearprepServer& operator=(const NearprepServer&) = delete;

  // Listens on address:port (port 0 picks a free port), with TLS when
  // options.tls.cert_file is set. UNAVAILABLE when the port cannot be bound;
  // INVALID_ARGUMENT naming the file when a TLS file cannot be read, or
  // when only one of cert_file / key_file is set.
  absl::Status Start(const std::string& address, int port);
  // The port actually bound; 0 before Start.
  int BoundPort() const { return bound_port_.load(); }
  // See the header comment. Blocks until the server has stopped.
  void Shutdown(std::chrono::milliseconds drain);
  // Blocks until Shutdown has completed.
  void Wait();
  // For the service manager's watchdog, within `timeout`: first a TCP
  // connection to the listening port that something must accept and look
  // at (ProbeListener, connection_listener.h: a listener that stopped
  // accepting fails it), then a GetServerInfo call through the server's
  // in-process channel (gRPC's serving threads and the service behind
  // them still run). FAILED_PRECONDITION before Start or after Shutdown
  // began; otherwise the first failure. Do not call concurrently with the
  // destructor.
  absl::Status CheckServing(std::chrono::milliseconds timeout);
  // The gRPC port's connections (plaintext: the daemon's own listener and
  // its cap; with TLS gRPC listens itself and this stays all zero).
  ConnectionStats connection_stats() const;

  // The service without gRPC: counters, ServerInfo, live streams
  // (service_core.h; metrics read it).
  ServiceCore& core() { return *core_; }
  // The live policy: nearprepd reloads it on SIGHUP; metrics read its
  // decision counters.
  authz::Authorizer& authorizer() { return *authorizer_; }
  const authz::Authorizer& authorizer() const { return *authorizer_; }
  Pipeline& pipeline() { return *pipeline_; }
  const std::vector<std::unique_ptr<Dataset>>& datasets() const {
    return datasets_;
  }

 private:
  NearprepServer() = default;

  ServerOptions::TlsOptions tls_;
  uint64_t grpc_memory_bytes_ = 0;
  int64_t max_connections_ = 0;
  int64_t handshake_timeout_seconds_ = 0;
  int64_t idle_timeout_seconds_ = 0;
  std::string probe_host_;  // where CheckServing connects
  // Plaintext only; set by Start, stopped by Shutdown before gRPC is.
  std::unique_ptr<ConnectionListener> listener_;

  std::vector<std::unique_ptr<Dataset>> datasets_;
  std::unique_ptr<Pipeline> pipeline_;
  std::unique_ptr<authz::Authorizer> authorizer_;
  std::unique_ptr<ServiceCore> core_;
  std::unique_ptr<PreprocessorService> service_;  // the adapter over core_
  Mutex mu_;
  // Set by Start; once shut_down_ is set it no longer changes (Shutdown then
  // uses it without the lock).
  std::unique_ptr<grpc::Server> server_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int> bound_port_{0};
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_SERVICE_SERVER_H_
