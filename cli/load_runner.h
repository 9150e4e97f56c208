// `nearprep load`: many concurrent streams against one or several daemons,
// for a duration or a number of epochs, with a ramp-up, slow consumers and a
// simulated trainer step; a live progress line on stderr, then the report of
// load_report.h on stdout (and as JSON), the stall plot, and an exit status
// a script can trust:
//   0  every stream ended OK, something was received, --verify passed
//   1  a stream failed (status code counted), --verify failed, or no data
//   2  bad flags (CLI11) or a request the flags cannot express
//
// Streams: stream i connects to target i mod T (--target A,B,...). Without
// --split every stream reads the request's shard (N trainers each reading
// the dataset); with --split stream i reads shard i of N.
//
// Thread-safety: RunLoad runs one thread per stream plus the caller's
// (progress); LoadFlags is plain values bound to a CLI11 app.
#ifndef NEARPREP_CLIENT_CPP_SRC_LOAD_RUNNER_H_
#define NEARPREP_CLIENT_CPP_SRC_LOAD_RUNNER_H_

#include <string>

#include "CLI/CLI.hpp"
#include "cli/request_flags.h"

namespace nearprep {

struct LoadFlags {
  RequestFlags request;       // --target may list several, comma-separated.
  int streams = 4;            // --streams
  double duration_s = 0;      // --duration; 0: by epochs.
  int epochs = 0;             // --epochs; 0: 1, or unlimited with --duration.
  double ramp_up_s = 0;       // --ramp-up: stream i starts at i/N of it.
  int slow = 0;               // --slow: the first N streams are slow.
  double consumer_delay_ms = 0;  // --consumer-delay, per batch, slow ones.
  double step_ms = 0;         // --step-ms: every stream's "training step".
  bool split = false;         // --split: stream i reads shard i of N.
  bool verify = false;        // --verify
  std::string json_path;      // --json FILE
  std::string plot_path;      // --plot FILE.png
  double bin_s = 0;           // --plot-bin; 0: about 60 bins.
  bool quiet = false;         // --quiet: no progress line.

  void Register(CLI::App* app);
};

// Runs the load; returns the exit status above. Report on stdout, progress
// and errors on stderr.
int RunLoad(const LoadFlags& flags);

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_SRC_LOAD_RUNNER_H_
