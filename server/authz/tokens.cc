#include "server/authz/tokens.h"

#include <openssl/sha.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace nearprep {
namespace authz {

Sha256Digest Sha256(std::string_view data) {
  Sha256Digest d{};
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(),
         d.data());
  return d;
}

std::string DigestHex(const Sha256Digest& d) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (uint8_t b : d) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

bool ConstantTimeEqual(const Sha256Digest& a, const Sha256Digest& b) {
  // volatile: the compiler may not turn the loop into an early-exit memcmp.
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = diff | (a[i] ^ b[i]);
  return diff == 0;
}

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool ValidName(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' &&
        c != '@' && c != '-') {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<TokenEntry>> ParseTokenFile(
    const std::string& text, const std::string& source) {
  std::vector<TokenEntry> out;
  std::set<std::string> names;
  std::set<std::string> hashes;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", line_no, ": ", why));
    };
    std::istringstream fields(line);
    std::string name, hex, extra;
    fields >> name;
    if (name.empty() || name[0] == '#') continue;
    fields >> hex >> extra;
    if (hex.empty() || !extra.empty()) {
      return bad(
          "expected 'NAME SHA256-HEX' (64 hex digits of the token's "
          "SHA-256, never the token itself)");
    }
    if (!ValidName(name)) {
      return bad("token name '" + name +
                 "': only letters, digits and . _ @ - allowed");
    }
    if (hex.size() != 64) {
      return bad("token '" + name +
                 "': the hash must be 64 hex digits "
                 "(SHA-256), got " +
                 std::to_string(hex.size()) + " characters");
    }
    TokenEntry e;
    e.name = name;
    for (size_t i = 0; i < 32; ++i) {
      const int hi = HexValue(hex[2 * i]);
      const int lo = HexValue(hex[2 * i + 1]);
      if (hi < 0 || lo < 0) {
        return bad("token '" + name +
                   "': the hash has a character that is "
                   "not a hex digit");
      }
      e.sha256[i] = static_cast<uint8_t>(hi * 16 + lo);
    }
    if (!names.insert(name).second) {
      return bad("token name '" + name + "' appears twice");
    }
    if (!hashes.insert(DigestHex(e.sha256)).second) {
      return bad("token '" + name + "' has the same hash as an earlier one");
    }
    out.push_back(std::move(e));
  }
  return out;
}

absl::StatusOr<std::vector<TokenEntry>> LoadTokenFile(const std::string& path) {
  // A directory opens as a stream that reads nothing: it must not load as
  // an empty token file ("no tokens") on a reload.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::InvalidArgumentError("authorization.token_file: '" + path +
                                      "' is not a regular file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        "authorization.token_file: cannot read '" + path + "'");
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(
        "authorization.token_file: cannot read '" + path + "'");
  }
  return ParseTokenFile(text.str(), path);
}

std::optional<std::string> FindToken(const std::vector<TokenEntry>& entries,
                                     std::string_view token) {
  const Sha256Digest presented = Sha256(token);
  const TokenEntry* found = nullptr;
  for (const TokenEntry& e : entries) {
    // Every entry is compared; the branch only records which one matched
    // (hashes are unique, so at most one does).
    const bool equal = ConstantTimeEqual(e.sha256, presented);
    if (equal) found = &e;
  }
  if (found == nullptr) return std::nullopt;
  return found->name;
}

}  // namespace authz
}  // namespace nearprep
