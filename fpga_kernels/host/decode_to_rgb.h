// decode_to_rgb.h: host-side (C simulation) helper around the kernel's L1
// decode functions, for tests, fuzzers and hosts that want the kernel's
// pixels without the whole kernel. Not a kernel source: it allocates with
// malloc, which has no hardware; the kernel sources never include this file.
//
// Thread-safety: reentrant (no shared state).
#ifndef NEARPREP_FPGA_KERNELS_HOST_DECODE_TO_RGB_H_
#define NEARPREP_FPGA_KERNELS_HOST_DECODE_TO_RGB_H_

#include <cstdint>

#include "jpeg_l1.h"

namespace nearprep_fpga {

// Full decode to RGB: ParseJpegHeaders + DecodeScan + PlanesToRgb with an
// internally sized scratch buffer. On kStatusOk, *rgb_owned holds
// height*width*3 bytes; release it with FreeRgb. On any other status
// *rgb_owned is null.
uint32_t DecodeJpegToRgb(const uint8_t* data, uint32_t size, uint64_t max_values,
                         int* height, int* width, uint8_t** rgb_owned,
                         DecodeCycles* cycles);
void FreeRgb(uint8_t* rgb);

}  // namespace nearprep_fpga

#endif  // NEARPREP_FPGA_KERNELS_HOST_DECODE_TO_RGB_H_
