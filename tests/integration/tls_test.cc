// TLS end to end: an in-process NearprepServer with TLS (and mutual TLS)
// against nearprep::Client. A throwaway CA, server certificate (SAN
// localhost, 127.0.0.1) and client certificate are made with the `openssl`
// command at test time; the suite is skipped when it is not installed.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "nearprep/client.h"
#include "server/backend/cpu_backend.h"
#include "server/daemon/daemon_config.h"
#include "server/service/server.h"
#include "tests/integration/test_util.h"

namespace nearprep {
namespace {

using testing_util::BasicRequest;
using testing_util::Canonical;
using testing_util::TempDir;
using Clock = std::chrono::steady_clock;

bool Shell(const std::string& cmd) { return std::system(cmd.c_str()) == 0; }

// Writes CA, server and client key pairs into `dir`; false on failure.
bool MakeCertificates(const std::string& dir) {
  const std::string d = "'" + dir + "'";
  const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1"
                         " -nodes";
  {
    std::ofstream server_ext(dir + "/server.ext");
    server_ext << "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                  "basicConstraints=CA:FALSE\n"
                  "keyUsage=digitalSignature,keyEncipherment\n"
                  "extendedKeyUsage=serverAuth\n";
    std::ofstream client_ext(dir + "/client.ext");
    client_ext << "basicConstraints=CA:FALSE\n"
                  "keyUsage=digitalSignature,keyEncipherment\n"
                  "extendedKeyUsage=clientAuth\n";
  }
  const std::string quiet = " >/dev/null 2>&1";
  if (!Shell("openssl req -x509" + ec + " -keyout " + d + "/ca.key -out " + d +
           "/ca.pem -days 2 -subj '/CN=nearprep test CA'" + quiet)) {
    return false;
  }
  for (const char* who : {"server", "client"}) {
    const std::string w = who;
    const std::string cn = w == "server" ? "localhost" : "nearprep test client";
    if (!Shell("openssl req" + ec + " -keyout " + d + "/" + w + ".key -out " +
             d + "/" + w + ".csr -subj '/CN=" + cn + "'" + quiet) ||
        !Shell("openssl x509 -req -in " + d + "/" + w + ".csr -CA " + d +
             "/ca.pem -CAkey " + d + "/ca.key -CAcreateserial -days 2 -out " +
             d + "/" + w + ".pem -extfile " + d + "/" + w + ".ext" + quiet)) {
      return false;
    }
  }
  return true;
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!Shell("command -v openssl >/dev/null 2>&1")) return;
    certs_ = new TempDir("tls_certs");
    data_ = new TempDir("tls_data");
    if (!MakeCertificates(certs_->path())) {
      ADD_FAILURE() << "openssl could not make the test certificates in "
                    << certs_->path();
      return;
    }
    testing_util::MakeDataset(data_->path(), 2, 5, false, 7);
    ready_ = true;
  }
  static void TearDownTestSuite() {
    delete certs_;
    delete data_;
    certs_ = data_ = nullptr;
  }
  void SetUp() override {
    if (!ready_) GTEST_SKIP() << "openssl not installed (or failed)";
  }

  static std::string Cert(const std::string& name) {
    return certs_->path() + "/" + name;
  }

  static ServerOptions Options(ServerOptions::TlsOptions tls) {
    ServerOptions o;
    DatasetConfig d;
    d.name = "ds";
    d.root = data_->path();
    o.datasets = {d};
    o.pipeline.workers = 1;
    o.pipeline.prefetch_depth = 2;
    o.tls = std::move(tls);
    return o;
  }

  static std::unique_ptr<NearprepServer> StartServer(
      ServerOptions::TlsOptions tls) {
    auto s = NearprepServer::Create(Options(std::move(tls)),
                                    std::make_shared<CpuBackend>());
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return nullptr;
    absl::Status st = (*s)->Start("127.0.0.1", 0);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) return nullptr;
    return std::move(*s);
  }

  static ServerOptions::TlsOptions ServerTls(bool mutual) {
    ServerOptions::TlsOptions t;
    t.cert_file = Cert("server.pem");
    t.key_file = Cert("server.key");
    if (mutual) t.client_ca_file = Cert("ca.pem");
    return t;
  }

  static ClientOptions ClientFor(const std::string& target) {
    ClientOptions o;
    o.target = target;
    o.reconnect_deadline = std::chrono::milliseconds(600);
    o.initial_backoff = std::chrono::milliseconds(50);
    o.max_backoff = std::chrono::milliseconds(200);
    o.rpc_timeout = std::chrono::milliseconds(5000);
    return o;
  }

  // All batches of a small request, or the reader's error.
  static absl::StatusOr<std::vector<std::string>> Stream(Client* client) {
    v1::StreamBatchesRequest r = BasicRequest("ds", 4);
    std::unique_ptr<BatchReader> reader = client->StreamBatches(r);
    std::vector<std::string> out;
    v1::Batch b;
    while (reader->Next(&b)) out.push_back(Canonical(b));
    if (!reader->status().ok()) return reader->status();
    return out;
  }

  static TempDir* certs_;
  static TempDir* data_;
  static bool ready_;
};

