#include "server/metrics/http_endpoint.h"

#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace nearprep {
namespace metrics {
namespace {

TEST(ParseHostPortTest, AcceptsTheUsualForms) {
  auto a = ParseHostPort("0.0.0.0:9464", "metrics.listen");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "0.0.0.0");
  EXPECT_EQ(a->port, 9464);
  auto b = ParseHostPort("[::1]:0", "x");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, 0);
  auto c = ParseHostPort(":9464", "x");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->host, "0.0.0.0");
}

TEST(ParseHostPortTest, RejectsBadInputNamingTheField) {
  for (const char* bad : {"", "9464", "host:", "host:abc", "host:70000",
                          "host:-1", "::1:9464", "a b:1", "h:123456"}) {
    auto r = ParseHostPort(bad, "--metrics-listen");
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--metrics-listen"), std::string::npos);
  }
}

class MetricsHttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_.AddCollector([this](std::vector<MetricFamily>* out) {
      ++scrapes_;
      out->push_back(CounterFamily("test_scrapes_total", "Scrapes.")
                         .Add({}, scrapes_.load()));
    });
  }
  MetricsRegistry registry_;
  std::atomic<int> scrapes_{0};
};

TEST_F(MetricsHttpServerTest, ServesMetricsAndHealth) {
  MetricsHttpServer server(&registry_);
  ASSERT_TRUE(server.Start("127.0.0.1", 0).ok());
  ASSERT_GT(server.BoundPort(), 0);
  httplib::Client client("127.0.0.1", server.BoundPort());
  auto r1 = client.Get("/metrics");
  ASSERT_TRUE(r1);
  EXPECT_EQ(r1->status, 200);
  EXPECT_EQ(r1->get_header_value("Content-Type"), kContentType);
  EXPECT_EQ(r1->body,
            "# HELP test_scrapes_total Scrapes.\n"
            "# TYPE test_scrapes_total counter\n"
            "test_scrapes_total 1\n");
  auto r2 = client.Get("/metrics");
  ASSERT_TRUE(r2);
  EXPECT_NE(r2->body.find("test_scrapes_total 2\n"), std::string::npos);
  auto h = client.Get("/healthz");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(h->body, "ok\n");
  auto missing = client.Get("/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  server.Stop();
  server.Stop();  // idempotent
  httplib::Client after("127.0.0.1", server.BoundPort());
  after.set_connection_timeout(1);
  EXPECT_FALSE(after.Get("/healthz"));
}

TEST_F(MetricsHttpServerTest, PortInUseIsAnErrorNotASharedPort) {
  MetricsHttpServer first(&registry_);
  ASSERT_TRUE(first.Start("127.0.0.1", 0).ok());
  MetricsHttpServer second(&registry_);
  const absl::Status st = second.Start("127.0.0.1", first.BoundPort());
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_NE(st.message().find("cannot listen"), std::string::npos);
}

TEST_F(MetricsHttpServerTest, StopRightAfterStartReturns) {
  for (int i = 0; i < 20; ++i) {
    MetricsHttpServer server(&registry_);
    ASSERT_TRUE(server.Start("127.0.0.1", 0).ok());
    server.Stop();
  }
}

// A raw loopback connection: what a hostile client does.
int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

void Send(int fd, const std::string& s) {
  ASSERT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(s.size()));
}

// Everything until the server closes (or 5 s pass).
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, n);
  return out;
}

std::string Ask(int port, const std::string& request) {
  const int fd = Connect(port);
  if (fd < 0) return "";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out = ReadAll(fd);
  ::close(fd);
  return out;
}

TEST_F(MetricsHttpServerTest, HeaderLimitsAnswer431) {
  MetricsHttpOptions o;
  o.max_header_lines = 10;
  o.max_header_bytes = 1000;
  MetricsHttpServer server(&registry_, o);
  ASSERT_TRUE(server.Start("127.0.0.1", 0).ok());
  const int port = server.BoundPort();
  std::string ten, eleven;
  for (int i = 0; i < 10; ++i) ten += "H" + std::to_string(i) + ": v\r\n";
  eleven = ten + "H10: v\r\n";
  EXPECT_EQ(Ask(port, "GET /healthz HTTP/1.1\r\n" + ten + "\r\n")
                .rfind("HTTP/1.1 200 OK\r\n", 0),
            0u);
  EXPECT_EQ(Ask(port, "GET /healthz HTTP/1.1\r\n" + eleven + "\r\n")
                .rfind("HTTP/1.1 431 ", 0),
            0u);
  EXPECT_EQ(Ask(port, "GET /healthz HTTP/1.1\r\nBig: " +
                          std::string(1000, 'v') + "\r\n\r\n")
                .rfind("HTTP/1.1 431 ", 0),
            0u);
  EXPECT_EQ(server.stats().rejected_header_too_large, 2u);
}

