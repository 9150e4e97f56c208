// The table of `nearprep`'s commands and the loop over it (command.h).
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "cli/commands/command.h"
#include "common/version.h"

namespace nearprep {

// Each command's factory, defined in its file (command.h).
std::unique_ptr<Command> NewInfoCommand();
std::unique_ptr<Command> NewFetchCommand();
std::unique_ptr<Command> NewSheetCommand();
std::unique_ptr<Command> NewStreamCommand();
std::unique_ptr<Command> NewLoadCommand();
std::unique_ptr<Command> NewBenchCommand();
std::unique_ptr<Command> NewMkdatasetCommand();
std::unique_ptr<Command> NewPackCommand();
std::unique_ptr<Command> NewManifestCommand();
std::unique_ptr<Command> NewFleetPlanCommand();
std::unique_ptr<Command> NewPlacementCommand();
std::unique_ptr<Command> NewFleetReadCommand();

namespace {

using CommandFactory = std::unique_ptr<Command> (*)();

// The table, in `nearprep --help`'s order.
constexpr CommandFactory kCommands[] = {
    NewInfoCommand,     NewFetchCommand,    NewSheetCommand,     NewStreamCommand,
    NewLoadCommand,     NewBenchCommand,    NewMkdatasetCommand, NewPackCommand,
    NewManifestCommand, NewFleetPlanCommand, NewPlacementCommand, NewFleetReadCommand,
};

}  // namespace

std::vector<std::unique_ptr<Command>> NewCommands() {
  std::vector<std::unique_ptr<Command>> commands;
  for (CommandFactory make : kCommands) commands.push_back(make());
  return commands;
}

int RunCli(int argc, char** argv) {
  CLI::App app{"nearprep: client of the nearprepd preprocessing daemon"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("nearprep ") + kVersion,
                       "print the version and exit");
  const std::vector<std::unique_ptr<Command>> commands = NewCommands();
  std::vector<CLI::App*> subcommands;
  for (const std::unique_ptr<Command>& c : commands) {
    CLI::App* sub = app.add_subcommand(c->name(), c->help());
    c->AddOptions(sub);
    subcommands.push_back(sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every flag error is status 2 (CLI11's
    // own codes vary by error kind).
    return app.exit(e) == 0 ? 0 : 2;
  }
  for (size_t i = 0; i < commands.size(); ++i) {
    if (subcommands[i]->parsed()) return commands[i]->Run();
  }
  return 0;
}

}  // namespace nearprep
