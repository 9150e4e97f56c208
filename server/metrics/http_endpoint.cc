#include "server/metrics/http_endpoint.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace nearprep {
namespace metrics {

namespace {

using Clock = std::chrono::steady_clock;

// A connection is reading its request, writing the answer, or lingering:
// the answer is out (our side shut for writing) and what the client still
// sends is read and dropped for a moment, so that closing does not reset
// the connection before the client has read a 431 sent while it was still
// sending.
enum class ConnState { kReading, kWriting, kLingering };

struct Conn {
  int fd = -1;
  ConnState state = ConnState::kReading;
  uint64_t seq = 0;  // accept order
  Clock::time_point accepted;
  bool silent_at_accept = false;  // nothing to read when it was accepted
  std::string in;
  int lines = 0;
  bool head = false;
  std::string out;
  size_t sent = 0;
  Clock::time_point deadline;
};

constexpr auto kLinger = std::chrono::milliseconds(1000);
// At the cap, a connection still reading its request is evicted for a new
// one only once it is this old: a scraper's request follows its connect
// within a round trip, so a younger one is probably a scrape on its way.
constexpr auto kEvictAfter = std::chrono::milliseconds(500);
constexpr int kDeferAcceptSeconds = 2;
constexpr auto kLogEvery = std::chrono::seconds(10);

const char* Reason(int code) {
  switch (code) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    case 505: return "HTTP Version Not Supported";
  }
  return "Error";
}

std::string Response(int code, const std::string& content_type,
                     const std::string& body, bool head,
                     const std::string& extra_headers = "") {
  std::string r = absl::StrCat("HTTP/1.1 ", code, " ", Reason(code),
                               "\r\nContent-Type: ", content_type,
                               "\r\nContent-Length: ", body.size(),
                               "\r\nConnection: close\r\n", extra_headers,
                               "\r\n");
  if (!head) r += body;
  return r;
}

std::string Plain(int code, const std::string& text) {
  return Response(code, "text/plain; charset=utf-8", text, false);
}

}  // namespace

// The serving loop and everything it owns; counters are atomics so that
// stats() may read them from any thread.
class MetricsHttpServer::Loop {
 public:
  Loop(const MetricsRegistry* registry, const MetricsHttpOptions& options)
      : registry_(registry), options_(options) {
    if (!options_.log_warning) {
      options_.log_warning = [](const std::string& m) {
        std::fprintf(stderr, "%s\n", m.c_str());
      };
    }
    options_.max_connections = std::max(1, options_.max_connections);
  }
  ~Loop() {
    for (auto& [fd, c] : conns_) ::close(fd);
    for (int fd : {listen_fd_, epoll_fd_, wake_fd_, spare_fd_}) {
      if (fd >= 0) ::close(fd);
    }
  }

  absl::Status Bind(const std::string& host, int port, int* bound);
  void Run();
  void Wake() {
    stop_ = true;
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  }
  MetricsHttpStats Stats() const {
    MetricsHttpStats s;
    s.connections_active = active_.load();
    s.connections_limit = options_.max_connections;
    s.connections_accepted = accepted_.load();
    s.connections_rejected = rejected_.load();
    s.requests_served = served_.load();
    s.rejected_header_too_large = too_large_.load();
    s.rejected_timeout = timeouts_.load();
    s.rejected_bad_request = bad_.load();
    s.accept_waits = accept_waits_.load();
    return s;
  }

