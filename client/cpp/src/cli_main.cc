// `nearprep`: the command-line client of nearprepd.
//
//   nearprep info     --target HOST:PORT
//   nearprep fetch    --target ... --dataset D --batches 2 --out DIR
//   nearprep sheet    --target ... --dataset D --out sheet.png
//   nearprep stream   --target ... --dataset D [--sheet first.png]
//   nearprep load     --target A[,B...] --dataset D --streams N
//                     [--duration S | --epochs E] [--verify] [--json FILE]
//   (commands that connect also take --tls-ca FILE [--tls-cert FILE
//    --tls-key FILE] [--tls-server-name NAME])
//   nearprep bench    --dataset DIR [--threads N] [--batch-size B]
//   nearprep mkdataset --out DIR [--classes C --per-class K --with-bad-files]
//   nearprep pack     --source DIR | --from-tfrecord F... --out DIR
//                     [--format tfrecord|tar] [--shard-size BYTES]
//   nearprep manifest --root DIR [--format tfrecord|tar] [--partitions C]
//   nearprep fleet-plan --manifest FILE ... (client/cpp/fleet/fleet_cli.h)
//
// Exit status: 0 on success, 1 on an error (printed to stderr), 2 on bad
// flags.
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cpp/fleet/fleet_cli.h"
#include "client/cpp/pack/pack.h"
#include "client/cpp/src/batch_json.h"
#include "client/cpp/src/contact_sheet.h"
#include "client/cpp/src/load_runner.h"
#include "client/cpp/src/npy.h"
#include "client/cpp/src/request_flags.h"
#include "client/cpp/src/tensor_image.h"
#include "nearprep/client.h"
#include "client/cpp/mkdataset/mkdataset.h"
#include "common/version.h"
#ifdef NEARPREP_HAVE_PIPELINE_BENCH
#include "bench/pipeline/pipeline_bench.h"
#endif

namespace nearprep {
namespace {

using Clock = std::chrono::steady_clock;

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "nearprep: %s\n", s.ToString().c_str());
  return 1;
}

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// One progress line on stderr (a terminal gets \r updates; a pipe gets a
// line every few seconds).
class Progress {
 public:
  explicit Progress(uint64_t total_images)
      : total_(total_images),
        tty_(isatty(fileno(stderr)) != 0),
        start_(Clock::now()),
        last_(start_) {}

  // `consumed`: images plus skipped samples (what the percentage counts).
  void Update(uint64_t batches, uint64_t images, uint64_t bytes,
              int reconnects, bool force = false, uint64_t consumed = 0) {
    const Clock::time_point now = Clock::now();
    const double since = Seconds(last_, now);
    if (!force && since < (tty_ ? 0.25 : 5.0)) return;
    // Live rates, both over the window since the previous update.
    const double window_ips =
        since > 0 ? (images - last_images_) / since : 0.0;
    const double el = Seconds(start_, now);
    const double mbps = since > 0 ? (bytes - last_bytes_) / since / 1e6 : 0.0;
    std::string pct;
    if (total_ > 0) {
      pct = absl::StrFormat(" %5.1f%%",
                            100.0 * std::max(images, consumed) / total_);
    }
    std::fprintf(stderr,
                 "%s%s batch %" PRIu64 "  %" PRIu64
                 " img  %8.1f img/s  %8.1f MB/s  %6.1fs  reconnects %d%s",
                 tty_ ? "\r" : "", pct.c_str(), batches, images, window_ips,
                 mbps, el, reconnects, tty_ ? "   " : "\n");
    std::fflush(stderr);
    last_ = now;
    last_images_ = images;
    last_bytes_ = bytes;
  }
  void Done() {
    if (tty_) std::fprintf(stderr, "\n");
  }

 private:
  uint64_t total_;
  bool tty_;
  Clock::time_point start_, last_;
  uint64_t last_images_ = 0;
  uint64_t last_bytes_ = 0;
};

ClientOptions OptionsFor(const std::string& target, const TlsFlags& tls) {
  return tls.ToClientOptions(target);
}

