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
//   Numbers are parsed with strtod, so Python's repr() round-trips exactly.
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

int Run(const char* in_path, const char* out_path) {
  std::ifstream in(in_path, std::ios::binary);
  std::ofstream out(out_path, std::ios::binary);
  if (!in || !out) {
    std::fprintf(stderr, "cannot open %s or %s\n", in_path, out_path);
    return 1;
  }
  std::string line;
  size_t job = 0;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    std::istringstream fields(line);
    int h = 0, w = 0, fr = 0, fg = 0, fb = 0;
    std::string op;
    if (!(fields >> h >> w >> fr >> fg >> fb >> op) || h < 0 || w < 0) {
      std::fprintf(stderr, "bad job line %zu: %s\n", job, line.c_str());
      return 2;
    }
    std::vector<std::string> args;
    for (std::string s; fields >> s;) args.push_back(s);
    RgbImage img;
    img.height = h;
    img.width = w;
    img.data.resize(static_cast<size_t>(h) * static_cast<size_t>(w) * 3);
    if (!in.read(reinterpret_cast<char*>(img.data.data()),
                 static_cast<std::streamsize>(img.data.size()))) {
      std::fprintf(stderr, "input ends before job %zu\n", job);
      return 1;
    }
    const uint8_t fill[3] = {static_cast<uint8_t>(fr), static_cast<uint8_t>(fg),
                             static_cast<uint8_t>(fb)};
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
  std::fprintf(stderr,
               "usage: %s tables H W [avx2|default|avx512] | run IN.raw "
               "OUT.raw < JOBS\n",
               argv[0]);
  return 2;
}