 private:
  void AcceptSome();
  void AcceptFailedForWantOfDescriptors();
  void Admit(int fd);
  void OnEvent(int fd, uint32_t events);
  void ReadRequest(Conn& c);
  void Answer(Conn& c, std::string response);
  void Respond(Conn& c);
  void Write(Conn& c);
  void StartLinger(Conn& c);
  void Linger(Conn& c);
  void Close(int fd);
  void ExpireDeadlines();
  int NextTimeoutMs() const;
  void CapReached(bool evicted);
  // How readily a connection is closed to make room: 0 never (answering,
  // or a request that may still be arriving), 1 unfinished for kEvictAfter,
  // 2 silent although deferred, 3 lingering.
  int EvictRank(const Conn& c, Clock::time_point now) const;
  // At the cap: closes a lingering connection, else the oldest one still
  // reading that is at least kEvictAfter old. False when there is none.
  bool MakeRoom();
  // Stops (and restarts) watching the listening socket: while every slot
  // is taken, new connections wait in the kernel's listen backlog.
  void PauseAccepting();
  void ResumeAccepting();

  const MetricsRegistry* const registry_;
  MetricsHttpOptions options_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int spare_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::unordered_map<int, Conn> conns_;
  bool accept_paused_ = false;
  bool deferred_ = false;  // TCP_DEFER_ACCEPT took
  uint64_t next_seq_ = 0;
  Clock::time_point last_cap_log_{};
  uint64_t cap_since_log_ = 0;
  Clock::time_point last_emfile_log_{};
  Clock::time_point last_wait_log_{};
  std::atomic<int64_t> active_{0};
  std::atomic<uint64_t> accepted_{0}, rejected_{0}, served_{0},
      too_large_{0}, timeouts_{0}, bad_{0}, accept_waits_{0};
};

absl::Status MetricsHttpServer::Loop::Bind(const std::string& host, int port,
                                           int* bound) {
  auto unavailable = [&](const std::string& why) {
    return absl::UnavailableError(absl::StrCat(
        "metrics: cannot listen on ", host, ":", port,
        " (address in use or not available?): ", why));
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res);
      rc != 0) {
    return unavailable(::gai_strerror(rc));
  }
  std::string why = "no address";
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family,
                            a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                            a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    // SO_REUSEADDR only: no SO_REUSEPORT, which would let two daemons
    // silently share (and split) one metrics port.
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    // nginx's "listen ... deferred": the kernel hands a connection to
    // accept only once its first bytes (the request) arrived, or after
    // kDeferAcceptSeconds. Scrapes then never hold a slot while their
    // request is on its way, and idle connections wait in the kernel
    // instead of taking slots. Best effort (not every kernel has it).
    int defer = kDeferAcceptSeconds;
    deferred_ = ::setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer,
                             sizeof(defer)) == 0;
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 ||
        ::listen(fd, SOMAXCONN) != 0) {
      why = std::strerror(errno);
      ::close(fd);
      continue;
    }
    listen_fd_ = fd;
    break;
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0) return unavailable(why);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  *bound = ntohs(ss.ss_family == AF_INET6
                     ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                     : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("metrics: epoll/eventfd: ", std::strerror(errno)));
  }
  for (int fd : {listen_fd_, wake_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
  return absl::OkStatus();
}

void MetricsHttpServer::Loop::Run() {
  epoll_event events[64];
  while (!stop_) {
    const int n = ::epoll_wait(epoll_fd_, events, 64, NextTimeoutMs());
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < n && !stop_; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) continue;
      if (fd == listen_fd_) {
        AcceptSome();
      } else {
        OnEvent(fd, events[i].events);
      }
    }
    ExpireDeadlines();
    // A connection old enough to be evicted: look at the backlog again.
    if (accept_paused_ &&
        static_cast<int>(conns_.size()) >= options_.max_connections) {
      const auto now = Clock::now();
      for (const auto& [fd, c] : conns_) {
        if (EvictRank(c, now) > 0) {
          ResumeAccepting();
          break;
        }
      }
    }
  }
}

int MetricsHttpServer::Loop::NextTimeoutMs() const {
  auto first = Clock::now() + std::chrono::seconds(1);
  for (const auto& [fd, c] : conns_) {
    first = std::min(first, c.deadline);
    if (accept_paused_ && c.state == ConnState::kReading) {
      first = std::min(first, c.accepted + kEvictAfter);
    }
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      first - Clock::now())
                      .count();
  return static_cast<int>(std::clamp<int64_t>(ms + 1, 0, 1000));
}

