// Bearer tokens for deployments behind a TLS-terminating proxy: the proxy
// forwards the client's `authorization: Bearer TOKEN` metadata, and the
// daemon knows each token only by its SHA-256, from a file of lines
//
//   # NAME SHA256-HEX
//   ci-runner 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//
// (`printf %s "$TOKEN" | sha256sum`). A token's identity is "token:NAME".
// Neither the token nor its hash is ever logged. The lookup hashes the
// presented token and compares it with every entry in constant time (no
// early exit, on the hash or on the entry that matched), so timing says
// nothing about how close a guess was.
//
// Thread-safety: pure functions.
#ifndef NEARPREP_SERVER_AUTHZ_TOKENS_H_
#define NEARPREP_SERVER_AUTHZ_TOKENS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace nearprep {
namespace authz {

using Sha256Digest = std::array<uint8_t, 32>;

struct TokenEntry {
  std::string name;
  Sha256Digest sha256{};
};

Sha256Digest Sha256(std::string_view data);

// Lower-case hex of a digest.
std::string DigestHex(const Sha256Digest& d);

// Whether a and b are equal, in time independent of where they differ.
bool ConstantTimeEqual(const Sha256Digest& a, const Sha256Digest& b);

// Parses a token file's text. INVALID_ARGUMENT naming `source` and the line
// for a line that is not "NAME HEX64", a name repeated or with characters
// other than [A-Za-z0-9._@-], a hash repeated.
absl::StatusOr<std::vector<TokenEntry>> ParseTokenFile(
    const std::string& text, const std::string& source);

// Reads and parses `path` (INVALID_ARGUMENT naming it when unreadable).
absl::StatusOr<std::vector<TokenEntry>> LoadTokenFile(const std::string& path);

// The name of the entry whose hash is SHA-256(token); nullopt if none. Every
// entry is compared, whatever matched.
std::optional<std::string> FindToken(const std::vector<TokenEntry>& entries,
                                     std::string_view token);

}  // namespace authz
}  // namespace nearprep

#endif  // NEARPREP_SERVER_AUTHZ_TOKENS_H_
