// nearprep_bench_e2e: end-to-end throughput over loopback gRPC versus the
// same request in-process, measured in one run.
//
// For each worker count (1, and all cores) it starts nearprepd (--port 0
// --port-file, one dataset), then for uint8 and float32 output streams
// `--epochs` epochs with nearprep::Client and runs the identical request
// in-process through nearprep::Pipeline (CPU backend, same worker count,
// same prefetch depth). Each figure is the best epoch (the machine is shared;
// the best epoch is the least disturbed one); the ratio is e2e / in-process.
//
// With --first-batch it measures time to first batch instead: for prefetch
// depths 1, 2, 4 and 8 (all cores), the median over --streams fresh streams
// of the time from opening a stream over loopback gRPC to receiving its first
// float32 batch, against one batch's decode time in the same run (the
// in-process pipeline's first batch at depth 1, same workers). Target: at most
// 1.5x at every depth.
//
// Thread-safety: a single-threaded program (the pipeline has its own pool).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nearprep/client.h"
#include "server/backend/cpu_backend.h"
#include "server/data/dataset.h"
#include "server/pipeline/pipeline.h"

#ifndef NEARPREPD_PATH
#define NEARPREPD_PATH ""
#endif

namespace nearprep {
namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  std::string nearprepd = NEARPREPD_PATH;
  std::string dataset =
      std::string(NEARPREP_SOURCE_DIR) + "/../shared/datasets/imagenet-sample-200";
  int epochs = 3;
  int batch_size = 32;
  int height = 224, width = 224;
  int prefetch = 4;
  bool shuffle = true;
  int all_workers = 0;  // 0: hardware_concurrency.
  bool first_batch = false;
  int streams = 7;
};

struct Measure {
  double images_per_s = 0;
  double mb_per_s = 0;
  uint64_t images = 0;
};

// Keeps the best (fastest) epoch.
void KeepBest(Measure* best, uint64_t images, uint64_t bytes, double secs) {
  if (secs <= 0) return;
  const double ips = images / secs;
  if (ips > best->images_per_s) {
    best->images_per_s = ips;
    best->mb_per_s = bytes / secs / 1e6;
    best->images = images;
  }
}

// A nearprepd child process; SIGTERM + wait on destruction.
class Daemon {
 public:
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const Config& c,
                                                       int workers) {
    auto d = std::unique_ptr<Daemon>(new Daemon());
    const std::string dir =
        std::filesystem::temp_directory_path() /
        absl::StrCat("nearprep_bench_e2e_", getpid());
    std::filesystem::create_directories(dir);
    d->port_file_ = dir + "/port";
    std::filesystem::remove(d->port_file_);
    d->log_ = dir + absl::StrCat("/nearprepd_", workers, ".log");
    std::vector<std::string> args = {
        c.nearprepd,
        "--listen", "127.0.0.1",
        "--port", "0",
        "--port-file", d->port_file_,
        "--dataset", "bench=" + c.dataset,
        "--workers", std::to_string(workers),
        "--prefetch-depth", std::to_string(c.prefetch),
        "--log-level", "warn",
        "--drain-seconds", "1"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) return absl::InternalError("fork failed");
    if (pid == 0) {
      const int fd = open(d->log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      execv(argv[0], argv.data());
      _exit(127);
    }
    d->pid_ = pid;
    // Wait for the port file (written atomically once listening).
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
    while (Clock::now() < deadline) {
      std::ifstream in(d->port_file_);
      int port = 0;
      if (in >> port && port > 0) {
        d->port_ = port;
        return d;
      }
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        d->pid_ = -1;
        return absl::InternalError(absl::StrCat(
            "nearprepd exited (status ", status, "); see ", d->log_));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return absl::DeadlineExceededError("nearprepd did not write its port");
  }

  ~Daemon() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 500; ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
  }

  int port() const { return port_; }

 private:
  Daemon() = default;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string port_file_, log_;
};

v1::StreamBatchesRequest WireRequest(const Config& c, v1::DType dtype,
                                     int epoch) {
  v1::StreamBatchesRequest r;
  r.set_dataset("bench");
  r.set_batch_size(c.batch_size);
  r.set_seed(1234);
  r.set_epoch(epoch);
  r.set_shuffle(c.shuffle);
  r.mutable_transform()->set_height(c.height);
  r.mutable_transform()->set_width(c.width);
  r.mutable_output()->set_dtype(dtype);
  return r;
}

absl::StatusOr<Measure> RunEndToEnd(const Config& c, int port, v1::DType dtype) {
  ClientOptions o;
  o.target = absl::StrCat("127.0.0.1:", port);
  Client client(o);
  Measure best;
  for (int e = 0; e <= c.epochs; ++e) {  // Epoch 0 warms up.
    std::unique_ptr<BatchReader> reader =
        client.StreamBatches(WireRequest(c, dtype, e));
    v1::Batch batch;
    uint64_t images = 0, bytes = 0;
    const Clock::time_point t0 = Clock::now();
    while (reader->Next(&batch)) {
      images += batch.labels_size();
      bytes += batch.tensor().data().size();
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!reader->status().ok()) return reader->status();
    if (e > 0 || c.epochs == 0) KeepBest(&best, images, bytes, secs);
  }
  return best;
}

