#include "server/metrics/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace nearprep {
namespace metrics {
namespace {

bool ReadFile(const char* path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// Entries of /proc/self/fd, without the descriptor of the listing itself.
bool CountOpenFds(uint64_t* n) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return false;
  const int own = ::dirfd(dir);
  uint64_t count = 0;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    if (std::atoi(e->d_name) == own) continue;
    ++count;
  }
  ::closedir(dir);
  *n = count;
  return true;
}

double Limit(int resource) {
  rlimit rl{};
  if (::getrlimit(resource, &rl) != 0) return -1;
  if (rl.rlim_cur == RLIM_INFINITY) return 18446744073709551615.0;
  return static_cast<double>(rl.rlim_cur);
}

double Seconds(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

}  // namespace

bool ParseProcStat(const std::string& text, ProcStat* out) {
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream in(text.substr(close + 1));
  // Field 3 (state) is the first after ')'; we need fields 14, 15, 20, 22,
  // 23, 24 (proc(5)).
  std::vector<std::string> f;
  std::string tok;
  while (in >> tok && f.size() < 22) f.push_back(tok);
  if (f.size() < 22) return false;
  auto num = [&f](size_t field, uint64_t* v) {
    const std::string& s = f[field - 3];
    char* end = nullptr;
    *v = std::strtoull(s.c_str(), &end, 10);
    return !s.empty() && end != nullptr && *end == '\0';
  };
  return num(14, &out->utime_ticks) && num(15, &out->stime_ticks) &&
         num(20, &out->num_threads) && num(22, &out->start_ticks) &&
         num(23, &out->vsize_bytes) && num(24, &out->rss_pages);
}

void CollectProcessMetrics(std::vector<MetricFamily>* out) {
  std::string text;
  ProcStat st;
  if (ReadFile("/proc/self/stat", &text) && ParseProcStat(text, &st)) {
    const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
    const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
    out->push_back(CounterFamily("process_cpu_seconds_total",
                                 "Total user and system CPU time spent in "
                                 "seconds.")
                       .Add({}, (st.utime_ticks + st.stime_ticks) / ticks));
    out->push_back(GaugeFamily("process_resident_memory_bytes",
                               "Resident memory size in bytes.")
                       .Add({}, st.rss_pages * page));
    out->push_back(GaugeFamily("process_virtual_memory_bytes",
                               "Virtual memory size in bytes.")
                       .Add({}, static_cast<double>(st.vsize_bytes)));
    // Boot time in whole wall-clock seconds (as /proc/stat's btime) = now -
    // time since boot: stable from one scrape to the next.
    const double boot =
        std::round(Seconds(CLOCK_REALTIME) - Seconds(CLOCK_BOOTTIME));
    out->push_back(GaugeFamily("process_start_time_seconds",
                               "Start time of the process since unix epoch "
                               "in seconds.")
                       .Add({}, boot + st.start_ticks / ticks));
    out->push_back(GaugeFamily("process_threads", "Number of OS threads.")
                       .Add({}, static_cast<double>(st.num_threads)));
  }
  out->push_back(GaugeFamily("process_virtual_memory_max_bytes",
                             "Maximum amount of virtual memory available in "
                             "bytes.")
                     .Add({}, Limit(RLIMIT_AS)));
  uint64_t fds = 0;
  if (CountOpenFds(&fds)) {
    out->push_back(GaugeFamily("process_open_fds",
                               "Number of open file descriptors.")
                       .Add({}, static_cast<double>(fds)));
  }
  out->push_back(GaugeFamily("process_max_fds",
                             "Maximum number of open file descriptors.")
                     .Add({}, Limit(RLIMIT_NOFILE)));
}

}  // namespace metrics
}  // namespace nearprep
