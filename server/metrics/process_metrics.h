// process_* metrics of the calling process, with the names and units of
// the official Prometheus clients (client_golang's process collector):
//   process_cpu_seconds_total          user + system CPU time
//   process_resident_memory_bytes      RSS
//   process_virtual_memory_bytes       virtual memory size
//   process_virtual_memory_max_bytes   RLIMIT_AS
//   process_open_fds, process_max_fds  open descriptors, RLIMIT_NOFILE
//   process_start_time_seconds         start, seconds since the Unix epoch
//   process_threads                    threads (as the Python client)
// Read from /proc/self/stat and /proc/self/fd only: under systemd's
// ProcSubset=pid (deploy/nearprepd.service) /proc/stat is hidden, so the
// start time comes from the process's start in clock ticks since boot and
// CLOCK_BOOTTIME rather than from /proc/stat's btime. An unlimited rlimit is
// reported as the largest uint64 (as client_golang does).
//
// Thread-safety: pure functions (reading /proc is safe from any thread).
#ifndef NEARPREP_SERVER_METRICS_PROCESS_METRICS_H_
#define NEARPREP_SERVER_METRICS_PROCESS_METRICS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "server/metrics/exposition.h"

namespace nearprep {
namespace metrics {

// The fields of /proc/PID/stat this collector uses.
struct ProcStat {
  uint64_t utime_ticks = 0;
  uint64_t stime_ticks = 0;
  uint64_t num_threads = 0;
  uint64_t start_ticks = 0;  // since boot
  uint64_t vsize_bytes = 0;
  uint64_t rss_pages = 0;
};

// Parses the text of /proc/PID/stat (the command name may hold spaces and
// parentheses: fields are counted after the last ')'). False when the text
// is not in that format.
bool ParseProcStat(const std::string& text, ProcStat* out);

// Appends the process_* families (those that could be read; a missing
// /proc leaves them out rather than reporting zeros).
void CollectProcessMetrics(std::vector<MetricFamily>* out);

}  // namespace metrics
}  // namespace nearprep

#endif  // NEARPREP_SERVER_METRICS_PROCESS_METRICS_H_
