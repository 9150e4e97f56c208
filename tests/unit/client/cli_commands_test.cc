// The table of `nearprep`'s commands (cli/commands/command.h):
// every command has a name and a one-line help, parses `--help` with exit 0,
// and is listed by `nearprep --help`; every command file of the folder is
// in the table.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli/commands/command.h"
#include "gtest/gtest.h"

namespace nearprep {
namespace {

struct CliResult {
  int status;
  std::string out, err;
};

// RunCli as `nearprep ARGS...`, with its stdout and stderr.
CliResult Cli(std::vector<std::string> args) {
  args.insert(args.begin(), "nearprep");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const int status = RunCli(static_cast<int>(argv.size()), argv.data());
  CliResult r{status, testing::internal::GetCapturedStdout(), ""};
  r.err = testing::internal::GetCapturedStderr();
  return r;
}

std::string OneSpaced(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool space = c == ' ' || c == '\n' || c == '\t';
    if (space && (out.empty() || out.back() == ' ')) continue;
    out += space ? ' ' : c;
  }
  return out;
}

TEST(CliCommandsTest, EveryCommandHasANameAndAOneLineHelp) {
  std::set<std::string> names;
  for (const std::unique_ptr<Command>& c : NewCommands()) {
    const std::string name = c->name(), help = c->help();
    EXPECT_FALSE(name.empty());
    EXPECT_TRUE(names.insert(name).second) << "two commands named " << name;
    EXPECT_FALSE(help.empty()) << name;
    EXPECT_EQ(help.find('\n'), std::string::npos) << name << ": " << help;
  }
  EXPECT_GE(names.size(), 12u);
}

TEST(CliCommandsTest, EveryCommandParsesHelpWithExitZero) {
  for (const std::unique_ptr<Command>& c : NewCommands()) {
    const CliResult r = Cli({c->name(), "--help"});
    EXPECT_EQ(r.status, 0) << c->name() << ": " << r.err;
    // The command's own help: its line and its usage.
    EXPECT_NE(OneSpaced(r.out).find(OneSpaced(c->help())), std::string::npos)
        << c->name() << ":\n" << r.out;
    EXPECT_NE(r.out.find(std::string("nearprep ") + c->name()), std::string::npos)
        << c->name() << ":\n" << r.out;
  }
}

TEST(CliCommandsTest, HelpListsEveryCommandWithItsLine) {
  const CliResult r = Cli({"--help"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string out = OneSpaced(r.out);
  for (const std::unique_ptr<Command>& c : NewCommands()) {
    EXPECT_NE(out.find(std::string(c->name()) + " " + OneSpaced(c->help())), std::string::npos)
        << c->name() << " missing from:\n" << r.out;
  }
}

TEST(CliCommandsTest, EveryCommandFileIsInTheTable) {
  // commands/NAME.cc is command NAME ('_' for '-'); command_table.cc is the
  // table itself.
  std::set<std::string> names;
  for (const std::unique_ptr<Command>& c : NewCommands()) names.insert(c->name());
  const std::filesystem::path dir =
      std::filesystem::path(NEARPREP_SOURCE_DIR) / "cli/commands";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::filesystem::path p = entry.path();
    if (p.extension() != ".cc" || p.filename() == "command_table.cc") continue;
    std::string name = p.stem().string();
    std::replace(name.begin(), name.end(), '_', '-');
    EXPECT_TRUE(names.count(name)) << p << " defines a command that is not in the table "
                                   << "(command_table.cc)";
    ++files;
  }
  EXPECT_EQ(static_cast<size_t>(files), names.size())
      << "a command in the table without its file in " << dir;
}

TEST(CliCommandsTest, FlagErrorsExitTwo) {
  EXPECT_EQ(Cli({}).status, 2);  // no command
  EXPECT_EQ(Cli({"bogus"}).status, 2);
  EXPECT_EQ(Cli({"stream", "--dataset", "d", "--no-such-flag"}).status, 2);
  EXPECT_EQ(Cli({"fleet-read", "--manifest", "M"}).status, 2);  // --targets missing
}

TEST(CliCommandsTest, VersionExitsZero) {
  const CliResult r = Cli({"--version"});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out.rfind("nearprep ", 0), 0u) << r.out;
}

}  // namespace
}  // namespace nearprep