void MetricsHttpServer::Loop::AcceptSome() {
  // A bounded number per wake-up, so that a flood of connections cannot
  // starve the requests already open.
  for (int i = 0; i < 64; ++i) {
    if (static_cast<int>(conns_.size()) >= options_.max_connections) {
      // Only when a connection is waiting: never evict for nothing.
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 0) != 1) return;
      if (!MakeRoom()) {
        // Every slot holds a request being read (young), answered or
        // lingering: the new ones wait in the backlog instead of evicting
        // a scrape whose request has not arrived yet (issue 37 item 9).
        PauseAccepting();
        return;
      }
    }
    const int fd = ::accept4(listen_fd_, nullptr, nullptr,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      Admit(fd);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EMFILE || errno == ENFILE) {
      AcceptFailedForWantOfDescriptors();
      continue;
    }
    return;  // EAGAIN, or an error the next wake-up retries
  }
}

void MetricsHttpServer::Loop::AcceptFailedForWantOfDescriptors() {
  // The spare descriptor makes room for one accept, whose connection is
  // closed at once: the client sees a closed connection instead of waiting
  // in the backlog, and the listener stays readable only while there is
  // something to take.
  const int saved = errno;
  if (spare_fd_ >= 0) {
    ::close(spare_fd_);
    spare_fd_ = -1;
  }
  const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) {
    ::close(fd);
    ++rejected_;
  }
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const auto now = Clock::now();
  if (now - last_emfile_log_ >= kLogEvery) {
    last_emfile_log_ = now;
    options_.log_warning(absl::StrCat(
        "metrics: accept failed (", std::strerror(saved),
        "): closing new connections until descriptors are free"));
  }
  if (fd < 0) {
    // Nothing taken (even the spare was not enough): back off a moment
    // rather than spin on a readable listener.
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void MetricsHttpServer::Loop::CapReached(bool evicted) {
  ++rejected_;
  ++cap_since_log_;
  const auto now = Clock::now();
  if (now - last_cap_log_ >= kLogEvery) {
    last_cap_log_ = now;
    options_.log_warning(absl::StrCat(
        "metrics: ", options_.max_connections,
        " connections open (the cap): ", cap_since_log_,
        " connection(s) closed since the last such line (",
        evicted ? "the oldest unfinished request" : "new connections",
        " closed first; nearprep_metrics_http_connections_rejected_total)"));
    cap_since_log_ = 0;
  }
}

int MetricsHttpServer::Loop::EvictRank(const Conn& c,
                                       Clock::time_point now) const {
  switch (c.state) {
    case ConnState::kWriting:
      return 0;  // answering: never
    case ConnState::kLingering:
      return 3;  // its answer is out
    case ConnState::kReading:
      break;
  }
  // Accepted with nothing sent although the kernel deferred it until data
  // came: it was silent for kDeferAcceptSeconds already, an idle one.
  if (deferred_ && c.in.empty() && c.silent_at_accept) return 2;
  // A request still arriving: only once it is old enough.
  return now - c.accepted >= kEvictAfter ? 1 : 0;
}

bool MetricsHttpServer::Loop::MakeRoom() {
  const auto now = Clock::now();
  int victim = -1;
  int rank = 0;
  uint64_t best = UINT64_MAX;
  for (const auto& [cfd, c] : conns_) {
    const int r = EvictRank(c, now);
    if (r == 0) continue;
    if (r > rank || (r == rank && c.seq < best)) {
      victim = cfd;
      rank = r;
      best = c.seq;
    }
  }
  if (victim < 0) return false;
  if (rank < 3) CapReached(true);
  Close(victim);
  return true;
}

void MetricsHttpServer::Loop::PauseAccepting() {
  if (accept_paused_) return;
  accept_paused_ = true;
  ++accept_waits_;
  epoll_event ev{};
  ev.events = 0;
  ev.data.fd = listen_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
  const auto now = Clock::now();
  if (now - last_wait_log_ >= kLogEvery) {
    last_wait_log_ = now;
    options_.log_warning(absl::StrCat(
        "metrics: ", options_.max_connections,
        " connections open (the cap), all with a request on its way or "
        "being answered: new connections wait in the listen backlog "
        "(nearprep_metrics_http_accept_waits_total)"));
  }
}

void MetricsHttpServer::Loop::ResumeAccepting() {
  if (!accept_paused_) return;
  accept_paused_ = false;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
}

void MetricsHttpServer::Loop::Admit(int fd) {
  ++accepted_;
  if (static_cast<int>(conns_.size()) >= options_.max_connections) {
    ::close(fd);  // AcceptSome made room first: not reached
    CapReached(false);
    return;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  Conn c;
  c.fd = fd;
  const uint64_t seq = next_seq_++;
  c.seq = seq;
  c.accepted = Clock::now();
  c.deadline = Clock::now() + options_.request_timeout;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    ::close(fd);
    return;
  }
  auto it = conns_.emplace(fd, std::move(c)).first;
  active_ = static_cast<int64_t>(conns_.size());
  // A client sends its request as soon as its connect completes, which is
  // before the accept: read now, so that a scrape accepted in a flood of
  // idle connections is answered before newer arrivals could evict it.
  ReadRequest(it->second);
  auto again = conns_.find(fd);  // ReadRequest may have answered and closed
  if (again != conns_.end() && again->second.seq == seq &&
      again->second.state == ConnState::kReading &&
      again->second.in.empty()) {
    again->second.silent_at_accept = true;
  }
}

void MetricsHttpServer::Loop::Close(int fd) {
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  conns_.erase(fd);
  active_ = static_cast<int64_t>(conns_.size());
  if (static_cast<int>(conns_.size()) < options_.max_connections) {
    ResumeAccepting();
  }
}

void MetricsHttpServer::Loop::OnEvent(int fd, uint32_t events) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  Conn& c = it->second;
  switch (c.state) {
    case ConnState::kReading:
      ReadRequest(c);
      break;
    case ConnState::kWriting:
      if (events & (EPOLLERR | EPOLLHUP)) {
        Close(fd);
      } else {
        Write(c);
      }
      break;
    case ConnState::kLingering:
      Linger(c);
      break;
  }
}

