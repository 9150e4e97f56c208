// nearprep_torchvision_apply: runs PreprocessJpeg with FIDELITY_TORCHVISION
// on a list of files with given crop boxes and flips, for the tests that
// compare it with PIL + torchvision (torchvision_oracle_test.py) and for the
// torchvision benchmark.
//
//   nearprep_torchvision_apply --out FILE [--mode train|eval] [--height H]
//       [--width W] [--resize R] [--dtype float32|float16|bfloat16|uint8]
//       [--layout nchw|nhwc] [--mean a,b,c --std a,b,c] [--repeat N]
//   stdin: one job per line: "PATH Y X H W FLIP" (train: the crop box and
//   flip 0/1; eval: the box is ignored).
// FILE receives every job's tensor, in order (zeros for a failed job).
// stdout: "ERROR <job> <message>" per failed job, then
// "TIME <seconds> <images>" for the PreprocessJpeg calls of the last repeat
// (files are read into memory first); with --turbojpeg 1 also
// "DECODE_TIME <seconds> <images>": the last repeat of a full-size TurboJPEG
// decode (TJFLAG_FASTDCT, RGB) of the same files, the decode-only baseline
// of the benchmarks. --scalar 1 forces the scalar kernels (no AVX2).
// With NEARPREP_APPLY_DECODED=1 in the environment each file is decoded once
// (DecodeForReuse, as the decoded-image cache does) and every job runs
// PreprocessDecoded on that decode instead of PreprocessJpeg: the oracle
// test then checks the cached path against PIL + torchvision.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <turbojpeg.h>

#include "server/spec/types.h"
#include "server/image/preprocess.h"
#include "server/image/preprocess_kernels.h"

