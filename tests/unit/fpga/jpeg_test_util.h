// Test helpers for the FPGA kernel tests: JPEG encoding with libjpeg (all the
// variants the kernel must handle or refuse), the libjpeg TF_COMPAT
// reference decode, and the real-image list.
//
// Thread-safety: functions are reentrant.
#ifndef NEARPREP_TESTS_UNIT_FPGA_JPEG_TEST_UTIL_H_
#define NEARPREP_TESTS_UNIT_FPGA_JPEG_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

namespace nearprep {
namespace fpga_test {

struct EncodeOptions {
  int width = 64, height = 48;
  int components = 3;          // 1 or 3
  int h_samp = 2, v_samp = 2;  // luma sampling factors (chroma 1x1)
  int quality = 90;
  int restart_interval = 0;    // MCUs
  bool progressive = false;
  bool arithmetic = false;
  uint32_t seed = 1;
};

// Procedural picture (gradients + noise + edges) encoded as JPEG.
std::vector<uint8_t> EncodeTestJpeg(const EncodeOptions& o);

struct RefImage {
  bool ok = false;       // decoded with no error
  int warnings = 0;      // libjpeg warnings (TF_COMPAT treats them as errors)
  int first_warning = -1;  // libjpeg msg_code of the first warning
  bool progressive = false, arithmetic = false;
  int height = 0, width = 0;
  std::vector<uint8_t> rgb;
};
// libjpeg: JDCT_IFAST, fancy upsampling, JCS_RGB output.
RefImage ReferenceDecode(const std::vector<uint8_t>& jpeg);

std::vector<uint8_t> ReadFile(const std::string& path);
// The real sample images: $NEARPREP_SAMPLE_IMAGES_DIR when set (a worktree
// not beside shared/), else ../shared/datasets/imagenet-sample-200.
std::string SampleImagesDir();
// Sorted JPEG paths under the real dataset; empty when absent.
std::vector<std::string> RealImages();

}  // namespace fpga_test
}  // namespace nearprep

#endif  // NEARPREP_TESTS_UNIT_FPGA_JPEG_TEST_UTIL_H_