// Class names of `dataset`, empty when the daemon does not say.
std::vector<std::string> ClassNames(Client* client, const std::string& dataset,
                                    uint64_t* num_samples) {
  absl::StatusOr<std::vector<v1::DatasetInfo>> ds = client->ListDatasets();
  if (!ds.ok()) return {};
  for (const v1::DatasetInfo& d : *ds) {
    if (d.name() == dataset) {
      if (num_samples) *num_samples = d.num_samples();
      return {d.class_names().begin(), d.class_names().end()};
    }
  }
  return {};
}

absl::Status RenderSheet(const v1::Batch& batch,
                         const v1::StreamBatchesRequest& req,
                         const std::vector<std::string>& class_names,
                         const std::string& path, int columns) {
  std::vector<float> mean(req.transform().mean().begin(),
                          req.transform().mean().end());
  std::vector<float> stdv(req.transform().std().begin(),
                          req.transform().std().end());
  absl::StatusOr<std::vector<RgbImage>> images =
      TensorToImages(batch.tensor(), mean, stdv);
  if (!images.ok()) return images.status();
  std::vector<int64_t> labels(batch.labels().begin(), batch.labels().end());
  std::vector<std::string> captions;
  for (int64_t l : labels) {
    std::string c = absl::StrCat(l);
    if (l >= 0 && static_cast<size_t>(l) < class_names.size()) {
      absl::StrAppend(&c, " ", class_names[l]);
    }
    captions.push_back(c);
  }
  absl::StatusOr<RgbImage> sheet =
      RenderContactSheet(*images, labels, captions, columns);
  if (!sheet.ok()) return sheet.status();
  return WritePng(path, *sheet);
}

// --dry-run: prints the request (protobuf JSON) and returns 0; -1 without it.
int DryRun(const RequestFlags& flags, const v1::StreamBatchesRequest& req) {
  if (!flags.dry_run) return -1;
  absl::StatusOr<std::string> json = RequestJson(req);
  if (!json.ok()) return Fail(json.status());
  std::printf("%s\n", json->c_str());
  return 0;
}

// ---------------------------------------------------------------------------

