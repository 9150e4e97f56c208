// Driver for pil_ops_oracle_test.py: runs nearprep's PIL-exact ops and
// torchvision auto-augment tables so the Python test can compare them with
// Pillow 9.4 / torchvision 0.14 themselves.
//
//   nearprep_pil_ops_apply tables H W [avx2|default|avx512]
//     Prints AugmentSpace for TrivialAugmentWide(31), RandAugment(31, HxW)
//     and AutoAugment(10, HxW) with that TorchCpuKernel (avx2 if omitted),
//     one line per op:
//       space POLICY OP SIGNED V1 V2 ...   (values as float32 bit patterns,
//       hex)
//     then the AutoAugment IMAGENET policies, one line per sub-policy:
//       policy OP1 P1 M1 OP2 P2 M2          (P as the float's %.9g, M or -1)
//   nearprep_pil_ops_apply run IN.raw OUT.raw < JOBS
//     Each stdin line is one job: "H W FR FG FB OP [ARGS...]". Its input is
//     the next H*W*3 bytes of IN.raw; the result is appended to OUT.raw.
//     OP is an AugmentOp name (ARGS: the float magnitude _apply_op gets), or
//     brightness / contrast / saturation / sharpness F (float factor),
//     hue F (double), posterize BITS, solarize T (double), autocontrast,
//     equalize, invert, hflip, rotate A (double),
//     affine ANGLE TX TY SCALE SHEARX SHEARY (torchvision's default centre).
//   nearprep_pil_ops_apply time IN.raw REPEAT < JOBS
//     The same jobs (and inputs) as run, for bench/python/augment_ops_bench.py:
//     each job runs REPEAT times, each time on a fresh copy of its input (the
//     copy is outside the timed interval), and the driver prints
//       TIME JOB MEDIAN MIN     (seconds per run over the REPEAT runs)
//     One more OP exists here only: erase Y X EH EW V, RandomErasing's fill
//     of the box [Y, Y+EH) x [X, X+EW) with V on the image as the 3xHxW
//     float32 NCHW tensor (input / 255), the loop of EraseBox in
//     server/image/torchvision_preprocess.cc (which the daemon runs on the
//     stored output, so there is no copy of the image in its cost).
//   Numbers are parsed with strtod, so Python's repr() round-trips exactly.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "server/image/pil_ops.h"
#include "server/image/torchvision_augment.h"
#include "server/image/torchvision_preprocess.h"

