// ConnectionListener: nearprepd's own listening socket for plaintext gRPC,
// and ProbeListener, the watchdog's check that a port still accepts.
//
// Why not gRPC's listener: in gRPC 1.51, one accept4 failing with EMFILE
// ends its listener for good ("Failed accept4: Too many open files", never
// re-armed: the port then only fills its backlog), and 1.51 has no cap on
// incoming connections (GRPC_ARG_MAX_ALLOWED_INCOMING_CONNECTIONS came in a
// later release; its ResourceQuota bounds memory and threads only). So for
// plaintext the daemon accepts itself and hands each connection to gRPC
// (grpc::AddInsecureChannelFromFd, in server.cc: this file has no gRPC):
//   - at most max_connections handed-over connections are open; past the
//     cap a new connection is accepted and closed at once (counted, and
//     logged at most once per 10 s). The cap follows the descriptor limit
//     (RLIMIT_NOFILE, read again at every accept, so `prlimit` on a running
//     daemon moves it), less a reserve for files and the metrics port;
//   - a spare descriptor is held: when accept fails with EMFILE / ENFILE it
//     is closed, the waiting connection is accepted and closed, and the
//     spare is taken again, so the listener never stops and never spins;
//   - gRPC closes the connections it was given without telling us: the
//     listener remembers each one's descriptor and socket inode, and a
//     sweep (every second, and before refusing at the cap) drops those whose
//     descriptor no longer names that socket;
//   - silent connections do not hold the port (issue 37 item 2; the way
//     Envoy's and nginx's header and idle timeouts do): the sweep reads each
//     connection's TCP_INFO (bytes received, time since the last data came
//     in; it reads no data, gRPC's descriptor stays gRPC's) and shuts down
//     (shutdown(2): gRPC then closes it) a connection that has not sent the
//     HTTP/2 preface and a frame header (kHandshakeBytes) within
//     handshake_timeout, and one from which nothing came for idle_timeout.
//     At the cap, a new connection evicts the oldest one that has not
//     completed that handshake (open for at least kMinEvictAge) instead of
//     being refused, so sockets that connect and send nothing (or only the
//     preface) cannot lock other clients out even for handshake_timeout.
//     A live gRPC connection always sends something within idle_timeout
//     when the server pings it (server.cc sets keepalive pings on
//     connections with calls, and gRPC's max_connection_idle to close ones
//     without calls gracefully first).
// TLS stays on gRPC's own listener (1.51 cannot take an accepted TLS
// socket): there neither guarantee holds, and the watchdog's probe through
// the port is what notices a dead listener (systemd then restarts the
// daemon).
//
// Thread-safety: Listen, Start and Stop from one thread (the server's
// lifecycle); stats() from any thread. The handoff runs on the listener's
// thread.
#ifndef NEARPREP_SERVER_SERVICE_CONNECTION_LISTENER_H_
#define NEARPREP_SERVER_SERVICE_CONNECTION_LISTENER_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace nearprep {

// What a listener has seen; a plain struct for the metrics.
struct ConnectionStats {
  int64_t active = 0;    // handed over and still open (as of the last sweep)
  int64_t limit = 0;     // the cap now
  uint64_t accepted = 0;
  uint64_t rejected = 0;  // closed at the cap or for want of descriptors
  // Shut down by the listener: no handshake within handshake_timeout,
  // nothing received for idle_timeout, evicted at the cap (no handshake).
  uint64_t closed_handshake_timeout = 0;
  uint64_t closed_idle_timeout = 0;
  uint64_t evicted = 0;
};

// What a connection must have sent to count as having completed its
// handshake: the HTTP/2 client preface (24 bytes) and one frame header (9;
// a client sends its SETTINGS right after the preface).
inline constexpr uint64_t kHandshakeBytes = 24 + 9;
// At the cap only connections at least this old are evicted: a client that
// just connected has its preface in flight.
inline constexpr std::chrono::milliseconds kMinEvictAge{1000};

// The cap for a descriptor limit: what is left after a reserve of
// max(64, limit / 8) descriptors for files and the like and 64 for the
// metrics port (its own cap), at least 1.
int64_t ConnectionCapForDescriptorLimit(uint64_t nofile);

