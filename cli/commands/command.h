// The subcommands of `nearprep`, one object each, in one table.
//
// A command is a file of its own in this folder, named after the command
// ('-' written '_': fleet-read is fleet_read.cc), that defines a Command and
// its factory; the table (command_table.cc) lists the factories in the order
// `nearprep --help` shows them, and RunCli loops over it: each command gets
// a CLI11 subcommand with its name and help line, adds its flags to it, and
// the one given on the command line runs. Adding a command: its file here
// (CMake picks up every .cc of the folder) and its line in the table;
// tests/unit/client/cli_commands_test.cc fails for a file that is not in the
// table.
//
// Thread-safety: none needed. RunCli makes one object of each command, binds
// their flags, parses once and runs one command on the calling thread.
#ifndef NEARPREP_CLIENT_CPP_SRC_COMMANDS_COMMAND_H_
#define NEARPREP_CLIENT_CPP_SRC_COMMANDS_COMMAND_H_

#include <memory>
#include <vector>

namespace CLI {
class App;
}

namespace nearprep {

class Command {
 public:
  virtual ~Command() = default;
  // The subcommand's name ("stream") and its one-line help (no newline).
  virtual const char* name() const = 0;
  virtual const char* help() const = 0;
  // Adds the command's flags to `app` (its subcommand), bound to members of
  // this object, which must outlive the parse.
  virtual void AddOptions(CLI::App* app) = 0;
  // Runs the command after a successful parse: its exit status (0 on
  // success, 1 on an error it printed to stderr).
  virtual int Run() = 0;
};

// The table: one new object of each command, in `nearprep --help`'s order.
std::vector<std::unique_ptr<Command>> NewCommands();

// The CLI (`main`): parses argv against the table's commands and runs the
// one given. Exit status: 0 on success and for --help / --version, 1 on an
// error (printed to stderr), 2 on bad flags.
int RunCli(int argc, char** argv);

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_SRC_COMMANDS_COMMAND_H_