void MetricsHttpServer::Loop::ReadRequest(Conn& c) {
  char buf[4096];
  while (true) {
    const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
    if (n == 0) {
      Close(c.fd);  // the client gave up before its request was complete
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) Close(c.fd);
      return;
    }
    // Only up to the end of the headers matters; a body (there should be
    // none on a GET) is never read: the connection closes after the answer.
    const size_t before = c.in.size();
    c.in.append(buf, static_cast<size_t>(n));
    const size_t scan_from = before >= 3 ? before - 3 : 0;
    size_t end = c.in.find("\r\n\r\n", scan_from);
    size_t end_len = 4;
    if (end == std::string::npos) {
      end = c.in.find("\n\n", before >= 1 ? before - 1 : 0);
      end_len = 2;
    }
    const size_t counted_to =
        end == std::string::npos ? c.in.size() : end + end_len;
    for (size_t i = before; i < counted_to; ++i) c.lines += c.in[i] == '\n';
    const size_t header_bytes =
        end == std::string::npos ? c.in.size() : end + end_len;
    // Lines: the request line, max_header_lines headers, the empty line.
    if (header_bytes > options_.max_header_bytes ||
        c.lines > options_.max_header_lines + 2) {
      ++too_large_;
      Answer(c, Plain(431, absl::StrCat(
                               "request header fields too large (at most ",
                               options_.max_header_lines, " lines and ",
                               options_.max_header_bytes, " bytes)\n")));
      return;
    }
    if (end != std::string::npos) {
      c.in.resize(end);
      Respond(c);
      return;
    }
  }
}