class ConnectionListener {
 public:
  struct Options {
    // 0: ConnectionCapForDescriptorLimit(the soft RLIMIT_NOFILE now).
    int64_t max_connections = 0;
    // A connection that has not sent kHandshakeBytes this long after it
    // was accepted is shut down. 0: never.
    std::chrono::milliseconds handshake_timeout{10000};
    // A connection from which no byte came for this long is shut down.
    // 0: never.
    std::chrono::milliseconds idle_timeout{300000};
    // Where warnings go (the cap reached, accept failing); default stderr.
    std::function<void(const std::string&)> log_warning;
  };
  // Takes ownership of an accepted, non-blocking, close-on-exec socket.
  using Handoff = std::function<void(int fd)>;

  // Binds address:port (port 0: a free one; "0.0.0.0" or "::": every
  // address, IPv6 and IPv4 on one dual-stack socket where the host has
  // IPv6) and listens; nothing is accepted before Start. UNAVAILABLE when
  // the address cannot be bound (no SO_REUSEPORT: a port in use is an
  // error).
  static absl::StatusOr<std::unique_ptr<ConnectionListener>> Listen(
      const std::string& address, int port, Options options);
  ~ConnectionListener();  // Stop()
  ConnectionListener(const ConnectionListener&) = delete;
  ConnectionListener& operator=(const ConnectionListener&) = delete;

  int port() const { return port_; }
  // Starts the accept thread. Once.
  void Start(Handoff handoff);
  // Stops accepting, closes the listening socket and joins the thread; the
  // connections handed over are gRPC's and stay open. Idempotent.
  void Stop();
  ConnectionStats stats() const;

 private:
  explicit ConnectionListener(Options options);
  void Run();
  void AcceptOne();
  struct Conn {
    ino_t inode = 0;
    std::chrono::steady_clock::time_point accepted;
    bool handshaked = false;  // sent kHandshakeBytes (never reset)
    bool shut = false;        // shut down by us; gRPC closes it
  };
  void Sweep();
  // Shuts down the oldest connection that has not completed its handshake
  // and is at least kMinEvictAge old; false when there is none.
  bool EvictOne();
  // Updates c->handshaked; *idle_ms: milliseconds since data last came in.
  // False when TCP_INFO cannot be read (then nothing is enforced).
  bool Activity(int fd, Conn* c, uint32_t* idle_ms) const;
  void Shut(int fd, Conn* c);
  int64_t OpenCount() const;
  int64_t CapNow() const;
  void Warn(std::chrono::steady_clock::time_point* last,
            const std::string& message);

  Options options_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  int spare_fd_ = -1;
  int port_ = 0;
  Handoff handoff_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  // Listener thread only: descriptor -> what was handed over.
  std::unordered_map<int, Conn> live_;
  int64_t shut_count_ = 0;  // entries of live_ with shut set
  std::chrono::steady_clock::time_point last_sweep_{};
  std::chrono::steady_clock::time_point last_cap_log_{};
  std::chrono::steady_clock::time_point last_emfile_log_{};
  std::chrono::steady_clock::time_point last_evict_log_{};
  std::chrono::steady_clock::time_point last_timeout_log_{};
  std::chrono::steady_clock::time_point last_idle_check_{};
  uint64_t rejected_since_log_ = 0;
  std::atomic<int64_t> active_{0};
  std::atomic<int64_t> limit_{0};
  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> rejected_{0};
  std::atomic<uint64_t> closed_handshake_{0};
  std::atomic<uint64_t> closed_idle_{0};
  std::atomic<uint64_t> evicted_{0};
};

// Connects to host:port ("0.0.0.0" / "::" / "" mean this host's loopback),
// sends the HTTP/2 client preface and an empty SETTINGS frame, and waits
// for the first byte back or the peer closing: either shows that something
// accepted the connection and looked at it (a gRPC server in plaintext
// answers with its SETTINGS; in TLS its handshake fails and it closes;
// ConnectionListener at its cap closes). A listener that no longer accepts
// leaves the connection in its backlog: DEADLINE_EXCEEDED after `timeout`.
// UNAVAILABLE when the connection is refused.
absl::Status ProbeListener(const std::string& host, int port,
                           std::chrono::milliseconds timeout);

// gRPC names a connection handed to it by descriptor "fd:N"; while that
// connection is open this returns its peer's address the way gRPC names
// the ones it accepts ("ipv4:10.0.0.7:51234", "ipv6:[::1]:51234"). Any
// other name comes back unchanged.
std::string PeerName(const std::string& grpc_peer);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_SERVICE_CONNECTION_LISTENER_H_
