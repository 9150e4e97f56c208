#include "server/daemon/daemon_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <tuple>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace nearprep {
namespace {

CommandLine Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "nearprepd");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return ParseCommandLine(static_cast<int>(argv.size()), argv.data());
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            (name + "." + std::to_string(::getpid())))
                               .string();
  std::ofstream(path) << text;
  return path;
}

TEST(DaemonConfigTest, ParsesByteSizes) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("64K"), 64u << 10);
  EXPECT_EQ(*ParseByteSize("512m"), 512u << 20);
  EXPECT_EQ(*ParseByteSize("2GiB"), uint64_t{2} << 30);
  EXPECT_FALSE(ParseByteSize("").ok());
  EXPECT_FALSE(ParseByteSize("12Q").ok());
  EXPECT_FALSE(ParseByteSize("G").ok());
  EXPECT_FALSE(ParseByteSize("99999999999999999999").ok());
  EXPECT_FALSE(ParseByteSize("99999999999T").ok());
}

TEST(DaemonConfigTest, ParsesDatasetFlags) {
  auto a = ParseDatasetFlag("sample=/data/x");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->name, "sample");
  EXPECT_EQ(a->root, "/data/x");
  EXPECT_EQ(a->format, "image_folder");
  auto b = ParseDatasetFlag("l=/data/y,list=train.txt");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->format, "file_list");
  EXPECT_EQ(b->root, "/data/y");
  EXPECT_EQ(b->list_file, "train.txt");
  EXPECT_FALSE(ParseDatasetFlag("noequals").ok());
  EXPECT_FALSE(ParseDatasetFlag("=/root").ok());
  EXPECT_FALSE(ParseDatasetFlag("x=").ok());
  auto t = ParseDatasetFlag("t=/data/tf,format=tfrecord");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->format, "tfrecord");
  EXPECT_EQ(t->root, "/data/tf");
  EXPECT_FALSE(ParseDatasetFlag("t=/data/tf,format=lmdb").ok());
  EXPECT_FALSE(ParseDatasetFlag("t=,format=tar").ok());
}

TEST(DaemonConfigTest, YamlFileThenFlagsOverride) {
  const std::string path = WriteTemp("nearprepd_cfg.yaml", R"(
listen: 127.0.0.1
port: 9000
log_level: debug
drain_seconds: 2.5
backend: {kind: auto, xclbin: /opt/k.xclbin}
pipeline: {workers: 3, prefetch_depth: 6}
limits:
  max_batch_size: 64
  max_output_pixels: 65536
  max_decoded_pixels: 1000000
  max_concurrent_streams: 5
  per_stream_memory: 256M
datasets:
  - {name: a, root: /data/a}
  - {name: b, format: file_list, root: /data/b, list_file: list.txt,
     max_file_bytes: 1M}
)");
  CommandLine cl = Parse({"--config", path, "--port", "0", "--workers", "1",
                          "--dataset", "c=/data/c", "--max-batch-size", "32"});
  ASSERT_FALSE(cl.exit_now) << cl.message;
  const DaemonConfig& c = cl.config;
  EXPECT_EQ(c.listen_address, "127.0.0.1");
  EXPECT_EQ(c.port, 0);                     // flag wins
  EXPECT_EQ(c.server.pipeline.workers, 1);  // flag wins
  EXPECT_EQ(c.server.pipeline.prefetch_depth, 6);
  EXPECT_EQ(c.server.limits.max_batch_size, 32u);  // flag wins
  EXPECT_EQ(c.server.limits.max_output_pixels, 65536u);
  EXPECT_EQ(c.server.limits.max_decoded_pixels, 1000000u);
  EXPECT_EQ(c.server.limits.max_concurrent_streams, 5u);
  EXPECT_EQ(c.server.limits.per_stream_memory_bytes, uint64_t{256} << 20);
  EXPECT_EQ(c.backend.kind, "auto");
  EXPECT_EQ(c.backend.fpga.xclbin, "/opt/k.xclbin");
  EXPECT_EQ(c.log_level, "debug");
  EXPECT_DOUBLE_EQ(c.drain_seconds, 2.5);
  ASSERT_EQ(c.server.datasets.size(), 3u);
  EXPECT_EQ(c.server.datasets[1].format, "file_list");
  EXPECT_EQ(c.server.datasets[1].list_file, "list.txt");
  EXPECT_EQ(c.server.datasets[1].max_file_bytes, 1u << 20);
  EXPECT_EQ(c.server.datasets[2].name, "c");
  std::filesystem::remove(path);
}