namespace {

using nearprep::AugmentOp;
using nearprep::AugmentPolicy;
using nearprep::pil::RgbImage;

int Tables(int height, int width, nearprep::TorchCpuKernel kernel) {
  struct Space {
    const char* name;
    AugmentPolicy policy;
    int bins;
  };
  const Space spaces[] = {
      {"TrivialAugmentWide", AugmentPolicy::kTrivialAugmentWide, 31},
      {"RandAugment", AugmentPolicy::kRandAugment, 31},
      {"AutoAugment", AugmentPolicy::kAutoAugmentImagenet, 10},
  };
  for (const Space& sp : spaces) {
    for (const auto& meta :
         nearprep::AugmentSpace(sp.policy, height, width, kernel)) {
      std::printf("space %s %s %d", sp.name, nearprep::AugmentOpName(meta.op),
                  meta.is_signed ? 1 : 0);
      for (float v : meta.magnitudes) {
        uint32_t bits;
        std::memcpy(&bits, &v, sizeof(bits));
        std::printf(" %08x", bits);
      }
      std::printf("\n");
    }
  }
  for (const auto& sub : nearprep::AutoAugmentImagenetPolicies()) {
    std::printf("policy");
    for (const auto& step : sub) {
      std::printf(" %s %.9g %d", nearprep::AugmentOpName(step.op),
                  static_cast<double>(step.probability), step.magnitude_id);
    }
    std::printf("\n");
  }
  return 0;
}

bool FindOp(const std::string& name, AugmentOp* op) {
  for (int i = 0; i <= static_cast<int>(AugmentOp::kInvert); ++i) {
    const auto candidate = static_cast<AugmentOp>(i);
    if (name == nearprep::AugmentOpName(candidate)) {
      *op = candidate;
      return true;
    }
  }
  return false;
}

double Arg(const std::vector<std::string>& args, size_t i) {
  if (i >= args.size()) {
    std::fprintf(stderr, "missing argument %zu\n", i);
    std::exit(2);
  }
  return std::strtod(args[i].c_str(), nullptr);
}

bool RunOne(RgbImage* img, const std::string& op,
            const std::vector<std::string>& a, const uint8_t fill[3]) {
  namespace pil = nearprep::pil;
  AugmentOp aug;
  if (FindOp(op, &aug)) {
    nearprep::ApplyAugmentOp(img, aug, static_cast<float>(Arg(a, 0)), fill);
  } else if (op == "brightness") {
    pil::AdjustBrightness(img, static_cast<float>(Arg(a, 0)));
  } else if (op == "contrast") {
    pil::AdjustContrast(img, static_cast<float>(Arg(a, 0)));
  } else if (op == "saturation") {
    pil::AdjustSaturation(img, static_cast<float>(Arg(a, 0)));
  } else if (op == "sharpness") {
    pil::AdjustSharpness(img, static_cast<float>(Arg(a, 0)));
  } else if (op == "hue") {
    pil::AdjustHue(img, Arg(a, 0));
  } else if (op == "posterize") {
    pil::Posterize(img, static_cast<int>(Arg(a, 0)));
  } else if (op == "solarize") {
    pil::Solarize(img, Arg(a, 0));
  } else if (op == "autocontrast") {
    pil::AutoContrast(img);
  } else if (op == "equalize") {
    pil::Equalize(img);
  } else if (op == "invert") {
    pil::Invert(img);
  } else if (op == "hflip") {
    pil::FlipLeftRight(img);
  } else if (op == "rotate") {
    pil::Rotate(img, Arg(a, 0), fill);
  } else if (op == "affine") {
    const int translate[2] = {static_cast<int>(Arg(a, 1)),
                              static_cast<int>(Arg(a, 2))};
    const double shear[2] = {Arg(a, 4), Arg(a, 5)};
    pil::Affine(img, Arg(a, 0), translate, Arg(a, 3), shear, nullptr, fill);
  } else {
    return false;
  }
  return true;
}

// One job line of `run` / `time`: "H W FR FG FB OP [ARGS...]" and its
// H*W*3 input bytes from `in`. Returns 0, or the exit code after printing
// why (2: a bad line; 1: the input ends).
int ReadJob(const std::string& line, size_t job, std::istream& in,
            RgbImage* img, std::string* op, std::vector<std::string>* args,
            uint8_t fill[3]) {
  std::istringstream fields(line);
  int h = 0, w = 0, fr = 0, fg = 0, fb = 0;
  if (!(fields >> h >> w >> fr >> fg >> fb >> *op) || h < 0 || w < 0) {
    std::fprintf(stderr, "bad job line %zu: %s\n", job, line.c_str());
    return 2;
  }
  args->clear();
  for (std::string s; fields >> s;) args->push_back(s);
  img->height = h;
  img->width = w;
  img->data.resize(static_cast<size_t>(h) * static_cast<size_t>(w) * 3);
  if (!in.read(reinterpret_cast<char*>(img->data.data()),
               static_cast<std::streamsize>(img->data.size()))) {
    std::fprintf(stderr, "input ends before job %zu\n", job);
    return 1;
  }
  fill[0] = static_cast<uint8_t>(fr);
  fill[1] = static_cast<uint8_t>(fg);
  fill[2] = static_cast<uint8_t>(fb);
  return 0;
}

int Run(const char* in_path, const char* out_path) {
  std::ifstream in(in_path, std::ios::binary);
  std::ofstream out(out_path, std::ios::binary);
  if (!in || !out) {
    std::fprintf(stderr, "cannot open %s or %s\n", in_path, out_path);
    return 1;
  }
  std::string line;
  size_t job = 0;
  RgbImage img;
  std::string op;
  std::vector<std::string> args;
  uint8_t fill[3];
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    if (int rc = ReadJob(line, job, in, &img, &op, &args, fill); rc != 0) {
      return rc;
    }
    if (!RunOne(&img, op, args, fill)) {
      std::fprintf(stderr, "unknown op %s (job %zu)\n", op.c_str(), job);
      return 2;
    }
    out.write(reinterpret_cast<const char*>(img.data.data()),
              static_cast<std::streamsize>(img.data.size()));
    ++job;
  }
  return out ? 0 : 1;
}

