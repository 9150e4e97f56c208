// Writes tensors as NumPy .npy files (format version 1.0) and parses .npy
// headers back (for tests and for tools that check what they wrote).
//
// Format (numpy/lib/format.py, "NEP 1"): the magic "\x93NUMPY", major 1,
// minor 0, a little-endian uint16 header length, then an ASCII Python dict
// literal {'descr': ..., 'fortran_order': False, 'shape': (...), } padded
// with spaces and a final '\n' so that the data starts at a multiple of 64
// bytes; then the raw C-order elements.
//
// dtype mapping from nearprep tensors:
//   FLOAT32 -> '<f4', FLOAT16 -> '<f2', UINT8 -> '|u1',
//   BFLOAT16 -> '<u2': NumPy has no bfloat16, so the raw 16-bit patterns are
//   stored as uint16; x.astype(np.uint32) << 16 viewed as float32 recovers
//   the values (or view as ml_dtypes.bfloat16 where installed).
//
// Thread-safety: free functions without shared state.
#ifndef NEARPREP_CLIENT_CPP_SRC_NPY_H_
#define NEARPREP_CLIENT_CPP_SRC_NPY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nearprep/v1/nearprep.pb.h"

namespace nearprep {

// The .npy descr string of a dtype ("<f4", ...); INVALID_ARGUMENT if unknown.
absl::StatusOr<std::string> NpyDescr(v1::DType dtype);

// Element size in bytes of a wire dtype; 0 if unknown.
size_t WireDTypeSize(v1::DType dtype);

// The complete preamble (magic .. padded header) for a C-order array.
// INVALID_ARGUMENT if it would not fit a v1.0 header (65535 bytes).
absl::StatusOr<std::string> NpyPreamble(std::string_view descr,
                                        const std::vector<uint64_t>& shape);

// Writes preamble + data. INVALID_ARGUMENT if `size` is not
// product(shape) * element size of descr; INTERNAL on an I/O failure.
absl::Status WriteNpy(const std::string& path, std::string_view descr,
                      const std::vector<uint64_t>& shape, const void* data,
                      size_t size);

// Writes a wire tensor, checking that its byte count matches shape x dtype.
absl::Status WriteTensorNpy(const std::string& path, const v1::Tensor& tensor);

struct NpyHeader {
  int major = 0, minor = 0;
  std::string descr;
  bool fortran_order = false;
  std::vector<uint64_t> shape;
  size_t data_offset = 0;  // Where the elements start.
};

// Parses the preamble of a .npy file (v1.x or v2.x). INVALID_ARGUMENT on any
// malformed input; never reads past `bytes`.
absl::StatusOr<NpyHeader> ParseNpyHeader(std::string_view bytes);

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_SRC_NPY_H_
