// `nearprep`: the command-line client of nearprepd. Its commands are in
// commands/, one file each, listed in the table of commands/command_table.cc
// (`nearprep --help` shows them; `nearprep CMD --help` shows CMD's flags).
//
// Exit status: 0 on success, 1 on an error (printed to stderr), 2 on bad
// flags.
#include "cli/commands/command.h"

int main(int argc, char** argv) { return nearprep::RunCli(argc, argv); }
