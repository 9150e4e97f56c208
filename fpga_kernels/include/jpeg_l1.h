// jpeg_l1.h: L1 building blocks of the nearprep JPEG decode kernel.
//
// Reproduces libjpeg-turbo's TF_COMPAT decode (JDCT_IFAST, fancy upsampling,
// RGB output) in integer arithmetic written for Vitis HLS: marker segment
// parsing (baseline/extended sequential, 8-bit, restart intervals), Huffman
// table validation, dequantisation + IFAST IDCT with libjpeg-turbo's SIMD
// range guard, and the YCbCr->RGB arithmetic. The dataflow stages
// (dataflow.h) are built from these.
//
// Thread-safety: pure functions on caller-owned memory.
#ifndef NEARPREP_FPGA_KERNELS_JPEG_L1_H_
#define NEARPREP_FPGA_KERNELS_JPEG_L1_H_

#include <cstdint>

namespace nearprep_fpga {

// Widest image the kernel's line buffers hold (wider: kStatusTooLarge).
constexpr int kMaxWidth = 16384;

// Zig-zag index -> natural index, with libjpeg's 16 extra entries so that a
// corrupt run past 63 lands on coefficient 63 (as jpeg_natural_order does).
constexpr uint8_t kNatural[64 + 16] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,
    12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28,
    35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
    58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
    63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63};

// A Huffman table as the DHT segment gives it.
struct HuffSpec {
  bool present;
  uint8_t bits[17];  // bits[l]: number of codes of length l (bits[0] unused)
  uint8_t vals[256];
};

struct JpegComponent {
  uint8_t id, h, v, tq, td, ta;
  int ds_w, ds_h;  // libjpeg's downsampled_width / height
};

enum Sampling { kSamplingGray = 0, kSampling444 = 1, kSampling422 = 2, kSampling420 = 3 };

// What the marker segments up to the first SOS say. Value-initialise
// (JpegHeader h = JpegHeader();) before the first ParseSegment.
struct JpegHeader {
  bool have_sof, done;  // done: the SOS of the (only) scan was parsed
  int width, height, ncomp;
  JpegComponent comp[3];
  int hmax, vmax;
  uint16_t qt[4][64];  // natural order
  bool qt_present[4];
  HuffSpec dc[4], ac[4];
  int restart_interval;
  bool saw_adobe;
  int adobe_transform;
  int sampling;
  int mcus_x, mcus_y;  // MCUs of the scan
  bool interleaved;
};

// Applies one marker segment (marker code `m`, its `n` bytes after the length
// field) to *hdr, with libjpeg's acceptance rules. Returns kStatusOk,
// kStatusUnsupported or kStatusCorrupt; sets hdr->done at the SOS.
uint32_t ParseSegment(int m, const uint8_t* seg, uint32_t n, JpegHeader* hdr);

// Whether the header stage keeps segment `m`'s bytes (tables, frame, scan);
// every other segment is skipped.
bool SegmentIsParsed(int m);

// jdhuff.c's table checks (JERR_BAD_HUFF_TABLE); marks the table present.
bool ValidateHuffSpec(HuffSpec* t, bool is_dc);

// libjpeg's IFAST multiplier table for a quantisation table.
void IfastMultipliers(const uint16_t qt[64], int16_t qmul[64]);

// The 8x8 IFAST IDCT in its two passes: IdctColumn dequantises column c of a
// block (natural-order coefficients, IFAST multipliers) and runs the 1-D
// transform into the workspace; IdctRow turns workspace row r into 8
// samples. *out_of_range is ORed with one flag per intermediate value: set
// when a value leaves the range in which libjpeg-turbo's 16-bit SIMD IDCT and
// its C IDCT agree (the image then goes to the CPU; the samples are then
// meaningless but always written).
void IdctColumn(const int16_t coef[64], const int16_t qmul[64], int c, int ws[64],
                bool* out_of_range);
void IdctRow(const int ws[64], int r, uint8_t out[8], bool* out_of_range);

// jdcolor.c's YCbCr->RGB, one pixel.
void YccToRgb(int y, int cb, int cr, uint8_t rgb[3]);

}  // namespace nearprep_fpga

#endif  // NEARPREP_FPGA_KERNELS_JPEG_L1_H_