int RunInfo(const std::string& target, const TlsFlags& tls) {
  Client client(OptionsFor(target, tls));
  absl::StatusOr<v1::ServerInfo> info = client.Info();
  if (!info.ok()) return Fail(info.status());
  const v1::Limits& l = info->limits();
  const v1::Counters& c = info->counters();
  std::printf("nearprepd %s at %s (this client: nearprep %s)\n",
              info->version().c_str(), target.c_str(), kVersion);
  std::printf("  backend      %s%s%s\n", info->backend().c_str(),
              info->backend_detail().empty() ? "" : "  (",
              info->backend_detail().empty()
                  ? ""
                  : (info->backend_detail() + ")").c_str());
  std::printf("  workers      %u\n", info->workers());
  std::printf("  uptime       %" PRIu64 " s\n", info->uptime_seconds());
  std::printf("  limits       batch <= %u, output pixels <= %" PRIu64
              ", decoded values < %" PRIu64 ", streams <= %u,\n"
              "               %" PRIu64 " MB per stream, prefetch %u\n",
              l.max_batch_size(), l.max_output_pixels(),
              l.max_decoded_pixels(), l.max_concurrent_streams(),
              l.per_stream_memory_bytes() >> 20, l.prefetch_depth());
  std::printf("  counters     streams %" PRIu64 " (%" PRIu64
              " active), batches %" PRIu64 ", samples %" PRIu64
              " ok / %" PRIu64 " failed, %.1f MB sent, %" PRIu64
              " rejected\n",
              c.streams_started(), c.streams_active(), c.batches_sent(),
              c.samples_ok(), c.samples_failed(), c.bytes_sent() / 1e6,
              c.requests_rejected());
  std::printf("               errors: decode %" PRIu64 ", limit %" PRIu64
              ", io %" PRIu64 "; backend fallbacks %" PRIu64 "\n",
              c.decode_errors(), c.limit_errors(), c.io_errors(),
              c.backend_fallbacks());
  absl::StatusOr<std::vector<v1::DatasetInfo>> ds = client.ListDatasets();
  if (!ds.ok()) return Fail(ds.status());
  std::printf("datasets (%zu)\n", ds->size());
  for (const v1::DatasetInfo& d : *ds) {
    std::printf("  %-20s %-12s %8" PRIu64 " samples  %5u classes",
                d.name().c_str(), d.format().c_str(), d.num_samples(),
                d.num_classes());
    if (d.num_refused() > 0) {
      std::printf("  (%" PRIu64 " refused)", d.num_refused());
    }
    std::printf("\n");
    if (!d.manifest_hash().empty()) {
      // Fleet datasets: the manifest, what this node holds and, with a
      // placement, what it is assigned and still misses.
      std::printf("  %-20s manifest %s: holds %d of %u partitions", "",
                  d.manifest_hash().substr(0, 12).c_str(), d.partitions_held_size(),
                  d.num_partitions());
      if (d.placement_version() > 0) {
        const std::set<uint32_t> held(d.partitions_held().begin(), d.partitions_held().end());
        std::string missing;
        for (uint32_t p : d.partitions_assigned()) {
          if (!held.count(p)) absl::StrAppend(&missing, missing.empty() ? "" : ",", p);
        }
        std::printf("; placement version %" PRIu64 ": %d assigned, missing [%s]",
                    d.placement_version(), d.partitions_assigned_size(), missing.c_str());
      }
      std::printf("\n");
    }
    if (d.class_names_size() > 0) {
      std::string names;
      const int shown = std::min(d.class_names_size(), 6);
      for (int i = 0; i < shown; ++i) {
        absl::StrAppend(&names, i ? ", " : "", d.class_names(i));
      }
      if (shown < d.class_names_size()) absl::StrAppend(&names, ", ...");
      std::printf("  %-20s classes: %s\n", "", names.c_str());
    }
  }
  return 0;
}

int RunFetch(const RequestFlags& flags, const std::string& out_dir) {
  absl::StatusOr<v1::StreamBatchesRequest> req = flags.ToRequest();
  if (!req.ok()) return Fail(req.status());
  if (int rc = DryRun(flags, *req); rc >= 0) return rc;
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    return Fail(absl::InternalError(
        absl::StrCat("cannot create ", out_dir, ": ", ec.message())));
  }
  Client client(OptionsFor(flags.target, flags.tls));
  std::unique_ptr<BatchReader> reader = client.StreamBatches(*req);
  v1::Batch batch;
  uint64_t batches = 0, images = 0, bytes = 0, errors = 0;
  Progress progress(0);
  while (reader->Next(&batch)) {
    const std::string stem =
        absl::StrFormat("batch_%05d", static_cast<int>(batch.batch_index()));
    const std::string npy = (std::filesystem::path(out_dir) / (stem + ".npy"));
    absl::Status st = WriteTensorNpy(npy, batch.tensor());
    if (!st.ok()) return Fail(st);
    std::ofstream js(std::filesystem::path(out_dir) / (stem + ".json"));
    js << BatchToJson(batch, stem + ".npy");
    if (!js) return Fail(absl::InternalError("cannot write " + stem + ".json"));
    ++batches;
    images += batch.labels_size();
    bytes += batch.tensor().data().size();
    errors += batch.errors_size();
    progress.Update(batches, images, bytes, reader->reconnects());
  }
  progress.Update(batches, images, bytes, reader->reconnects(), true);
  progress.Done();
  if (!reader->status().ok()) return Fail(reader->status());
  std::printf("wrote %" PRIu64 " batches (%" PRIu64 " images, %" PRIu64
              " skipped samples, %.1f MB) to %s\n",
              batches, images, errors, bytes / 1e6, out_dir.c_str());
  return 0;
}

