// nearprep_kernel.h: the FPGA kernel's top function (one xclbin kernel,
// "nearprep_preprocess"), callable from C simulation. The argument list is
// kKernelArgs in nearprep_kernel_abi.h.
//
// Thread-safety: reentrant on disjoint buffers. In C simulation each call
// runs its dataflow processes on threads of its own (hls_sim.h).
#ifndef NEARPREP_FPGA_KERNELS_NEARPREP_KERNEL_H_
#define NEARPREP_FPGA_KERNELS_NEARPREP_KERNEL_H_

#include <cstdint>

#include "hls_compat.h"

extern "C" {
// For each image i < num_images: decode the JPEG described by desc[i] from
// `jpeg`, crop/resize/augment/clip/normalise/pack it into `out`, and write
// its status record. `jpeg` and `out` are read and written in whole 64-byte
// words: both buffers must be allocated in whole words (cfg gives their
// sizes; the kernel never touches a word past RoundUp64(size)). Output slots
// must be in increasing order and not overlap. A bad descriptor or stream
// yields a non-OK status for that image only; a cfg whose kCfgAbiVersion is
// not kAbiVersion makes every image UNSUPPORTED.
void nearprep_preprocess(const WideWord* jpeg, const uint32_t* desc, const uint32_t* cfg,
                         WideWord* out, uint32_t* status, uint32_t num_images);
}

#endif  // NEARPREP_FPGA_KERNELS_NEARPREP_KERNEL_H_
