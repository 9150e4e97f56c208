// jpeg_l1.h: L1 building blocks of the nearprep JPEG decode kernel.
//
// Reproduces libjpeg-turbo's TF_COMPAT decode (JDCT_IFAST, fancy upsampling,
// RGB output) in integer arithmetic written for Vitis HLS: marker parsing,
// Huffman decoding (baseline/extended sequential, 8-bit, restart markers),
// dequantisation + IFAST IDCT, h2v1/h2v2 fancy upsampling and the table-based
// YCbCr->RGB conversion. Every access to the input is bounds-checked: a
// corrupt stream ends in kStatusCorrupt, never an out-of-bounds read/write.
//
// Thread-safety: pure functions on caller-owned memory.
#ifndef NEARPREP_FPGA_KERNELS_JPEG_L1_H_
#define NEARPREP_FPGA_KERNELS_JPEG_L1_H_

#include <cstddef>
#include <cstdint>

#include "hls_compat.h"

namespace nearprep_fpga {

// Widest image the kernel's line buffers hold (wider: kStatusTooLarge).
constexpr int kMaxWidth = 16384;

struct HuffTable {
  bool present = false;
  uint8_t bits[17] = {};   // bits[l]: number of codes of length l
  uint8_t vals[256] = {};
  int32_t maxcode[18] = {};    // largest code of length l, -1 if none
  int32_t valoffset[18] = {};  // vals index = code + valoffset[l]
  uint16_t look[512] = {};     // 9-bit lookahead: (length << 8) | symbol, 0 = slow path
};

struct JpegComponent {
  uint8_t id = 0, h = 1, v = 1, tq = 0, td = 0, ta = 0;
  int ds_w = 0, ds_h = 0;      // libjpeg's downsampled_width / height
  int wblocks = 0, hblocks = 0;  // blocks stored in this component's plane
  uint64_t plane_offset = 0;   // byte offset of the plane in scratch
  int stride = 0;              // wblocks * 8
};

enum Sampling { kSamplingGray = 0, kSampling444 = 1, kSampling422 = 2, kSampling420 = 3 };

struct JpegInfo {
  int width = 0, height = 0, ncomp = 0;
  JpegComponent comp[3];
  int hmax = 1, vmax = 1;
  uint16_t qt[4][64] = {};  // natural order
  bool qt_present[4] = {};
  HuffTable dc[4], ac[4];
  int restart_interval = 0;
  uint32_t scan_begin = 0;  // first byte of entropy-coded data
  bool saw_adobe = false;
  int adobe_transform = -1;
  int sampling = kSamplingGray;
  int mcus_x = 0, mcus_y = 0;  // MCUs of the (only) scan
  bool interleaved = false;
};

// Parses markers from SOI up to and including the SOS of the first scan.
// Returns kStatusOk, kStatusUnsupported or kStatusCorrupt.
uint32_t ParseJpegHeaders(const uint8_t* data, uint32_t size, JpegInfo* info);

// Header-only helper for hosts: width/height/components of the frame, or a
// non-OK status. Works on any SOFn (also progressive).
uint32_t PeekJpegSize(const uint8_t* data, uint32_t size, int* height,
                      int* width, int* components);

// Bytes of scratch the decode of `info` needs (component planes + RGB).
uint64_t ScratchBytesNeeded(const JpegInfo& info);

// Lays out planes from scratch offset 0; returns the RGB image offset.
uint64_t AssignPlanes(JpegInfo* info);

// Cycle estimates of one decode (see docs/fpga.md for the model).
struct DecodeCycles {
  uint64_t entropy = 0;  // 1 per Huffman symbol + 1 per MCU/restart
  uint64_t idct = 0;     // 8 per block (one 8-sample row per cycle)
  uint64_t color = 0;    // 1 per output pixel
};

// Entropy decode + dequantise + IFAST IDCT of the whole scan into the
// component planes in `scratch`, then checks the stream ends with EOI.
// scratch must hold ScratchBytesNeeded(info) bytes.
uint32_t DecodeScan(const uint8_t* data, uint32_t size, const JpegInfo& info,
                    uint8_t* scratch, DecodeCycles* cycles);

// Fancy upsampling + colour conversion of the planes into interleaved RGB
// (height x width x 3) at scratch + rgb_offset.
void PlanesToRgb(const JpegInfo& info, uint8_t* scratch, uint64_t rgb_offset,
                 DecodeCycles* cycles);

// The 8x8 IFAST IDCT of one block (natural order coefficients, IFAST
// multiplier table), writing 8 rows of 8 samples at out + r * stride.
// Returns false when an intermediate leaves the range in which libjpeg-turbo's
// 16-bit SIMD IDCT and its C IDCT agree (the caller then defers to the CPU);
// the range is checked before each pass, so no input overflows int, and on
// false `out` may be left partly or wholly unwritten.
bool IdctIfast(const int16_t coef[64], const int16_t qmul[64], uint8_t* out,
               int stride);

// libjpeg's IFAST multiplier table for a quantisation table.
void IfastMultipliers(const uint16_t qt[64], int16_t qmul[64]);

}  // namespace nearprep_fpga

#endif  // NEARPREP_FPGA_KERNELS_JPEG_L1_H_
