#include "tests/unit/fpga/jpeg_test_util.h"

#include <algorithm>
#include <cstdlib>
#include <cctype>
#include <csetjmp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include <jpeglib.h>

namespace nearprep {
namespace fpga_test {
namespace {

struct ErrMgr {
  jpeg_error_mgr pub;
  jmp_buf jb;
  int warnings = 0;
  int first_warning = -1;
};
void ErrorExit(j_common_ptr cinfo) {
  ErrMgr* e = reinterpret_cast<ErrMgr*>(cinfo->err);
  longjmp(e->jb, 1);
}
void EmitMessage(j_common_ptr cinfo, int level) {
  ErrMgr* e = reinterpret_cast<ErrMgr*>(cinfo->err);
  if (level < 0) {
    if (e->warnings++ == 0) e->first_warning = e->pub.msg_code;
  }
}
void OutputMessage(j_common_ptr) {}

}  // namespace

std::vector<uint8_t> EncodeTestJpeg(const EncodeOptions& o) {
  std::mt19937 rng(o.seed);
  const int nc = o.components;
  std::vector<uint8_t> px(static_cast<size_t>(o.width) * o.height * nc);
  for (int y = 0; y < o.height; ++y) {
    for (int x = 0; x < o.width; ++x) {
      for (int c = 0; c < nc; ++c) {
        int v = (x * (3 + c) * 255) / (o.width + 1) + (y * (5 - c) * 255) / (o.height + 1);
        if (((x / 7) + (y / 5)) % 3 == c) v += 90;
        v += static_cast<int>(rng() % 40) - 20;
        px[(static_cast<size_t>(y) * o.width + x) * nc + c] =
            static_cast<uint8_t>(v & 255);
      }
    }
  }
  jpeg_compress_struct cinfo;
  ErrMgr err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = ErrorExit;
  err.pub.output_message = OutputMessage;
  unsigned char* buf = nullptr;
  unsigned long size = 0;  // NOLINT: libjpeg's type
  if (setjmp(err.jb)) {
    jpeg_destroy_compress(&cinfo);
    free(buf);
    return {};
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = o.width;
  cinfo.image_height = o.height;
  cinfo.input_components = nc;
  cinfo.in_color_space = nc == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, o.quality, TRUE);
  if (nc == 3) {
    cinfo.comp_info[0].h_samp_factor = o.h_samp;
    cinfo.comp_info[0].v_samp_factor = o.v_samp;
    for (int c = 1; c < 3; ++c) {
      cinfo.comp_info[c].h_samp_factor = 1;
      cinfo.comp_info[c].v_samp_factor = 1;
    }
  }
  cinfo.restart_interval = o.restart_interval;
  cinfo.arith_code = o.arithmetic ? TRUE : FALSE;
  if (o.progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = &px[static_cast<size_t>(cinfo.next_scanline) * o.width * nc];
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::vector<uint8_t> out(buf, buf + size);
  free(buf);
  return out;
}

RefImage ReferenceDecode(const std::vector<uint8_t>& jpeg) {
  RefImage r;
  jpeg_decompress_struct cinfo;
  ErrMgr err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = ErrorExit;
  err.pub.emit_message = EmitMessage;
  err.pub.output_message = OutputMessage;
  if (setjmp(err.jb)) {
    jpeg_destroy_decompress(&cinfo);
    r.ok = false;
    r.warnings = err.warnings;
    r.first_warning = err.first_warning;
    return r;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
  jpeg_read_header(&cinfo, TRUE);
  r.progressive = cinfo.progressive_mode;
  r.arithmetic = cinfo.arith_code;
  cinfo.dct_method = JDCT_IFAST;
  cinfo.do_fancy_upsampling = TRUE;
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  r.height = static_cast<int>(cinfo.output_height);
  r.width = static_cast<int>(cinfo.output_width);
  r.rgb.resize(static_cast<size_t>(r.height) * r.width * 3);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = &r.rgb[static_cast<size_t>(cinfo.output_scanline) * r.width * 3];
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  r.ok = true;
  r.warnings = err.warnings;
  r.first_warning = err.first_warning;
  return r;
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)),
                              std::istreambuf_iterator<char>());
}

std::string SampleImagesDir() {
  const char* env = std::getenv("NEARPREP_SAMPLE_IMAGES_DIR");
  if (env != nullptr && *env != '\0') return env;
  return std::string(NEARPREP_SOURCE_DIR) + "/../shared/datasets/imagenet-sample-200";
}

std::vector<std::string> RealImages() {
  std::vector<std::string> out;
  const std::filesystem::path root = SampleImagesDir();
  std::error_code ec;
  if (!std::filesystem::is_directory(root, ec)) return out;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (!it->is_regular_file()) continue;
    std::string ext = it->path().extension().string();
    for (auto& ch : ext) ch = static_cast<char>(std::tolower(ch));
    if (ext == ".jpeg" || ext == ".jpg") out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace fpga_test
}  // namespace nearprep