int RunSheet(RequestFlags flags, const std::string& out, int columns) {
  flags.batches = 1;
  absl::StatusOr<v1::StreamBatchesRequest> req = flags.ToRequest();
  if (!req.ok()) return Fail(req.status());
  if (int rc = DryRun(flags, *req); rc >= 0) return rc;
  Client client(OptionsFor(flags.target, flags.tls));
  std::vector<std::string> names = ClassNames(&client, flags.dataset, nullptr);
  std::unique_ptr<BatchReader> reader = client.StreamBatches(*req);
  v1::Batch batch;
  if (!reader->Next(&batch)) {
    if (!reader->status().ok()) return Fail(reader->status());
    return Fail(absl::NotFoundError("the stream has no batch to draw"));
  }
  absl::Status st = RenderSheet(batch, *req, names, out, columns);
  if (!st.ok()) return Fail(st);
  std::printf("wrote %s: batch %" PRIu64 ", %d images\n", out.c_str(),
              batch.batch_index(), batch.labels_size());
  return 0;
}

int RunStream(const RequestFlags& flags, int epochs, const std::string& sheet,
              int columns) {
  absl::StatusOr<v1::StreamBatchesRequest> req = flags.ToRequest();
  if (!req.ok()) return Fail(req.status());
  if (int rc = DryRun(flags, *req); rc >= 0) return rc;
  KeepFreedMemory(256u << 20);  // no page faults per received message
  Client client(OptionsFor(flags.target, flags.tls));
  uint64_t num_samples = 0;
  std::vector<std::string> names =
      ClassNames(&client, flags.dataset, &num_samples);
  const uint64_t shards = std::max<uint32_t>(1, req->num_shards());
  uint64_t per_epoch = (num_samples + shards - 1 - req->shard_index()) / shards;
  if (req->max_batches() > 0) {
    per_epoch = std::min<uint64_t>(per_epoch,
                                   req->max_batches() * req->batch_size());
  }
  std::fprintf(stderr, "streaming %s from %s: %d epoch(s), batch %u, %ux%u %s\n",
               flags.dataset.c_str(), flags.target.c_str(), epochs,
               req->batch_size(), req->transform().height(),
               req->transform().width(),
               DTypeName(req->output().dtype()).c_str());
  uint64_t batches = 0, images = 0, bytes = 0, errors = 0;
  int reconnects = 0;
  uint64_t read_us = 0, decode_us = 0, transform_us = 0;
  Progress progress(per_epoch * epochs);
  std::vector<uint8_t> tensor;
  const Clock::time_point start = Clock::now();
  Clock::time_point first_batch_at = start;
  // Epochs after the first: the steady state, without the stream set-up and
  // the first batch's latency.
  Clock::time_point steady_start = start;
  uint64_t steady_images = 0, steady_bytes = 0;
  for (int e = 0; e < epochs; ++e) {
    if (e == 1) {
      steady_start = Clock::now();
      steady_images = images;
      steady_bytes = bytes;
    }
    v1::StreamBatchesRequest r = *req;
    r.set_epoch(req->epoch() + e);
    std::unique_ptr<BatchReader> reader = client.StreamBatches(r);
    v1::Batch batch;
    // The one-copy receive (NextInto): each tensor goes from gRPC's receive
    // slices straight into this reused buffer, as a trainer linking the
    // library would do; no protobuf copy of the tensor.
    size_t tensor_bytes = 0;
    const TensorAllocator allocate = [&tensor, &tensor_bytes](size_t n) {
      if (tensor.size() < n) tensor.resize(n);
      tensor_bytes = n;
      return tensor.data();
    };
    while ((tensor_bytes = 0, reader->NextInto(&batch, allocate))) {
      if (batches == 0) {
        first_batch_at = Clock::now();
        if (!sheet.empty()) {
          v1::Batch full = batch;
          full.mutable_tensor()->set_data(tensor.data(), tensor_bytes);
          absl::Status st = RenderSheet(full, r, names, sheet, columns);
          if (!st.ok()) return Fail(st);
        }
      }
      ++batches;
      images += batch.labels_size();
      bytes += tensor_bytes;
      errors += batch.errors_size();
      read_us += batch.timings().read_us();
      decode_us += batch.timings().decode_us();
      transform_us += batch.timings().transform_us();
      progress.Update(batches, images, bytes, reconnects + reader->reconnects(),
                      false, images + errors);
    }
    reconnects += reader->reconnects();
    if (!reader->status().ok()) {
      progress.Done();
      return Fail(reader->status());
    }
  }
  const Clock::time_point end = Clock::now();
  progress.Update(batches, images, bytes, reconnects, true, images + errors);
  progress.Done();
  const double secs = Seconds(start, end);
  std::printf("streamed %" PRIu64 " images in %" PRIu64
              " batches in %.2f s: %.1f images/s, %.1f MB/s "
              "(%.1f MB; first batch after %.0f ms)\n",
              images, batches, secs, secs > 0 ? images / secs : 0.0,
              secs > 0 ? bytes / secs / 1e6 : 0.0, bytes / 1e6,
              Seconds(start, first_batch_at) * 1e3);
  if (epochs > 1) {
    const double steady_s = Seconds(steady_start, end);
    const double first_s = Seconds(start, steady_start);
    std::printf("steady state (epochs 2-%d): %.1f images/s, %.1f MB/s; "
                "first epoch: %.1f images/s; time to first batch: %.0f ms\n",
                epochs,
                steady_s > 0 ? (images - steady_images) / steady_s : 0.0,
                steady_s > 0 ? (bytes - steady_bytes) / steady_s / 1e6 : 0.0,
                first_s > 0 ? steady_images / first_s : 0.0,
                Seconds(start, first_batch_at) * 1e3);
  }
  const double work_s = (read_us + decode_us + transform_us) / 1e6;
  if (work_s > 0) {
    std::printf("server worker time: read %.0f%%, decode %.0f%%, "
                "transform %.0f%% of %.2f s\n",
                100.0 * read_us / 1e6 / work_s, 100.0 * decode_us / 1e6 / work_s,
                100.0 * transform_us / 1e6 / work_s, work_s);
  }
  std::printf("skipped samples: %" PRIu64 ", reconnects: %d\n", errors,
              reconnects);
  if (!sheet.empty() && batches > 0) {
    std::printf("contact sheet of the first batch: %s\n", sheet.c_str());
  }
  if (images == 0) {
    // A stream that delivers nothing is a failure, not a result: an empty
    // dataset, a shard past the end, every sample failing.
    std::fprintf(stderr,
                 "nearprep: the stream ended with 0 images (%" PRIu64
                 " skipped samples; dataset '%s' has %" PRIu64
                 " samples): nothing was streamed\n",
                 errors, flags.dataset.c_str(), num_samples);
    return 1;
  }
  return 0;
}

