// Reading PEM files (certificates, private keys, CA bundles) for TLS.
//
// common/ holds code shared by the daemon (server/) and the C++ client
// (client/cpp); it depends on neither of them.
//
// Thread-safety: a pure function; call it from any thread.
#ifndef NEARPREP_COMMON_PEM_H_
#define NEARPREP_COMMON_PEM_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace nearprep {

// Returns the whole text of the PEM file at `path`. `what` names the option
// the path came from ("tls.cert", "tls_root_ca_file") and starts every error
// message, so the caller can pass the status on unchanged:
//   INVALID_ARGUMENT "<what>: cannot read '<path>'"       (open failed)
//   INVALID_ARGUMENT "<what>: error reading '<path>'"     (read failed)
//   INVALID_ARGUMENT "<what>: '<path>' is not a PEM file (no -----BEGIN)"
// Only the presence of a "-----BEGIN " line is checked here; the TLS library
// parses the contents when the credentials are used.
absl::StatusOr<std::string> ReadPemFile(const std::string& path,
                                        absl::string_view what);

}  // namespace nearprep

#endif  // NEARPREP_COMMON_PEM_H_