// The in-process twin of WireRequest.
StreamRequest InProcessRequest(const Config& c, const Dataset& dataset,
                               v1::DType dtype, int epoch) {
  StreamRequest r;
  r.context.source = std::make_shared<const SampleSource>(dataset);
  r.batch_size = static_cast<uint32_t>(c.batch_size);
  r.context.seed = 1234;
  r.context.epoch = static_cast<uint64_t>(epoch);
  r.shuffle = c.shuffle;
  r.context.spec.height = c.height;
  r.context.spec.width = c.width;
  r.context.output.dtype =
      dtype == v1::DTYPE_UINT8 ? DType::kUint8 : DType::kFloat32;
  return r;
}

absl::StatusOr<Measure> RunInProcess(const Config& c, const Dataset& dataset,
                                     int workers, v1::DType dtype) {
  PipelineOptions po;
  po.workers = workers;
  po.prefetch_depth = c.prefetch;
  Pipeline pipeline(po, std::make_shared<CpuBackend>());
  Measure best;
  for (int e = 0; e <= c.epochs; ++e) {
    const StreamRequest r = InProcessRequest(c, dataset, dtype, e);
    absl::StatusOr<std::unique_ptr<BatchStream>> stream = pipeline.OpenStream(r);
    if (!stream.ok()) return stream.status();
    uint64_t images = 0, bytes = 0;
    const Clock::time_point t0 = Clock::now();
    for (;;) {
      absl::StatusOr<std::shared_ptr<const BatchData>> b =
          (*stream)->NextBlocking();
      if (!b.ok()) return b.status();
      if (*b == nullptr) break;
      images += (*b)->num_samples;
      bytes += (*b)->tensor_bytes;
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    if (e > 0 || c.epochs == 0) KeepBest(&best, images, bytes, secs);
  }
  return best;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median seconds from StreamBatches to the first float32 batch over
// loopback, over c.streams streams (each a fresh epoch).
absl::StatusOr<double> EndToEndFirstBatch(const Config& c, int port) {
  ClientOptions o;
  o.target = absl::StrCat("127.0.0.1:", port);
  Client client(o);
  std::vector<double> t;
  for (int e = 0; e <= c.streams; ++e) {  // Stream 0 warms up.
    const Clock::time_point t0 = Clock::now();
    std::unique_ptr<BatchReader> reader =
        client.StreamBatches(WireRequest(c, v1::DTYPE_FLOAT32, e));
    v1::Batch batch;
    if (!reader->Next(&batch)) return reader->status();
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    reader->Cancel();
    while (reader->Next(&batch)) {
    }
    if (e > 0) t.push_back(secs);
  }
  return Median(t);
}

// Median seconds to the first float32 batch in-process at depth 1: one
// batch's decode time with `workers` workers.
absl::StatusOr<double> InProcessFirstBatch(const Config& c, const Dataset& dataset,
                                           int workers) {
  PipelineOptions po;
  po.workers = workers;
  po.prefetch_depth = 1;
  Pipeline pipeline(po, std::make_shared<CpuBackend>());
  std::vector<double> t;
  for (int e = 0; e <= c.streams; ++e) {
    const StreamRequest r = InProcessRequest(c, dataset, v1::DTYPE_FLOAT32, e);
    const Clock::time_point t0 = Clock::now();
    absl::StatusOr<std::unique_ptr<BatchStream>> stream = pipeline.OpenStream(r);
    if (!stream.ok()) return stream.status();
    absl::StatusOr<std::shared_ptr<const BatchData>> b = (*stream)->NextBlocking();
    if (!b.ok()) return b.status();
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    if (e > 0) t.push_back(secs);
  }
  return Median(t);
}

int RunFirstBatch(const Config& base, const Dataset& dataset, int workers) {
  absl::StatusOr<double> one = InProcessFirstBatch(base, dataset, workers);
  if (!one.ok()) {
    std::fprintf(stderr, "nearprep_bench_e2e: in-process: %s\n",
                 one.status().ToString().c_str());
    return 1;
  }
  std::printf("time to first batch, float32, %d workers, median of %d streams; "
              "one batch's decode time (in-process, depth 1): %.1f ms\n",
              workers, base.streams, *one * 1e3);
  std::printf("%-6s | %14s | %8s\n", "depth", "e2e first ms", "ratio");
  int worst = 0;
  for (int depth : {1, 2, 4, 8}) {
    Config c = base;
    c.prefetch = depth;
    absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(c, workers);
    if (!daemon.ok()) {
      std::fprintf(stderr, "nearprep_bench_e2e: %s\n",
                   daemon.status().ToString().c_str());
      return 1;
    }
    absl::StatusOr<double> e2e = EndToEndFirstBatch(c, (*daemon)->port());
    if (!e2e.ok()) {
      std::fprintf(stderr, "nearprep_bench_e2e: e2e: %s\n",
                   e2e.status().ToString().c_str());
      return 1;
    }
    const double ratio = *one > 0 ? *e2e / *one : 0;
    if (ratio > 1.5) ++worst;
    std::printf("%-6d | %14.1f | %7.2fx\n", depth, *e2e * 1e3, ratio);
    std::fflush(stdout);
  }
  std::printf("ratio = end-to-end time to first batch / one batch's decode "
              "time (target: <= 1.5x at every depth; %d over)\n", worst);
  return 0;
}

int Run(const Config& c) {
  if (c.nearprepd.empty() || !std::filesystem::exists(c.nearprepd)) {
    std::fprintf(stderr, "nearprep_bench_e2e: nearprepd not found ('%s'); "
                 "pass --nearprepd\n", c.nearprepd.c_str());
    return 1;
  }
  DatasetConfig dc;
  dc.name = "bench";
  dc.root = c.dataset;
  absl::StatusOr<std::unique_ptr<Dataset>> dataset = Dataset::Open(dc);
  if (!dataset.ok()) {
    std::fprintf(stderr, "nearprep_bench_e2e: dataset %s: %s\n",
                 c.dataset.c_str(), dataset.status().ToString().c_str());
    return 1;
  }
  const int all = c.all_workers > 0
                      ? c.all_workers
                      : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (c.first_batch) return RunFirstBatch(c, **dataset, all);
  std::vector<int> worker_counts = {1};
  if (all > 1) worker_counts.push_back(all);
  std::printf("nearprep_bench_e2e: %s (%zu images), batch %d, %dx%d, "
              "shuffle %s, best of %d epoch(s) after 1 warm-up\n",
              c.dataset.c_str(), (*dataset)->size(), c.batch_size, c.height,
              c.width, c.shuffle ? "on" : "off", c.epochs);
  std::printf("%-8s %-8s | %12s %10s | %12s %10s | %6s\n", "workers", "dtype",
              "e2e img/s", "e2e MB/s", "inproc img/s", "inproc MB/s",
              "ratio");
  for (int w : worker_counts) {
    absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(c, w);
    if (!daemon.ok()) {
      std::fprintf(stderr, "nearprep_bench_e2e: %s\n",
                   daemon.status().ToString().c_str());
      return 1;
    }
    for (v1::DType dtype : {v1::DTYPE_UINT8, v1::DTYPE_FLOAT32}) {
      absl::StatusOr<Measure> e2e = RunEndToEnd(c, (*daemon)->port(), dtype);
      if (!e2e.ok()) {
        std::fprintf(stderr, "nearprep_bench_e2e: e2e: %s\n",
                     e2e.status().ToString().c_str());
        return 1;
      }
      absl::StatusOr<Measure> inproc = RunInProcess(c, **dataset, w, dtype);
      if (!inproc.ok()) {
        std::fprintf(stderr, "nearprep_bench_e2e: in-process: %s\n",
                     inproc.status().ToString().c_str());
        return 1;
      }
      std::printf("%-8d %-8s | %12.1f %10.1f | %12.1f %10.1f | %5.2fx\n", w,
                  dtype == v1::DTYPE_UINT8 ? "uint8" : "float32",
                  e2e->images_per_s, e2e->mb_per_s, inproc->images_per_s,
                  inproc->mb_per_s,
                  inproc->images_per_s > 0
                      ? e2e->images_per_s / inproc->images_per_s
                      : 0.0);
      std::fflush(stdout);
    }
  }
  std::printf("ratio = end-to-end images/s / in-process images/s for the same "
              "request and worker count (targets: uint8 >= 0.8, float32 >= "
              "0.7)\n");
  return 0;
}

}  // namespace
}  // namespace nearprep

