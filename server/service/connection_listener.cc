#include "server/service/connection_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
// The kernel's struct tcp_info (glibc's lacks tcpi_bytes_received).
#include <linux/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace nearprep {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kLogEvery = std::chrono::seconds(10);
constexpr auto kSweepEvery = std::chrono::seconds(1);
// At the cap, a sweep before refusing at most this often (a sweep is one
// fstat per connection).
constexpr auto kSweepAtCapEvery = std::chrono::milliseconds(100);

bool IsWildcard(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]";
}

std::string Unbracket(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

int BindListen(const sockaddr* addr, socklen_t len, bool dual_stack,
               std::string* why) {
  const int fd = ::socket(addr->sa_family,
                          SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *why = std::strerror(errno);
    return -1;
  }
  int yes = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  if (dual_stack) {
    int no = 0;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));
  }
  if (::bind(fd, addr, len) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    *why = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

int64_t ConnectionCapForDescriptorLimit(uint64_t nofile) {
  const uint64_t reserve = std::max<uint64_t>(64, nofile / 8) + 64;
  if (nofile <= reserve) return 1;
  return static_cast<int64_t>(
      std::min<uint64_t>(nofile - reserve, uint64_t{1} << 40));
}

ConnectionListener::ConnectionListener(Options options)
    : options_(std::move(options)) {
  if (!options_.log_warning) {
    options_.log_warning = [](const std::string& m) {
      std::fprintf(stderr, "%s\n", m.c_str());
    };
  }
}

absl::StatusOr<std::unique_ptr<ConnectionListener>> ConnectionListener::Listen(
    const std::string& address, int port, Options options) {
  std::unique_ptr<ConnectionListener> l(
      new ConnectionListener(std::move(options)));
  std::string why = "no address";
  if (IsWildcard(address)) {
    // One dual-stack socket (as gRPC binds a wildcard), IPv4 alone where
    // the host has no IPv6.
    sockaddr_in6 a6{};
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_any;
    a6.sin6_port = htons(static_cast<uint16_t>(port));
    const bool v4_only = address == "0.0.0.0";
    l->listen_fd_ = BindListen(reinterpret_cast<sockaddr*>(&a6), sizeof(a6),
                               /*dual_stack=*/true, &why);
    if (l->listen_fd_ < 0 && v4_only) {
      sockaddr_in a4{};
      a4.sin_family = AF_INET;
      a4.sin_addr.s_addr = htonl(INADDR_ANY);
      a4.sin_port = htons(static_cast<uint16_t>(port));
      l->listen_fd_ = BindListen(reinterpret_cast<sockaddr*>(&a4), sizeof(a4),
                                 false, &why);
    }
  } else {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const std::string host = Unbracket(address);
    const std::string port_text = std::to_string(port);
    if (int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res);
        rc != 0) {
      why = ::gai_strerror(rc);
    } else {
      for (addrinfo* a = res; a != nullptr && l->listen_fd_ < 0;
           a = a->ai_next) {
        l->listen_fd_ = BindListen(a->ai_addr, a->ai_addrlen, false, &why);
      }
      ::freeaddrinfo(res);
    }
  }
  if (l->listen_fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, ":", port, ": ", why));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(l->listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  l->port_ = ntohs(ss.ss_family == AF_INET6
                       ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                       : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  l->wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  l->spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (l->wake_fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  l->limit_ = l->CapNow();
  return l;
}

ConnectionListener::~ConnectionListener() {
  Stop();
  for (int fd : {listen_fd_, wake_fd_, spare_fd_}) {
    if (fd >= 0) ::close(fd);
  }
}

void ConnectionListener::Start(Handoff handoff) {
  if (thread_.joinable()) return;
  handoff_ = std::move(handoff);
  thread_ = std::thread([this] { Run(); });
}

void ConnectionListener::Stop() {
  stop_ = true;
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
}

ConnectionStats ConnectionListener::stats() const {
  ConnectionStats s;
  s.active = active_.load();
  s.limit = limit_.load();
  s.accepted = accepted_.load();
  s.rejected = rejected_.load();
  s.closed_handshake_timeout = closed_handshake_.load();
  s.closed_idle_timeout = closed_idle_.load();
  s.evicted = evicted_.load();
  return s;
}

int64_t ConnectionListener::OpenCount() const {
  return static_cast<int64_t>(live_.size()) - shut_count_;
}

bool ConnectionListener::Activity(int fd, Conn* c, uint32_t* idle_ms) const {
  struct tcp_info info {};
  socklen_t len = sizeof(info);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return false;
  *idle_ms = info.tcpi_last_data_recv;
  const socklen_t need = offsetof(struct tcp_info, tcpi_bytes_received) +
                         sizeof(info.tcpi_bytes_received);
  if (len < need) {
    c->handshaked = true;  // an old kernel: only the idle timeout applies
  } else if (info.tcpi_bytes_received >= kHandshakeBytes) {
    c->handshaked = true;
  }
  return true;
}

void ConnectionListener::Shut(int fd, Conn* c) {
  // gRPC owns the descriptor: shutdown(2) ends the connection (the peer
  // sees it closed, gRPC reads EOF and closes the descriptor), close(2)
  // here would let gRPC use a number that may be reused.
  ::shutdown(fd, SHUT_RDWR);
  c->shut = true;
  ++shut_count_;
}

bool ConnectionListener::EvictOne() {
  const auto now = Clock::now();
  int victim = -1;
  Clock::time_point oldest = now;
  for (auto& [fd, c] : live_) {
    if (c.shut || c.handshaked || now - c.accepted < kMinEvictAge) continue;
    // Still the socket we handed over (gRPC may have closed it and the
    // number been reused): never shut down someone else's descriptor.
    struct stat st {};
    if (::fstat(fd, &st) != 0 || st.st_ino != c.inode) continue;
    uint32_t idle_ms = 0;
    if (!Activity(fd, &c, &idle_ms) || c.handshaked) continue;
    if (c.accepted < oldest) {
      oldest = c.accepted;
      victim = fd;
    }
  }
  if (victim < 0) return false;
  Shut(victim, &live_[victim]);
  ++evicted_;
  return true;
}

int64_t ConnectionListener::CapNow() const {
  rlimit rl{};
  int64_t cap = options_.max_connections;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    const int64_t by_limit = ConnectionCapForDescriptorLimit(rl.rlim_cur);
    cap = cap > 0 ? std::min(cap, by_limit) : by_limit;
  } else if (cap <= 0) {
    cap = 1024;
  }
  return cap;
}

void ConnectionListener::Warn(Clock::time_point* last,
                              const std::string& message) {
  const auto now = Clock::now();
  if (now - *last < kLogEvery) return;
  *last = now;
  options_.log_warning(message);
}

void ConnectionListener::Run() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  while (!stop_) {
    const int n = ::poll(fds, 2, 1000);
    if (stop_) break;
    if (Clock::now() - last_sweep_ >= kSweepEvery) Sweep();
    if (n <= 0 || !(fds[0].revents & POLLIN)) continue;
    // A bounded number per wake-up, then the sweep and the stop flag again.
    for (int i = 0; i < 64 && !stop_; ++i) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        ++accepted_;
        const int64_t cap = CapNow();
        limit_ = cap;
        if (OpenCount() >= cap &&
            Clock::now() - last_sweep_ >= kSweepAtCapEvery) {
          Sweep();
        }
        // At the cap a connection that never completed its handshake makes
        // room (nginx drains idle keepalive connections the same way).
        if (OpenCount() >= cap && EvictOne()) {
          Warn(&last_evict_log_,
               absl::StrCat("gRPC port: at the cap (", cap,
                            "): closing connections that sent no HTTP/2 "
                            "preface for new ones (",
                            evicted_.load(),
                            " so far; nearprep_grpc_connections_closed_"
                            "total{kind=\"evicted\"})"));
        }
        if (OpenCount() >= cap) {
          ::close(fd);
          ++rejected_;
          ++rejected_since_log_;
          Warn(&last_cap_log_,
               absl::StrCat("gRPC port: ", OpenCount(),
                            " connections open, the cap (", cap,
                            "): closing new connections (",
                            rejected_since_log_,
                            " so far; nearprep_grpc_connections_rejected_"
                            "total)"));
          continue;
        }
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        struct stat st {};
        if (::fstat(fd, &st) == 0) {
          auto old = live_.find(fd);  // a number gRPC closed and we reused
          if (old != live_.end() && old->second.shut) --shut_count_;
          Conn& c = live_[fd];
          c = Conn{};
          c.inode = st.st_ino;
          c.accepted = Clock::now();
        }
        active_ = OpenCount();
        handoff_(fd);
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        const int saved = errno;
        // The spare makes room for one accept, closed at once: the client
        // learns at once, and the backlog does not keep the port readable.
        if (spare_fd_ >= 0) ::close(spare_fd_);
        const int drop = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (drop >= 0) {
          ::close(drop);
          ++rejected_;
        }
        spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        Warn(&last_emfile_log_,
             absl::StrCat("gRPC port: accept failed (", std::strerror(saved),
                          "): closing new connections until descriptors "
                          "are free (", OpenCount(), " open)"));
        Sweep();
        if (drop < 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          break;
        }
        continue;
      }
      break;  // EAGAIN, or an error the next wake-up retries
    }
  }
}