TEST(DaemonConfigTest, FleetPlacementKeys) {
  const std::string path = WriteTemp("nearprepd_placement.yaml", R"(
datasets:
  - name: imagenet
    format: tfrecord
    root: /data/tf
    manifest: /etc/nearprep/imagenet.nearprep-manifest
    placement: /etc/nearprep/imagenet.nearprep-placement
    node: "10.0.0.2:7070"
  - {name: plain, format: tfrecord, root: /data/tf2, manifest: m}
)");
  CommandLine cl = Parse({"--config", path});
  ASSERT_FALSE(cl.exit_now) << cl.message;
  ASSERT_EQ(cl.config.server.datasets.size(), 2u);
  const DatasetConfig& d = cl.config.server.datasets[0];
  EXPECT_EQ(d.placement, "/etc/nearprep/imagenet.nearprep-placement");
  EXPECT_EQ(d.node, "10.0.0.2:7070");
  EXPECT_TRUE(cl.config.server.datasets[1].placement.empty());
  EXPECT_TRUE(cl.config.server.datasets[1].node.empty());
  std::filesystem::remove(path);
}

TEST(DaemonConfigTest, BadConfigsExitWithCode2AndNameTheKey) {
  struct Case {
    const char* yaml;
    const char* expected;  // Substring of the message.
  };
  const Case cases[] = {
      {"prot: 7070\ndatasets: [{name: a, root: /a}]\n", "prot"},
      {"port: 70000\ndatasets: [{name: a, root: /a}]\n", "port"},
      {"port: -1\ndatasets: [{name: a, root: /a}]\n", "port"},
      {"port: seven\ndatasets: [{name: a, root: /a}]\n", "port"},
      {"limits: {max_batch_size: 0}\ndatasets: [{name: a, root: /a}]\n",
       "limits.max_batch_size"},
      {"limits: {per_stream_memory: 12Q}\ndatasets: [{name: a, root: /a}]\n",
       "limits.per_stream_memory"},
      {"backend: {kind: gpu}\ndatasets: [{name: a, root: /a}]\n",
       "backend.kind"},
      {"datasets: [{name: a}]\n", "datasets[0].root"},
      {"datasets: [{name: a, root: /a}, {name: a, root: /b}]\n",
       "datasets[1].name"},
      {"datasets: [{name: a, root: /a, format: lmdb}]\n", "datasets[0].format"},
      {"datasets: [{name: a, root: /a, format: tfrecord, label_offset: x}]\n",
       "datasets[0].label_offset"},
      {"datasets: [{name: a, root: /a, colour: red}]\n", "datasets[0].colour"},
      {"datasets: {name: a}\n", "datasets"},
      {"port: [1, 2\n", "not valid YAML"},
      {"log_level: loud\ndatasets: [{name: a, root: /a}]\n", "log_level"},
      {"port: 1\n", "datasets"},
      {"metrics: {listen: 9464}\ndatasets: [{name: a, root: /a}]\n",
       "metrics.listen"},
      {"metrics: {listen: \"h:99999\"}\ndatasets: [{name: a, root: /a}]\n",
       "metrics.listen"},
      {"metrics: {port_file: /tmp/p}\ndatasets: [{name: a, root: /a}]\n",
       "metrics.port_file"},
      {"metrics: {listn: \":1\"}\ndatasets: [{name: a, root: /a}]\n",
       "metrics.listn"},
      // A fleet placement: both keys or neither, and only with a manifest.
      {"datasets: [{name: a, root: /a, format: tfrecord, manifest: m, "
       "placement: p}]\n",
       "datasets[0].node: required with placement"},
      {"datasets: [{name: a, root: /a, format: tfrecord, manifest: m, node: "
       "x}]\n",
       "datasets[0].placement: required with node"},
      {"datasets: [{name: a, root: /a, format: tfrecord, placement: p, node: "
       "x}]\n",
       "datasets[0].placement: only with manifest"},
      {"datasets: [{name: a, root: /a, format: tfrecord, manifest: m, "
       "placement: [p],"
       " node: x}]\n",
       "datasets[0].placement"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.yaml);
    const std::string path = WriteTemp("nearprepd_bad.yaml", c.yaml);
    CommandLine cl = Parse({"--config", path});
    EXPECT_TRUE(cl.exit_now);
    EXPECT_EQ(cl.exit_code, 2);
    EXPECT_NE(cl.message.find(c.expected), std::string::npos) << cl.message;
    std::filesystem::remove(path);
  }
}

