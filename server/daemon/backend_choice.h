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
};

// On success `*why` (may be null) describes the choice.
absl::StatusOr<std::shared_ptr<Backend>> CreateBackend(
    const BackendOptions& options, std::string* why);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_DAEMON_BACKEND_CHOICE_H_