void ConnectionListener::Sweep() {
  const auto now = Clock::now();
  last_sweep_ = now;
  const auto hs = options_.handshake_timeout;
  const auto idle = options_.idle_timeout;
  // The idle check (one getsockopt per connection) at most every tenth of
  // the timeout; the handshake check only for connections still owing it.
  const bool check_idle =
      idle.count() > 0 &&
      now - last_idle_check_ >=
          std::max<Clock::duration>(std::chrono::seconds(1), idle / 10);
  if (check_idle) last_idle_check_ = now;
  uint64_t closed_hs = 0, closed_idle = 0;
  for (auto it = live_.begin(); it != live_.end();) {
    Conn& c = it->second;
    struct stat st {};
    if (::fstat(it->first, &st) != 0 || !S_ISSOCK(st.st_mode) ||
        st.st_ino != c.inode) {
      if (c.shut) --shut_count_;
      it = live_.erase(it);
      continue;
    }
    const bool hs_due =
        hs.count() > 0 && !c.handshaked && now - c.accepted >= hs;
    if (!c.shut && (hs_due || check_idle)) {
      uint32_t idle_ms = 0;
      if (Activity(it->first, &c, &idle_ms)) {
        if (hs_due && !c.handshaked) {
          Shut(it->first, &c);
          ++closed_hs;
        } else if (check_idle && idle_ms >= idle.count()) {
          Shut(it->first, &c);
          ++closed_idle;
        }
      }
    }
    ++it;
  }
  closed_handshake_ += closed_hs;
  closed_idle_ += closed_idle;
  if (closed_hs + closed_idle > 0) {
    Warn(&last_timeout_log_,
         absl::StrCat(
             "gRPC port: closed ", closed_hs,
             " connection(s) that sent no HTTP/2 preface within ", hs.count(),
             " ms (limits.handshake_timeout_seconds) and ", closed_idle,
             " from which nothing came for ", idle.count(),
             " ms (limits.idle_timeout_seconds); "
             "nearprep_grpc_connections_closed_total counts them"));
  }
  active_ = OpenCount();
  limit_ = CapNow();
}