void MetricsHttpServer::Loop::Respond(Conn& c) {
  // Request line: METHOD SP TARGET SP HTTP/1.x; then header lines, each
  // NAME ":" VALUE (checked, not used: only the path matters here).
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos <= c.in.size()) {
    size_t nl = c.in.find('\n', pos);
    if (nl == std::string::npos) nl = c.in.size();
    std::string line = c.in.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    pos = nl + 1;
  }
  c.in.clear();
  c.in.shrink_to_fit();
  auto bad = [&](int code, const std::string& why,
                 const std::string& extra = "") {
    ++bad_;
    Answer(c, Response(code, "text/plain; charset=utf-8", why + "\n", false,
                       extra));
  };
  const std::string& rl = lines[0];
  const size_t sp1 = rl.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? sp1 : rl.find(' ', sp1 + 1);
  if (sp1 == std::string::npos || sp2 == std::string::npos ||
      rl.find(' ', sp2 + 1) != std::string::npos || sp1 == 0 ||
      sp2 == sp1 + 1) {
    return bad(400, "malformed request line");
  }
  const std::string method = rl.substr(0, sp1);
  std::string target = rl.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string version = rl.substr(sp2 + 1);
  if (version.rfind("HTTP/", 0) != 0) return bad(400, "malformed request line");
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return bad(505, "only HTTP/1.0 and HTTP/1.1");
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string& h = lines[i];
    const size_t colon = h.find(':');
    if (colon == std::string::npos || colon == 0 || h[0] == ' ' ||
        h[0] == '\t') {
      return bad(400, "malformed header line");
    }
  }
  if (method != "GET" && method != "HEAD") {
    return bad(405, "only GET and HEAD", "Allow: GET, HEAD\r\n");
  }
  c.head = method == "HEAD";
  if (const size_t q = target.find('?'); q != std::string::npos) {
    target.resize(q);
  }
  ++served_;
  if (target == "/metrics") {
    Answer(c, Response(200, kContentType, registry_->Render(), c.head));
  } else if (target == "/healthz") {
    Answer(c, Response(200, "text/plain; charset=utf-8", "ok\n", c.head));
  } else if (target == "/") {
    Answer(c, Response(200, "text/plain; charset=utf-8",
                       "nearprepd\n/metrics  Prometheus metrics\n/healthz  "
                       "liveness\n",
                       c.head));
  } else {
    Answer(c, Response(404, "text/plain; charset=utf-8", "not found\n",
                       c.head));
  }
}

void MetricsHttpServer::Loop::Answer(Conn& c, std::string response) {
  c.in.clear();
  c.in.shrink_to_fit();
  c.out = std::move(response);
  c.sent = 0;
  c.state = ConnState::kWriting;
  c.deadline = Clock::now() + options_.write_timeout;
  epoll_event ev{};
  ev.events = EPOLLOUT;
  ev.data.fd = c.fd;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  Write(c);
}

void MetricsHttpServer::Loop::Write(Conn& c) {
  while (c.sent < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.sent,
                             c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;  // EPOLLOUT
      Close(c.fd);
      return;
    }
    c.sent += static_cast<size_t>(n);
  }
  StartLinger(c);
}

void MetricsHttpServer::Loop::StartLinger(Conn& c) {
  c.out.clear();
  c.out.shrink_to_fit();
  ::shutdown(c.fd, SHUT_WR);
  c.state = ConnState::kLingering;
  c.deadline = Clock::now() + kLinger;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = c.fd;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  Linger(c);
}

void MetricsHttpServer::Loop::Linger(Conn& c) {
  char buf[4096];
  // Reads at most 64 kB per wake-up (dropped); the deadline ends it.
  for (int i = 0; i < 16; ++i) {
    const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    Close(c.fd);  // EOF or error: the client is done
    return;
  }
}

