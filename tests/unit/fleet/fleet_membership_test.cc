// The C++ fleet membership (client/cpp/fleet/membership.h): the targets
// file's syntax and a file membership following a rewrite. DNS against a
// stub server, and both sources mid-epoch with real daemons:
// tests/python/test_fleet_membership.py.
#include "client/cpp/fleet/membership.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace nearprep {
namespace {

using Targets = std::vector<std::string>;

TEST(ParseTargetsFileTest, TakesOneTargetPerLineWithComments) {
  auto t = ParseTargetsFile("# the fleet\n127.0.0.3:7070  # b\n\n  127.0.0.2:7070\n127.0.0.3:7070");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, (Targets{"127.0.0.2:7070", "127.0.0.3:7070"}));
  auto empty = ParseTargetsFile("# nothing\n\n");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(ParseTargetsFileTest, RefusesABadLineNamingIt) {
  for (const auto& [text, line] : std::vector<std::pair<std::string, std::string>>{
           {"127.0.0.2:7070\nnoport\n", "line 2:"},
           {"a:1 b:2\n", "line 1:"},
           {"a:1,b:2\n", "line 1:"}}) {
    auto t = ParseTargetsFile(text);
    ASSERT_FALSE(t.ok()) << text;
    EXPECT_NE(t.status().message().find(line), std::string::npos) << t.status();
  }
}

TEST(MembershipTest, FileRewrittenIsANewGeneration) {
  const std::string path =
      ::testing::TempDir() + "/membership_test_targets." + std::to_string(getpid());
  auto write = [&](const std::string& text) {
    const std::string tmp = path + ".new";
    std::ofstream(tmp) << text;
    ASSERT_EQ(std::rename(tmp.c_str(), path.c_str()), 0);
  };
  write("127.0.0.2:7070\n");
  MembershipOptions o;
  o.file = path;
  o.interval = std::chrono::milliseconds(10);
  auto m = Membership::Create(o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->Current().generation, 1u);
  EXPECT_EQ((*m)->Current().targets, (Targets{"127.0.0.2:7070"}));
  write("127.0.0.3:7070\n127.0.0.2:7070\n");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((*m)->Current().generation < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ((*m)->Current().generation, 2u);
  EXPECT_EQ((*m)->Current().targets, (Targets{"127.0.0.2:7070", "127.0.0.3:7070"}));
  // An empty or broken file keeps the last set.
  write("# nobody\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  write("bad line\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ((*m)->Current().generation, 2u);
  EXPECT_EQ((*m)->Current().targets, (Targets{"127.0.0.2:7070", "127.0.0.3:7070"}));
  m->reset();
  std::remove(path.c_str());
  // No first answer: refused, naming the file.
  o.file = path;
  auto none = Membership::Create(o);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find(path), std::string::npos) << none.status();
}

TEST(MembershipTest, NeedsExactlyOneSource) {
  MembershipOptions o;
  EXPECT_FALSE(Membership::Create(o).ok());
  o.file = "/x";
  o.dns_name = "n";
  o.dns_port = 1;
  EXPECT_FALSE(Membership::Create(o).ok());
}

}  // namespace
}  // namespace nearprep
