#include "cli/load_report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace nearprep {

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  // Nearest rank: the smallest value with at least p% of values <= it.
  // (The tolerance keeps p = 99.9 of 1000 values at rank 999, not 1000.)
  const double rank = std::ceil(std::clamp(p, 0.0, 100.0) / 100.0 *
                                    static_cast<double>(values.size()) -
                                1e-9);
  const size_t i = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return values[std::min(i, values.size() - 1)];
}

double JainIndex(const std::vector<double>& values) {
  double sum = 0, sum_sq = 0;
  for (double v : values) {
    sum += v;
    sum_sq += v * v;
  }
  if (values.empty() || sum_sq == 0) return 1.0;
  return sum * sum / (static_cast<double>(values.size()) * sum_sq);
}

bool LoadSummary::ok() const {
  return stream_errors.empty() && verify_failures == 0 && images > 0;
}

namespace {

double StreamSeconds(const StreamRecord& r) {
  return std::max(0.0, r.end_s - r.start_s);
}

double StreamIps(const StreamRecord& r) {
  const double s = StreamSeconds(r);
  return s > 0 ? r.images / s : 0.0;
}

std::vector<double> Quantiles(const std::vector<double>& v_s) {
  std::vector<double> out;
  for (double p : kLatencyPercentiles) out.push_back(Percentile(v_s, p) * 1e3);
  return out;
}

}  // namespace

LoadSummary Summarize(const std::vector<StreamRecord>& streams, double wall_s,
                      bool verify) {
  LoadSummary s;
  s.wall_s = wall_s;
  s.streams = static_cast<int>(streams.size());
  s.verify = verify;
  std::vector<double> ips, ttfb, gaps, waits;
  for (const StreamRecord& r : streams) {
    s.batches += r.batches;
    s.images += r.images;
    s.bytes += r.bytes;
    s.skipped_samples += r.skipped_samples;
    s.reconnects += r.reconnects;
    s.resumes += r.resumes;
    ips.push_back(StreamIps(r));
    if (r.first_batch_s >= 0) ttfb.push_back(r.first_batch_s - r.start_s);
    gaps.insert(gaps.end(), r.inter_batch_s.begin(), r.inter_batch_s.end());
    for (const BatchRecord& b : r.batch_log) waits.push_back(b.wait_s);
    for (const auto& [code, n] : r.sample_errors) s.sample_errors[code] += n;
    if (r.status_code != "OK") ++s.stream_errors[r.status_code];
    s.epochs_verified += r.epochs_verified;
    s.verify_failures += r.verify_failures.size();
    s.stalls.push_back(AnalyzeStalls(r.batch_log, StreamSeconds(r)));
    const StallSummary& st = s.stalls.back();
    s.overall_stall.wall_s += st.wall_s;
    s.overall_stall.wait_s += st.wait_s;
    for (int i = 0; i < kNumStallStages; ++i) {
      s.overall_stall.by_stage_s[i] += st.by_stage_s[i];
    }
  }
  StallSummary& o = s.overall_stall;
  o.stall_fraction = o.wall_s > 0 ? std::min(1.0, o.wait_s / o.wall_s) : 0.0;
  for (int i = 0; i < kNumStallStages; ++i) {
    if (o.by_stage_s[i] > 0 &&
        (o.bound_stage < 0 || o.by_stage_s[i] > o.by_stage_s[o.bound_stage])) {
      o.bound_stage = i;
    }
  }
  s.images_per_s = wall_s > 0 ? s.images / wall_s : 0.0;
  s.mb_per_s = wall_s > 0 ? s.bytes / wall_s / 1e6 : 0.0;
  if (!ips.empty()) {
    s.stream_ips_min = *std::min_element(ips.begin(), ips.end());
    s.stream_ips_max = *std::max_element(ips.begin(), ips.end());
    s.stream_ips_median = Percentile(ips, 50);
  }
  s.jain_index = JainIndex(ips);
  s.ttfb_p50_ms = Percentile(ttfb, 50) * 1e3;
  s.ttfb_max_ms = Percentile(ttfb, 100) * 1e3;
  s.inter_batch_ms = Quantiles(gaps);
  s.wait_ms = Quantiles(waits);
  return s;
}