// The gRPC port's connection cap: 0 (from the descriptor limit) by
// default, a number from limits.max_connections, a bad one names the key.
TEST(DaemonConfigTest, MaxConnections) {
  CommandLine def = Parse({"--dataset", "a=/a"});
  ASSERT_FALSE(def.exit_now) << def.message;
  EXPECT_EQ(def.config.server.max_connections, 0);
  const std::string path = WriteTemp(
      "nearprepd_max_conns.yaml",
      "limits: {max_connections: 500}\ndatasets: [{name: a, root: /a}]\n");
  CommandLine set = Parse({"--config", path});
  ASSERT_FALSE(set.exit_now) << set.message;
  EXPECT_EQ(set.config.server.max_connections, 500);
  std::filesystem::remove(path);
  const std::string bad_yaml = WriteTemp(
      "nearprepd_max_conns_bad.yaml",
      "limits: {max_connections: -3}\ndatasets: [{name: a, root: /a}]\n");
  CommandLine bad = Parse({"--config", bad_yaml});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.message.find("limits.max_connections"), std::string::npos)
      << bad.message;
  std::filesystem::remove(bad_yaml);
}

// Silent connections (issue 37 item 2): 10 s to send the HTTP/2 preface and
// 300 s of silence by default; 0 turns either off; over a day or negative
// is refused naming the key.
TEST(DaemonConfigTest, HandshakeAndIdleTimeouts) {
  CommandLine def = Parse({"--dataset", "a=/a"});
  ASSERT_FALSE(def.exit_now) << def.message;
  EXPECT_EQ(def.config.server.handshake_timeout_seconds, 10);
  EXPECT_EQ(def.config.server.idle_timeout_seconds, 300);
  const std::string path = WriteTemp(
      "nearprepd_timeouts.yaml",
      "limits: {handshake_timeout_seconds: 3, idle_timeout_seconds: 0}\n"
      "datasets: [{name: a, root: /a}]\n");
  CommandLine set = Parse({"--config", path});
  ASSERT_FALSE(set.exit_now) << set.message;
  EXPECT_EQ(set.config.server.handshake_timeout_seconds, 3);
  EXPECT_EQ(set.config.server.idle_timeout_seconds, 0);
  std::filesystem::remove(path);
  for (const char* bad_value :
       {"handshake_timeout_seconds: 86401", "idle_timeout_seconds: -1",
        "idle_timeout_seconds: 1e300"}) {
    const std::string bad_yaml = WriteTemp(
        "nearprepd_timeouts_bad.yaml",
        std::string("limits: {") + bad_value +
            "}\ndatasets: [{name: a, root: /a}]\n");
    CommandLine bad = Parse({"--config", bad_yaml});
    EXPECT_EQ(bad.exit_code, 2) << bad_value;
    const std::string key =
        std::string("limits.") +
        std::string(bad_value).substr(0, std::string(bad_value).find(':'));
    EXPECT_NE(bad.message.find(key), std::string::npos) << bad.message;
    std::filesystem::remove(bad_yaml);
  }
}

// gRPC's memory quota: 1G by default, from the config and the flag (the
// flag wins), 0 allowed (no quota), a bad size names its key or flag.
TEST(DaemonConfigTest, GrpcMemoryQuota) {
  CommandLine def = Parse({"--dataset", "a=/a"});
  ASSERT_FALSE(def.exit_now) << def.message;
  EXPECT_EQ(def.config.server.grpc_memory_bytes, uint64_t{1} << 30);
  const std::string path =
      WriteTemp("nearprepd_grpc_mem.yaml",
                "limits: {grpc_memory: 0}\ndatasets: [{name: a, root: /a}]\n");
  CommandLine zero = Parse({"--config", path});
  ASSERT_FALSE(zero.exit_now) << zero.message;
  EXPECT_EQ(zero.config.server.grpc_memory_bytes, 0u);
  CommandLine flag = Parse({"--config", path, "--grpc-memory", "64M"});
  ASSERT_FALSE(flag.exit_now) << flag.message;
  EXPECT_EQ(flag.config.server.grpc_memory_bytes, uint64_t{64} << 20);
  std::filesystem::remove(path);
  CommandLine bad = Parse({"--dataset", "a=/a", "--grpc-memory", "lots"});
  EXPECT_TRUE(bad.exit_now);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.message.find("--grpc-memory"), std::string::npos)
      << bad.message;
  const std::string bad_yaml = WriteTemp(
      "nearprepd_grpc_mem_bad.yaml",
      "limits: {grpc_memory: 12Q}\ndatasets: [{name: a, root: /a}]\n");
  CommandLine bad2 = Parse({"--config", bad_yaml});
  EXPECT_EQ(bad2.exit_code, 2);
  EXPECT_NE(bad2.message.find("limits.grpc_memory"), std::string::npos)
      << bad2.message;
  std::filesystem::remove(bad_yaml);
}

