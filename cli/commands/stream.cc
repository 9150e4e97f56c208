// `nearprep stream --target ... --dataset D [--epochs E] [--sheet first.png]`:
// streams whole epochs and prints live and final images/s and MB/s.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "cli/cli_common.h"
#include "cli/commands/command.h"
#include "cli/request_flags.h"
#include "nearprep/client.h"

namespace nearprep {
namespace {

using Clock = CliClock;

class StreamCommand final : public Command {
 public:
  const char* name() const override { return "stream"; }
  const char* help() const override {
    return "stream whole epochs, print live and final images/s and MB/s";
  }

  void AddOptions(CLI::App* app) override {
    flags_.Register(app);
    app->add_option("--epochs", epochs_, "epochs to stream")
        ->check(CLI::Range(1, 1000000))
        ->capture_default_str();
    app->add_option("--sheet", sheet_,
                    "also write a contact sheet PNG of the first batch");
    app->add_option("--columns", columns_, "sheet grid columns");
  }

  int Run() override;

 private:
  RequestFlags flags_;
  int epochs_ = 1;
  std::string sheet_;
  int columns_ = 0;
};

int StreamCommand::Run() {
  const RequestFlags& flags = flags_;
  const int epochs = epochs_;
  const std::string& sheet = sheet_;
  const int columns = columns_;
  absl::StatusOr<v1::StreamBatchesRequest> req = flags.ToRequest();
  if (!req.ok()) return Fail(req.status());
  if (int rc = DryRun(flags, *req); rc >= 0) return rc;
  KeepFreedMemory(256u << 20);  // no page faults per received message
  Client client(flags.tls.ToClientOptions(flags.target));
  uint64_t num_samples = 0;
  std::vector<std::string> names =
      ClassNames(&client, flags.dataset, &num_samples);
  const uint64_t shards = std::max<uint32_t>(1, req->num_shards());
  uint64_t per_epoch = (num_samples + shards - 1 - req->shard_index()) / shards;
  if (req->max_batches() > 0) {
    per_epoch =
        std::min<uint64_t>(per_epoch, req->max_batches() * req->batch_size());
  }
  std::fprintf(
      stderr, "streaming %s from %s: %d epoch(s), batch %u, %ux%u %s\n",
      flags.dataset.c_str(), flags.target.c_str(), epochs, req->batch_size(),
      req->transform().height(), req->transform().width(),
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
    if (e > 0) {
      // The resume point (--start-batch, --resume-token: bound to its
      // epoch) is the first epoch's; the next ones start at batch 0.
      r.clear_start_batch();
      r.clear_start_position();
      r.clear_resume_token();
    }
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
    std::printf(
        "steady state (epochs 2-%d): %.1f images/s, %.1f MB/s; "
        "first epoch: %.1f images/s; time to first batch: %.0f ms\n",
        epochs, steady_s > 0 ? (images - steady_images) / steady_s : 0.0,
        steady_s > 0 ? (bytes - steady_bytes) / steady_s / 1e6 : 0.0,
        first_s > 0 ? steady_images / first_s : 0.0,
        Seconds(start, first_batch_at) * 1e3);
  }
  const double work_s = (read_us + decode_us + transform_us) / 1e6;
  if (work_s > 0) {
    std::printf(
        "server worker time: read %.0f%%, decode %.0f%%, "
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

}  // namespace

std::unique_ptr<Command> NewStreamCommand() {
  return std::make_unique<StreamCommand>();
}

}  // namespace nearprep