namespace {

std::string CodeList(const std::map<std::string, uint64_t>& m) {
  if (m.empty()) return "none";
  std::string out;
  for (const auto& [code, n] : m) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", code, " ", n);
  }
  return out;
}

std::string StageSplit(const StallSummary& st) {
  if (st.wait_s <= 0) return "";
  std::string out;
  for (int i = 0; i < kNumStallStages; ++i) {
    absl::StrAppend(&out, i ? ", " : "", StallStageName(i), " ",
                    absl::StrFormat("%.0f%%", 100 * st.by_stage_s[i] / st.wait_s));
  }
  return out;
}

nlohmann::json StallJson(const StallSummary& st) {
  nlohmann::json by = nlohmann::json::object();
  for (int i = 0; i < kNumStallStages; ++i) {
    by[StallStageName(i)] = st.by_stage_s[i];
  }
  return {{"wall_s", st.wall_s},
          {"wait_s", st.wait_s},
          {"stall_fraction", st.stall_fraction},
          {"bound", st.Bound()},
          {"wait_by_stage_s", by}};
}

nlohmann::json Quantile(const std::vector<double>& ms) {
  static const char* kNames[] = {"p50", "p90", "p99", "p99_9", "max"};
  nlohmann::json j = nlohmann::json::object();
  for (size_t i = 0; i < ms.size(); ++i) j[kNames[i]] = ms[i];
  return j;
}

}  // namespace

std::string ReportText(const LoadSummary& s,
                       const std::vector<StreamRecord>& streams) {
  std::string out;
  absl::StrAppendFormat(
      &out,
      "load: %d streams, %.2f s: %llu images in %llu batches, %.1f images/s, "
      "%.1f MB/s\n",
      s.streams, s.wall_s, static_cast<unsigned long long>(s.images),
      static_cast<unsigned long long>(s.batches), s.images_per_s, s.mb_per_s);
  absl::StrAppendFormat(
      &out,
      "  per stream images/s: min %.1f, median %.1f, max %.1f; Jain's "
      "fairness index %.3f\n",
      s.stream_ips_min, s.stream_ips_median, s.stream_ips_max, s.jain_index);
  absl::StrAppendFormat(&out,
                        "  time to first batch: p50 %.1f ms, max %.1f ms\n",
                        s.ttfb_p50_ms, s.ttfb_max_ms);
  const auto& g = s.inter_batch_ms;
  const auto& w = s.wait_ms;
  absl::StrAppendFormat(
      &out,
      "  inter-batch latency ms: p50 %.2f, p90 %.2f, p99 %.2f, p99.9 %.2f, "
      "max %.2f\n",
      g[0], g[1], g[2], g[3], g[4]);
  absl::StrAppendFormat(
      &out,
      "  wait for data per batch ms: p50 %.2f, p90 %.2f, p99 %.2f, p99.9 "
      "%.2f, max %.2f\n",
      w[0], w[1], w[2], w[3], w[4]);
  absl::StrAppend(&out, "  stream errors: ", CodeList(s.stream_errors),
                  "; skipped samples: ", CodeList(s.sample_errors), "\n");
  absl::StrAppend(&out, "  reconnects: ", s.reconnects,
                  ", resumes: ", s.resumes, "\n");
  if (s.verify) {
    absl::StrAppend(&out, "  verify: ", s.epochs_verified, " (stream, epoch) ",
                    s.verify_failures == 0 ? "passed" : "checked, ",
                    s.verify_failures == 0 ? ""
                                           : absl::StrCat(s.verify_failures,
                                                          " FAILED"),
                    "\n");
    for (const StreamRecord& r : streams) {
      for (const std::string& f : r.verify_failures) {
        absl::StrAppend(&out, "    stream ", r.index, ": ", f, "\n");
      }
    }
  }
  const StallSummary& o = s.overall_stall;
  absl::StrAppendFormat(
      &out, "  data stall: %.1f%% of trainer time waiting for data; bound: %s",
      100 * o.stall_fraction, o.Bound());
  const std::string split = StageSplit(o);
  if (!split.empty()) absl::StrAppend(&out, " (wait: ", split, ")");
  absl::StrAppend(&out, "\n");
  absl::StrAppend(&out, "  stream  target  shard  images/s  ttfb ms  stall  "
                        "bound  status\n");
  for (size_t i = 0; i < streams.size(); ++i) {
    const StreamRecord& r = streams[i];
    const StallSummary& st = s.stalls[i];
    absl::StrAppendFormat(
        &out, "  %6d  %s  %u/%u%s  %.1f  %.1f  %.1f%%  %s  %s%s\n", r.index,
        r.target, r.shard_index, r.num_shards, r.slow ? " slow" : "",
        StreamSeconds(r) > 0 ? r.images / StreamSeconds(r) : 0.0,
        r.first_batch_s >= 0 ? (r.first_batch_s - r.start_s) * 1e3 : -1.0,
        100 * st.stall_fraction, st.Bound(), r.status_code,
        r.status_message.empty() ? "" : absl::StrCat(" (", r.status_message, ")"));
  }
  return out;
}