// Parses "256MiB", "4M", "1000" into bytes; 0 on a malformed size.
uint64_t ParseSize(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  if (i == 0) return 0;
  const uint64_t v = std::strtoull(s.substr(0, i).c_str(), nullptr, 10);
  const std::string unit = s.substr(i);
  if (unit.empty() || unit == "B") return v;
  if (unit == "K" || unit == "KiB") return v << 10;
  if (unit == "M" || unit == "MiB") return v << 20;
  if (unit == "G" || unit == "GiB") return v << 30;
  return 0;
}

int RunPack(PackOptions o, const std::string& size) {
  o.shard_bytes = ParseSize(size);
  if (o.shard_bytes == 0) {
    return Fail(absl::InvalidArgumentError("--shard-size: malformed size '" +
                                           size + "'"));
  }
  if (o.source_root.empty() == o.from_tfrecord.empty()) {
    return Fail(absl::InvalidArgumentError(
        "give exactly one of --source DIR and --from-tfrecord FILE..."));
  }
  if (!o.list_file.empty()) o.source_format = "file_list";
  const bool tty = ::isatty(2);
  uint64_t bytes = 0;
  o.progress = [&](uint64_t done, uint64_t total, uint64_t n) {
    bytes += n;
    if (!(tty || done % 1000 == 0 || done == total)) return;
    if (total > 0) {
      const int width = 30;
      const int fill = static_cast<int>(width * done / total);
      std::fprintf(stderr, "%s[%s%s] %llu/%llu samples, %.1f MB%s",
                   tty ? "\r" : "", std::string(fill, '#').c_str(),
                   std::string(width - fill, '.').c_str(),
                   static_cast<unsigned long long>(done),
                   static_cast<unsigned long long>(total), bytes / 1e6,
                   tty ? "" : "\n");
    } else {
      std::fprintf(stderr, "%s%llu records, %.1f MB%s", tty ? "\r" : "",
                   static_cast<unsigned long long>(done), bytes / 1e6,
                   tty ? "" : "\n");
    }
  };
  auto r = Pack(o);
  if (tty) std::fprintf(stderr, "\n");
  if (!r.ok()) return Fail(r.status());
  std::printf("wrote %llu samples in %zu %s shards (%.1f MB) to %s\n",
              static_cast<unsigned long long>(r->samples), r->shards.size(),
              o.format.c_str(), r->bytes / 1e6, o.out_dir.c_str());
  return 0;
}

}  // namespace
}  // namespace nearprep