TempDir* TlsTest::certs_ = nullptr;
TempDir* TlsTest::data_ = nullptr;
bool TlsTest::ready_ = false;

TEST_F(TlsTest, TlsStreamEqualsPlaintextStream) {
  auto plain = StartServer({});
  auto tls = StartServer(ServerTls(false));
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(tls, nullptr);

  Client plain_client(
      ClientFor("127.0.0.1:" + std::to_string(plain->BoundPort())));
  absl::StatusOr<std::vector<std::string>> want = Stream(&plain_client);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(want->size(), 3u);  // 10 samples in batches of 4.

  // By host name (SAN DNS:localhost) and by IP address (SAN IP:127.0.0.1).
  for (const std::string host : {"localhost", "127.0.0.1"}) {
    ClientOptions o = ClientFor(host + ":" + std::to_string(tls->BoundPort()));
    o.tls_root_ca_file = Cert("ca.pem");
    Client client(o);
    absl::StatusOr<v1::ServerInfo> info = client.Info();
    ASSERT_TRUE(info.ok()) << host << ": " << info.status();
    absl::StatusOr<std::vector<std::string>> got = Stream(&client);
    ASSERT_TRUE(got.ok()) << host << ": " << got.status();
    EXPECT_EQ(*got, *want) << host;
  }
  plain->Shutdown(std::chrono::milliseconds(0));
  tls->Shutdown(std::chrono::milliseconds(0));
}

TEST_F(TlsTest, TargetNameOverrideIsChecked) {
  auto tls = StartServer(ServerTls(false));
  ASSERT_NE(tls, nullptr);
  const std::string target = "127.0.0.1:" + std::to_string(tls->BoundPort());
  ClientOptions o = ClientFor(target);
  o.tls_root_ca_file = Cert("ca.pem");
  o.tls_target_name_override = "localhost";
  EXPECT_TRUE(Client(o).Info().ok());
  // A name the certificate does not carry fails verification.
  o.tls_target_name_override = "not-the-server.example";
  absl::StatusOr<v1::ServerInfo> bad = Client(o).Info();
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kUnavailable)
      << bad.status();
}

TEST_F(TlsTest, PlaintextClientToTlsPortFailsFast) {
  auto tls = StartServer(ServerTls(false));
  ASSERT_NE(tls, nullptr);
  ClientOptions o = ClientFor("127.0.0.1:" + std::to_string(tls->BoundPort()));
  o.rpc_timeout = std::chrono::milliseconds(3000);
  Client client(o);
  const Clock::time_point start = Clock::now();
  absl::StatusOr<v1::ServerInfo> info = client.Info();
  EXPECT_EQ(info.status().code(), absl::StatusCode::kUnavailable)
      << info.status();
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(2500));

  // And the streaming reader gives up (after its reconnect deadline).
  absl::StatusOr<std::vector<std::string>> got = Stream(&client);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable)
      << got.status();
}

TEST_F(TlsTest, TlsClientToPlaintextPortFails) {
  auto plain = StartServer({});
  ASSERT_NE(plain, nullptr);
  ClientOptions o =
      ClientFor("127.0.0.1:" + std::to_string(plain->BoundPort()));
  o.tls_root_ca_file = Cert("ca.pem");
  absl::StatusOr<v1::ServerInfo> info = Client(o).Info();
  EXPECT_EQ(info.status().code(), absl::StatusCode::kUnavailable)
      << info.status();
}

TEST_F(TlsTest, MutualTlsRequiresClientCertificate) {
  auto mtls = StartServer(ServerTls(true));
  ASSERT_NE(mtls, nullptr);
  const std::string target = "localhost:" + std::to_string(mtls->BoundPort());

  ClientOptions anonymous = ClientFor(target);
  anonymous.tls_root_ca_file = Cert("ca.pem");
  {
    Client client(anonymous);
    absl::StatusOr<v1::ServerInfo> info = client.Info();
    EXPECT_FALSE(info.ok());
    EXPECT_EQ(info.status().code(), absl::StatusCode::kUnavailable)
        << info.status();
    absl::StatusOr<std::vector<std::string>> got = Stream(&client);
    EXPECT_FALSE(got.ok());
  }
  // A client certificate with a private key that does not belong to it.
  {
    ClientOptions o = anonymous;
    o.tls_client_cert_file = Cert("ca.pem");
    o.tls_client_key_file = Cert("client.key");
    EXPECT_FALSE(Client(o).Info().ok());
  }
  ClientOptions with_cert = anonymous;
  with_cert.tls_client_cert_file = Cert("client.pem");
  with_cert.tls_client_key_file = Cert("client.key");
  Client client(with_cert);
  absl::StatusOr<v1::ServerInfo> info = client.Info();
  ASSERT_TRUE(info.ok()) << info.status();
  absl::StatusOr<std::vector<std::string>> got = Stream(&client);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 3u);
}

