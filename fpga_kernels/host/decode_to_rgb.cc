// Host-side decode helper; see decode_to_rgb.h.
#include "decode_to_rgb.h"

#include <cstdlib>
#include <cstring>

#include "nearprep_kernel_abi.h"

namespace nearprep_fpga {

uint32_t DecodeJpegToRgb(const uint8_t* data, uint32_t size, uint64_t max_values,
                         int* height, int* width, uint8_t** rgb_owned,
                         DecodeCycles* cycles) {
  *rgb_owned = nullptr;
  JpegInfo info;
  uint32_t st = ParseJpegHeaders(data, size, &info);
  if (st != kStatusOk) return st;
  if (static_cast<uint64_t>(info.width) * info.height * 3 >= max_values ||
      info.width > kMaxWidth) {
    return kStatusTooLarge;
  }
  const uint64_t rgb_off = AssignPlanes(&info);
  const uint64_t need = ScratchBytesNeeded(info);
  uint8_t* scratch = static_cast<uint8_t*>(std::malloc(need));
  if (!scratch) return kStatusTooLarge;
  st = DecodeScan(data, size, info, scratch, cycles);
  if (st != kStatusOk) {
    std::free(scratch);
    return st;
  }
  PlanesToRgb(info, scratch, rgb_off, cycles);
  const uint64_t n = static_cast<uint64_t>(info.width) * info.height * 3;
  std::memmove(scratch, scratch + rgb_off, n);
  *rgb_owned = scratch;
  *height = info.height;
  *width = info.width;
  return kStatusOk;
}

void FreeRgb(uint8_t* rgb) { std::free(rgb); }

}  // namespace nearprep_fpga
