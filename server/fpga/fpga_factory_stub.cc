// CreateFpgaBackend of a build without the XRT backend (see fpga_factory.h).
#include "server/fpga/fpga_factory.h"

namespace nearprep {

absl::StatusOr<std::shared_ptr<Backend>> CreateFpgaBackend(
    const FpgaOptions& /*options*/, std::string* /*why*/) {
  return absl::FailedPreconditionError(
      "fpga: this build has no XRT support (no FPGA backend)");
}

}  // namespace nearprep
