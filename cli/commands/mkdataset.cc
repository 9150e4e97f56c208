// `nearprep mkdataset --out DIR [--classes C --per-class K --with-bad-files]`:
// a synthetic image-folder dataset of JPEGs (cli/mkdataset).
#include <cstdio>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "cli/cli_common.h"
#include "cli/commands/command.h"
#include "cli/mkdataset/mkdataset.h"

namespace nearprep {
namespace {

class MkdatasetCommand final : public Command {
 public:
  const char* name() const override { return "mkdataset"; }
  const char* help() const override {
    return "write a synthetic image-folder dataset of JPEGs";
  }

  void AddOptions(CLI::App* app) override {
    app->add_option("--out", out_, "output folder")->required();
    app->add_option("--classes", classes_, "number of classes")->capture_default_str();
    app->add_option("--per-class", per_class_, "images per class")->capture_default_str();
    app->add_option("--seed", seed_, "seed")->capture_default_str();
    app->add_flag("--with-bad-files", bad_,
                  "add corrupt/truncated/empty/non-JPEG/huge-header files "
                  "(class_000/bad_*.jpg)");
  }

  int Run() override {
    MkDatasetOptions o;
    o.output_dir = out_;
    o.num_classes = classes_;
    o.images_per_class = per_class_;
    o.seed = seed_;
    o.with_bad_files = bad_;
    MkDatasetSummary summary;
    absl::Status st = MakeSyntheticDataset(o, &summary);
    if (!st.ok()) return Fail(st);
    std::printf("wrote %zu images in %d classes (%.1f MB)%s to %s\n",
                summary.images.size(), classes_, summary.total_bytes / 1e6,
                summary.bad_files.empty()
                    ? ""
                    : absl::StrCat(" and ", summary.bad_files.size(),
                                   " bad files in class_000/ (bad_*)")
                          .c_str(),
                out_.c_str());
    return 0;
  }

 private:
  std::string out_;
  int classes_ = 4, per_class_ = 16;
  uint64_t seed_ = 1;
  bool bad_ = false;
};

}  // namespace

std::unique_ptr<Command> NewMkdatasetCommand() {
  return std::make_unique<MkdatasetCommand>();
}

}  // namespace nearprep