void MetricsHttpServer::Loop::ExpireDeadlines() {
  const auto now = Clock::now();
  std::vector<int> expired;
  for (auto& [fd, c] : conns_) {
    if (c.deadline <= now) expired.push_back(fd);
  }
  for (int fd : expired) {
    auto it = conns_.find(fd);
    if (it == conns_.end()) continue;
    Conn& c = it->second;
    if (c.state == ConnState::kReading) {
      ++timeouts_;
      // One try at saying why; whatever does not fit the socket buffer now
      // is dropped with the connection.
      const std::string r = Plain(408, "request not complete in time\n");
      [[maybe_unused]] ssize_t n =
          ::send(fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    } else if (c.state == ConnState::kWriting) {
      ++timeouts_;
    }
    Close(fd);
  }
}

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

MetricsHttpServer::MetricsHttpServer(const MetricsRegistry* registry,
                                     MetricsHttpOptions options)
    : registry_(registry), options_(std::move(options)) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

absl::Status MetricsHttpServer::Start(const std::string& host, int port) {
  if (loop_ != nullptr) {
    return absl::FailedPreconditionError("metrics server already started");
  }
  auto loop = std::make_unique<Loop>(registry_, options_);
  int bound = 0;
  if (absl::Status st = loop->Bind(host, port, &bound); !st.ok()) return st;
  port_ = bound;
  loop_ = std::move(loop);
  Loop* l = loop_.get();
  thread_ = std::thread([l] { l->Run(); });
  return absl::OkStatus();
}

void MetricsHttpServer::Stop() {
  if (loop_ == nullptr) return;
  loop_->Wake();
  if (thread_.joinable()) thread_.join();
  last_stats_ = loop_->Stats();
  loop_.reset();
}

MetricsHttpStats MetricsHttpServer::stats() const {
  return loop_ != nullptr ? loop_->Stats() : last_stats_;
}

void MetricsHttpServer::Collect(std::vector<MetricFamily>* out) const {
  const MetricsHttpStats s = stats();
  const std::string p = "nearprep_metrics_http_";
  out->push_back(GaugeFamily(p + "connections_active",
                             "Connections open on the metrics port.")
                     .Add({}, static_cast<double>(s.connections_active)));
  out->push_back(GaugeFamily(p + "connections_limit",
                             "Most connections the metrics port keeps open.")
                     .Add({}, static_cast<double>(s.connections_limit)));
  out->push_back(CounterFamily(p + "connections_accepted_total",
                               "Connections accepted on the metrics port.")
                     .Add({}, static_cast<double>(s.connections_accepted)));
  out->push_back(
      CounterFamily(p + "connections_rejected_total",
                    "Connections closed because of the cap (new ones "
                    "refused, unfinished ones evicted) or for want of "
                    "descriptors.")
          .Add({}, static_cast<double>(s.connections_rejected)));
  out->push_back(
      CounterFamily(p + "accept_waits_total",
                    "Times every slot held a request on its way or being "
                    "answered: new connections waited in the listen backlog "
                    "instead of evicting one.")
          .Add({}, static_cast<double>(s.accept_waits)));
  out->push_back(CounterFamily(p + "requests_total",
                               "Requests answered (any path, any status but "
                               "the rejections).")
                     .Add({}, static_cast<double>(s.requests_served)));
  out->push_back(
      CounterFamily(p + "requests_rejected_total",
                    "Requests refused: headers over the limits (431), "
                    "not complete in time, malformed or not GET/HEAD.")
          .Add({{"kind", "header_too_large"}},
               static_cast<double>(s.rejected_header_too_large))
          .Add({{"kind", "timeout"}}, static_cast<double>(s.rejected_timeout))
          .Add({{"kind", "bad_request"}},
               static_cast<double>(s.rejected_bad_request)));
}

}  // namespace metrics
}  // namespace nearprep
