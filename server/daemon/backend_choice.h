// Chooses and builds the daemon's backend: "cpu", "fpga" or "auto". Choosing
// a backend is wiring, so it happens here, where nearprepd puts its parts
// together, and the result is handed to NearprepServer::Create.
//
// auto picks fpga when the FPGA backend is built in, a device opens and the
// xclbin loads; otherwise it falls back to cpu and `*why` says why (logged
// and shown in ServerInfo.backend_detail). An explicit "fpga" that cannot
// start is an error; the daemon then refuses to start.
#ifndef NEARPREP_SERVER_DAEMON_BACKEND_CHOICE_H_
#define NEARPREP_SERVER_DAEMON_BACKEND_CHOICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/backend/backend.h"
#include "server/fpga/fpga_options.h"

namespace nearprep {

struct BackendOptions {
  std::string kind = "cpu";  // cpu | fpga | auto
  FpgaOptions fpga;          // fpga and auto; the cpu backend ignores them
  // The CPU backend's decoded-image cache (server/data/decoded_cache.h):
  // bytes of decoded pixels in all (0: off; YAML decoded_cache.bytes, flag
  // --decoded-cache-bytes) and per dataset (0: bytes / the number of
  // datasets; decoded_cache.dataset_bytes, --decoded-cache-dataset-bytes).
  // The FPGA backend decodes on the device and has no cache (its CPU
  // fallback neither).
  uint64_t decoded_cache_bytes = 0;
  uint64_t decoded_cache_dataset_bytes = 0;
  // For the per-dataset default (set by the daemon from its datasets).
  uint64_t dataset_count = 1;
};

// On success `*why` (may be null) describes the choice.
absl::StatusOr<std::shared_ptr<Backend>> CreateBackend(
    const BackendOptions& options, std::string* why);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_DAEMON_BACKEND_CHOICE_H_
