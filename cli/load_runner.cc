#include "cli/load_runner.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/load_report.h"
#include "cli/load_verify.h"
#include "cli/stall_report.h"
#include "nearprep/client.h"

namespace nearprep {

void LoadFlags::Register(CLI::App* app) {
  request.target_list = true;
  request.Register(app);
  app->add_option("--streams", streams, "concurrent streams")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app->add_option("--duration", duration_s,
                  "stop after this many seconds (streams loop over epochs); "
                  "0: run --epochs")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--epochs", epochs,
                  "epochs per stream (default 1, or unlimited with --duration)")
      ->check(CLI::Range(0, 1000000));
  app->add_option("--ramp-up", ramp_up_s,
                  "seconds over which the streams start (stream i at i/N)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--slow", slow, "the first N streams are slow consumers")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--consumer-delay", consumer_delay_ms,
                  "milliseconds a slow consumer sleeps after each batch")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--step-ms", step_ms,
                  "simulated training step: every stream sleeps this many ms "
                  "after each batch (the data-stall report)")
      ->check(CLI::NonNegativeNumber);
  app->add_flag("--split", split, "stream i reads shard i of N (not --shard)");
  app->add_flag("--verify", verify,
                "check that every (stream, epoch) received each sample id of "
                "its shard exactly once");
  app->add_option("--json", json_path, "also write the report as JSON here");
  app->add_option("--plot", plot_path,
                  "PNG of throughput and stall fraction over time");
  app->add_option("--plot-bin", bin_s, "plot bin width in seconds (0: auto)")
      ->check(CLI::NonNegativeNumber);
  app->add_flag("--quiet", quiet, "no live progress line");
}

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// What the stream threads share with the progress line.
struct Shared {
  Clock::time_point start;
  std::optional<Clock::time_point> deadline;
  std::atomic<uint64_t> images{0}, bytes{0};
  std::atomic<int> up{0}, errors{0}, finished{0};
};

struct StreamPlan {
  std::string target;
  uint64_t num_samples = 0;  // For --verify.
};

void RunOneStream(const LoadFlags& f, const v1::StreamBatchesRequest& base,
                  const StreamPlan& plan, Shared* sh, StreamRecord* rec) {
  std::this_thread::sleep_until(
      sh->start + std::chrono::duration_cast<Clock::duration>(
                      std::chrono::duration<double>(f.ramp_up_s * rec->index /
                                                    f.streams)));
  rec->start_s = Seconds(sh->start, Clock::now());
  rec->end_s = rec->start_s;
  Client client(f.request.tls.ToClientOptions(plan.target));
  const int epochs =
      f.epochs > 0 ? f.epochs : (f.duration_s > 0 ? INT_MAX : 1);
  const bool whole_shard = base.max_batches() == 0 && !base.drop_remainder();
  const double delay_ms = f.step_ms + (rec->slow ? f.consumer_delay_ms : 0);
  double last_arrival = -1;
  bool stop = false;
  sh->up.fetch_add(1);
  for (int e = 0; e < epochs && !stop; ++e) {
    v1::StreamBatchesRequest req = base;
    req.set_shard_index(rec->shard_index);
    req.set_num_shards(rec->num_shards);
    req.set_epoch(base.epoch() + e);
    std::unique_ptr<BatchReader> reader = client.StreamBatches(req);
    EpochDelivery got;
    int seen_reconnects = 0;
    v1::Batch batch;
    for (;;) {
      const Clock::time_point asked = Clock::now();
      const bool ok = reader->Next(&batch);
      const Clock::time_point arrived = Clock::now();
      if (reader->reconnects() > seen_reconnects) {
        // A reconnect after batches of this epoch arrived resumed mid-way.
        if (got.batches > 0) rec->resumes += reader->reconnects() - seen_reconnects;
        seen_reconnects = reader->reconnects();
      }
      if (!ok) break;
      BatchRecord b;
      b.t_s = Seconds(sh->start, arrived);
      b.wait_s = Seconds(asked, arrived);
      b.images = static_cast<uint32_t>(batch.labels_size());
      b.bytes = batch.tensor().data().size();
      b.read_us = batch.timings().read_us();
      b.decode_us = batch.timings().decode_us();
      b.transform_us = batch.timings().transform_us();
      b.queue_wait_us = batch.timings().queue_wait_us();
      rec->batch_log.push_back(b);
      if (last_arrival >= 0) rec->inter_batch_s.push_back(b.t_s - last_arrival);
      last_arrival = b.t_s;
      if (rec->first_batch_s < 0) rec->first_batch_s = b.t_s;
      ++rec->batches;
      rec->images += b.images;
      rec->bytes += b.bytes;
      rec->skipped_samples += batch.errors_size();
      for (const v1::SampleError& err : batch.errors()) {
        ++rec->sample_errors[err.code()];
        if (f.verify) got.skipped.push_back(err.sample_id());
      }
      if (f.verify) {
        got.received.insert(got.received.end(), batch.sample_ids().begin(),
                            batch.sample_ids().end());
      }
      got.end_position = batch.next_position();
      ++got.batches;
      sh->images.fetch_add(b.images, std::memory_order_relaxed);
      sh->bytes.fetch_add(b.bytes, std::memory_order_relaxed);
      if (delay_ms > 0) {
        std::this_thread::sleep_for(
            std::chrono::duration<double, std::milli>(delay_ms));
      }
      if (sh->deadline && Clock::now() >= *sh->deadline) {
        stop = true;  // This epoch is cut short: not verified.
        break;
      }
    }
    rec->reconnects += reader->reconnects();
    if (stop) break;
    if (!reader->status().ok()) {
      rec->status_code = absl::StatusCodeToString(reader->status().code());
      rec->status_message = std::string(reader->status().message());
      sh->errors.fetch_add(1);
      break;
    }
    ++rec->epochs_completed;
    if (f.verify) {
      const std::vector<uint64_t> shard =
          ExpectedShard(plan.num_samples, req.seed(), req.epoch(),
                        req.shuffle(), req.shard_index(), req.num_shards());
      const VerifyResult v = VerifyDelivery(shard, got, whole_shard);
      ++rec->epochs_verified;
      if (!v.ok) {
        rec->verify_failures.push_back(
            absl::StrCat("epoch ", req.epoch(), ": ", v.detail));
      }
    }
    if (sh->deadline && Clock::now() >= *sh->deadline) stop = true;
  }
  rec->end_s = Seconds(sh->start, Clock::now());
  sh->up.fetch_sub(1);
  sh->finished.fetch_add(1);
}