absl::Status ProbeListener(const std::string& host, int port,
                           std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::string target = Unbracket(host);
  if (IsWildcard(host)) target = "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(port);
  if (int rc = ::getaddrinfo(target.c_str(), port_text.c_str(), &hints, &res);
      rc != 0 || res == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("probe ", target, ":", port, ": ", ::gai_strerror(rc)));
  }
  const int fd = ::socket(res->ai_family,
                          SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ::freeaddrinfo(res);
    return absl::UnavailableError(
        absl::StrCat("probe: socket: ", std::strerror(errno)));
  }
  const int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
  ::freeaddrinfo(res);
  auto fail = [&](absl::StatusCode code, const std::string& why) {
    ::close(fd);
    return absl::Status(code, absl::StrCat("probe of port ", port, ": ", why));
  };
  auto wait = [&](short events) -> int {  // 1 ready, 0 timed out, -1 error
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - Clock::now());
      if (left.count() <= 0) return 0;
      pollfd p{fd, events, 0};
      const int n = ::poll(&p, 1, static_cast<int>(left.count()));
      if (n < 0 && errno == EINTR) continue;
      return n > 0 ? 1 : n;
    }
  };
  if (rc != 0 && errno != EINPROGRESS) {
    return fail(absl::StatusCode::kUnavailable, std::strerror(errno));
  }
  if (rc != 0) {
    if (wait(POLLOUT) != 1) {
      return fail(absl::StatusCode::kDeadlineExceeded, "connect timed out");
    }
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return fail(absl::StatusCode::kUnavailable, std::strerror(err));
  }
  // The HTTP/2 client preface and an empty SETTINGS frame.
  static const char kHello[] =
      "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
  const ssize_t sent =
      ::send(fd, kHello, sizeof(kHello) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)sent;  // a closed connection shows below as EOF or an error
  if (wait(POLLIN) != 1) {
    return fail(absl::StatusCode::kDeadlineExceeded,
                "connected, but nothing accepted the connection in time "
                "(a listener that stopped accepting?)");
  }
  char byte = 0;
  [[maybe_unused]] ssize_t n = ::recv(fd, &byte, 1, MSG_DONTWAIT);
  // Data, EOF or a reset: the other side took the connection.
  ::close(fd);
  return absl::OkStatus();
}

std::string PeerName(const std::string& grpc_peer) {
  if (grpc_peer.rfind("fd:", 0) != 0) return grpc_peer;
  int fd = -1;
  if (!absl::SimpleAtoi(grpc_peer.substr(3), &fd)) return grpc_peer;
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return grpc_peer;
  }
  char text[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
    return absl::StrCat("ipv4:", text, ":", ntohs(a->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
      ::inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], text, sizeof(text));
      return absl::StrCat("ipv4:", text, ":", ntohs(a->sin6_port));
    }
    ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text));
    return absl::StrCat("ipv6:[", text, "]:", ntohs(a->sin6_port));
  }
  return grpc_peer;
}

}  // namespace nearprep