int Time(const char* in_path, int repeat) {
  std::ifstream in(in_path, std::ios::binary);
  if (!in || repeat < 1) {
    std::fprintf(stderr, "cannot open %s or REPEAT < 1\n", in_path);
    return 1;
  }
  using Clock = std::chrono::steady_clock;
  std::string line;
  size_t job = 0;
  std::vector<double> runs(static_cast<size_t>(repeat));
  RgbImage src;
  std::string op;
  std::vector<std::string> args;
  uint8_t fill[3];
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    if (int rc = ReadJob(line, job, in, &src, &op, &args, fill); rc != 0) {
      return rc;
    }
    const int h = src.height, w = src.width;
    if (op == "erase") {
      const int by = static_cast<int>(Arg(args, 0));
      const int bx = static_cast<int>(Arg(args, 1));
      const int bh = static_cast<int>(Arg(args, 2));
      const int bw = static_cast<int>(Arg(args, 3));
      const float v = static_cast<float>(Arg(args, 4));
      const float value[3] = {v, v, v};
      if (by < 0 || bx < 0 || bh < 0 || bw < 0 || by + bh > h || bx + bw > w) {
        std::fprintf(stderr, "erase box outside the image (job %zu)\n", job);
        return 2;
      }
      const size_t plane = static_cast<size_t>(h) * static_cast<size_t>(w);
      std::vector<float> chw(plane * 3), work(plane * 3);
      for (size_t i = 0; i < plane; ++i) {
        for (size_t c = 0; c < 3; ++c) {
          chw[c * plane + i] = static_cast<float>(src.data[i * 3 + c]) / 255.0f;
        }
      }
      for (int r = 0; r < repeat; ++r) {
        std::copy(chw.begin(), chw.end(), work.begin());
        const auto t0 = Clock::now();
        nearprep::internal::EraseBox(nearprep::CropBox{by, bx, bh, bw}, value, h,
                                     w, nearprep::DType::kFloat32,
                                     nearprep::Layout::kNCHW,
                                     reinterpret_cast<uint8_t*>(work.data()));
        const auto t1 = Clock::now();
        runs[static_cast<size_t>(r)] =
            std::chrono::duration<double>(t1 - t0).count();
      }
    } else {
      RgbImage img;
      for (int r = 0; r < repeat; ++r) {
        img = src;  // Same size after the first run: no allocation.
        const auto t0 = Clock::now();
        const bool known = RunOne(&img, op, args, fill);
        const auto t1 = Clock::now();
        if (!known) {
          std::fprintf(stderr, "unknown op %s (job %zu)\n", op.c_str(), job);
          return 2;
        }
        runs[static_cast<size_t>(r)] =
            std::chrono::duration<double>(t1 - t0).count();
      }
    }
    std::vector<double> sorted = runs;
    std::sort(sorted.begin(), sorted.end());
    const size_t m = sorted.size();
    const double median =
        m % 2 == 1 ? sorted[m / 2] : 0.5 * (sorted[m / 2 - 1] + sorted[m / 2]);
    std::printf("TIME %zu %.9g %.9g\n", job, median, sorted[0]);
    ++job;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if ((argc == 4 || argc == 5) && std::strcmp(argv[1], "tables") == 0) {
    auto kernel = nearprep::TorchCpuKernel::kAvx2;
    if (argc == 5 && std::strcmp(argv[4], "default") == 0) {
      kernel = nearprep::TorchCpuKernel::kDefault;
    } else if (argc == 5 && std::strcmp(argv[4], "avx512") == 0) {
      kernel = nearprep::TorchCpuKernel::kAvx512;
    } else if (argc == 5 && std::strcmp(argv[4], "avx2") != 0) {
      std::fprintf(stderr, "unknown kernel %s\n", argv[4]);
      return 2;
    }
    return Tables(std::atoi(argv[2]), std::atoi(argv[3]), kernel);
  }
  if (argc == 4 && std::strcmp(argv[1], "run") == 0)
    return Run(argv[2], argv[3]);
  if (argc == 4 && std::strcmp(argv[1], "time") == 0)
    return Time(argv[2], std::atoi(argv[3]));
  std::fprintf(stderr,
               "usage: %s tables H W [avx2|default|avx512] | run IN.raw "
               "OUT.raw < JOBS | time IN.raw REPEAT < JOBS\n",
               argv[0]);
  return 2;
}