void PrintProgress(const Shared& sh, int streams, bool tty,
                   uint64_t* last_images, Clock::time_point* last) {
  const Clock::time_point now = Clock::now();
  const uint64_t images = sh.images.load(std::memory_order_relaxed);
  const double window = Seconds(*last, now);
  const double el = Seconds(sh.start, now);
  std::fprintf(stderr,
               "%s%7.1fs  %9.1f img/s  %8.1f MB/s  streams up %d/%d  "
               "errors %d%s",
               tty ? "\r" : "", el,
               window > 0 ? (images - *last_images) / window : 0.0,
               el > 0 ? sh.bytes.load(std::memory_order_relaxed) / el / 1e6
                      : 0.0,
               sh.up.load(), streams, sh.errors.load(), tty ? "   " : "\n");
  std::fflush(stderr);
  *last_images = images;
  *last = now;
}

}  // namespace

int RunLoad(const LoadFlags& f) {
  absl::StatusOr<v1::StreamBatchesRequest> base = f.request.ToRequest();
  if (!base.ok()) {
    std::fprintf(stderr, "nearprep load: %s\n", base.status().ToString().c_str());
    return 2;
  }
  if (f.request.dry_run) {  // the base request (each stream gets its shard)
    absl::StatusOr<std::string> json = RequestJson(*base);
    if (!json.ok()) return 1;
    std::printf("%s\n", json->c_str());
    return 0;
  }
  std::vector<std::string> targets =
      absl::StrSplit(f.request.target, ',', absl::SkipWhitespace());
  if (targets.empty()) {
    std::fprintf(stderr, "nearprep load: --target: no address given\n");
    return 2;
  }
  if (f.slow > f.streams) {
    std::fprintf(stderr, "nearprep load: --slow %d is more than --streams %d\n",
                 f.slow, f.streams);
    return 2;
  }
  if (f.verify && (base->start_batch() > 0 || base->start_position() > 0)) {
    std::fprintf(stderr,
                 "nearprep load: --verify needs whole streams (no --start-batch)\n");
    return 2;
  }
  // Dataset sizes, for --verify (and to fail fast on a wrong name).
  std::map<std::string, uint64_t> num_samples;
  for (const std::string& t : targets) {
    Client c(f.request.tls.ToClientOptions(t));
    absl::StatusOr<std::vector<v1::DatasetInfo>> ds = c.ListDatasets();
    if (!ds.ok()) {
      std::fprintf(stderr, "nearprep load: %s: %s\n", t.c_str(),
                   ds.status().ToString().c_str());
      return 1;
    }
    auto it = std::find_if(ds->begin(), ds->end(), [&](const v1::DatasetInfo& d) {
      return d.name() == f.request.dataset;
    });
    if (it == ds->end()) {
      std::fprintf(stderr, "nearprep load: %s has no dataset '%s'\n", t.c_str(),
                   f.request.dataset.c_str());
      return 1;
    }
    num_samples[t] = it->num_samples();
  }

  std::vector<StreamRecord> records(f.streams);
  std::vector<StreamPlan> plans(f.streams);
  for (int i = 0; i < f.streams; ++i) {
    StreamRecord& r = records[i];
    r.index = i;
    r.target = targets[i % targets.size()];
    r.slow = i < f.slow;
    r.shard_index = f.split ? i : base->shard_index();
    r.num_shards = f.split ? f.streams : std::max<uint32_t>(1, base->num_shards());
    plans[i].target = r.target;
    plans[i].num_samples = num_samples[r.target];
  }
  std::fprintf(stderr,
               "load: %d stream(s) on %zu target(s), dataset %s, batch %u, "
               "%s%s\n",
               f.streams, targets.size(), f.request.dataset.c_str(),
               base->batch_size(),
               f.duration_s > 0 ? absl::StrCat(f.duration_s, " s").c_str()
                                : absl::StrCat(f.epochs > 0 ? f.epochs : 1,
                                               " epoch(s)").c_str(),
               f.verify ? ", verifying" : "");

  Shared sh;
  sh.start = Clock::now();
  if (f.duration_s > 0) {
    sh.deadline = sh.start + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(f.duration_s));
  }
  std::vector<std::thread> threads;
  threads.reserve(f.streams);
  for (int i = 0; i < f.streams; ++i) {
    threads.emplace_back(RunOneStream, std::cref(f), std::cref(*base),
                         std::cref(plans[i]), &sh, &records[i]);
  }
  const bool tty = isatty(fileno(stderr)) != 0;
  uint64_t last_images = 0;
  Clock::time_point last_print = sh.start;
  while (sh.finished.load() < f.streams) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!f.quiet && Seconds(last_print, Clock::now()) >= (tty ? 0.25 : 5.0)) {
      PrintProgress(sh, f.streams, tty, &last_images, &last_print);
    }
  }
  for (std::thread& t : threads) t.join();
  double wall = 0;
  for (const StreamRecord& r : records) wall = std::max(wall, r.end_s);
  if (!f.quiet) {
    PrintProgress(sh, f.streams, tty, &last_images, &last_print);
    if (tty) std::fprintf(stderr, "\n");
  }

  const LoadSummary s = Summarize(records, wall, f.verify);
  std::fputs(ReportText(s, records).c_str(), stdout);
  std::fflush(stdout);
  int status = s.ok() ? 0 : 1;
  if (!f.json_path.empty()) {
    std::ofstream out(f.json_path, std::ios::trunc);
    out << ReportJson(s, records).dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "nearprep load: cannot write %s\n",
                   f.json_path.c_str());
      status = 1;
    }
  }
  if (!f.plot_path.empty()) {
    const double bin = f.bin_s > 0 ? f.bin_s : std::max(0.25, wall / 60.0);
    std::vector<TrainerSpan> spans;
    for (const StreamRecord& r : records) {
      spans.push_back({r.start_s, r.end_s, &r.batch_log});
    }
    absl::Status st = WriteStallPlot(
        f.plot_path, BuildTimeline(spans, wall, bin), bin,
        absl::StrCat("NEARPREP LOAD: ", f.streams, " STREAMS, STEP ",
                     f.step_ms, " MS, STALL ",
                     static_cast<int>(100 * s.overall_stall.stall_fraction + 0.5),
                     "%, BOUND: ", s.overall_stall.Bound()));
    if (!st.ok()) {
      std::fprintf(stderr, "nearprep load: --plot: %s\n", st.ToString().c_str());
      status = 1;
    }
  }
  if (!s.ok()) {
    std::fprintf(stderr, "nearprep load: FAILED (%s)\n",
                 s.images == 0 ? "no images received"
                 : s.verify_failures > 0 ? "verify failed"
                                         : "stream errors");
  }
  return status;
}

}  // namespace nearprep
