#include "server/metrics/http_endpoint.h"

#include <httplib.h>

#include <string>
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

}  // namespace
}  // namespace metrics
}  // namespace nearprep
