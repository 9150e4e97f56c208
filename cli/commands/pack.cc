// `nearprep pack --source DIR | --from-tfrecord F... --out DIR
// [--format tfrecord|tar] [--shard-size BYTES]`: a dataset as TFRecord or tar
// shards with indexes (cli/pack).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "cli/cli_common.h"
#include "cli/commands/command.h"
#include "cli/pack/pack.h"

namespace nearprep {
namespace {

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

class PackCommand final : public Command {
 public:
  const char* name() const override { return "pack"; }
  const char* help() const override {
    return "write a dataset as TFRecord or tar shards with indexes";
  }

  void AddOptions(CLI::App* app) override {
    app->add_option("--source", o_.source_root, "image-folder (or file-list) dataset root");
    app->add_option("--list-file", o_.list_file, "file_list source: the list file");
    app->add_option("--from-tfrecord", o_.from_tfrecord,
                    "TFRecord files to rewrite uncompressed (GZIP/ZLIB ok)");
    app->add_option("--out", o_.out_dir, "output folder")->required();
    app->add_option("--format", o_.format, "tfrecord or tar")->capture_default_str();
    app->add_option("--prefix", o_.prefix, "shard file name prefix")->capture_default_str();
    app->add_option("--shard-size", size_, "shard size (bytes; K/M/G/KiB/MiB/GiB suffixes)")
        ->capture_default_str();
  }

  int Run() override;

 private:
  PackOptions o_;
  std::string size_ = "256MiB";
};

int PackCommand::Run() {
  PackOptions o = o_;
  const std::string& size = size_;
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

std::unique_ptr<Command> NewPackCommand() { return std::make_unique<PackCommand>(); }

}  // namespace nearprep
