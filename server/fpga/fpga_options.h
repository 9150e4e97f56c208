// FpgaOptions: what the daemon's configuration says about the FPGA backend
// (config keys backend.xclbin, backend.device_index,
// backend.fpga_simulate_kernel, backend.fpga_inject_error_run; the matching
// nearprepd flags). Plain data; FpgaBackendConfig (fpga_backend.h) holds the
// backend's full configuration, derived from these by CreateFpgaBackend.
#ifndef NEARPREP_SERVER_FPGA_FPGA_OPTIONS_H_
#define NEARPREP_SERVER_FPGA_FPGA_OPTIONS_H_

#include <cstdint>
#include <string>

namespace nearprep {

struct FpgaOptions {
  std::string xclbin;  // path to the xclbin
  int device_index = 0;
  // Development / testing only.
  // simulate_kernel: after each device run, execute the C-simulation kernel
  // (fpga_kernels/) on the run's mapped buffers on the host. Makes XRT's
  // noop shim (XCL_EMULATION_MODE=noop) behave like a device, so the whole
  // host path can be exercised without hardware. Logged as a warning and
  // named in ServerInfo.backend_detail; never use it on real hardware (it
  // would overwrite the device's results with the host's).
  bool simulate_kernel = false;
  // Fault injection: run number N (0-based over the backend's lifetime)
  // reports a device error, so its images take the CPU fallback. -1: off.
  int64_t inject_error_run = -1;
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_FPGA_FPGA_OPTIONS_H_
