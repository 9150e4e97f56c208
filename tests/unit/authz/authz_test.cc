// The policy engine of server/authz without any server: matching, globs,
// prefixes, deny by default, identities, token hashing, reload and audit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "server/authz/authorizer.h"
#include "server/authz/policy.h"
#include "server/authz/tokens.h"

namespace nearprep {
namespace authz {
namespace {

using ::testing::HasSubstr;

PolicyConfig Parse(const std::string& yaml) {
  absl::StatusOr<PolicyConfig> c = ParsePolicyYaml(yaml, "test.yaml");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : PolicyConfig{};
}

std::shared_ptr<const Policy> Make(const std::string& yaml,
                                   std::vector<TokenEntry> tokens = {}) {
  return *Policy::Create(Parse(yaml), std::move(tokens));
}

constexpr char kTwoTeams[] = R"(
datasets: []
authorization:
  rules:
    - name: vision
      identities: ["spiffe://corp/team-vision/*"]
      datasets: ["imagenet-*", "coco"]
      operations: [list, stream]
    - name: speech
      identities: [speech-trainer.corp]
      datasets: [librispeech]
    - name: monitoring
      identities: [prometheus]
      operations: [info]
)";

TEST(GlobMatchTest, StarsAndQuestionMarks) {
  EXPECT_TRUE(GlobMatch("imagenet-*", "imagenet-train"));
  EXPECT_TRUE(GlobMatch("imagenet-*", "imagenet-"));
  EXPECT_FALSE(GlobMatch("imagenet-*", "imagenet"));
  EXPECT_TRUE(GlobMatch("*", ""));
  EXPECT_TRUE(GlobMatch("*-v?", "coco-v2"));
  EXPECT_FALSE(GlobMatch("*-v?", "coco-v22"));
  EXPECT_TRUE(GlobMatch("a*b*c", "aXXbYYc"));
  EXPECT_FALSE(GlobMatch("a*b*c", "aXXbYY"));
  EXPECT_TRUE(GlobMatch("coco", "coco"));
  EXPECT_FALSE(GlobMatch("coco", "coco2"));
  EXPECT_FALSE(GlobMatch("coco", "Coco"));
  // Backtracking across several stars on a long mismatch stays correct.
  EXPECT_FALSE(GlobMatch("*a*a*a*b", std::string(200, 'a')));
}

TEST(IdentityMatchTest, ExactOrPrefix) {
  EXPECT_TRUE(
      IdentityMatch("spiffe://corp/team-a/*", "spiffe://corp/team-a/j1"));
  EXPECT_FALSE(
      IdentityMatch("spiffe://corp/team-a/*", "spiffe://corp/team-ab/j1"));
  EXPECT_FALSE(IdentityMatch("spiffe://corp/team-a/*", "spiffe://corp/team-a"));
  EXPECT_TRUE(IdentityMatch("trainer.corp", "trainer.corp"));
  // Without the star it is exact: no prefix match.
  EXPECT_FALSE(IdentityMatch("trainer.corp", "trainer.corp.evil"));
  // '?' and a star in the middle are literal in identities.
  EXPECT_FALSE(IdentityMatch("a?c", "abc"));
}

TEST(PolicyTest, AllowsOnlyWhatARuleGives) {
  auto p = Make(kTwoTeams);
  ASSERT_TRUE(p->enabled());
  const std::string vision = "spiffe://corp/team-vision/job-7";
  Decision d = p->Check(vision, Operation::kStream, "imagenet-train");
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.rule, "vision");
  EXPECT_TRUE(p->Check(vision, Operation::kList, "coco").allowed);
  EXPECT_FALSE(p->Check(vision, Operation::kStream, "librispeech").allowed);
  // Operation not granted by the rule.
  EXPECT_FALSE(p->Check(vision, Operation::kInfo, "").allowed);
  EXPECT_TRUE(p->Check("speech-trainer.corp", Operation::kInfo, "").allowed);
  EXPECT_TRUE(p->Check("speech-trainer.corp", Operation::kStream, "librispeech")
                  .allowed);
  EXPECT_FALSE(
      p->Check("speech-trainer.corp", Operation::kStream, "imagenet-train")
          .allowed);
  EXPECT_TRUE(p->Check("prometheus", Operation::kInfo, "").allowed);
  EXPECT_FALSE(p->Check("prometheus", Operation::kList, "coco").allowed);
  // Unknown identities get nothing.
  EXPECT_FALSE(p->Check("someone", Operation::kStream, "coco").allowed);
}

TEST(PolicyTest, SectionWithoutRulesDeniesEverything) {
  auto p = Make("authorization:\n  rules: []\n");
  ASSERT_TRUE(p->enabled());
  EXPECT_FALSE(p->Check("anyone", Operation::kStream, "coco").allowed);
  EXPECT_FALSE(p->Check("anyone", Operation::kInfo, "").allowed);
  auto bare = Make("authorization:\n");
  ASSERT_TRUE(bare->enabled());
  EXPECT_FALSE(bare->Check("anyone", Operation::kList, "coco").allowed);
}

TEST(PolicyTest, NoSectionAllowsEverything) {
  auto p = Make("listen: 127.0.0.1\n");
  EXPECT_FALSE(p->enabled());
  EXPECT_TRUE(p->Check("", Operation::kStream, "anything").allowed);
}

TEST(PolicyTest, IdentityPrefersUriThenDnsThenCn) {
  auto p = Make(kTwoTeams);
  Credentials c;
  c.common_name = "cn-name";
  EXPECT_EQ(*p->Identify(c), "cn-name");
  c.san_dns = {"host1.corp", "host2.corp"};
  EXPECT_EQ(*p->Identify(c), "host1.corp");
  c.san_uris = {"spiffe://corp/team-vision/a"};
  EXPECT_EQ(*p->Identify(c), "spiffe://corp/team-vision/a");
  // Only the preferred name is matched: a certificate whose URI is not
  // allowed does not get in through a DNS name a rule names.
  Credentials both;
  both.san_uris = {"spiffe://corp/other/x"};
  both.san_dns = {"speech-trainer.corp"};
  const std::string id = *p->Identify(both);
  EXPECT_FALSE(p->Check(id, Operation::kStream, "librispeech").allowed);
}

TEST(PolicyTest, NoIdentityIsUnauthenticated) {
  auto p = Make(kTwoTeams);
  Credentials c;
  c.peer = "ipv4:127.0.0.1:1";
  absl::StatusOr<std::string> id = p->Identify(c);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(id.status().message(), HasSubstr("client certificate"));
}

TEST(TokensTest, Sha256KnownAnswer) {
  // FIPS 180-2 example "abc".
  EXPECT_EQ(DigestHex(Sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(DigestHex(Sha256("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(TokensTest, ConstantTimeEqualComparesEveryByte) {
  Sha256Digest a = Sha256("x"), b = a;
  EXPECT_TRUE(ConstantTimeEqual(a, b));
  b[31] ^= 1;  // Only the last byte differs.
  EXPECT_FALSE(ConstantTimeEqual(a, b));
  b = a;
  b[0] ^= 0x80;
  EXPECT_FALSE(ConstantTimeEqual(a, b));
}

TEST(TokensTest, FileParsesAndFindsByHash) {
  const std::string text =
      "# name sha256\n\nci-runner " + DigestHex(Sha256("s3cret-ci")) +
      "\n  team.a@corp   " + DigestHex(Sha256("tok-a")) + "  \n";
  absl::StatusOr<std::vector<TokenEntry>> t = ParseTokenFile(text, "tokens");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ(FindToken(*t, "s3cret-ci").value_or(""), "ci-runner");
  EXPECT_EQ(FindToken(*t, "tok-a").value_or(""), "team.a@corp");
  EXPECT_FALSE(FindToken(*t, "s3cret-cj").has_value());
  EXPECT_FALSE(FindToken(*t, "").has_value());
  // The hash itself is not a token.
  EXPECT_FALSE(FindToken(*t, DigestHex(Sha256("tok-a"))).has_value());
}

TEST(TokensTest, BadFilesNameTheLine) {
  const std::string h = DigestHex(Sha256("t"));
  auto err = [](const std::string& text) {
    absl::StatusOr<std::vector<TokenEntry>> t = ParseTokenFile(text, "tok");
    EXPECT_FALSE(t.ok());
    return t.ok() ? std::string() : std::string(t.status().message());
  };
  EXPECT_THAT(err("a " + h + "\nplain-token-here\n"), HasSubstr("tok:2:"));
  EXPECT_THAT(err("a " + h.substr(0, 40) + "\n"), HasSubstr("64 hex digits"));
  EXPECT_THAT(err("a " + h + "\na " + DigestHex(Sha256("u")) + "\n"),
              HasSubstr("appears twice"));
  EXPECT_THAT(err("a " + h + "\nb " + h + "\n"), HasSubstr("same hash"));
  EXPECT_THAT(err("a/b " + h + "\n"), HasSubstr("only letters"));
  EXPECT_THAT(err("a " + std::string(64, 'g') + "\n"),
              HasSubstr("not a hex digit"));
  EXPECT_THAT(err("a " + h + " extra\n"), HasSubstr("NAME SHA256-HEX"));
}

// A policy whose one rule gives everything to the bearer token named ci
// (token "good-token").
std::shared_ptr<const Policy> TokenCiPolicy() {
  std::vector<TokenEntry> tokens =
      *ParseTokenFile("ci " + DigestHex(Sha256("good-token")) + "\n", "t");
  return Make(R"(
authorization:
  rules:
    - identities: ["token:ci"]
      datasets: ["*"]
)",
              tokens);
}

TEST(PolicyTest, BearerTokenIdentityAndErrors) {
  auto p = TokenCiPolicy();
  Credentials c;
  c.has_authorization = true;
  c.authorization = "Bearer good-token";
  EXPECT_EQ(*p->Identify(c), "token:ci");
  c.authorization = "bearer good-token";  // scheme is case-insensitive
  EXPECT_EQ(*p->Identify(c), "token:ci");
  EXPECT_TRUE(p->Check("token:ci", Operation::kStream, "x").allowed);
  EXPECT_EQ(p->config().rules[0].name, "rules[0]");

  // A token takes precedence over a certificate (a proxy's own certificate
  // must not stand in for the user whose token it forwards)...
  c.san_uris = {"spiffe://corp/proxy"};
  EXPECT_EQ(*p->Identify(c), "token:ci");
  // ...and a wrong one is refused even with a certificate, never echoed.
  c.authorization = "Bearer wrong-token";
  absl::StatusOr<std::string> id = p->Identify(c);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(id.status().message(), ::testing::Not(HasSubstr("wrong-token")));
  c.authorization = "Basic Zm9vOmJhcg==";
  EXPECT_EQ(p->Identify(c).status().code(), absl::StatusCode::kUnauthenticated);
  // Tokens without a token file are refused with the reason.
  auto no_tokens = Make("authorization:\n  rules: []\n");
  c.authorization = "Bearer good-token";
  EXPECT_THAT(no_tokens->Identify(c).status().message(),
              HasSubstr("token_file"));
}

// Issue 37 item 3: a certificate named like a token ("token:ci" as CN or
// SAN DNS) got the token's rules; item 13: with two authorization headers
// the first decided. Both are refused now.
TEST(PolicyTest, CertificateNamesNeverEnterTheTokenNamespace) {
  auto p = TokenCiPolicy();
  for (int field = 0; field < 3; ++field) {
    Credentials c;
    const std::string name = field == 2 ? "TOKEN:ci" : "token:ci";
    if (field == 0) c.common_name = name;
    if (field == 1) c.san_dns = {name};
    if (field == 2) c.san_uris = {name};
    absl::StatusOr<std::string> id = p->Identify(c);
    ASSERT_FALSE(id.ok()) << field << " got " << *id;
    EXPECT_EQ(id.status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(id.status().message(), HasSubstr("namespace"));
  }
  Credentials fine;
  fine.common_name = "tokens.corp";  // not the prefix: a name like any other
  EXPECT_EQ(*p->Identify(fine), "tokens.corp");

  Credentials two;
  two.has_authorization = true;
  two.authorization = "Bearer good-token";
  EXPECT_EQ(*p->Identify(two), "token:ci");
  two.duplicate_authorization = true;
  EXPECT_EQ(p->Identify(two).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(p->Identify(two).status().message(), HasSubstr("more than one"));
}

// Issue 37 item 7: a token file replaced by a directory loaded as an empty
// file ("no tokens"); it is an error now, so a reload keeps the old tokens.
TEST(TokensTest, DirectoryIsNotATokenFile) {
  const std::string dir = ::testing::TempDir() + "np_token_dir";
  std::remove(dir.c_str());
  ASSERT_EQ(system(("mkdir -p '" + dir + "'").c_str()), 0);
  absl::StatusOr<std::vector<TokenEntry>> t = LoadTokenFile(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("not a regular file"));
  ASSERT_EQ(system(("rmdir '" + dir + "'").c_str()), 0);
}

TEST(ParsePolicyYamlTest, ErrorsNameTheKey) {
  auto err = [](const std::string& yaml) {
    absl::StatusOr<PolicyConfig> c = ParsePolicyYaml(yaml, "n.yaml");
    EXPECT_FALSE(c.ok());
    return c.ok() ? std::string() : std::string(c.status().message());
  };
  EXPECT_THAT(err("authorization:\n  rule: []\n"),
              HasSubstr("authorization.rule: unknown key"));
  EXPECT_THAT(err("authorization:\n  rules:\n    - identities: [a]\n"
                  "      datasets: [x]\n      operations: [write]\n"),
              HasSubstr("authorization.rules[0].operations[0]: unknown "
                        "operation 'write'"));
  EXPECT_THAT(err("authorization:\n  rules:\n    - datasets: [x]\n"),
              HasSubstr("rules[0].identities: required"));
  EXPECT_THAT(err("authorization:\n  rules:\n    - identities: [a]\n"),
              HasSubstr("rules[0].datasets: required"));
  EXPECT_THAT(err("authorization:\n  rules:\n    - identities: ['a*b']\n"
                  "      datasets: [x]\n"),
              HasSubstr("only at the end"));
  EXPECT_THAT(err("authorization:\n  rules:\n    - identities: ['*']\n"
                  "      datasets: [x]\n"),
              HasSubstr("every identity"));
  EXPECT_THAT(err("authorization:\n  rules:\n    - {name: a, identities: [x], "
                  "datasets: [y]}\n    - {name: a, identities: [x], "
                  "datasets: [y]}\n"),
              HasSubstr("rules[1].name: 'a' names an earlier rule"));
  EXPECT_THAT(err("authorization:\n  rules: [\n"), HasSubstr("not valid YAML"));
  EXPECT_THAT(err("a: 1\nauthorization:\n  rules:\n    - identities: [a]\n"
                  "      datasets: {x: 1}\n"),
              HasSubstr("n.yaml:5: authorization.rules[0].datasets"));
}

// A temporary file with `text`.
std::string TempFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/authz_" + name;
  std::ofstream(path, std::ios::trunc) << text;
  return path;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(AuthorizerTest, DeniesNamingDatasetAndIdentityAndAudits) {
  const std::string audit = ::testing::TempDir() + "/authz_audit.jsonl";
  std::remove(audit.c_str());
  PolicyConfig config =
      Parse(std::string(kTwoTeams) + "  audit_log: " + audit + "\n");
  auto a = Authorizer::Create(config, {"imagenet-train", "librispeech"});
  ASSERT_TRUE(a.ok()) << a.status();
  Credentials vision;
  vision.san_uris = {"spiffe://corp/team-vision/j"};
  vision.peer = "ipv4:10.1.2.3:4444";
  EXPECT_TRUE(
      (*a)->Authorize(vision, Operation::kStream, "imagenet-train").ok());
  absl::Status denied =
      (*a)->Authorize(vision, Operation::kStream, "librispeech");
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(denied.message(), HasSubstr("'librispeech'"));
  EXPECT_THAT(denied.message(), HasSubstr("'spiffe://corp/team-vision/j'"));
  // A name the daemon does not serve counts as "(other)".
  EXPECT_FALSE((*a)->Authorize(vision, Operation::kStream, "x-secret").ok());
  Credentials nobody;
  EXPECT_EQ(
      (*a)->Authorize(nobody, Operation::kStream, "imagenet-train").code(),
      absl::StatusCode::kUnauthenticated);

  const auto counts = (*a)->decision_counts();
  EXPECT_EQ(counts.at({"allow", "imagenet-train"}), 1u);
  EXPECT_EQ(counts.at({"deny", "librispeech"}), 1u);
  EXPECT_EQ(counts.at({"deny", "(other)"}), 1u);
  EXPECT_EQ(counts.at({"unauthenticated", "imagenet-train"}), 1u);

  const std::string log = ReadAll(audit);
  EXPECT_THAT(
      log,
      HasSubstr(
          R"("identity":"spiffe://corp/team-vision/j","peer":"ipv4:10.1.2.3:4444",)"
          R"("dataset":"imagenet-train","operation":"stream","decision":"allow",)"
          R"("rule":"vision"})"));
  EXPECT_THAT(log, HasSubstr(R"("dataset":"librispeech","operation":"stream",)"
                             R"("decision":"deny","rule":""})"));
  EXPECT_THAT(log, HasSubstr(R"("decision":"unauthenticated")"));
  int lines = 0;
  for (char ch : log) lines += ch == '\n';
  EXPECT_EQ(lines, 4);
  EXPECT_THAT(log, HasSubstr(R"({"time":")"));
}

TEST(AuthorizerTest, ListFilterShowsOnlyListableDatasets) {
  auto a = *Authorizer::Create(Parse(kTwoTeams),
                               {"imagenet-train", "coco", "librispeech"});
  Credentials vision;
  vision.san_uris = {"spiffe://corp/team-vision/j"};
  auto f = a->ListFilter(vision);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE((*f)("imagenet-train"));
  EXPECT_TRUE((*f)("coco"));
  EXPECT_FALSE((*f)("librispeech"));
  EXPECT_EQ(a->ListFilter(Credentials{}).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(AuthorizerTest, ReloadReplacesPolicyAndBadReloadKeepsOld) {
  const std::string tokens =
      TempFile("tokens", "a " + DigestHex(Sha256("token-a")) + "\n");
  const std::string yaml =
      "authorization:\n  token_file: " + tokens +
      "\n  rules:\n    - {name: a, identities: ['token:a'], datasets: [d]}\n";
  auto a = *Authorizer::Create(Parse(yaml), {"d"});
  Credentials c;
  c.has_authorization = true;
  c.authorization = "Bearer token-a";
  EXPECT_TRUE(a->Authorize(c, Operation::kStream, "d").ok());

  // A token file that does not parse: the old policy (and tokens) stay.
  const std::string broken = TempFile("tokens-broken", "a not-a-hash\n");
  PolicyConfig bad = Parse("authorization:\n  token_file: " + broken + "\n");
  EXPECT_FALSE(a->Reload(bad).ok());
  EXPECT_EQ(a->reloads_failed(), 1u);
  EXPECT_TRUE(a->Authorize(c, Operation::kStream, "d").ok());
  PolicyConfig missing =
      Parse("authorization:\n  token_file: /nonexistent/tokens\n");
  absl::Status st = a->Reload(missing);
  EXPECT_THAT(st.message(), HasSubstr("/nonexistent/tokens"));
  EXPECT_TRUE(a->Authorize(c, Operation::kStream, "d").ok());

  // Revoking the rule: denied from now on.
  PolicyConfig revoked =
      Parse("authorization:\n  token_file: " + tokens + "\n  rules: []\n");
  ASSERT_TRUE(a->Reload(revoked).ok());
  EXPECT_EQ(a->reloads_ok(), 1u);
  EXPECT_EQ(a->Authorize(c, Operation::kStream, "d").code(),
            absl::StatusCode::kPermissionDenied);
}

// Captures what the daemon's log gets while it lives.
class LogCapture {
 public:
  LogCapture()
      : previous_(spdlog::default_logger()),
        logger_(std::make_shared<spdlog::logger>(
            "capture",
            std::make_shared<spdlog::sinks::ostream_sink_mt>(out_))) {
    spdlog::set_default_logger(logger_);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  std::string text() {
    logger_->flush();
    return out_.str();
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<spdlog::logger> logger_;
};

int CountOf(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

// A full disk (/dev/full: every write is ENOSPC): the stream is still
// served by default, but each lost record is counted and the daemon's log
// says so once per interval, not once per record, and not never.
TEST(AuthorizerTest, AuditWriteFailuresAreCountedAndLoggedOncePerInterval) {
  LogCapture log;
  auto a = *Authorizer::Create(
      Parse(std::string(kTwoTeams) + "  audit_log: /dev/full\n"),
      {"imagenet-train", "librispeech"});
  Credentials vision;
  vision.san_uris = {"spiffe://corp/team-vision/j"};
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(
        a->Authorize(vision, Operation::kStream, "imagenet-train").ok());
  }
  EXPECT_EQ(a->Authorize(vision, Operation::kStream, "librispeech").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(a->audit_write_failures(), 6u);
  EXPECT_EQ(a->audit_refusals(), 0u);
  EXPECT_EQ(a->decision_counts().at({"allow", "imagenet-train"}), 5u);
  const std::string text = log.text();
  EXPECT_EQ(CountOf(text, "cannot be written"), 1) << text;
  EXPECT_THAT(text, HasSubstr("'/dev/full'"));
  EXPECT_THAT(text, HasSubstr("No space left on device"));
  EXPECT_THAT(text, HasSubstr("served unaudited"));
}

// authorization.audit_fail_closed: a stream whose record is lost is
// refused (UNAVAILABLE), counted apart from the policy's decisions.
TEST(AuthorizerTest, AuditFailClosedRefusesStreamsItCannotAudit) {
  LogCapture log;
  auto a = *Authorizer::Create(
      Parse(std::string(kTwoTeams) +
            "  audit_log: /dev/full\n  audit_fail_closed: true\n"),
      {"imagenet-train"});
  Credentials vision;
  vision.san_uris = {"spiffe://corp/team-vision/j"};
  absl::Status st = a->Authorize(vision, Operation::kStream, "imagenet-train");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_THAT(st.message(), HasSubstr("audit log cannot be written"));
  EXPECT_EQ(a->audit_write_failures(), 1u);
  EXPECT_EQ(a->audit_refusals(), 1u);
  EXPECT_EQ(a->decision_counts().count({"allow", "imagenet-train"}), 0u);
  EXPECT_THAT(log.text(), HasSubstr("streams are refused"));

  // A reload to a writable log: served (and audited) again, and the log
  // says how many records were lost.
  const std::string audit = ::testing::TempDir() + "/authz_audit_back.jsonl";
  std::remove(audit.c_str());
  ASSERT_TRUE(a->Reload(Parse(std::string(kTwoTeams) + "  audit_log: " +
                              audit + "\n  audit_fail_closed: true\n"))
                  .ok());
  EXPECT_TRUE(a->Authorize(vision, Operation::kStream, "imagenet-train").ok());
  EXPECT_THAT(ReadAll(audit), HasSubstr(R"("decision":"allow")"));
  EXPECT_THAT(log.text(), HasSubstr("written again; 1 audit record(s)"));
}

// A record cut short (here by RLIMIT_FSIZE, as a disk that fills mid-line)
// leaves no partial line: every line of the file stays one JSON record.
TEST(AuthorizerTest, AuditRecordCutShortIsRemoved) {
  LogCapture log;
  const std::string audit = ::testing::TempDir() + "/authz_audit_cut.jsonl";
  std::remove(audit.c_str());
  auto a = *Authorizer::Create(
      Parse(std::string(kTwoTeams) + "  audit_log: " + audit + "\n"),
      {"imagenet-train"});
  Credentials vision;
  vision.san_uris = {"spiffe://corp/team-vision/j"};
  ASSERT_TRUE(a->Authorize(vision, Operation::kStream, "imagenet-train").ok());
  struct stat st;
  ASSERT_EQ(::stat(audit.c_str(), &st), 0);
  const off_t one = st.st_size;

  auto* previous = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct rlimit small = old_limit;
  small.rlim_cur = static_cast<rlim_t>(one + one / 2);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const bool ok =
      a->Authorize(vision, Operation::kStream, "imagenet-train").ok();
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, previous);
  EXPECT_TRUE(ok);
  EXPECT_EQ(a->audit_write_failures(), 1u);
  ASSERT_EQ(::stat(audit.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, one);

  ASSERT_TRUE(a->Authorize(vision, Operation::kStream, "imagenet-train").ok());
  const std::string text = ReadAll(audit);
  EXPECT_EQ(CountOf(text, "\n"), 2);
  EXPECT_EQ(CountOf(text, "{\"time\""), 2);
}

TEST(ParsePolicyYamlTest, AuditFailClosedNeedsAFileAndABool) {
  EXPECT_TRUE(Parse("authorization:\n  audit_log: /a\n"
                    "  audit_fail_closed: true\n")
                  .audit_fail_closed);
  EXPECT_FALSE(Parse("authorization:\n  audit_log: /a\n").audit_fail_closed);
  auto err = [](const std::string& yaml) {
    absl::StatusOr<PolicyConfig> c = ParsePolicyYaml(yaml, "n.yaml");
    EXPECT_FALSE(c.ok());
    return c.ok() ? std::string() : std::string(c.status().message());
  };
  EXPECT_THAT(err("authorization:\n  audit_log: /a\n"
                  "  audit_fail_closed: maybe\n"),
              HasSubstr("n.yaml:3: authorization.audit_fail_closed: must be "
                        "true or false"));
  EXPECT_THAT(err("authorization:\n  audit_fail_closed: true\n"),
              HasSubstr("needs authorization.audit_log"));
}

TEST(AuditJsonTest, EscapesEveryNonPrintableByte) {
  AuditRecord r;
  r.time = "t";
  r.identity = "a\"b\\c\n\x01\xff";
  r.operation = Operation::kInfo;
  EXPECT_EQ(AuditJson(r),
            R"({"time":"t","identity":"a\"b\\c\n\u0001\u00ff","peer":"",)"
            R"("dataset":"","operation":"info","decision":"","rule":""})");
}

}  // namespace
}  // namespace authz
}  // namespace nearprep
