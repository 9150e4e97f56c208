// nearprep_bench_rowcolor: the per-row colour kernel of the fused CPU path
// (vertical lerp, brightness, saturation, clip, float32 NHWC store) by
// itself, on rows of real images resized to the output size, at every
// kernel level this CPU has: without saturation, with TF_COMPAT's exact
// saturation and with FAST's closed form. The difference between the rows
// is the saturation's cost per image. It also counts the pixels whose hue
// would send a vector block to the scalar fallback (non-finite hue) and
// those whose hue sum takes the exact double path.
//
// Example:
//   nearprep_bench_rowcolor --dataset ../shared/datasets/imagenet-sample-200
#include <turbojpeg.h>

#include <algorithm>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "server/data/dataset.h"
#include "server/image/preprocess_kernels.h"
#include "server/image/tf_ops.h"
#include "server/image/tf_ops_internal.h"

namespace nearprep {
namespace {

// This thread's CPU time in seconds: on a shared machine, time the thread
// spends descheduled would otherwise dominate the differences.
double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// One image resized to w x h, planar rows (R|G|B, each w floats).
struct Rows {
  int h = 0, w = 0;
  std::vector<float> planes;  // h rows of 3 * w floats
  float delta = 0, factor = 1;
  const float* row(int y) const { return planes.data() + size_t(y) * 3 * w; }
};

bool LoadRows(const std::vector<uint8_t>& jpeg, int size, std::mt19937* rng,
              Rows* out) {
  tjhandle tj = tjInitDecompress();
  int w = 0, h = 0, sub = 0, cs = 0;
  bool ok = tj != nullptr &&
            tjDecompressHeader3(tj, jpeg.data(), jpeg.size(), &w, &h, &sub,
                                &cs) == 0;
  std::vector<uint8_t> rgb;
  if (ok) {
    rgb.resize(size_t(w) * h * 3);
    ok = tjDecompress2(tj, jpeg.data(), jpeg.size(), rgb.data(), w, 0, h,
                       TJPF_RGB, 0) == 0;
  }
  if (tj != nullptr) tjDestroy(tj);
  if (!ok) return false;
  std::vector<float> hwc(size_t(size) * size * 3);
  ResizeBilinearU8(rgb.data(), h, w, CropBox{0, 0, h, w}, hwc.data(), size,
                   size);
  out->h = out->w = size;
  out->planes.resize(hwc.size());
  for (int y = 0; y < size; ++y) {
    for (int x = 0; x < size; ++x) {
      for (int c = 0; c < 3; ++c) {
        out->planes[(size_t(y) * 3 + c) * size + x] =
            hwc[(size_t(y) * size + x) * 3 + c];
      }
    }
  }
  // The pipeline bench's ranges: brightness 32/255, saturation [0.5, 1.5].
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  out->delta = (u(*rng) * 2 - 1) * (32.0f / 255.0f);
  out->factor = 0.5f + u(*rng);
  return true;
}

using RowColorFn = int (*)(const float*, const float*, float, int,
                           const internal::RowOps&,
                           const internal::PackTarget&);

// Seconds for one pass of `fn` over every row of every image.
double Pass(const std::vector<Rows>& images, RowColorFn fn, int sat_mode,
            std::vector<float>* out) {
  const double t0 = ThreadSeconds();
  for (const Rows& im : images) {
    internal::RowOps ops;
    ops.brightness = true;
    ops.delta = im.delta;
    ops.saturation = sat_mode != 0;
    ops.fast_saturation = sat_mode == 2;
    ops.factor = im.factor;
    ops.clip = true;
    for (int y = 0; y < im.h; ++y) {
      internal::PackTarget t;
      t.dtype = DType::kFloat32;
      t.layout = Layout::kNHWC;
      t.flip = (y & 1) != 0;
      t.dst[0] = reinterpret_cast<uint8_t*>(out->data() + size_t(y) * 3 * im.w);
      const int done = fn(im.row(y), im.row(std::min(y + 1, im.h - 1)), 0.375f,
                          im.w, ops, t);
      if (done != im.w - im.w % 8) std::abort();
    }
  }
  return ThreadSeconds() - t0;
}

// The scalar reference saturation over the same pixels (planar in place on
// a copy), for scale.
double ScalarPass(const std::vector<Rows>& images, std::vector<float>* tmp) {
  double s = 0;
  for (const Rows& im : images) {
    tmp->assign(im.planes.begin(), im.planes.end());
    const double t0 = ThreadSeconds();
    for (int y = 0; y < im.h; ++y) {
      float* r = tmp->data() + size_t(y) * 3 * im.w;
      for (int x = 0; x < im.w; ++x) {
        float p[3] = {r[x], r[im.w + x], r[2 * im.w + x]};
        internal::SaturatePixel(p, im.factor);
        r[x] = p[0];
        r[im.w + x] = p[1];
        r[2 * im.w + x] = p[2];
      }
    }
    s += ThreadSeconds() - t0;
  }
  return s;
}

// Pixels (after lerp and brightness, as the kernel sees them) whose 6 * hue
// is outside [0, 7.5): the vector kernels hand their block to the scalar
// path. *double_hue counts those whose hue sum the float bracket of the
// vector kernels cannot decide (their vector takes the double path).
uint64_t FallbackPixels(const std::vector<Rows>& images, uint64_t* double_hue) {
  uint64_t n = 0;
  *double_hue = 0;
  for (const Rows& im : images) {
    for (int y = 0; y < im.h; ++y) {
      const float* lo = im.row(y);
      const float* hi = im.row(std::min(y + 1, im.h - 1));
      for (int x = 0; x < im.w; ++x) {
        float p[3];
        for (int c = 0; c < 3; ++c) {
          const float a = lo[c * im.w + x], b = hi[c * im.w + x];
          p[c] = (a + (b - a) * 0.375f) + im.delta;
        }
        float hh, ss, vv;
        internal::RgbToHsv(p[0], p[1], p[2], &hh, &ss, &vv);
        const float dh = hh * 6;
        if (!(dh >= 0.0f && dh < 7.5f)) ++n;
        // The kernels' bracket (preprocess_avx2_inl.h), lane for lane.
        const float range = vv - std::min(std::min(p[2], p[1]), p[0]);
        const float norm = 1.0f / (6.0f * range);
        const bool is_g = p[1] == vv;
        const float t = is_g ? norm * (p[2] - p[0]) : norm * (p[0] - p[1]);
        const double k = is_g ? 2.0 / 6.0 : 4.0 / 6.0;
        const float kh = static_cast<float>(k);
        const float kl = static_cast<float>(k - kh);
        const float e44 = 0x1p-44f;
        const float s = kh + t;
        const float e = t - (s - kh);
        const float lo_sum = s + (e + (kl - e44));
        const float hi_sum = s + (e + (kl + e44));
        if (lo_sum != hi_sum && lo_sum == lo_sum && hi_sum == hi_sum) {
          ++*double_hue;
        }
      }
    }
  }
  return n;
}

}  // namespace
}  // namespace nearprep