TEST_F(MetricsHttpServerTest, StrictAboutTheRequest) {
  MetricsHttpServer server(&registry_);
  ASSERT_TRUE(server.Start("127.0.0.1", 0).ok());
  const int port = server.BoundPort();
  const std::string post = Ask(port, "POST /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(post.rfind("HTTP/1.1 405 ", 0), 0u) << post;
  EXPECT_NE(post.find("Allow: GET, HEAD\r\n"), std::string::npos);
  EXPECT_EQ(Ask(port, "GET /metrics\r\n\r\n").rfind("HTTP/1.1 400 ", 0), 0u);
  EXPECT_EQ(Ask(port, "GET /metrics HTTP/2.0\r\n\r\n").rfind("HTTP/1.1 505 ", 0),
            0u);
  EXPECT_EQ(Ask(port, "GET / HTTP/1.1\r\nno colon\r\n\r\n")
                .rfind("HTTP/1.1 400 ", 0),
            0u);
  const std::string head = Ask(port, "HEAD /healthz HTTP/1.0\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
  EXPECT_NE(head.find("Content-Length: 3\r\n"), std::string::npos);
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n");  // no body
  EXPECT_EQ(Ask(port, "GET /metrics?x=1 HTTP/1.1\r\n\r\n")
                .rfind("HTTP/1.1 200 OK\r\n", 0),
            0u);
}

TEST_F(MetricsHttpServerTest, AWholeRequestDeadlineEndsATrickle) {
  MetricsHttpOptions o;
  o.request_timeout = std::chrono::milliseconds(300);
  MetricsHttpServer server(&registry_, o);
  ASSERT_TRUE(server.Start("127.0.0.1", 0).ok());
  const int fd = Connect(server.BoundPort());
  ASSERT_GE(fd, 0);
  const auto start = std::chrono::steady_clock::now();
  Send(fd, "GET /metrics HTTP/1.1\r\n");
  // One header line every 100 ms: each read is quick, the request never
  // ends; a per-read timeout would wait forever.
  std::string answer;
  for (int i = 0; i < 30 && answer.empty(); ++i) {
    ::send(fd, "X: v\r\n", 6, MSG_NOSIGNAL);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    char buf[256];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) answer.assign(buf, n);
    if (n == 0) answer = "closed";
  }
  ::close(fd);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(answer.rfind("HTTP/1.1 408 ", 0), 0u) << answer;
  EXPECT_LT(took, std::chrono::seconds(2));
  EXPECT_EQ(server.stats().rejected_timeout, 1u);
}

TEST_F(MetricsHttpServerTest, TheCapClosesTheOldestIdleConnectionForAScrape) {
  MetricsHttpOptions o;
  o.max_connections = 4;
  MetricsHttpServer server(&registry_, o);
  ASSERT_TRUE(server.Start("127.0.0.1", 0).ok());
  // Connections that send nothing are not even accepted (TCP_DEFER_ACCEPT:
  // they wait in the kernel); ones that started a request and stopped are,
  // and fill the cap: the oldest (at least 500 ms old) make room.
  std::vector<int> idle;
  for (int i = 0; i < 20; ++i) {
    const int fd = Connect(server.BoundPort());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  for (int i = 0; i < 20; ++i) {
    const int fd = Connect(server.BoundPort());
    ASSERT_GE(fd, 0);
    Send(fd, "G");
    idle.push_back(fd);
  }
  const std::string r = Ask(server.BoundPort(), "GET /healthz HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  const MetricsHttpStats s = server.stats();
  EXPECT_LE(s.connections_active, 4);
  EXPECT_GE(s.connections_rejected, 17u);
  EXPECT_EQ(s.connections_limit, 4);
  for (int fd : idle) ::close(fd);
  std::vector<MetricFamily> families;
  server.Collect(&families);
  EXPECT_NE(WriteExposition(families).find(
                "nearprep_metrics_http_connections_limit 4\n"),
            std::string::npos);
}

// Issue 37 item 9: 200 scrapers at once against the 64-connection cap. A
// scraper connects, then sends its request (here 50 ms later, as a loaded
// host or a distant Prometheus does): the cap evicted connections accepted
// before their request arrived (179 answers of 200 in one round of nine; 64
// of 200 here). Now a connection is accepted once its first bytes came
// (TCP_DEFER_ACCEPT), and one whose request is still arriving is not
// evicted while it is young: newer ones wait in the listen backlog.
// `split`: the first byte goes out at once, the rest 50 ms later (the
// connections are then accepted before their requests are complete).
int ScrapeAtOnce(int port, int scrapers, bool split) {
  std::atomic<int> answered{0}, connected{0};
  std::vector<std::thread> threads;
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  for (int i = 0; i < scrapers; ++i) {
    threads.emplace_back([&] {
      const int fd = Connect(port);
      if (fd < 0) return;
      if (split) ::send(fd, req.data(), 1, MSG_NOSIGNAL);
      ++connected;
      // Every scraper is connected before any request goes out (whole).
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (connected.load() < scrapers && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const size_t from = split ? 1 : 0;
      ::send(fd, req.data() + from, req.size() - from, MSG_NOSIGNAL);
      const std::string r = ReadAll(fd);
      ::close(fd);
      if (r.rfind("HTTP/1.1 200 OK\r\n", 0) == 0 &&
          r.find("test_scrapes_total") != std::string::npos) {
        ++answered;
      }
    });
  }
  for (auto& t : threads) t.join();
  return answered.load();
}

TEST_F(MetricsHttpServerTest, TwoHundredConcurrentScrapersAreAllAnswered) {
  MetricsHttpServer server(&registry_, MetricsHttpOptions{});
  ASSERT_TRUE(server.Start("127.0.0.1", 0).ok());
  EXPECT_EQ(ScrapeAtOnce(server.BoundPort(), 200, /*split=*/false), 200);
  EXPECT_EQ(server.stats().connections_rejected, 0u);
  EXPECT_EQ(ScrapeAtOnce(server.BoundPort(), 200, /*split=*/true), 200);
  const MetricsHttpStats s = server.stats();
  EXPECT_EQ(s.connections_rejected, 0u);
  EXPECT_GE(s.accept_waits, 1u);  // the split requests waited in the backlog
  EXPECT_EQ(s.requests_served, 400u);
}

}  // namespace
}  // namespace metrics
}  // namespace nearprep
