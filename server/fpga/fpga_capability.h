// What the FPGA device path computes of a stream's request, field by field.
// kFpgaSpecFields has one row per field of TransformSpec, OutputSpec and
// DecodeLimits (server/spec/types.h): where the device path handles it -
// the kernel computes it from its configuration or descriptor words, or the
// host resolves it into the descriptor (random draws, crop box) - and which
// of its values the device path cannot compute. FpgaSupports() derives its
// answer from these rows alone.
//
// Completeness by construction: fpga_capability.cc static_asserts, for each
// of the three structs, that its rows account for every member (arrays by
// element), counted from the struct itself. A field added to a spec without
// a row here does not compile; the row it needs says what the kernel does
// with it, or refuses every value but the default ("the kernel does not
// compute this") until it does.
//
// No XRT here: the table is plain data, testable without a device.
// Thread-safety: constants and pure functions.
#ifndef NEARPREP_SERVER_FPGA_FPGA_CAPABILITY_H_
#define NEARPREP_SERVER_FPGA_FPGA_CAPABILITY_H_

#include <cstddef>
#include <string>

#include "server/backend/backend.h"

namespace nearprep {

enum class FpgaSpecPart { kTransform, kOutput, kLimits };

// Where the device path handles a field.
enum class FpgaFieldPath {
  kKernel,  // the kernel computes it (configuration or descriptor words)
  kHost,    // the host resolves it into the descriptor (draws, crop box)
};

struct FpgaSpecField {
  const char* name;  // the request's field, e.g. "transform.height"
  FpgaSpecPart part;
  FpgaFieldPath path;
  int members;  // members of the struct it accounts for (an array: its elements)
  // Null when the device path computes every value; else "" when it computes
  // ctx's value and why not otherwise.
  std::string (*refuses)(const WorkContext& ctx);
  // The field in ctx (tests check that the rows cover every field).
  const void* (*where)(const WorkContext& ctx);
};

// The rows (NumFpgaSpecFields() of them), in the structs' declaration order.
const FpgaSpecField* FpgaSpecFields();
size_t NumFpgaSpecFields();

// Supported when every row accepts ctx's value; otherwise the first refusal,
// "<field>: <why>".
Capability FpgaSupports(const WorkContext& ctx);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_FPGA_FPGA_CAPABILITY_H_
