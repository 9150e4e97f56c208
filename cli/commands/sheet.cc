// `nearprep sheet --target ... --dataset D --out sheet.png`: a contact sheet
// PNG of one batch, each image captioned with its label.
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

class SheetCommand final : public Command {
 public:
  const char* name() const override { return "sheet"; }
  const char* help() const override { return "contact sheet PNG of one batch with labels"; }

  void AddOptions(CLI::App* app) override {
    flags_.Register(app, /*with_batches=*/false);
    app->add_option("--out", out_, "PNG path")->capture_default_str();
    app->add_option("--columns", columns_, "grid columns (0: square)");
  }

  int Run() override;

 private:
  RequestFlags flags_;
  std::string out_ = "sheet.png";
  int columns_ = 0;
};

int SheetCommand::Run() {
  RequestFlags flags = flags_;
  flags.batches = 1;
  absl::StatusOr<v1::StreamBatchesRequest> req = flags.ToRequest();
  if (!req.ok()) return Fail(req.status());
  if (int rc = DryRun(flags, *req); rc >= 0) return rc;
  Client client(flags.tls.ToClientOptions(flags.target));
  std::vector<std::string> names = ClassNames(&client, flags.dataset, nullptr);
  std::unique_ptr<BatchReader> reader = client.StreamBatches(*req);
  v1::Batch batch;
  if (!reader->Next(&batch)) {
    if (!reader->status().ok()) return Fail(reader->status());
    return Fail(absl::NotFoundError("the stream has no batch to draw"));
  }
  absl::Status st = RenderSheet(batch, *req, names, out_, columns_);
  if (!st.ok()) return Fail(st);
  std::printf("wrote %s: batch %" PRIu64 ", %d images\n", out_.c_str(),
              batch.batch_index(), batch.labels_size());
  return 0;
}

}  // namespace

std::unique_ptr<Command> NewSheetCommand() { return std::make_unique<SheetCommand>(); }

}  // namespace nearprep
