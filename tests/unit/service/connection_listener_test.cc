#include "server/service/connection_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
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