TEST(DaemonConfigTest, BadFlagsExitWithCode2HelpWith0) {
  CommandLine a = Parse({"--port", "x", "--dataset", "a=/a"});
  EXPECT_TRUE(a.exit_now);
  EXPECT_EQ(a.exit_code, 2);
  CommandLine b = Parse({"--backend", "gpu", "--dataset", "a=/a"});
  EXPECT_TRUE(b.exit_now);
  EXPECT_EQ(b.exit_code, 2);
  CommandLine c = Parse({"--config", "/nonexistent/nearprepd.yaml"});
  EXPECT_EQ(c.exit_code, 2);
  EXPECT_NE(c.message.find("--config"), std::string::npos);
  CommandLine d = Parse({"--no-such-flag"});
  EXPECT_EQ(d.exit_code, 2);
  CommandLine h = Parse({"--help"});
  EXPECT_TRUE(h.exit_now);
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_NE(h.message.find("--port-file"), std::string::npos);
}

TEST(DaemonConfigTest, MetricsListenFromYamlAndFlags) {
  CommandLine off = Parse({"--dataset", "a=/a"});
  ASSERT_FALSE(off.exit_now) << off.message;
  EXPECT_EQ(off.config.metrics_listen, "");  // off by default
  const std::string path = WriteTemp(
      "nearprepd_metrics.yaml",
      "metrics:\n  listen: 0.0.0.0:9464\ndatasets: [{name: a, root: /a}]\n");
  CommandLine yaml = Parse({"--config", path});
  ASSERT_FALSE(yaml.exit_now) << yaml.message;
  EXPECT_EQ(yaml.config.metrics_listen, "0.0.0.0:9464");
  CommandLine flag = Parse({"--config", path, "--metrics-listen", "127.0.0.1:0",
                            "--metrics-port-file", "/tmp/mp"});
  ASSERT_FALSE(flag.exit_now) << flag.message;
  EXPECT_EQ(flag.config.metrics_listen, "127.0.0.1:0");
  EXPECT_EQ(flag.config.metrics_port_file, "/tmp/mp");
  CommandLine bad = Parse({"--dataset", "a=/a", "--metrics-listen", "nope"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.message.find("metrics.listen"), std::string::npos)
      << bad.message;
  std::filesystem::remove(path);
}

TEST(DaemonConfigTest, ExampleConfigInDeployIsValid) {
  std::ifstream in(NEARPREP_SOURCE_DIR "/deploy/nearprepd.example.yaml");
  ASSERT_TRUE(in) << "deploy/nearprepd.example.yaml missing";
  std::stringstream ss;
  ss << in.rdbuf();
  DaemonConfig c;
  absl::Status st = ApplyYamlConfig(ss.str(), "example", &c);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_TRUE(ValidateDaemonConfig(c).ok()) << ValidateDaemonConfig(c);
  EXPECT_EQ(c.port, 7070);
  EXPECT_FALSE(c.server.datasets.empty());
  EXPECT_EQ(c.metrics_listen, "0.0.0.0:9464");  // on in deploy/ configs
}

// Issue 32: the decoded-image cache's budget, from YAML and flags; per
// dataset it defaults to the budget split between the datasets.
TEST(DaemonConfigTest, DecodedCacheBudgetFromYamlAndFlags) {
  DaemonConfig c;
  ASSERT_TRUE(ApplyYamlConfig("decoded_cache:\n  bytes: 2G\n  dataset_bytes: 512M\n",
                              "t", &c)
                  .ok());
  EXPECT_EQ(c.backend.decoded_cache_bytes, uint64_t{2} << 30);
  EXPECT_EQ(c.backend.decoded_cache_dataset_bytes, uint64_t{512} << 20);
  EXPECT_FALSE(ApplyYamlConfig("decoded_cache:\n  byte: 1G\n", "t", &c).ok());
  CommandLine off = Parse({"--dataset", "a=/a"});
  ASSERT_FALSE(off.exit_now) << off.message;
  EXPECT_EQ(off.config.backend.decoded_cache_bytes, 0u);  // off by default
  CommandLine on = Parse({"--dataset", "a=/a", "--dataset", "b=/b",
                          "--decoded-cache-bytes", "64M"});
  ASSERT_FALSE(on.exit_now) << on.message;
  EXPECT_EQ(on.config.backend.decoded_cache_bytes, uint64_t{64} << 20);
  EXPECT_EQ(on.config.backend.dataset_count, 2u);
  CommandLine bad = Parse({"--dataset", "a=/a", "--decoded-cache-bytes", "lots"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.message.find("decoded-cache-bytes"), std::string::npos)
      << bad.message;
}

// Issue 25: without `listen`, plaintext stays on loopback; TLS keeps the old
// default (every address); an explicit address is kept either way.
TEST(DaemonConfigTest, DefaultListenIsLoopbackWithoutTls) {
  const std::string plain =
      WriteTemp("np_listen_plain.yaml", "datasets: [{name: a, root: /a}]\n");
  EXPECT_EQ(Parse({"--config", plain}).config.listen_address, "127.0.0.1");
  EXPECT_EQ(
      Parse({"--config", plain, "--listen", "0.0.0.0"}).config.listen_address,
      "0.0.0.0");
  EXPECT_EQ(Parse({"--dataset", "a=/a"}).config.listen_address, "127.0.0.1");
  EXPECT_EQ(
      Parse({"--dataset", "a=/a", "--tls-cert", "c.pem", "--tls-key", "k.pem"})
          .config.listen_address,
      "0.0.0.0");
  const std::string given =
      WriteTemp("np_listen_given.yaml",
                "listen: 10.1.2.3\ndatasets: [{name: a, root: /a}]\n");
  EXPECT_EQ(Parse({"--config", given}).config.listen_address, "10.1.2.3");
  std::filesystem::remove(plain);
  std::filesystem::remove(given);
}

// Issue 25: the authorization section reaches ServerOptions; its errors exit
// 2 naming the key; ReloadAuthorization reads it again from the file.
TEST(DaemonConfigTest, AuthorizationSectionParsedAndReloaded) {
  const std::string path = WriteTemp(
      "np_authz.yaml",
      "datasets: [{name: a, root: /a}]\n"
      "authorization:\n"
      "  rules:\n"
      "    - {name: r, identities: ['spiffe://x/*'], datasets: [a]}\n");
  CommandLine cl = Parse({"--config", path});
  ASSERT_FALSE(cl.exit_now) << cl.message;
  const authz::PolicyConfig& p = cl.config.server.authorization;
  EXPECT_TRUE(p.enabled);
  ASSERT_EQ(p.rules.size(), 1u);
  EXPECT_EQ(p.rules[0].name, "r");
  EXPECT_EQ(cl.config.config_file, path);
  EXPECT_FALSE(
      Parse({"--dataset", "a=/a"}).config.server.authorization.enabled);

  const std::string bad = WriteTemp(
      "np_authz_bad.yaml",
      "datasets: [{name: a, root: /a}]\nauthorization:\n  rulez: []\n");
  CommandLine b = Parse({"--config", bad});
  EXPECT_TRUE(b.exit_now);
  EXPECT_EQ(b.exit_code, 2);
  EXPECT_NE(b.message.find("authorization.rulez: unknown key"),
            std::string::npos)
      << b.message;

  auto authorizer = authz::Authorizer::Create(p, {"a"});
  ASSERT_TRUE(authorizer.ok());
  authz::Credentials c;
  c.san_uris = {"spiffe://x/job"};
  EXPECT_TRUE((*authorizer)->Authorize(c, authz::Operation::kStream, "a").ok());
  // A syntax error: not reloaded, the rule still applies.
  std::ofstream(path, std::ios::app) << "    - name: [unclosed\n";
  absl::Status st = ReloadAuthorization(path, authorizer->get());
  EXPECT_NE(st.message().find("not valid YAML"), std::string::npos) << st;
  EXPECT_TRUE((*authorizer)->Authorize(c, authz::Operation::kStream, "a").ok());
  // The rule removed: denied from now on.
  std::ofstream(path, std::ios::trunc)
      << "datasets: [{name: a, root: /a}]\nauthorization:\n  rules: []\n";
  EXPECT_TRUE(ReloadAuthorization(path, authorizer->get()).ok());
  EXPECT_EQ((*authorizer)->Authorize(c, authz::Operation::kStream, "a").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ReloadAuthorization("", authorizer->get()).code(),
            absl::StatusCode::kFailedPrecondition);
  std::filesystem::remove(path);
  std::filesystem::remove(bad);
}

// Issue 37 item 1: a reload that would turn authorization off keeps the
// policy in force (it failed open: an empty file, one cut short before its
// authorization section, or one that is not a mapping disabled it).
TEST(DaemonConfigTest, ReloadNeverTurnsAuthorizationOff) {
  const std::string path = WriteTemp(
      "np_authz_reload.yaml",
      "datasets: [{name: a, root: /a}]\n"
      "authorization:\n"
      "  rules:\n"
      "    - {name: r, identities: ['spiffe://x/*'], datasets: [a]}\n");
  CommandLine cl = Parse({"--config", path});
  ASSERT_FALSE(cl.exit_now) << cl.message;
  auto authorizer =
      authz::Authorizer::Create(cl.config.server.authorization, {"a"});
  ASSERT_TRUE(authorizer.ok());
  authz::Credentials anonymous;
  authz::Credentials job;
  job.san_uris = {"spiffe://x/job"};
  const struct {
    const char* content;
    const char* why;
  } cases[] = {
      {"", "is empty"},
      {"datasets: [{name: a, root: /a}]\n", "has no authorization section"},
      {"- a\n- b\n", "is not a YAML mapping"},
      {"just text\n", "is not a YAML mapping"},
      {"datasets: [{name: a, root: /a}]\nlistem: x\nauthorization:\n  rules: "
       "[]\n",
       "unknown key"},
  };
  for (const auto& c : cases) {
    std::ofstream(path, std::ios::trunc) << c.content;
    absl::Status st = ReloadAuthorization(path, authorizer->get());
    EXPECT_FALSE(st.ok()) << c.content;
    EXPECT_NE(st.message().find(c.why), std::string::npos) << st;
    // The old policy, unchanged: anonymous callers refused, the rule's
    // identities allowed.
    EXPECT_TRUE((*authorizer)->enabled());
    EXPECT_FALSE((*authorizer)
                     ->Authorize(anonymous, authz::Operation::kStream, "a")
                     .ok())
        << c.content;
    EXPECT_TRUE(
        (*authorizer)->Authorize(job, authz::Operation::kStream, "a").ok())
        << c.content;
  }
  std::filesystem::remove(path);
}

// Issue 37 item 13: drain_seconds is range-checked before main() casts it
// to int64 milliseconds (1e300 was accepted), and dataset names are
// printable ASCII without spaces (a newline in --dataset was accepted).
TEST(DaemonConfigTest, DrainSecondsAndDatasetNamesAreRangeChecked) {
  for (const char* drain : {"1e300", "86401", "-1", "nan"}) {
    CommandLine cl = Parse({"--dataset", "a=/a", "--drain-seconds", drain});
    EXPECT_TRUE(cl.exit_now) << drain;
    EXPECT_EQ(cl.exit_code, 2) << drain;
    EXPECT_NE(cl.message.find("drain_seconds"), std::string::npos)
        << cl.message;
  }
  EXPECT_FALSE(
      Parse({"--dataset", "a=/a", "--drain-seconds", "86400"}).exit_now);
  for (const std::string& name :
       {std::string("a\nb"), std::string("a b"), std::string("caf\xc3\xa9"),
        std::string(129, 'x')}) {
    CommandLine cl = Parse({"--dataset", name + "=/a"});
    EXPECT_TRUE(cl.exit_now) << name;
    EXPECT_EQ(cl.exit_code, 2) << name;
    EXPECT_NE(cl.message.find("name"), std::string::npos) << cl.message;
  }
  EXPECT_FALSE(Parse({"--dataset", "imagenet-1k_v2.train=/a"}).exit_now);
}

// Issue 37 item 8: a key given twice in one mapping is refused with
// file:line (yaml-cpp keeps both and lookups see the first: a second
// authorization section or an override appended at the end was ignored).
TEST(DaemonConfigTest, DuplicateKeysAreRefusedWithTheirLine) {
  DaemonConfig c;
  absl::Status st = ApplyYamlConfig(
      "datasets: [{name: a, root: /a}]\nport: 1\nauthorization:\n  rules: []\n"
      "port: 2\n",
      "f.yaml", &c);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("f.yaml:5: port: duplicate key"),
            std::string::npos)
      << st;
  st = ApplyYamlConfig("datasets:\n  - {name: a, root: /a, root: /b}\n",
                       "g.yaml", &c);
  EXPECT_NE(st.message().find("g.yaml:2: datasets[0].root: duplicate key"),
            std::string::npos)
      << st;
  st = ApplyYamlConfig(
      "datasets: [{name: a, root: /a}]\nauthorization:\n  rules: []\n"
      "authorization:\n  rules: []\n",
      "h.yaml", &c);
  EXPECT_NE(st.message().find("h.yaml:4: authorization: duplicate key"),
            std::string::npos)
      << st;
  DaemonConfig ok;
  EXPECT_TRUE(
      ApplyYamlConfig("datasets: [{name: a, root: /a}, {name: b, root: /b}]\n",
                      "ok.yaml", &ok)
          .ok());
}

// Issue 20: block_cache_bytes is documented (example YAML, operations.md,
// architecture.md, protocol.md); allow_empty serves an empty dataset.
TEST(DaemonConfigTest, DatasetBlockCacheBytesAndAllowEmpty) {
  DaemonConfig c;
  ASSERT_TRUE(ApplyYamlConfig(R"(
datasets:
  - name: t
    format: tfrecord
    root: /data/t
    block_cache_bytes: 64M
    allow_empty: true
  - name: u
    root: /data/u
    block_cache_bytes: 0
)",
                              "cfg.yaml", &c)
                  .ok());
  ASSERT_EQ(c.server.datasets.size(), 2u);
  EXPECT_EQ(c.server.datasets[0].block_cache_bytes, uint64_t{64} << 20);
  EXPECT_TRUE(c.server.datasets[0].allow_empty);
  EXPECT_EQ(c.server.datasets[1].block_cache_bytes, 0u);
  EXPECT_FALSE(c.server.datasets[1].allow_empty);
  DaemonConfig d;
  absl::Status st = ApplyYamlConfig(
      "datasets:\n  - name: t\n    root: /x\n    block_cache_bytes: lots\n",
      "cfg.yaml", &d);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("datasets[0].block_cache_bytes"),
            std::string::npos)
      << st;
  st = ApplyYamlConfig(
      "datasets:\n  - name: t\n    root: /x\n    allow_empty: maybe\n",
      "cfg.yaml", &d);
  EXPECT_NE(st.message().find("datasets[0].allow_empty"), std::string::npos)
      << st;
}