nlohmann::json ReportJson(const LoadSummary& s,
                          const std::vector<StreamRecord>& streams) {
  nlohmann::json j;
  j["ok"] = s.ok();
  j["wall_s"] = s.wall_s;
  j["streams"] = s.streams;
  j["batches"] = s.batches;
  j["images"] = s.images;
  j["bytes"] = s.bytes;
  j["skipped_samples"] = s.skipped_samples;
  j["images_per_s"] = s.images_per_s;
  j["mb_per_s"] = s.mb_per_s;
  j["fairness"] = {{"min_images_per_s", s.stream_ips_min},
                   {"median_images_per_s", s.stream_ips_median},
                   {"max_images_per_s", s.stream_ips_max},
                   {"jain_index", s.jain_index}};
  j["time_to_first_batch_ms"] = {{"p50", s.ttfb_p50_ms},
                                 {"max", s.ttfb_max_ms}};
  j["inter_batch_latency_ms"] = Quantile(s.inter_batch_ms);
  j["wait_ms"] = Quantile(s.wait_ms);
  j["stream_errors"] = s.stream_errors;
  j["sample_errors"] = s.sample_errors;
  j["reconnects"] = s.reconnects;
  j["resumes"] = s.resumes;
  if (s.verify) {
    j["verify"] = {{"epochs_verified", s.epochs_verified},
                   {"failures", s.verify_failures},
                   {"passed", s.verify_failures == 0}};
  }
  j["stall"] = StallJson(s.overall_stall);
  nlohmann::json per = nlohmann::json::array();
  for (size_t i = 0; i < streams.size(); ++i) {
    const StreamRecord& r = streams[i];
    nlohmann::json o = {
        {"index", r.index},
        {"target", r.target},
        {"shard", absl::StrCat(r.shard_index, "/", r.num_shards)},
        {"slow", r.slow},
        {"batches", r.batches},
        {"images", r.images},
        {"bytes", r.bytes},
        {"images_per_s", StreamIps(r)},
        {"time_to_first_batch_ms",
         r.first_batch_s >= 0 ? (r.first_batch_s - r.start_s) * 1e3 : -1.0},
        {"epochs_completed", r.epochs_completed},
        {"reconnects", r.reconnects},
        {"resumes", r.resumes},
        {"status", r.status_code},
        {"status_message", r.status_message},
        {"sample_errors", r.sample_errors},
        {"stall", StallJson(s.stalls[i])}};
    if (s.verify) {
      o["epochs_verified"] = r.epochs_verified;
      o["verify_failures"] = r.verify_failures;
    }
    per.push_back(std::move(o));
  }
  j["per_stream"] = std::move(per);
  return j;
}

}  // namespace nearprep
