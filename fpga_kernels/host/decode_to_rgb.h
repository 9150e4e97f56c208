// decode_to_rgb.h: host-side (C simulation) helpers around the kernel's
// decode processes, for tests, fuzzers and hosts that want the kernel's
// pixels without the whole kernel. Not kernel sources: they allocate, which
// has no hardware; the kernel sources never include this file.
//
// Thread-safety: reentrant (no shared state).
#ifndef NEARPREP_FPGA_KERNELS_HOST_DECODE_TO_RGB_H_
#define NEARPREP_FPGA_KERNELS_HOST_DECODE_TO_RGB_H_

#include <cstdint>

#include "jpeg_l1.h"

namespace nearprep_fpga {

// Loop iterations of the decode stages for one image (measured in C
// simulation; see docs/fpga.md for the cycle model built on them).
struct DecodeCycles {
  uint64_t entropy = 0;  // HuffmanDecode: one symbol (or one refill) per iteration
  uint64_t idct = 0;     // Idct: 16 per block (two 8-step passes)
  uint64_t color = 0;    // UpsampleColor: one per pixel
};

// Full decode to RGB through the kernel's own decode network (DecodeToRgb in
// dataflow.h: ParseHeader ... UpsampleColor, the region the kernel's top
// calls), fed from memory.
// On kStatusOk, *rgb_owned holds height*width*3 bytes; release it with
// FreeRgb. On any other status *rgb_owned is null.
uint32_t DecodeJpegToRgb(const uint8_t* data, uint32_t size, uint64_t max_values,
                         int* height, int* width, uint8_t** rgb_owned,
                         DecodeCycles* cycles);
void FreeRgb(uint8_t* rgb);

// Header-only helper for hosts: width/height/components of the frame, or a
// non-OK status. Works on any SOFn (also progressive).
uint32_t PeekJpegSize(const uint8_t* data, uint32_t size, int* height, int* width,
                      int* components);

}  // namespace nearprep_fpga

#endif  // NEARPREP_FPGA_KERNELS_HOST_DECODE_TO_RGB_H_