namespace {

struct Job {
  std::vector<uint8_t> bytes;
  nearprep::SampleParams params;
};

bool ParseTriple(const char* s, float v[3]) {
  return std::sscanf(s, "%f,%f,%f", &v[0], &v[1], &v[2]) == 3;
}

int Usage() {
  std::cerr << "usage: nearprep_torchvision_apply --out FILE [--mode train|eval]"
               " [--height H] [--width W] [--resize R] [--dtype D]"
               " [--layout nchw|nhwc] [--mean a,b,c --std a,b,c]"
               " [--repeat N] [--turbojpeg 0|1] [--scalar 0|1] < jobs\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using nearprep::CropMode;
  using nearprep::DType;
  using nearprep::Layout;
  nearprep::TransformSpec spec;
  spec.fidelity = nearprep::Fidelity::kTorchvision;
  spec.crop = CropMode::kRandomResized;
  nearprep::OutputSpec output;
  output.layout = Layout::kNCHW;
  std::string out_path;
  int repeat = 1;
  bool turbojpeg = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return Usage();
    const char* v = argv[++i];
    if (a == "--out") {
      out_path = v;
    } else if (a == "--mode") {
      spec.crop = std::string(v) == "eval" ? CropMode::kResizeCenter
                                           : CropMode::kRandomResized;
    } else if (a == "--height") {
      spec.height = std::atoi(v);
    } else if (a == "--width") {
      spec.width = std::atoi(v);
    } else if (a == "--resize") {
      spec.resize_shorter = std::atoi(v);
    } else if (a == "--repeat") {
      repeat = std::atoi(v);
    } else if (a == "--scalar") {
      // The scalar kernels only (the AVX2 ones give the same bytes).
      if (std::atoi(v) != 0) {
        nearprep::internal::SetKernelLevelForTesting(
            nearprep::internal::KernelLevel::kScalar);
      }
    } else if (a == "--turbojpeg") {
      turbojpeg = std::atoi(v) != 0;
    } else if (a == "--dtype") {
      const std::string d = v;
      output.dtype = d == "uint8"      ? DType::kUint8
                     : d == "float16"  ? DType::kFloat16
                     : d == "bfloat16" ? DType::kBFloat16
                                       : DType::kFloat32;
    } else if (a == "--layout") {
      output.layout = std::string(v) == "nhwc" ? Layout::kNHWC : Layout::kNCHW;
    } else if (a == "--mean") {
      if (!ParseTriple(v, spec.mean)) return Usage();
      spec.normalize = true;
    } else if (a == "--std") {
      if (!ParseTriple(v, spec.std)) return Usage();
      spec.normalize = true;
    } else {
      return Usage();
    }
  }
  if (out_path.empty() || spec.height <= 0 || spec.width <= 0 || repeat < 1) {
    return Usage();
  }
  std::vector<Job> jobs;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    std::istringstream in(line);
    std::string path;
    int flip = 0;
    Job job;
    in >> path >> job.params.crop.y >> job.params.crop.x >>
        job.params.crop.height >> job.params.crop.width >> flip;
    job.params.flip = flip != 0;
    std::ifstream f(path, std::ios::binary);
    job.bytes.assign(std::istreambuf_iterator<char>(f), {});
    jobs.push_back(std::move(job));
  }
  const size_t sample_bytes = output.SampleBytes(spec);
  std::vector<uint8_t> tensor(sample_bytes * jobs.size());
  const nearprep::DecodeLimits limits;
  double seconds = 0;
  const char* decoded_env = std::getenv("NEARPREP_APPLY_DECODED");
  const bool use_decoded = decoded_env != nullptr && decoded_env[0] == '1';
  std::vector<absl::StatusOr<nearprep::RgbImage>> decodes;
  if (use_decoded) {
    for (const Job& job : jobs) {
      decodes.push_back(nearprep::DecodeForReuse(
          job.bytes.data(), job.bytes.size(), spec.fidelity, limits));
    }
  }
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < jobs.size(); ++i) {
      const nearprep::SampleParams given = jobs[i].params;
      nearprep::ParamsFn draw = [&given](int, int) { return given; };
      uint8_t* slot = tensor.data() + i * sample_bytes;
      const absl::Status st =
          use_decoded && decodes[i].ok()
              ? nearprep::PreprocessDecoded(
                    decodes[i]->pixels.data(), decodes[i]->height,
                    decodes[i]->width, spec, output, draw, nullptr, slot,
                    nullptr)
              : nearprep::PreprocessJpeg(jobs[i].bytes.data(),
                                         jobs[i].bytes.size(), spec, output,
                                         limits, draw, nullptr, slot, nullptr);
      if (!st.ok()) {
        std::memset(slot, 0, sample_bytes);
        if (r == 0) std::cout << "ERROR " << i << " " << st.message() << "\n";
      }
    }
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                            t0)
                  .count();
  }
  if (turbojpeg) {
    tjhandle h = tjInitDecompress();
    if (h == nullptr) return 1;
    std::vector<uint8_t> rgb;
    size_t decoded = 0;
    double decode_seconds = 0;
    for (int r = 0; r < repeat; ++r) {
      decoded = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (const Job& job : jobs) {
        int w = 0, hgt = 0, sub = 0, cs = 0;
        if (tjDecompressHeader3(h, job.bytes.data(), job.bytes.size(), &w,
                                &hgt, &sub, &cs) != 0) {
          continue;
        }
        rgb.resize(static_cast<size_t>(w) * hgt * 3);
        if (tjDecompress2(h, job.bytes.data(), job.bytes.size(), rgb.data(),
                          w, 0, hgt, TJPF_RGB, TJFLAG_FASTDCT) == 0) {
          ++decoded;
        }
      }
      decode_seconds = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - t0)
                           .count();
    }
    tjDestroy(h);
    std::cout << "DECODE_TIME " << decode_seconds << " " << decoded << "\n";
  }
  std::ofstream f(out_path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(tensor.data()),
          static_cast<std::streamsize>(tensor.size()));
  std::cout << "TIME " << seconds << " " << jobs.size() << "\n";
  return f.good() ? 0 : 1;
}
