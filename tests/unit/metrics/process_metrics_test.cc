#include "server/metrics/process_metrics.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace nearprep {
namespace metrics {
namespace {

TEST(ProcessMetricsTest, ParsesProcStatWithOddCommandName) {
  // proc(5): pid (comm) state ppid pgrp session tty tpgid flags minflt
  // cminflt majflt cmajflt utime stime cutime cstime priority nice
  // num_threads itrealvalue starttime vsize rss ...
  const std::string text =
      "4242 (we ird) (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 "
      "250 75 0 0 20 0 9 0 123456 987654321 3210 18446744073709551615 1 1 0";
  ProcStat st;
  ASSERT_TRUE(ParseProcStat(text, &st));
  EXPECT_EQ(st.utime_ticks, 250u);
  EXPECT_EQ(st.stime_ticks, 75u);
  EXPECT_EQ(st.num_threads, 9u);
  EXPECT_EQ(st.start_ticks, 123456u);
  EXPECT_EQ(st.vsize_bytes, 987654321u);
  EXPECT_EQ(st.rss_pages, 3210u);
}

TEST(ProcessMetricsTest, RejectsMalformedStat) {
  ProcStat st;
  EXPECT_FALSE(ParseProcStat("", &st));
  EXPECT_FALSE(ParseProcStat("12 (x) S 1 2 3", &st));  // too short
  EXPECT_FALSE(ParseProcStat(
      "1 (x) S 1 1 1 0 -1 0 0 0 0 0 abc 1 0 0 20 0 1 0 5 6 7", &st));
}

std::map<std::string, double> Collect() {
  std::vector<MetricFamily> f;
  CollectProcessMetrics(&f);
  std::map<std::string, double> values;
  for (const auto& fam : f) {
    EXPECT_EQ(fam.samples.size(), 1u) << fam.name;
    if (!fam.samples.empty()) values[fam.name] = fam.samples[0].value;
  }
  return values;
}

TEST(ProcessMetricsTest, ReportsThisProcess) {
  std::map<std::string, double> v = Collect();
  for (const char* name :
       {"process_cpu_seconds_total", "process_resident_memory_bytes",
        "process_virtual_memory_bytes", "process_start_time_seconds",
        "process_threads", "process_open_fds", "process_max_fds",
        "process_virtual_memory_max_bytes"}) {
    EXPECT_EQ(v.count(name), 1u) << name;
  }
  EXPECT_GT(v["process_resident_memory_bytes"], 1 << 20);
  EXPECT_GE(v["process_virtual_memory_bytes"],
            v["process_resident_memory_bytes"]);
  EXPECT_GE(v["process_threads"], 1);
  // Started within the last hour, not in the future. The boot time under
  // it is rounded to whole seconds (so that it does not move between
  // scrapes): the value may lie up to 0.5 s (+ one clock tick) after the
  // true start, which was only moments ago; allow 2 s.
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  const double now_s = now.tv_sec + now.tv_nsec / 1e9;
  EXPECT_LE(v["process_start_time_seconds"], now_s + 2.0);
  EXPECT_GT(v["process_start_time_seconds"], now_s - 3600.0);

  // Open descriptors follow what the process opens.
  std::vector<int> fds;
  for (int i = 0; i < 5; ++i) fds.push_back(::open("/dev/null", O_RDONLY));
  const double more = Collect()["process_open_fds"];
  EXPECT_EQ(more, v["process_open_fds"] + 5);
  for (int fd : fds) ::close(fd);
  EXPECT_EQ(Collect()["process_open_fds"], v["process_open_fds"]);

  // CPU time grows with work.
  const double cpu0 = v["process_cpu_seconds_total"];
  volatile double x = 0;
  timespec start{}, t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
  do {
    for (int i = 0; i < 100000; ++i) x = x + i * 0.5;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  } while ((t.tv_sec - start.tv_sec) + (t.tv_nsec - start.tv_nsec) / 1e9 < 0.05);
  EXPECT_GT(Collect()["process_cpu_seconds_total"], cpu0);
}

}  // namespace
}  // namespace metrics
}  // namespace nearprep
