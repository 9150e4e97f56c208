// Development hooks for FpgaBackend: the C-simulation kernel run on the
// host after each device run (for XRT's noop shim, which completes runs
// without executing kernels), and device-error fault injection.
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "hls_sim.h"
#include "nearprep_kernel.h"
#include "server/fpga/fpga_backend.h"

namespace nearprep {

FpgaRunHook MakeDevelopmentHook(bool simulate_kernel,
                                int64_t inject_error_run) {
  if (!simulate_kernel && inject_error_run < 0) return nullptr;
  return [simulate_kernel, inject_error_run](const FpgaRunView& v) -> absl::Status {
    if (inject_error_run >= 0 &&
        v.run_index == static_cast<uint64_t>(inject_error_run)) {
      return absl::UnavailableError(
          absl::StrCat("injected device error on run ", v.run_index,
                       " (--fpga-inject-error-run)"));
    }
    if (!simulate_kernel) return absl::OkStatus();
    if (v.jpeg == nullptr || v.desc == nullptr || v.cfg == nullptr ||
        v.out == nullptr || v.status == nullptr) {
      return absl::InternalError(
          "kernel simulation: a buffer of the run is not mapped");
    }
    try {
      nearprep_preprocess(reinterpret_cast<const WideWord*>(v.jpeg), v.desc, v.cfg,
                          reinterpret_cast<WideWord*>(v.out), v.status, v.num_images);
    } catch (const hls_sim::Deadlock& d) {
      // A kernel that would hang in hardware: the run failed (its images go
      // to the CPU path), the daemon goes on.
      return absl::InternalError(
          absl::StrCat("kernel simulation of run ", v.run_index, ": ", d.report));
    }
    return absl::OkStatus();
  };
}

}  // namespace nearprep
