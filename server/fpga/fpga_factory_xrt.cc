// CreateFpgaBackend of a build with the XRT backend (see fpga_factory.h):
// FpgaOptions -> FpgaBackendConfig, with the development hooks.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/fpga/fpga_backend.h"
#include "server/fpga/fpga_factory.h"
#include "spdlog/spdlog.h"

namespace nearprep {

absl::StatusOr<std::shared_ptr<Backend>> CreateFpgaBackend(
    const FpgaOptions& options, std::string* why) {
  FpgaBackendConfig config;
  config.xclbin = options.xclbin;
  config.device_index = options.device_index;
  std::string dev;
  if (options.simulate_kernel) {
    dev = "SIMULATED KERNEL: the C-simulation kernel runs on the host after "
          "each device run (development/testing, not hardware acceleration)";
  }
  if (options.inject_error_run >= 0) {
    absl::StrAppend(&dev, dev.empty() ? "" : "; ",
                    "FAULT INJECTION: run ", options.inject_error_run,
                    " reports a device error");
  }
  config.hook = MakeDevelopmentHook(options.simulate_kernel,
                                    options.inject_error_run);
  config.detail_note = dev;
  auto b = FpgaBackend::Create(config);
  if (!b.ok()) return b.status();
  if (!dev.empty()) {
    spdlog::warn("fpga backend: {}", dev);
  }
  if (why != nullptr) {
    *why = absl::StrCat("using fpga, device ",
                        options.device_index, ", xclbin ", options.xclbin,
                        (*b)->p2p_buffers() ? ", p2p input buffers"
                                            : ", host-synced input buffers");
  }
  return std::shared_ptr<Backend>(std::move(b).value());
}

}  // namespace nearprep
