// Small generated JPEG datasets for backend tests: procedural pictures
// encoded with TurboJPEG at several sizes, subsamplings and qualities
// (grayscale and progressive included), plus broken files (truncated,
// empty, not a JPEG, a header claiming a huge image).
//
// Thread-safety: functions are reentrant; each writes its own files.
#ifndef NEARPREP_TESTS_UNIT_BACKEND_TEST_IMAGES_H_
#define NEARPREP_TESTS_UNIT_BACKEND_TEST_IMAGES_H_

#include <turbojpeg.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace nearprep {
namespace testing_internal {

// Encodes a procedural image; empty on failure.
inline std::vector<uint8_t> MakeTestJpeg(int height, int width, int subsamp,
                                         int quality, bool progressive,
                                         int pattern) {
  const bool gray = subsamp == TJSAMP_GRAY;
  const int channels = gray ? 1 : 3;
  std::vector<uint8_t> pixels(static_cast<size_t>(height) * width * channels);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        double v = 127.5 + 100 * std::sin(0.13 * (x + 3 * c + pattern) +
                                          0.07 * y * (c + 1)) +
                   ((x * 31 + y * 17 + c * 7 + pattern) % 23) - 11;
        pixels[(static_cast<size_t>(y) * width + x) * channels + c] =
            static_cast<uint8_t>(std::lround(std::fmin(255, std::fmax(0, v))));
      }
    }
  }
  tjhandle h = tjInitCompress();
  if (h == nullptr) return {};
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;  // NOLINT(runtime/int): TurboJPEG's type.
  int flags = progressive ? TJFLAG_PROGRESSIVE : 0;
  int rc = tjCompress2(h, pixels.data(), width, 0, height,
                       gray ? TJPF_GRAY : TJPF_RGB, &jpeg, &size, subsamp,
                       quality, flags);
  std::vector<uint8_t> out;
  if (rc == 0) out.assign(jpeg, jpeg + size);
  tjFree(jpeg);
  tjDestroy(h);
  return out;
}

// Rewrites the frame size in the SOF marker of `jpeg`.
inline void PatchJpegSize(std::vector<uint8_t>* jpeg, int height, int width) {
  for (size_t i = 2; i + 8 < jpeg->size(); ++i) {
    uint8_t m = (*jpeg)[i + 1];
    if ((*jpeg)[i] == 0xFF && (m == 0xC0 || m == 0xC1 || m == 0xC2)) {
      (*jpeg)[i + 5] = static_cast<uint8_t>(height >> 8);
      (*jpeg)[i + 6] = static_cast<uint8_t>(height & 0xFF);
      (*jpeg)[i + 7] = static_cast<uint8_t>(width >> 8);
      (*jpeg)[i + 8] = static_cast<uint8_t>(width & 0xFF);
      return;
    }
  }
}

inline void WriteFile(const std::filesystem::path& p,
                      const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()),
          static_cast<std::streamsize>(bytes.size()));
}

// Writes an image_folder dataset under `root` (classes "a" and "b"). Broken
// files have "bad_" in their name and sort between good ones.
inline void WriteConformanceDataset(const std::string& root) {
  namespace fs = std::filesystem;
  const fs::path r(root);
  struct Spec {
    const char* path;
    int h, w, subsamp, quality;
    bool progressive;
  };
  const Spec good[] = {
      {"a/00_420.jpg", 61, 83, TJSAMP_420, 90, false},
      {"a/02_422.jpg", 48, 64, TJSAMP_422, 75, false},
      {"a/04_444.jpg", 33, 29, TJSAMP_444, 95, false},
      {"a/06_gray.jpg", 40, 52, TJSAMP_GRAY, 85, false},
      {"b/00_prog.jpg", 70, 45, TJSAMP_420, 80, true},
      {"b/02_tiny.jpg", 1, 1, TJSAMP_444, 90, false},
      {"b/04_wide.jpg", 9, 120, TJSAMP_420, 60, false},
      {"b/06_tall.jpg", 100, 12, TJSAMP_422, 70, true},
  };
  int pattern = 0;
  for (const Spec& s : good) {
    WriteFile(r / s.path, MakeTestJpeg(s.h, s.w, s.subsamp, s.quality,
                                       s.progressive, pattern++));
  }
  std::vector<uint8_t> base = MakeTestJpeg(64, 64, TJSAMP_420, 90, false, 7);
  std::vector<uint8_t> truncated(base.begin(), base.begin() + base.size() / 2);
  WriteFile(r / "a/01_bad_truncated.jpg", truncated);
  WriteFile(r / "a/03_bad_empty.jpg", {});
  const std::string text = "this is not a JPEG file\n";
  WriteFile(r / "a/05_bad_text.jpg", std::vector<uint8_t>(text.begin(), text.end()));
  std::vector<uint8_t> huge = base;
  PatchJpegSize(&huge, 60000, 60000);
  WriteFile(r / "b/01_bad_huge.jpg", huge);
}

}  // namespace testing_internal
}  // namespace nearprep

#endif  // NEARPREP_TESTS_UNIT_BACKEND_TEST_IMAGES_H_
