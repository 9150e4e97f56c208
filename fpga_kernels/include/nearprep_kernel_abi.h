// nearprep_kernel_abi.h: the contract between the nearprep FPGA kernel and
// its host code. One table, used by three parties:
//  - the kernel top function (fpga_kernels/src/preprocess_kernel.cc),
//  - the XRT backend (server/fpga/), which fills descriptors and reads
//    per-image status records,
//  - the test-xclbin generator (fpga_kernels/xclbin_gen/xclbin_gen.cc), which writes
//    the kernel's argument list into the xclbin's EMBEDDED_METADATA.
// Plain constants and PODs only; no server/ includes.
//
// Thread-safety: constants only.
#ifndef NEARPREP_FPGA_KERNELS_NEARPREP_KERNEL_ABI_H_
#define NEARPREP_FPGA_KERNELS_NEARPREP_KERNEL_ABI_H_

#include <cstdint>

namespace nearprep_fpga {

constexpr const char kKernelName[] = "nearprep_preprocess";

// The version of this contract. The host writes it into cfg word
// kCfgAbiVersion and the kernel serves no image of a run whose version
// differs (UNSUPPORTED): a host and a kernel built from different ABI
// tables cannot silently misread each other's words. Bump it with every
// change to the arguments, the descriptor, cfg or status words.
//   1: seven arguments, the 6th an unused `scratch` pointer; cfg words 13-14
//      its size.
//   2: `scratch` removed (six arguments); cfg word 13 the ABI version.
constexpr uint32_t kAbiVersion = 2;

// Per-image status codes written by the kernel.
enum KernelStatus : uint32_t {
  kStatusOk = 0,
  kStatusUnsupported = 1,  // progressive, arithmetic, CMYK, 12-bit, multi-scan, odd sampling
  kStatusCorrupt = 2,      // anything libjpeg would warn or fail on
  kStatusTooLarge = 3,     // over max_decoded_values, or wider than the kernel decodes
  kStatusNotRun = 0xFFFFFFFFu,  // host pre-fills this; a kernel that ran overwrites it
};

inline const char* KernelStatusName(uint32_t s) {
  switch (s) {
    case kStatusOk: return "OK";
    case kStatusUnsupported: return "UNSUPPORTED";
    case kStatusCorrupt: return "CORRUPT";
    case kStatusTooLarge: return "TOO_LARGE";
    case kStatusNotRun: return "NOT_RUN";
  }
  return "UNKNOWN";
}

// Kernel arguments, in order. `kind` 1 = global memory pointer (m_axi),
// 0 = scalar (s_axilite). `port` is the m_axi bundle. `type` is the C type
// of the kernel's parameter as v++ writes it into the xclbin (jpeg and out
// are WideWord = ap_uint<512> pointers).
struct KernelArg {
  const char* name;
  int kind;
  const char* port;
  const char* type;
  uint32_t size;  // bytes of the scalar / pointer
};
constexpr int kNumArgs = 6;
constexpr KernelArg kKernelArgs[kNumArgs] = {
    {"jpeg", 1, "M_AXI_GMEM0", "ap_uint<512>*", 8},      // JPEG bytes (P2P target), 64-byte words
    {"desc", 1, "M_AXI_GMEM1", "unsigned int*", 8},      // per-image descriptors
    {"cfg", 1, "M_AXI_GMEM1", "unsigned int*", 8},       // job configuration
    {"out", 1, "M_AXI_GMEM2", "ap_uint<512>*", 8},       // finished tensors, 64-byte words
    {"status", 1, "M_AXI_GMEM1", "unsigned int*", 8},    // per-image status records
    {"num_images", 0, "S_AXI_CONTROL", "unsigned int", 4},
};
enum ArgIndex { kArgJpeg = 0, kArgDesc, kArgCfg, kArgOut, kArgStatus, kArgNumImages };

// Descriptor: kDescWords uint32 per image.
constexpr int kDescWords = 16;
enum DescWord {
  kDescJpegOffsetLo = 0, kDescJpegOffsetHi, kDescJpegSize,
  kDescFlags,            // kFlag* bits
  kDescBrightness,       // float bits
  kDescSaturation,       // float bits
  kDescCropY, kDescCropX, kDescCropH, kDescCropW,
  kDescOutOffsetLo, kDescOutOffsetHi,
};
constexpr uint32_t kFlagFlip = 1u << 0;
constexpr uint32_t kFlagWholeImage = 1u << 1;  // crop = decoded size
constexpr uint32_t kFlagSaturation = 1u << 2;

// Configuration: kCfgWords uint32, shared by every image of a run.
constexpr int kCfgWords = 24;
enum CfgWord {
  kCfgOutHeight = 0, kCfgOutWidth,
  kCfgDType,   // 0 f32, 1 f16, 2 bf16, 3 u8 (server/spec/types.h DType)
  kCfgLayout,  // 0 NHWC, 1 NCHW
  kCfgFlags,   // kCfgClip | kCfgNormalize
  kCfgMean0, kCfgMean1, kCfgMean2,  // float bits
  kCfgStd0, kCfgStd1, kCfgStd2,     // float bits
  kCfgMaxValuesLo, kCfgMaxValuesHi,  // decode limit: h*w*3 must be < this
  kCfgAbiVersion,                    // kAbiVersion of the host
  kCfgJpegBytesLo, kCfgJpegBytesHi,  // bytes of the jpeg buffer
  kCfgOutBytesLo, kCfgOutBytesHi,    // bytes of the out buffer
};
// Values of kCfgDType and kCfgLayout: server/spec/types.h's DType and
// Layout numbers (server/fpga/fpga_run.cc static_asserts it; the kernel
// includes nothing from server/).
enum CfgDType { kDTypeF32 = 0, kDTypeF16 = 1, kDTypeBF16 = 2, kDTypeU8 = 3 };
constexpr uint32_t kNumDTypes = 4;
enum CfgLayout { kLayoutNHWC = 0, kLayoutNCHW = 1 };
constexpr uint32_t kNumLayouts = 2;
constexpr uint32_t kCfgClip = 1u << 0;
constexpr uint32_t kCfgNormalize = 1u << 1;

// Status record: kStatusWords uint32 per image.
constexpr int kStatusWords = 8;
enum StatusWord {
  kStCode = 0, kStHeight, kStWidth,
  kStCyclesEntropy,  // modelled cycles per stage (C simulation estimate)
  kStCyclesIdct, kStCyclesColor, kStCyclesResize,
  kStSampling,       // 0 gray, 1 4:4:4, 2 4:2:2, 3 4:2:0
};

}  // namespace nearprep_fpga

#endif  // NEARPREP_FPGA_KERNELS_NEARPREP_KERNEL_ABI_H_
