// `nearprep fetch --target ... --dataset D --batches 2 --out DIR`: streams
// batches and writes batch_NNNNN.npy + .json for each.
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/batch_json.h"
#include "cli/cli_common.h"
#include "cli/commands/command.h"
#include "cli/npy.h"
#include "cli/request_flags.h"
#include "nearprep/client.h"

namespace nearprep {
namespace {

class FetchCommand final : public Command {
 public:
  const char* name() const override { return "fetch"; }
  const char* help() const override {
    return "stream batches, write batch_NNNNN.npy + .json each";
  }

  void AddOptions(CLI::App* app) override {
    flags_.Register(app);
    app->add_option("--out", out_dir_, "output folder")->required();
  }

  int Run() override;

 private:
  RequestFlags flags_;
  std::string out_dir_;
};

int FetchCommand::Run() {
  const RequestFlags& flags = flags_;
  const std::string& out_dir = out_dir_;
  absl::StatusOr<v1::StreamBatchesRequest> req = flags.ToRequest();
  if (!req.ok()) return Fail(req.status());
  if (int rc = DryRun(flags, *req); rc >= 0) return rc;
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    return Fail(absl::InternalError(
        absl::StrCat("cannot create ", out_dir, ": ", ec.message())));
  }
  Client client(flags.tls.ToClientOptions(flags.target));
  std::unique_ptr<BatchReader> reader = client.StreamBatches(*req);
  v1::Batch batch;
  std::string last_token;  // resume_token of the last batch written
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
    last_token = batch.resume_token();
    ++batches;
    images += batch.labels_size();
    bytes += batch.tensor().data().size();
    errors += batch.errors_size();
    progress.Update(batches, images, bytes, reader->reconnects());
  }
  progress.Update(batches, images, bytes, reader->reconnects(), true);
  progress.Done();
  // How to continue after the last batch written (its bound token).
  const auto say_resume = [&last_token](std::FILE* out) {
    if (last_token.empty()) return;
    std::fprintf(out,
                 "to continue after the last batch written: drop "
                 "--start-batch, add --resume-token '%s'\n",
                 last_token.c_str());
  };
  if (!reader->status().ok()) {
    say_resume(stderr);
    return Fail(reader->status());
  }
  std::printf("wrote %" PRIu64 " batches (%" PRIu64 " images, %" PRIu64
              " skipped samples, %.1f MB) to %s\n",
              batches, images, errors, bytes / 1e6, out_dir.c_str());
  if (req->max_batches() > 0 && batches == req->max_batches())
    say_resume(stdout);
  return 0;
}

}  // namespace

std::unique_ptr<Command> NewFetchCommand() {
  return std::make_unique<FetchCommand>();
}

}  // namespace nearprep
