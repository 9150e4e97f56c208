#include "server/service/display_string.h"

#include <cstddef>
#include <cstdint>

namespace nearprep {
namespace {

// Length of the well-formed UTF-8 sequence that starts at s[i], or 0 when
// the bytes there are not one (RFC 3629, table 3-7 of the Unicode standard).
size_t SequenceLength(absl::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t n = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // Allowed range of the second byte.
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;  // Overlong.
    if (b0 == 0xED) hi = 0x9F;  // Surrogates.
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;  // Overlong.
    if (b0 == 0xF4) hi = 0x8F;  // Above U+10FFFF.
  } else {
    return 0;  // 0x80-0xC1 (continuation, overlong lead) or 0xF5-0xFF.
  }
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

}  // namespace

bool IsValidUtf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = SequenceLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string DisplayString(absl::string_view s) {
  if (IsValidUtf8(s)) return std::string(s);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() + 16);
  for (size_t i = 0; i < s.size();) {
    const size_t n = SequenceLength(s, i);
    if (n > 0) {
      out.append(s.data() + i, n);
      i += n;
      continue;
    }
    const uint8_t b = static_cast<uint8_t>(s[i]);
    out += "\\x";
    out += kHex[b >> 4];
    out += kHex[b & 0xF];
    ++i;
  }
  return out;
}

std::string LogSafe(absl::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  const std::string text = DisplayString(s);
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const uint8_t b = static_cast<uint8_t>(ch);
    if (b >= 0x20 && b != 0x7f) {
      out += ch;
    } else if (b == '\n') {
      out += "\\n";
    } else if (b == '\r') {
      out += "\\r";
    } else if (b == '\t') {
      out += "\\t";
    } else {
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 0xF];
    }
  }
  return out;
}

}  // namespace nearprep