int main(int argc, char** argv) {
  using namespace nearprep;  // NOLINT: main only.
  CLI::App app{"nearprep: client of the nearprepd preprocessing daemon"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("nearprep ") + kVersion,
                       "print the version and exit");

  std::string info_target = "localhost:7070";
  CLI::App* info = app.add_subcommand("info", "server info and datasets");
  info->add_option("--target", info_target, "daemon address host:port")
      ->check(TargetValidator(/*list=*/false))
      ->capture_default_str();
  TlsFlags info_tls;
  info_tls.Register(info);

  RequestFlags fetch_flags;
  std::string fetch_out;
  CLI::App* fetch = app.add_subcommand(
      "fetch", "stream batches, write batch_NNNNN.npy + .json each");
  fetch_flags.Register(fetch);
  fetch->add_option("--out", fetch_out, "output folder")->required();

  RequestFlags sheet_flags;
  std::string sheet_out = "sheet.png";
  int sheet_columns = 0;
  CLI::App* sheet =
      app.add_subcommand("sheet", "contact sheet PNG of one batch with labels");
  sheet_flags.Register(sheet, /*with_batches=*/false);
  sheet->add_option("--out", sheet_out, "PNG path")->capture_default_str();
  sheet->add_option("--columns", sheet_columns, "grid columns (0: square)");

  RequestFlags stream_flags;
  int stream_epochs = 1;
  std::string stream_sheet;
  int stream_columns = 0;
  CLI::App* stream = app.add_subcommand(
      "stream", "stream whole epochs, print live and final images/s and MB/s");
  stream_flags.Register(stream);
  stream->add_option("--epochs", stream_epochs, "epochs to stream")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  stream->add_option("--sheet", stream_sheet,
                     "also write a contact sheet PNG of the first batch");
  stream->add_option("--columns", stream_columns, "sheet grid columns");

  LoadFlags load_flags;
  CLI::App* load = app.add_subcommand(
      "load",
      "load test: N concurrent streams, latency percentiles, fairness, "
      "data-stall report, --verify (exit 1 on errors)");
  load_flags.Register(load);

  CLI::App* bench = app.add_subcommand(
      "bench", "in-process pipeline throughput (no network)");
  std::string bench_dataset = "../shared/datasets/imagenet-sample-200";
  int bench_threads = 0;
  int bench_batch = 32;
  bench->add_option("--dataset", bench_dataset, "image-folder dataset root")
      ->capture_default_str();
  bench->add_option("--threads", bench_threads,
                    "worker threads (0: one and all cores)");
  bench->add_option("--batch-size", bench_batch, "batch size")
      ->capture_default_str();

  CLI::App* mk = app.add_subcommand(
      "mkdataset", "write a synthetic image-folder dataset of JPEGs");
  std::string mk_out;
  int mk_classes = 4, mk_per_class = 16;
  uint64_t mk_seed = 1;
  bool mk_bad = false;
  mk->add_option("--out", mk_out, "output folder")->required();
  mk->add_option("--classes", mk_classes, "number of classes")
      ->capture_default_str();
  mk->add_option("--per-class", mk_per_class, "images per class")
      ->capture_default_str();
  mk->add_option("--seed", mk_seed, "seed")->capture_default_str();
  mk->add_flag("--with-bad-files", mk_bad,
               "add corrupt/truncated/empty/non-JPEG/huge-header files "
               "(class_000/bad_*.jpg)");

  CLI::App* pack = app.add_subcommand(
      "pack", "write a dataset as TFRecord or tar shards with indexes");
  PackOptions pack_o;
  std::string pack_size = "256MiB";
  pack->add_option("--source", pack_o.source_root,
                   "image-folder (or file-list) dataset root");
  pack->add_option("--list-file", pack_o.list_file,
                   "file_list source: the list file");
  pack->add_option("--from-tfrecord", pack_o.from_tfrecord,
                   "TFRecord files to rewrite uncompressed (GZIP/ZLIB ok)");
  pack->add_option("--out", pack_o.out_dir, "output folder")->required();
  pack->add_option("--format", pack_o.format, "tfrecord or tar")
      ->capture_default_str();
  pack->add_option("--prefix", pack_o.prefix, "shard file name prefix")
      ->capture_default_str();
  pack->add_option("--shard-size", pack_size,
                   "shard size (bytes; K/M/G/KiB/MiB/GiB suffixes)")
      ->capture_default_str();

  std::shared_ptr<FleetCommands> fleet_cmds = AddFleetCommands(&app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every flag error is status 2 (CLI11's
    // own codes vary by error kind).
    return app.exit(e) == 0 ? 0 : 2;
  }

  if (info->parsed()) return RunInfo(info_target, info_tls);
  if (fetch->parsed()) return RunFetch(fetch_flags, fetch_out);
  if (sheet->parsed()) return RunSheet(sheet_flags, sheet_out, sheet_columns);
  if (stream->parsed()) {
    return RunStream(stream_flags, stream_epochs, stream_sheet, stream_columns);
  }
  if (load->parsed()) return RunLoad(load_flags);
  if (bench->parsed()) {
#ifdef NEARPREP_HAVE_PIPELINE_BENCH
    PipelineBenchOptions o;
    o.dataset_root = bench_dataset;
    o.threads = bench_threads;
    o.batch_size = bench_batch;
    absl::Status st = RunPipelineBench(o, std::cout);
    if (!st.ok()) return Fail(st);
    return 0;
#else
    (void)bench_threads;
    (void)bench_batch;
    return Fail(absl::UnimplementedError(
        "this build has no bench/pipeline (configure with "
        "-DNEARPREP_BUILD_BENCH=ON)"));
#endif
  }
  if (pack->parsed()) return RunPack(pack_o, pack_size);
  if (int rc = RunFleetCommands(*fleet_cmds); rc >= 0) return rc;
  if (mk->parsed()) {
    MkDatasetOptions o;
    o.output_dir = mk_out;
    o.num_classes = mk_classes;
    o.images_per_class = mk_per_class;
    o.seed = mk_seed;
    o.with_bad_files = mk_bad;
    MkDatasetSummary summary;
    absl::Status st = MakeSyntheticDataset(o, &summary);
    if (!st.ok()) return Fail(st);
    std::printf("wrote %zu images in %d classes (%.1f MB)%s to %s\n",
                summary.images.size(), mk_classes, summary.total_bytes / 1e6,
                summary.bad_files.empty()
                    ? ""
                    : absl::StrCat(" and ", summary.bad_files.size(),
                                   " bad files in class_000/ (bad_*)")
                          .c_str(),
                mk_out.c_str());
    return 0;
  }
  return 0;
}