TEST_F(TlsTest, BadServerTlsFilesAreStartErrors) {
  struct Case {
    ServerOptions::TlsOptions tls;
    std::string must_mention;
  };
  {
    std::ofstream junk(Cert("junk.pem"));
    junk << "this is not a certificate\n";
  }
  const std::string missing = Cert("does_not_exist.pem");
  std::vector<Case> cases = {
      {{missing, Cert("server.key"), ""}, missing},
      {{Cert("server.pem"), missing, ""}, missing},
      {{Cert("server.pem"), Cert("server.key"), missing}, missing},
      {{Cert("junk.pem"), Cert("server.key"), ""}, Cert("junk.pem")},
      {{Cert("server.pem"), "", ""}, "tls.key"},
      {{"", Cert("server.key"), ""}, "tls.cert"},
  };
  for (const Case& c : cases) {
    auto s = NearprepServer::Create(Options(c.tls),
                                    std::make_shared<CpuBackend>());
    ASSERT_TRUE(s.ok()) << s.status();
    absl::Status st = (*s)->Start("127.0.0.1", 0);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(c.must_mention), std::string::npos) << st;
    EXPECT_EQ((*s)->BoundPort(), 0);
  }
  // A key that does not match the certificate: no crash, an error.
  auto s = NearprepServer::Create(
      Options({Cert("server.pem"), Cert("client.key"), ""}),
      std::make_shared<CpuBackend>());
  ASSERT_TRUE(s.ok()) << s.status();
  absl::Status st = (*s)->Start("127.0.0.1", 0);
  if (!st.ok()) {
    EXPECT_NE(st.message().find(Cert("server.pem")), std::string::npos) << st;
  } else {
    // gRPC may accept the pair at listen time; then no handshake succeeds.
    ClientOptions o =
        ClientFor("localhost:" + std::to_string((*s)->BoundPort()));
    o.tls_root_ca_file = Cert("ca.pem");
    EXPECT_FALSE(Client(o).Info().ok());
  }
}

TEST_F(TlsTest, ClientWithUnreadableTlsFileReportsIt) {
  ClientOptions o = ClientFor("localhost:1");
  o.tls_root_ca_file = Cert("nope.pem");
  Client client(o);
  absl::StatusOr<v1::ServerInfo> info = client.Info();
  EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(info.status().message().find("nope.pem"), std::string::npos)
      << info.status();
  absl::StatusOr<std::vector<std::string>> got = Stream(&client);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);

  ClientOptions half = ClientFor("localhost:1");
  half.tls_root_ca_file = Cert("ca.pem");
  half.tls_client_cert_file = Cert("client.pem");
  absl::StatusOr<v1::ServerInfo> h = Client(half).Info();
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find("tls_client_key_file"),
            std::string::npos)
      << h.status();
}

// The daemon's side: YAML section and flags (no certificates needed).
TEST(TlsDaemonConfigTest, YamlSectionAndFlags) {
  DaemonConfig c;
  absl::Status st = ApplyYamlConfig(
      "tls:\n  cert: /c.pem\n  key: /k.pem\n  client_ca: /ca.pem\n", "t.yaml",
      &c);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(c.server.tls.cert_file, "/c.pem");
  EXPECT_EQ(c.server.tls.key_file, "/k.pem");
  EXPECT_EQ(c.server.tls.client_ca_file, "/ca.pem");

  DaemonConfig typo;
  st = ApplyYamlConfig("tls:\n  certificate: /c.pem\n", "t.yaml", &typo);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tls.certificate"), std::string::npos) << st;

  const char* ok[] = {"nearprepd",  "--dataset", "d=/x",   "--tls-cert",
                      "/c.pem",     "--tls-key", "/k.pem", "--tls-client-ca",
                      "/ca.pem"};
  CommandLine cl = ParseCommandLine(9, ok);
  ASSERT_FALSE(cl.exit_now) << cl.message;
  EXPECT_EQ(cl.config.server.tls.cert_file, "/c.pem");
  EXPECT_EQ(cl.config.server.tls.key_file, "/k.pem");
  EXPECT_EQ(cl.config.server.tls.client_ca_file, "/ca.pem");

  const char* no_key[] = {"nearprepd", "--dataset", "d=/x", "--tls-cert",
                          "/c.pem"};
  cl = ParseCommandLine(5, no_key);
  EXPECT_TRUE(cl.exit_now);
  EXPECT_EQ(cl.exit_code, 2);
  EXPECT_NE(cl.message.find("tls.key"), std::string::npos) << cl.message;

  const char* no_cert[] = {"nearprepd", "--dataset", "d=/x", "--tls-key",
                           "/k.pem"};
  cl = ParseCommandLine(5, no_cert);
  EXPECT_EQ(cl.exit_code, 2);
  EXPECT_NE(cl.message.find("tls.cert"), std::string::npos) << cl.message;
}

}  // namespace
}  // namespace nearprep
