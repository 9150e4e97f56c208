// CreateFpgaBackend: the FPGA backend as the daemon asks for it. The build
// picks the definition: fpga_factory_xrt.cc when the XRT backend is built
// (NEARPREP_WITH_XRT and XRT found), fpga_factory_stub.cc otherwise, which
// always answers FAILED_PRECONDITION. Callers need no #ifdef.
#ifndef NEARPREP_SERVER_FPGA_FPGA_FACTORY_H_
#define NEARPREP_SERVER_FPGA_FPGA_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/backend/backend.h"
#include "server/fpga/fpga_options.h"

namespace nearprep {

// Opens the device and loads the xclbin (with the development hooks the
// options ask for). On success `*why` (may be null) says which device and
// xclbin are used; on failure the status says why not.
absl::StatusOr<std::shared_ptr<Backend>> CreateFpgaBackend(
    const FpgaOptions& options, std::string* why);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_FPGA_FPGA_FACTORY_H_