int main(int argc, char** argv) {
  using namespace nearprep;
  std::string root = "../shared/datasets/imagenet-sample-200";
  int images_n = 64, size = 224, rounds = 15;
  CLI::App app{"nearprep row colour kernel benchmark"};
  app.add_option("--dataset", root, "image_folder dataset root");
  app.add_option("--images", images_n, "images to load");
  app.add_option("--size", size, "output height and width");
  app.add_option("--rounds", rounds, "passes per variant; the best counts");
  CLI11_PARSE(app, argc, argv);
  DatasetConfig config;
  config.name = "bench";
  config.root = root;
  auto ds = Dataset::Open(config);
  if (!ds.ok()) {
    std::fprintf(stderr, "%s\n", ds.status().ToString().c_str());
    return 1;
  }
  std::mt19937 rng(11);
  std::vector<Rows> images;
  for (uint64_t id = 0; id < (*ds)->size() && int(images.size()) < images_n;
       ++id) {
    std::vector<uint8_t> jpeg;
    if (!(*ds)->store().ReadSample(id, &jpeg).ok()) continue;
    Rows r;
    if (LoadRows(jpeg, size, &rng, &r)) images.push_back(std::move(r));
  }
  if (images.empty()) {
    std::fprintf(stderr, "no images under %s\n", root.c_str());
    return 1;
  }
  const double pixels = double(images.size()) * size * size;
  std::vector<float> out(size_t(size) * size * 3 + 16);
  // 64-byte aligned rows when size is a multiple of 16: the streaming
  // stores, as for the pipeline's batch buffers.
  std::printf("row colour kernel: %zu images at %dx%d, float32 NHWC, "
              "brightness + clip, best of %d passes (thread CPU time)\n",
              images.size(), size, size, rounds);
  uint64_t double_hue = 0;
  const uint64_t scalar = FallbackPixels(images, &double_hue);
  std::printf("pixels sent to the scalar fallback: %llu of %.0f; pixels "
              "whose hue sum takes the double path: %llu\n",
              static_cast<unsigned long long>(scalar), pixels,
              static_cast<unsigned long long>(double_hue));
  std::printf("%-8s %-16s %10s %12s\n", "level", "saturation", "ns/pixel",
              "us/image");
  struct Level {
    const char* name;
    RowColorFn fn;
    bool have;
  };
  const Level levels[] = {
      {"avx2", &internal::RowColorAvx2, internal::HaveAvx2Kernels()},
      {"avx512", &internal::RowColorAvx512, internal::HaveAvx512Kernels()},
  };
  const char* modes[] = {"none", "TF_COMPAT exact", "FAST"};
  for (const Level& l : levels) {
    if (!l.have) continue;
    for (int mode = 0; mode < 3; ++mode) {
      double best = 1e30;
      for (int i = 0; i < rounds; ++i) {
        best = std::min(best, Pass(images, l.fn, mode, &out));
      }
      std::printf("%-8s %-16s %10.2f %12.1f\n", l.name, modes[mode],
                  best / pixels * 1e9, best / images.size() * 1e6);
    }
  }
  std::vector<float> tmp;
  double best = 1e30;
  for (int i = 0; i < std::max(1, rounds / 2); ++i) {
    best = std::min(best, ScalarPass(images, &tmp));
  }
  std::printf("%-8s %-16s %10.2f %12.1f  (SaturatePixel alone)\n", "scalar",
              modes[1], best / pixels * 1e9, best / images.size() * 1e6);
  return 0;
}
