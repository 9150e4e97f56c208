// Host-side decode helpers; see decode_to_rgb.h.
#include "decode_to_rgb.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "dataflow.h"
#include "hls_compat.h"
#include "nearprep_kernel_abi.h"

namespace nearprep_fpga {
namespace {

inline int ReadU16(const uint8_t* p) { return (p[0] << 8) | p[1]; }

// Stands in for ReadControl + BurstRead: one job, the image's bytes.
void FeedImage(const uint8_t* data, uint32_t size, uint64_t max_values,
               hls::stream<ImageJob, kJobDepth>& job_out, hls::stream<uint8_t, kByteDepth>& bytes) {
  ImageJob j = ImageJob();
  j.status = kStatusOk;
  j.jpeg_size = size;
  j.flags = kFlagWholeImage;
  j.max_values = max_values;
  job_out.write(j);
  for (uint32_t i = 0; i < size; ++i) bytes.write(data[i]);
}

struct Collected {
  uint32_t status = kStatusNotRun;
  int height = 0, width = 0;
  std::vector<uint8_t> rgb;
  uint64_t entropy_iterations = 0, idct_iterations = 0;
};

// Stands in for the rest of the network: RGB pixels and the verdicts.
void CollectRgb(hls::stream<ImageJob, kJobDepth>& job_in, hls::stream<Rgb, kPixelDepth>& rgb,
                hls::stream<StageStatus, kStatusDepth>& huffman,
                hls::stream<StageStatus, kStatusDepth>& idct, Collected* out) {
  const ImageJob j = job_in.read();
  out->status = j.status;
  if (j.status != kStatusOk) return;
  out->height = j.height;
  out->width = j.width;
  const size_t n = static_cast<size_t>(j.height) * j.width;
  out->rgb.resize(n * 3);
  for (size_t i = 0; i < n; ++i) {
    const Rgb px = rgb.read();
    for (int c = 0; c < 3; ++c) out->rgb[i * 3 + c] = px.c[c];
  }
  const StageStatus hs = huffman.read();
  const StageStatus is = idct.read();
  out->status = hs.status != kStatusOk ? hs.status : is.status;
  out->entropy_iterations = hs.iterations;
  out->idct_iterations = is.iterations;
}

}  // namespace

uint32_t DecodeJpegToRgb(const uint8_t* data, uint32_t size, uint64_t max_values, int* height,
                         int* width, uint8_t** rgb_owned, DecodeCycles* cycles) {
  *rgb_owned = nullptr;
  Collected got;
  {
    hls::stream<ImageJob, kJobDepth> j_header("j_header"), j_done("j_done");
    hls::stream<uint8_t, kByteDepth> jpeg_bytes("jpeg_bytes");
    hls::stream<Rgb, kPixelDepth> rgb("rgb");
    hls::stream<StageStatus, kStatusDepth> huff_status("huff_status"), idct_status("idct_status");
    NEARPREP_DATAFLOW_BEGIN("decode_to_rgb_host");
    NEARPREP_PROCESS(FeedImage(data, size, max_values, j_header, jpeg_bytes));
    NEARPREP_PROCESS(DecodeToRgb(1, j_header, jpeg_bytes, j_done, rgb, huff_status, idct_status));
    NEARPREP_PROCESS(CollectRgb(j_done, rgb, huff_status, idct_status, &got));
    NEARPREP_DATAFLOW_END();
  }
  if (cycles != nullptr && got.status == kStatusOk) {
    cycles->entropy += got.entropy_iterations;
    cycles->idct += got.idct_iterations;
    cycles->color += static_cast<uint64_t>(got.height) * got.width;
  }
  if (got.status != kStatusOk) return got.status;
  uint8_t* rgb = static_cast<uint8_t*>(std::malloc(got.rgb.size() > 0 ? got.rgb.size() : 1));
  if (rgb == nullptr) return kStatusTooLarge;
  std::memcpy(rgb, got.rgb.data(), got.rgb.size());
  *rgb_owned = rgb;
  *height = got.height;
  *width = got.width;
  return kStatusOk;
}

void FreeRgb(uint8_t* rgb) { std::free(rgb); }

uint32_t PeekJpegSize(const uint8_t* data, uint32_t size, int* height, int* width,
                      int* components) {
  if (size < 4 || data[0] != 0xFF || data[1] != 0xD8) return kStatusCorrupt;
  uint32_t p = 2;
  for (int guard = 0; guard < 100000; ++guard) {
    while (p < size && data[p] != 0xFF) ++p;  // tolerate junk; libjpeg warns
    while (p < size && data[p] == 0xFF) ++p;
    if (p >= size) return kStatusCorrupt;
    const int m = data[p++];
    if (m == 0xD8 || m == 0xD9 || (m >= 0xD0 && m <= 0xD7) || m == 0x01) continue;
    if (size - p < 2) return kStatusCorrupt;
    const int len = ReadU16(data + p);
    if (len < 2 || static_cast<uint32_t>(len) > size - p) return kStatusCorrupt;
    if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
      if (len < 8) return kStatusCorrupt;
      *height = ReadU16(data + p + 3);
      *width = ReadU16(data + p + 5);
      *components = data[p + 7];
      return kStatusOk;
    }
    p += len;
  }
  return kStatusCorrupt;
}

}  // namespace nearprep_fpga
