#include "server/service/connection_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace nearprep {
namespace {

using std::chrono::milliseconds;

int Socket() { return ::socket(AF_INET, SOCK_STREAM, 0); }

bool ConnectTo(int fd, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return false;
  }
  timeval tv{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return true;
}

// True when the server closed the connection (EOF or reset) within 3 s.
bool ClosedByServer(int fd) {
  char c;
  const ssize_t n = ::recv(fd, &c, 1, 0);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

// What the handoff received (gRPC's side in the daemon).
struct Taken {
  std::mutex mu;
  std::vector<int> fds;
  size_t size() {
    std::lock_guard<std::mutex> l(mu);
    return fds.size();
  }
  void CloseAll() {
    std::lock_guard<std::mutex> l(mu);
    for (int fd : fds) ::close(fd);
    fds.clear();
  }
};

template <typename F>
bool WaitFor(F f, milliseconds limit = milliseconds(5000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return f();
}

TEST(ConnectionListenerTest, CapForDescriptorLimit) {
  EXPECT_EQ(ConnectionCapForDescriptorLimit(65536), 65536 - 8192 - 64);
  EXPECT_EQ(ConnectionCapForDescriptorLimit(256), 256 - 64 - 64);
  EXPECT_EQ(ConnectionCapForDescriptorLimit(100), 1);
}

TEST(ConnectionListenerTest, HandsOverAndNoticesWhenTheOwnerCloses) {
  auto l = ConnectionListener::Listen("127.0.0.1", 0, {});
  ASSERT_TRUE(l.ok()) << l.status();
  Taken taken;
  (*l)->Start([&taken](int fd) {
    std::lock_guard<std::mutex> g(taken.mu);
    taken.fds.push_back(fd);
  });
  std::vector<int> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(Socket());
    ASSERT_TRUE(ConnectTo(clients.back(), (*l)->port()));
  }
  ASSERT_TRUE(WaitFor([&] { return taken.size() == 3; }));
  EXPECT_EQ((*l)->stats().active, 3);
  EXPECT_EQ((*l)->stats().accepted, 3u);
  taken.CloseAll();  // as gRPC does when a connection ends
  EXPECT_TRUE(WaitFor([&] { return (*l)->stats().active == 0; }));
  for (int fd : clients) ::close(fd);
  (*l)->Stop();
  const int late = Socket();
  EXPECT_FALSE(ConnectTo(late, (*l)->port()));  // no longer listening
  ::close(late);
}

TEST(ConnectionListenerTest, PastTheCapNewConnectionsAreClosed) {
  ConnectionListener::Options o;
  o.max_connections = 2;
  std::vector<std::string> warnings;
  std::mutex wmu;
  o.log_warning = [&](const std::string& m) {
    std::lock_guard<std::mutex> g(wmu);
    warnings.push_back(m);
  };
  auto l = ConnectionListener::Listen("127.0.0.1", 0, o);
  ASSERT_TRUE(l.ok()) << l.status();
  Taken taken;
  (*l)->Start([&taken](int fd) {
    std::lock_guard<std::mutex> g(taken.mu);
    taken.fds.push_back(fd);
  });
  std::vector<int> clients;
  for (int i = 0; i < 5; ++i) {
    clients.push_back(Socket());
    ASSERT_TRUE(ConnectTo(clients.back(), (*l)->port()));
  }
  ASSERT_TRUE(WaitFor([&] { return (*l)->stats().rejected == 3; }));
  EXPECT_EQ(taken.size(), 2u);
  for (int i = 2; i < 5; ++i) EXPECT_TRUE(ClosedByServer(clients[i])) << i;
  EXPECT_EQ((*l)->stats().limit, 2);
  {
    std::lock_guard<std::mutex> g(wmu);
    ASSERT_EQ(warnings.size(), 1u);  // rate-limited: one line for three
    EXPECT_NE(warnings[0].find("the cap (2)"), std::string::npos) << warnings[0];
  }
  // Room again once one ends.
  taken.CloseAll();
  ASSERT_TRUE(WaitFor([&] { return (*l)->stats().active == 0; }));
  const int again = Socket();
  ASSERT_TRUE(ConnectTo(again, (*l)->port()));
  EXPECT_TRUE(WaitFor([&] { return taken.size() == 1; }));
  ::close(again);
  for (int fd : clients) ::close(fd);
  taken.CloseAll();
}

TEST(ConnectionListenerTest, AcceptsAgainAfterDescriptorsRanOut) {
  auto l = ConnectionListener::Listen("127.0.0.1", 0, {});
  ASSERT_TRUE(l.ok()) << l.status();
  Taken taken;
  (*l)->Start([&taken](int fd) {
    std::lock_guard<std::mutex> g(taken.mu);
    taken.fds.push_back(fd);
  });
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = 512;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  // The clients' sockets first, then every descriptor left is taken.
  const int starved = Socket();
  const int later = Socket();
  std::vector<int> filler;
  for (int fd; (fd = ::open("/dev/null", O_RDONLY)) >= 0;) filler.push_back(fd);
  ASSERT_EQ(errno, EMFILE);
  ASSERT_TRUE(ConnectTo(starved, (*l)->port()));
  // accept fails with EMFILE: the listener closes that connection (its
  // spare descriptor) instead of leaving it waiting or stopping.
  EXPECT_TRUE(ClosedByServer(starved));
  EXPECT_TRUE(WaitFor([&] { return (*l)->stats().rejected >= 1; }));
  for (int fd : filler) ::close(fd);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_TRUE(ConnectTo(later, (*l)->port()));
  EXPECT_TRUE(WaitFor([&] { return taken.size() == 1; }));
  ::close(starved);
  ::close(later);
  taken.CloseAll();
}

// The HTTP/2 client preface and an empty SETTINGS frame: what a gRPC client
// sends as soon as it is connected.
constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr char kSettings[] = "\x00\x00\x00\x04\x00\x00\x00\x00\x00";

void Send(int fd, const char* data, size_t n) {
  ASSERT_EQ(::send(fd, data, n, MSG_NOSIGNAL), static_cast<ssize_t>(n));
}

std::unique_ptr<ConnectionListener> Started(ConnectionListener::Options o,
                                            Taken* taken) {
  o.log_warning = [](const std::string&) {};
  auto l = ConnectionListener::Listen("127.0.0.1", 0, std::move(o));
  EXPECT_TRUE(l.ok()) << l.status();
  (*l)->Start([taken](int fd) {
    std::lock_guard<std::mutex> g(taken->mu);
    taken->fds.push_back(fd);
  });
  return std::move(*l);
}

// Issue 37 item 2: connections that send nothing, or only the preface, are
// shut down after handshake_timeout; one that sent its SETTINGS stays.
TEST(ConnectionListenerTest, SilentConnectionsAreClosedAfterTheHandshakeTimeout) {
  ConnectionListener::Options o;
  o.handshake_timeout = milliseconds(500);
  o.idle_timeout = milliseconds(0);
  Taken taken;
  auto l = Started(o, &taken);
  const int silent = Socket(), preface_only = Socket(), real = Socket();
  ASSERT_TRUE(ConnectTo(silent, l->port()));
  ASSERT_TRUE(ConnectTo(preface_only, l->port()));
  ASSERT_TRUE(ConnectTo(real, l->port()));
  Send(preface_only, kPreface, sizeof(kPreface) - 1);
  Send(real, kPreface, sizeof(kPreface) - 1);
  Send(real, kSettings, sizeof(kSettings) - 1);
  ASSERT_TRUE(WaitFor([&] { return taken.size() == 3; }));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(ClosedByServer(silent));
  EXPECT_TRUE(ClosedByServer(preface_only));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(2500));
  EXPECT_TRUE(WaitFor([&] { return l->stats().closed_handshake_timeout == 2; }));
  EXPECT_TRUE(WaitFor([&] { return l->stats().active == 1; }));
  // The one that spoke is left alone (recv times out: nothing, no EOF).
  timeval tv{0, 300000};
  ::setsockopt(real, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  EXPECT_FALSE(ClosedByServer(real));
  EXPECT_EQ(l->stats().closed_idle_timeout, 0u);
  for (int fd : {silent, preface_only, real}) ::close(fd);
  taken.CloseAll();
}

TEST(ConnectionListenerTest, ConnectionsSilentForTheIdleTimeoutAreClosed) {
  ConnectionListener::Options o;
  o.handshake_timeout = milliseconds(0);
  o.idle_timeout = milliseconds(1000);
  Taken taken;
  auto l = Started(o, &taken);
  const int quiet = Socket(), chatty = Socket();
  ASSERT_TRUE(ConnectTo(quiet, l->port()));
  ASSERT_TRUE(ConnectTo(chatty, l->port()));
  Send(quiet, kPreface, sizeof(kPreface) - 1);
  Send(quiet, kSettings, sizeof(kSettings) - 1);
  ASSERT_TRUE(WaitFor([&] { return taken.size() == 2; }));
  // chatty sends a frame header every 200 ms (as pings would).
  for (int i = 0; i < 15; ++i) {
    Send(chatty, kSettings, sizeof(kSettings) - 1);
    std::this_thread::sleep_for(milliseconds(200));
  }
  EXPECT_TRUE(WaitFor([&] { return l->stats().closed_idle_timeout == 1; }));
  EXPECT_TRUE(ClosedByServer(quiet));
  timeval tv{0, 100000};
  ::setsockopt(chatty, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  EXPECT_FALSE(ClosedByServer(chatty));
  ::close(quiet);
  ::close(chatty);
  taken.CloseAll();
}

// max_connections silent sockets no longer lock a real client out: at the
// cap, the oldest connection without a handshake makes room at once.
TEST(ConnectionListenerTest, AtTheCapSilentConnectionsMakeRoomForNewOnes) {
  ConnectionListener::Options o;
  o.max_connections = 3;
  o.handshake_timeout = milliseconds(60000);  // not what frees the room
  Taken taken;
  auto l = Started(o, &taken);
  std::vector<int> silent;
  for (int i = 0; i < 3; ++i) {
    silent.push_back(Socket());
    ASSERT_TRUE(ConnectTo(silent.back(), l->port()));
  }
  Send(silent[2], kPreface, sizeof(kPreface) - 1);  // only the preface
  ASSERT_TRUE(WaitFor([&] { return taken.size() == 3; }));
  std::this_thread::sleep_for(kMinEvictAge + milliseconds(100));
  const int real = Socket();
  ASSERT_TRUE(ConnectTo(real, l->port()));
  Send(real, kPreface, sizeof(kPreface) - 1);
  Send(real, kSettings, sizeof(kSettings) - 1);
  EXPECT_TRUE(WaitFor([&] { return taken.size() == 4; }, milliseconds(1000)));
  EXPECT_EQ(l->stats().rejected, 0u);
  EXPECT_EQ(l->stats().evicted, 1u);
  EXPECT_TRUE(ClosedByServer(silent[0]));  // the oldest
  // A connection that completed its handshake is never evicted: with every
  // slot held by one, new connections are refused as before.
  timeval tv{0, 300000};
  ::setsockopt(real, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  EXPECT_FALSE(ClosedByServer(real));
  for (int fd : silent) ::close(fd);
  ::close(real);
  taken.CloseAll();
}

TEST(ProbeListenerTest, TellsAnAcceptingPortFromADeadOne) {
  // A socket that listens but never accepts: what gRPC 1.51 leaves behind
  // after EMFILE.
  const int dead = Socket();
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(dead, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(dead, 16), 0);
  socklen_t len = sizeof(a);
  ::getsockname(dead, reinterpret_cast<sockaddr*>(&a), &len);
  const absl::Status st =
      ProbeListener("127.0.0.1", ntohs(a.sin_port), milliseconds(300));
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;

  auto l = ConnectionListener::Listen("0.0.0.0", 0, {});
  ASSERT_TRUE(l.ok()) << l.status();
  (*l)->Start([](int fd) { ::close(fd); });
  EXPECT_TRUE(ProbeListener("0.0.0.0", (*l)->port(), milliseconds(2000)).ok());
  const int port = (*l)->port();
  l->reset();
  ::close(dead);
  EXPECT_EQ(ProbeListener("127.0.0.1", port, milliseconds(300)).code(),
            absl::StatusCode::kUnavailable);
}

TEST(PeerNameTest, ResolvesDescriptorNames) {
  EXPECT_EQ(PeerName("ipv4:1.2.3.4:5"), "ipv4:1.2.3.4:5");
  EXPECT_EQ(PeerName("fd:x"), "fd:x");
  auto l = ConnectionListener::Listen("127.0.0.1", 0, {});
  ASSERT_TRUE(l.ok());
  Taken taken;
  (*l)->Start([&taken](int fd) {
    std::lock_guard<std::mutex> g(taken.mu);
    taken.fds.push_back(fd);
  });
  const int c = Socket();
  ASSERT_TRUE(ConnectTo(c, (*l)->port()));
  ASSERT_TRUE(WaitFor([&] { return taken.size() == 1; }));
  sockaddr_in mine{};
  socklen_t len = sizeof(mine);
  ::getsockname(c, reinterpret_cast<sockaddr*>(&mine), &len);
  EXPECT_EQ(PeerName("fd:" + std::to_string(taken.fds[0])),
            "ipv4:127.0.0.1:" + std::to_string(ntohs(mine.sin_port)));
  ::close(c);
  taken.CloseAll();
}

}  // namespace
}  // namespace nearprep
