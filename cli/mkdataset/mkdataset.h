// `nearprep mkdataset`: writes a synthetic image-folder dataset so that the
// demo and the tests run without real data. Pictures are procedural
// (gradients, circles, rings, rectangles, triangles, stripes, noise; a base
// hue and a favourite shape per class, so classes look different on a
// contact sheet), encoded with TurboJPEG at varied sizes, qualities and
// chroma subsamplings (4:2:0, 4:2:2, 4:4:4, grayscale), some progressive,
// some with an upper-case ".JPEG" extension.
//
// Layout: OUT/class_000/img_00000.jpg ... and, with with_bad_files, files
// a decoder must reject without crashing, in the first class (so the
// classes stay class_000 ... and a bad file has that class's label) as
// OUT/class_000/bad_NAME, sorted before the class's images:
//   corrupt.jpg      progressive; headers up to the first scan intact, the
//                    first scan's data overwritten by noise and the second
//                    scan's header invalid (Ss=64): a fatal libjpeg error
//   truncated.jpg    a valid JPEG cut inside its scan
//   empty.jpg        0 bytes
//   not_a_jpeg.jpg   plain text
//   huge_header.jpg  a small valid JPEG whose SOF says 65000 x 65000
//                    (65000*65000*3 >= 2^29: over the decoder's limit)
//
// Deterministic: the same options give the same bytes on a given platform
// (every image draws from its own std::mt19937_64, whose output the C++
// standard fixes; only libm's cos/sin/hypot could differ elsewhere).
//
// Thread-safety: MakeSyntheticDataset may run concurrently for different
// output folders.
#ifndef NEARPREP_CLIENT_CPP_MKDATASET_MKDATASET_H_
#define NEARPREP_CLIENT_CPP_MKDATASET_MKDATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace nearprep {

struct MkDatasetOptions {
  std::string output_dir;     // Created if missing; our files are overwritten.
  int num_classes = 4;        // [1, 1000]
  int images_per_class = 16;  // [1, 100000]
  uint64_t seed = 1;
  int min_side = 64;   // Each image's height and width are uniform in
  int max_side = 640;  // [min_side, max_side]; 8 <= min <= max <= 8192.
  bool with_bad_files = false;
};

// What was written (for tests and the CLI's message).
struct MkDatasetSummary {
  struct Image {
    std::string path;  // Relative to output_dir.
    int label = 0;
    int width = 0, height = 0;
    int quality = 0;
    int subsampling = 0;  // TurboJPEG TJSAMP_* value.
    bool progressive = false;
    uint64_t bytes = 0;
  };
  std::vector<Image> images;
  std::vector<std::string> bad_files;  // Relative to output_dir.
  uint64_t total_bytes = 0;
};

// INVALID_ARGUMENT for out-of-range options (naming the field); INTERNAL if
// encoding fails or a folder or file cannot be written (with the reason).
absl::Status MakeSyntheticDataset(const MkDatasetOptions& o);
absl::Status MakeSyntheticDataset(const MkDatasetOptions& o,
                                  MkDatasetSummary* summary);

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_MKDATASET_MKDATASET_H_