TEST(DaemonConfigTest, DatasetFlagOptions) {
  auto a = ParseDatasetFlag("e=/data/e,allow_empty=true");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->root, "/data/e");
  EXPECT_EQ(a->format, "image_folder");
  EXPECT_TRUE(a->allow_empty);
  auto b = ParseDatasetFlag("t=/data/t,format=tar,allow_empty=true");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->format, "tar");
  EXPECT_EQ(b->root, "/data/t");
  EXPECT_TRUE(b->allow_empty);
  auto c = ParseDatasetFlag("l=/data/a,b,list=x,y.txt,allow_empty=false");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->root, "/data/a,b");
  EXPECT_EQ(c->list_file, "x,y.txt");
  EXPECT_FALSE(c->allow_empty);
  EXPECT_FALSE(ParseDatasetFlag("e=/data/e,allow_empty=perhaps").ok());
  EXPECT_FALSE(ParseDatasetFlag("e=/data/e,format=tar,format=tfrecord").ok());
  EXPECT_FALSE(ParseDatasetFlag("e=/data/e,list=a.txt,format=tar").ok());
  EXPECT_FALSE(ParseDatasetFlag("e=,allow_empty=true").ok());
  CommandLine cl = Parse({"--dataset", "e=/data/e,allow_empty=true"});
  ASSERT_FALSE(cl.exit_now) << cl.message;
  EXPECT_TRUE(cl.config.server.datasets[0].allow_empty);
}


