// Pieces several `nearprep` commands share (commands/): the error line, the
// progress line, the dataset's class names, the contact sheet of a batch and
// --dry-run.
//
// Thread-safety: for the CLI's one thread; Progress is not thread-safe.
#ifndef NEARPREP_CLIENT_CPP_SRC_CLI_COMMON_H_
#define NEARPREP_CLIENT_CPP_SRC_CLI_COMMON_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cli/request_flags.h"
#include "nearprep/client.h"
#include "nearprep/v1/nearprep.pb.h"

namespace nearprep {

using CliClock = std::chrono::steady_clock;

// Prints "nearprep: <status>" to stderr and returns 1 (the exit status).
int Fail(const absl::Status& s);

double Seconds(CliClock::time_point a, CliClock::time_point b);

// One progress line on stderr (a terminal gets \r updates; a pipe gets a
// line every few seconds).
class Progress {
 public:
  explicit Progress(uint64_t total_images);
  // `consumed`: images plus skipped samples (what the percentage counts).
  void Update(uint64_t batches, uint64_t images, uint64_t bytes, int reconnects,
              bool force = false, uint64_t consumed = 0);
  void Done();

 private:
  uint64_t total_;
  bool tty_;
  CliClock::time_point start_, last_;
  uint64_t last_images_ = 0;
  uint64_t last_bytes_ = 0;
};

// Class names of `dataset`, empty when the daemon does not say; its sample
// count into *num_samples when given.
std::vector<std::string> ClassNames(Client* client, const std::string& dataset,
                                    uint64_t* num_samples);

// Writes the contact sheet PNG of `batch` (made by `req`) to `path`.
absl::Status RenderSheet(const v1::Batch& batch, const v1::StreamBatchesRequest& req,
                         const std::vector<std::string>& class_names,
                         const std::string& path, int columns);

// --dry-run: prints the request (protobuf JSON) and returns 0; -1 without it.
int DryRun(const RequestFlags& flags, const v1::StreamBatchesRequest& req);

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_SRC_CLI_COMMON_H_
