// What `nearprep load` measured, and its text and JSON reports: total and
// per-stream images/s with fairness (min/median/max, Jain's index), time to
// first batch, inter-batch latency percentiles, errors by status code,
// reconnects and resumes, --verify results and the data-stall report
// (stall_report.h) per trainer.
//
// Definitions (also in docs/operations.md):
//   time to first batch   stream start -> first batch received
//   inter-batch latency   gap between two consecutive batch arrivals of a
//                         stream (consumer delay included)
//   wait                  time blocked in Next() for one batch
//   resume                a reconnect after the stream had received batches
//
// Thread-safety: plain values and pure functions.
#ifndef NEARPREP_CLIENT_CPP_SRC_LOAD_REPORT_H_
#define NEARPREP_CLIENT_CPP_SRC_LOAD_REPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cli/stall_report.h"
#include "nlohmann/json.hpp"

namespace nearprep {

// Nearest-rank percentile (p in [0, 100]) of unsorted values; 0 when empty.
double Percentile(std::vector<double> values, double p);

// Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all equal, 1/n when
// one stream gets everything. 1 for an empty or all-zero input.
double JainIndex(const std::vector<double>& values);

// One stream of the load, as its thread recorded it.
struct StreamRecord {
  int index = 0;
  std::string target;
  uint32_t shard_index = 0, num_shards = 1;
  bool slow = false;
  double start_s = 0;          // Since the load started.
  double first_batch_s = -1;   // -1: no batch.
  double end_s = 0;
  uint64_t batches = 0, images = 0, bytes = 0, skipped_samples = 0;
  uint64_t epochs_completed = 0;
  int reconnects = 0, resumes = 0;
  std::vector<BatchRecord> batch_log;
  std::vector<double> inter_batch_s;
  std::map<std::string, uint64_t> sample_errors;  // SampleError.code -> n.
  std::string status_code = "OK";                 // Final stream status.
  std::string status_message;
  // --verify: epochs checked and the failures ("epoch E: detail").
  uint64_t epochs_verified = 0;
  std::vector<std::string> verify_failures;
};

struct LoadSummary {
  double wall_s = 0;
  int streams = 0;
  uint64_t batches = 0, images = 0, bytes = 0, skipped_samples = 0;
  double images_per_s = 0, mb_per_s = 0;
  // Per-stream images/s.
  double stream_ips_min = 0, stream_ips_median = 0, stream_ips_max = 0;
  double jain_index = 1;
  double ttfb_p50_ms = 0, ttfb_max_ms = 0;
  // Inter-batch latency and wait, milliseconds: p50, p90, p99, p99.9, max.
  std::vector<double> inter_batch_ms, wait_ms;
  std::map<std::string, uint64_t> stream_errors;  // Final status != OK.
  std::map<std::string, uint64_t> sample_errors;
  int reconnects = 0, resumes = 0;
  bool verify = false;
  uint64_t epochs_verified = 0, verify_failures = 0;
  std::vector<StallSummary> stalls;  // Per stream.
  StallSummary overall_stall;        // All trainers together.
  // Exit status of the run: non-zero on a stream error, a failed --verify,
  // or when nothing was received.
  bool ok() const;
};

inline constexpr double kLatencyPercentiles[] = {50, 90, 99, 99.9, 100};

LoadSummary Summarize(const std::vector<StreamRecord>& streams, double wall_s,
                      bool verify);

std::string ReportText(const LoadSummary& s,
                       const std::vector<StreamRecord>& streams);
nlohmann::json ReportJson(const LoadSummary& s,
                          const std::vector<StreamRecord>& streams);

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_SRC_LOAD_REPORT_H_