int main(int argc, char** argv) {
  nearprep::Config c;
  CLI::App app{"nearprep end-to-end benchmark (loopback gRPC vs in-process)"};
  app.add_option("--nearprepd", c.nearprepd, "path of the nearprepd binary")
      ->capture_default_str();
  app.add_option("--dataset", c.dataset, "image-folder dataset root")
      ->capture_default_str();
  app.add_option("--epochs", c.epochs, "measured epochs per configuration")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app.add_option("--batch-size", c.batch_size, "batch size")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--height", c.height, "output height")
      ->check(CLI::Range(1, 4096));
  app.add_option("--width", c.width, "output width")->check(CLI::Range(1, 4096));
  app.add_option("--prefetch", c.prefetch, "prefetch depth (both sides)")
      ->check(CLI::Range(1, 64));
  app.add_option("--all-workers", c.all_workers,
                 "worker count of the 'all' runs (0: all cores)");
  bool no_shuffle = false;
  app.add_flag("--no-shuffle", no_shuffle, "manifest order");
  app.add_flag("--first-batch", c.first_batch,
               "measure time to first batch per prefetch depth instead");
  app.add_option("--streams", c.streams,
                 "--first-batch: measured streams per depth (median)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  c.shuffle = !no_shuffle;
  return nearprep::Run(c);
}
