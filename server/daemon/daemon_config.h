// nearprepd's configuration: a YAML file (--config) plus command-line flags
// that override it. deploy/nearprepd.example.yaml documents every key.
//
// Errors are values: a bad file, an unknown key, a value of the wrong type or
// out of range gives INVALID_ARGUMENT with the key's path (and the YAML line),
// which nearprepd prints before exiting with status 2.
//
// Thread-safety: pure functions.
#ifndef NEARPREP_SERVER_DAEMON_DAEMON_CONFIG_H_
#define NEARPREP_SERVER_DAEMON_DAEMON_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/authz/authorizer.h"
#include "server/daemon/backend_choice.h"
#include "server/service/server.h"

namespace nearprep {

struct DaemonConfig {
  // Without `listen` / --listen: 127.0.0.1 when serving plaintext, 0.0.0.0
  // with TLS (ParseCommandLine decides once everything is merged).
  std::string listen_address = "127.0.0.1";
  bool listen_given = false;
  int port = 7070;
  // When set, the bound port is written there (atomically) once listening.
  std::string port_file;
  std::string log_level = "info";
  // SIGTERM/SIGINT: streams may finish for this long, then are cancelled.
  double drain_seconds = 10.0;
  // Prometheus metrics over HTTP (server/metrics/http_endpoint.h):
  // "HOST:PORT", empty = off. YAML metrics.listen, flag --metrics-listen.
  std::string metrics_listen;
  // When set, the metrics port is written there once listening (port 0).
  std::string metrics_port_file;
  ServerOptions server;
  BackendOptions backend;
  // The --config file ("" without one): SIGHUP re-reads its authorization
  // section (ReloadAuthorization).
  std::string config_file;
};

// Parses "123", "64K", "512M", "2G" (powers of 1024) into bytes.
absl::StatusOr<uint64_t> ParseByteSize(const std::string& text);

// The keys of a dataset's configuration, in the table's order: a config
// file's `datasets[i].KEY` and the --dataset flag's ",KEY=VALUE" (the flag's
// NAME=ROOT gives `name` and `root`). One table serves both parsers.
std::vector<std::string> DatasetConfigKeys();

// Parses a "NAME=ROOT[,KEY=VALUE...]" dataset flag ("NAME=ROOT,list_file=
// FILE", "NAME=ROOT,format=tar,allow_empty=true"): the keys, conversions and
// refusals of a config file's datasets entry (an unknown key: "unknown key
// (known: ...)"). A list (extensions) is the rest of the value, commas
// included. The older key `list=` is still accepted; its deprecation warning
// is appended to *warnings when given.
absl::StatusOr<DatasetConfig> ParseDatasetFlag(
    const std::string& text, std::vector<std::string>* warnings = nullptr);

// Applies the YAML document `yaml` onto *config (keys absent keep their
// value). `source` names the document in messages.
absl::Status ApplyYamlConfig(const std::string& yaml, const std::string& source,
                             DaemonConfig* config);

// Checks cross-field constraints once everything is merged.
absl::Status ValidateDaemonConfig(const DaemonConfig& config);

// The result of parsing the command line.
struct CommandLine {
  DaemonConfig config;
  // Set when the process should exit right away (--help, a bad flag, a bad
  // config) with `exit_code`; `message` is what to print.
  bool exit_now = false;
  int exit_code = 0;
  std::string message;
  // Deprecation notes for older spellings that were accepted; nearprepd
  // prints them to stderr.
  std::vector<std::string> warnings;
};

// Parses argv: defaults, then --config FILE, then the other flags.
CommandLine ParseCommandLine(int argc, const char* const* argv);

// SIGHUP: reads `config_file` again and replaces the live authorization
// policy and token file with its `authorization` section (the other keys
// take effect only on restart). On any error (unreadable file, YAML syntax,
// a bad rule, an unreadable token file) the policy in force stays and the
// error, naming the file and key, is returned.
absl::Status ReloadAuthorization(const std::string& config_file,
                                 authz::Authorizer* authorizer);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_DAEMON_DAEMON_CONFIG_H_
