#include "cli/cli_common.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/contact_sheet.h"
#include "cli/tensor_image.h"

namespace nearprep {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "nearprep: %s\n", s.ToString().c_str());
  return 1;
}

double Seconds(CliClock::time_point a, CliClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

Progress::Progress(uint64_t total_images)
    : total_(total_images),
      tty_(isatty(fileno(stderr)) != 0),
      start_(CliClock::now()),
      last_(start_) {}

void Progress::Update(uint64_t batches, uint64_t images, uint64_t bytes,
                      int reconnects, bool force, uint64_t consumed) {
  const CliClock::time_point now = CliClock::now();
  const double since = Seconds(last_, now);
  if (!force && since < (tty_ ? 0.25 : 5.0)) return;
  // Live rates, both over the window since the previous update.
  const double window_ips = since > 0 ? (images - last_images_) / since : 0.0;
  const double el = Seconds(start_, now);
  const double mbps = since > 0 ? (bytes - last_bytes_) / since / 1e6 : 0.0;
  std::string pct;
  if (total_ > 0) {
    pct = absl::StrFormat(" %5.1f%%", 100.0 * std::max(images, consumed) / total_);
  }
  std::fprintf(stderr,
               "%s%s batch %" PRIu64 "  %" PRIu64
               " img  %8.1f img/s  %8.1f MB/s  %6.1fs  reconnects %d%s",
               tty_ ? "\r" : "", pct.c_str(), batches, images, window_ips, mbps, el,
               reconnects, tty_ ? "   " : "\n");
  std::fflush(stderr);
  last_ = now;
  last_images_ = images;
  last_bytes_ = bytes;
}

void Progress::Done() {
  if (tty_) std::fprintf(stderr, "\n");
}

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

absl::Status RenderSheet(const v1::Batch& batch, const v1::StreamBatchesRequest& req,
                         const std::vector<std::string>& class_names,
                         const std::string& path, int columns) {
  std::vector<float> mean(req.transform().mean().begin(), req.transform().mean().end());
  std::vector<float> stdv(req.transform().std().begin(), req.transform().std().end());
  absl::StatusOr<std::vector<RgbImage>> images = TensorToImages(batch.tensor(), mean, stdv);
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
  absl::StatusOr<RgbImage> sheet = RenderContactSheet(*images, labels, captions, columns);
  if (!sheet.ok()) return sheet.status();
  return WritePng(path, *sheet);
}

int DryRun(const RequestFlags& flags, const v1::StreamBatchesRequest& req) {
  if (!flags.dry_run) return -1;
  absl::StatusOr<std::string> json = RequestJson(req);
  if (!json.ok()) return Fail(json.status());
  std::printf("%s\n", json->c_str());
  return 0;
}

}  // namespace nearprep
