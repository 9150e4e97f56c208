#include "cli/stall_report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "cli/bitmap_font.h"
#include "cli/contact_sheet.h"
#include "cli/tensor_image.h"

namespace nearprep {

const char* StallStageName(int stage) {
  switch (stage) {
    case kStageRead: return "read";
    case kStageDecode: return "decode";
    case kStageTransform: return "transform";
    case kStageQueueNetwork: return "queue/network";
    default: return "none";
  }
}

std::string StallSummary::Bound() const {
  if (bound_stage < 0 || stall_fraction < kStallNegligible) {
    return "none (compute-bound)";
  }
  return StallStageName(bound_stage);
}

void AttributeWait(const BatchRecord& b,
                   std::array<double, kNumStallStages>* by_stage_s) {
  if (b.wait_s <= 0) return;
  const double queued = std::min(b.queue_wait_us / 1e6, b.wait_s);
  (*by_stage_s)[kStageQueueNetwork] += queued;
  const double rest = b.wait_s - queued;
  const double work =
      static_cast<double>(b.read_us + b.decode_us + b.transform_us);
  if (rest <= 0) return;
  if (work <= 0) {
    // No stage timings (e.g. a batch of only skipped samples): the wait is
    // not the server's work, so it is the transport's.
    (*by_stage_s)[kStageQueueNetwork] += rest;
    return;
  }
  (*by_stage_s)[kStageRead] += rest * b.read_us / work;
  (*by_stage_s)[kStageDecode] += rest * b.decode_us / work;
  (*by_stage_s)[kStageTransform] += rest * b.transform_us / work;
}

StallSummary AnalyzeStalls(const std::vector<BatchRecord>& batches,
                           double wall_s) {
  StallSummary s;
  s.wall_s = wall_s;
  for (const BatchRecord& b : batches) {
    s.wait_s += b.wait_s;
    AttributeWait(b, &s.by_stage_s);
  }
  s.stall_fraction = wall_s > 0 ? std::min(1.0, s.wait_s / wall_s) : 0.0;
  double best = 0;
  for (int i = 0; i < kNumStallStages; ++i) {
    if (s.by_stage_s[i] > best) {
      best = s.by_stage_s[i];
      s.bound_stage = i;
    }
  }
  return s;
}

namespace {

// Length of the overlap of [a0, a1) and [b0, b1).
double Overlap(double a0, double a1, double b0, double b1) {
  return std::max(0.0, std::min(a1, b1) - std::max(a0, b0));
}

}  // namespace

std::vector<TimelineBin> BuildTimeline(const std::vector<TrainerSpan>& trainers,
                                       double total_s, double bin_s) {
  std::vector<TimelineBin> bins;
  if (bin_s <= 0 || total_s <= 0) return bins;
  const size_t n = static_cast<size_t>(std::ceil(total_s / bin_s));
  bins.resize(n);
  std::vector<double> active(n, 0.0), waiting(n, 0.0), images(n, 0.0);
  for (size_t i = 0; i < n; ++i) bins[i].start_s = i * bin_s;
  for (const TrainerSpan& t : trainers) {
    for (size_t i = 0; i < n; ++i) {
      active[i] += Overlap(t.start_s, t.end_s, i * bin_s, (i + 1) * bin_s);
    }
    if (t.batches == nullptr) continue;
    for (const BatchRecord& b : *t.batches) {
      const size_t at =
          std::min(n - 1, static_cast<size_t>(std::max(0.0, b.t_s) / bin_s));
      images[at] += b.images;
      const double w0 = b.t_s - b.wait_s;
      const size_t first = static_cast<size_t>(std::max(0.0, w0) / bin_s);
      for (size_t i = first; i <= at && i < n; ++i) {
        waiting[i] += Overlap(w0, b.t_s, i * bin_s, (i + 1) * bin_s);
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    // The last bin may be partial.
    const double width = std::min(bin_s, total_s - i * bin_s);
    bins[i].images_per_s = width > 0 ? images[i] / width : 0.0;
    bins[i].stall_fraction =
        active[i] > 0 ? std::min(1.0, waiting[i] / active[i]) : 0.0;
  }
  return bins;
}

namespace {

constexpr uint8_t kInk[3] = {40, 40, 40};
constexpr uint8_t kGrid[3] = {220, 220, 220};
constexpr uint8_t kBlue[3] = {31, 119, 180};
constexpr uint8_t kRed[3] = {214, 39, 40};

void Fill(RgbImage* img, int x0, int y0, int x1, int y1, const uint8_t c[3]) {
  for (int y = std::max(0, y0); y < std::min(img->height, y1); ++y) {
    for (int x = std::max(0, x0); x < std::min(img->width, x1); ++x) {
      uint8_t* p = img->at(y, x);
      p[0] = c[0];
      p[1] = c[1];
      p[2] = c[2];
    }
  }
}

// Bresenham, 2 pixels thick.
void Line(RgbImage* img, int x0, int y0, int x1, int y1, const uint8_t c[3]) {
  const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
  const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
  int err = dx + dy;
  for (;;) {
    Fill(img, x0, y0, x0 + 2, y0 + 2, c);
    if (x0 == x1 && y0 == y1) break;
    const int e2 = 2 * err;
    if (e2 >= dy) {
      err += dy;
      x0 += sx;
    }
    if (e2 <= dx) {
      err += dx;
      y0 += sy;
    }
  }
}

// A "nice" axis maximum >= v: 1, 2 or 5 times a power of ten.
double NiceMax(double v) {
  if (v <= 0) return 1.0;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= v) return m * p;
  }
  return 10 * p;
}

// One panel: values[i] at bin i, y axis [0, ymax], labels in `fmt` (a
// FormatSpec, checked at compile time: clang refuses a plain char* format).
void Panel(RgbImage* img, int top, int height, const std::string& title,
           const std::vector<double>& values, double ymax,
           const absl::FormatSpec<double>& fmt,
           const uint8_t color[3]) {
  const int left = 70, right = img->width - 20;
  const int bottom = top + height;
  DrawText(img, left, top - 16, title, 2, kInk);
  for (int g = 0; g <= 4; ++g) {
    const int y = bottom - g * height / 4;
    Fill(img, left, y, right, y + 1, kGrid);
    const std::string label = absl::StrFormat(fmt, ymax * g / 4);
    DrawText(img, left - 6 - TextWidth(label, 1), y - 3, label, 1, kInk);
  }
  Fill(img, left, top, left + 1, bottom + 1, kInk);
  Fill(img, left, bottom, right, bottom + 1, kInk);
  const size_t n = values.size();
  auto px = [&](size_t i) {
    return left + static_cast<int>((right - left) * (i + 0.5) /
                                   std::max<size_t>(1, n));
  };
  auto py = [&](double v) {
    return bottom - static_cast<int>(std::lround(
                        std::clamp(v / ymax, 0.0, 1.0) * height));
  };
  for (size_t i = 0; i < n; ++i) {
    if (n == 1) Fill(img, px(i) - 2, py(values[i]) - 2, px(i) + 3,
                     py(values[i]) + 3, color);
    if (i > 0) Line(img, px(i - 1), py(values[i - 1]), px(i), py(values[i]),
                    color);
  }
}

}  // namespace

absl::Status WriteStallPlot(const std::string& path,
                            const std::vector<TimelineBin>& timeline,
                            double bin_s, const std::string& title) {
  if (timeline.empty()) {
    return absl::InvalidArgumentError("stall plot: no data to draw");
  }
  constexpr int kWidth = 900, kPanel = 200;
  RgbImage img(2 * kPanel + 150, kWidth, 255);
  std::vector<double> ips, stall;
  double top_ips = 0;
  for (const TimelineBin& b : timeline) {
    ips.push_back(b.images_per_s);
    stall.push_back(100.0 * b.stall_fraction);
    top_ips = std::max(top_ips, b.images_per_s);
  }
  DrawText(&img, 10, 6, title, 1, kInk);
  Panel(&img, 40, kPanel, "IMAGES/S (ALL TRAINERS)", ips, NiceMax(top_ips),
        "%.0f", kBlue);
  Panel(&img, 40 + kPanel + 50, kPanel, "STALL % (TIME WAITING FOR DATA)",
        stall, 100.0, "%.0f", kRed);
  const double total = timeline.size() * bin_s;
  const int left = 70, right = kWidth - 20, axis_y = 40 + 2 * kPanel + 50 + 6;
  for (int g = 0; g <= 4; ++g) {
    const std::string label = absl::StrFormat("%.1fS", total * g / 4);
    const int x = left + (right - left) * g / 4;
    DrawText(&img, std::min(x, kWidth - TextWidth(label, 1) - 2), axis_y,
             label, 1, kInk);
  }
  DrawText(&img, left, axis_y + 14,
           absl::StrFormat("TIME (BINS OF %.2f S)", bin_s), 1, kInk);
  return WritePng(path, img);
}

}  // namespace nearprep