// The dataset keys are one table (DatasetConfigKeys) read by both the
// --dataset flag and the config file: every key, given either way, gives
// the same DatasetConfig; a key without a sample here fails (add one).
TEST(DaemonConfigTest, DatasetKeysAreOneTableForFlagAndYaml) {
  // key -> (flag value, YAML value, other keys both need as flag text)
  struct Sample {
    std::string flag, yaml, extra;
  };
  const std::map<std::string, Sample> samples = {
      {"format", {"tar", "tar", ""}},
      {"list_file", {"a,b.txt", "\"a,b.txt\"", ""}},
      {"extensions", {".jpg,.webp", "[.jpg, .webp]", ""}},
      {"max_file_bytes", {"2M", "2M", ""}},
      {"shard_pattern", {"train-*", "\"train-*\"", ",format=tfrecord"}},
      {"image_key", {"jpg", "jpg", ",format=tfrecord"}},
      {"label_key", {"cls", "cls", ",format=tfrecord"}},
      {"label_offset", {"-1", "-1", ",format=tfrecord"}},
      {"index_cache", {"/var/cache/np", "/var/cache/np", ",format=tfrecord"}},
      {"block_cache_bytes", {"64M", "64M", ",format=tfrecord"}},
      {"manifest", {"M.json", "M.json", ",format=tfrecord"}},
      {"manifest_check", {"crc32c", "crc32c", ",format=tfrecord,manifest=M"}},
      {"placement",
       {"P.json", "P.json", ",format=tfrecord,manifest=M,node=n1"}},
      {"node", {"n1", "n1", ",format=tfrecord,manifest=M,placement=P"}},
      {"allow_empty", {"true", "true", ""}},
  };
  auto same = [](const DatasetConfig& a, const DatasetConfig& b) {
    return std::tie(a.name, a.format, a.root, a.list_file, a.extensions,
                    a.max_file_bytes, a.shard_pattern, a.image_key,
                    a.label_key, a.label_offset, a.index_cache,
                    a.block_cache_bytes, a.manifest, a.manifest_check,
                    a.placement, a.node, a.allow_empty) ==
           std::tie(b.name, b.format, b.root, b.list_file, b.extensions,
                    b.max_file_bytes, b.shard_pattern, b.image_key,
                    b.label_key, b.label_offset, b.index_cache,
                    b.block_cache_bytes, b.manifest, b.manifest_check,
                    b.placement, b.node, b.allow_empty);
  };
  const std::vector<std::string> keys = DatasetConfigKeys();
  ASSERT_GE(keys.size(), 17u);
  for (const std::string& key : keys) {
    SCOPED_TRACE(key);
    if (key == "name" || key == "root") continue;  // the flag's NAME=ROOT
    auto it = samples.find(key);
    ASSERT_NE(it, samples.end()) << "a new dataset key: add a sample here";
    const Sample& sm = it->second;
    absl::StatusOr<DatasetConfig> flag =
        ParseDatasetFlag("d=/r" + sm.extra + "," + key + "=" + sm.flag);
    ASSERT_TRUE(flag.ok()) << flag.status();
    std::string yaml = "datasets:\n  - name: d\n    root: /r\n";
    for (const std::string& kv : std::vector<std::string>(
             absl::StrSplit(sm.extra, ',', absl::SkipEmpty()))) {
      const size_t eq = kv.find('=');
      yaml += "    " + kv.substr(0, eq) + ": " + kv.substr(eq + 1) + "\n";
    }
    yaml += "    " + key + ": " + sm.yaml + "\n";
    DaemonConfig c;
    absl::Status st = ApplyYamlConfig(yaml, "cfg.yaml", &c);
    ASSERT_TRUE(st.ok()) << st << "\n" << yaml;
    ASSERT_EQ(c.server.datasets.size(), 1u);
    EXPECT_TRUE(same(*flag, c.server.datasets[0])) << yaml;
    // ... and the key did something (the sample is not the default).
    absl::StatusOr<DatasetConfig> without = ParseDatasetFlag("d=/r" + sm.extra);
    if (key == "placement" || key == "node") continue;  // both or neither
    ASSERT_TRUE(without.ok()) << without.status();
    EXPECT_FALSE(same(*without, *flag));
  }
  // An unknown key: refused by both, with the same list of known keys.
  absl::StatusOr<DatasetConfig> flag = ParseDatasetFlag("d=/r,bogus_key=1");
  ASSERT_FALSE(flag.ok());
  DaemonConfig c;
  absl::Status yaml = ApplyYamlConfig(
      "datasets:\n  - name: d\n    root: /r\n    bogus_key: 1\n", "cfg.yaml", &c);
  ASSERT_FALSE(yaml.ok());
  auto known = [](absl::string_view m) {
    const size_t at = m.find("bogus_key: unknown key (known: ");
    return at == absl::string_view::npos ? std::string()
                                         : std::string(m.substr(at, m.find(')', at) - at));
  };
  EXPECT_NE(known(flag.status().message()), "") << flag.status();
  EXPECT_EQ(known(flag.status().message()), known(yaml.message()))
      << flag.status() << "\n" << yaml;
  for (const std::string& key : keys) {
    EXPECT_NE(known(yaml.message()).find(key), std::string::npos) << key;
  }
  // A bad value: the same words from both.
  flag = ParseDatasetFlag("d=/r,allow_empty=perhaps");
  yaml = ApplyYamlConfig(
      "datasets:\n  - name: d\n    root: /r\n    allow_empty: perhaps\n", "cfg.yaml", &c);
  const std::string words = "allow_empty: must be true or false, got 'perhaps'";
  EXPECT_NE(flag.status().message().find(words), std::string::npos) << flag.status();
  EXPECT_NE(yaml.message().find(words), std::string::npos) << yaml;
  flag = ParseDatasetFlag("d=/r,format=lmdb");
  yaml = ApplyYamlConfig("datasets:\n  - name: d\n    root: /r\n    format: lmdb\n",
                         "cfg.yaml", &c);
  EXPECT_NE(flag.status().message().find("format: must be one of"), std::string::npos)
      << flag.status();
  EXPECT_NE(yaml.message().find("format: must be one of"), std::string::npos) << yaml;
}

// list_file= is the flag's name (the config file's key); list= still works,
// with a deprecation warning.
TEST(DaemonConfigTest, DatasetFlagListFileAndDeprecatedList) {
  std::vector<std::string> warnings;
  absl::StatusOr<DatasetConfig> a = ParseDatasetFlag("l=/r,list_file=t.txt", &warnings);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->format, "file_list");
  EXPECT_EQ(a->list_file, "t.txt");
  EXPECT_TRUE(warnings.empty());
  absl::StatusOr<DatasetConfig> b = ParseDatasetFlag("l=/r,list=t.txt", &warnings);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->list_file, "t.txt");
  EXPECT_EQ(b->format, "file_list");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("list= is deprecated"), std::string::npos) << warnings[0];
  EXPECT_FALSE(ParseDatasetFlag("l=/r,list=a.txt,list_file=b.txt").ok());
  CommandLine cl = Parse({"--dataset", "l=/r,list=t.txt"});
  ASSERT_FALSE(cl.exit_now) << cl.message;
  EXPECT_EQ(cl.config.server.datasets[0].list_file, "t.txt");
  ASSERT_EQ(cl.warnings.size(), 1u);
}

}  // namespace
}  // namespace nearprep
