// Percent escaping of a string into one whitespace-free token: the one
// escaper behind the daemon's resume tokens (server/pipeline/resume_token.cc:
// the dataset name in "dataset=NAME;...") and the shard index files
// (server/records/shard_index.cc: keys, errors, option values in a
// space-separated line).
//
// The two formats differ only in which printable bytes they escape beyond
// the common set, so that difference is a parameter (`also`): resume tokens
// escape ';' and '=' (their separators), shard index lines do not. Both
// write what they always wrote, byte for byte: tokens already handed out and
// .nearprep-index files already on disk parse as before. (The shard index's
// "-" for an empty field is its own convention and stays in
// shard_index.cc.)
//
// Escaped: every byte <= 0x20 (controls and space), every byte >= 0x7f
// (DEL and all non-ASCII bytes, so UTF-8 is escaped byte by byte), '%', and
// each byte of `also`; each as '%' and two UPPERCASE hex digits ("%2F").
// Every other byte is copied.
//
// common/ holds code shared by the daemon (server/) and the C++ client
// (client/cpp); it depends on neither of them. This file needs Abseil's
// string_view only (target nearprep_percent_escape).
//
// Thread-safety: pure functions; call them from any thread.
#ifndef NEARPREP_COMMON_PERCENT_ESCAPE_H_
#define NEARPREP_COMMON_PERCENT_ESCAPE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace nearprep {

// `s` with the bytes above (and each byte of `also`) written as %XX.
std::string PercentEscape(absl::string_view s, absl::string_view also = "");

// The inverse of PercentEscape, whatever `also` was: each '%' followed by
// two hex digits (either case) becomes that byte; other bytes are copied.
// Returns false, with *out unspecified, on a '%' not followed by two hex
// digits ("%", "%4", "%G1", "%+1", "% 1").
bool PercentUnescape(absl::string_view s, std::string* out);

}  // namespace nearprep

#endif  // NEARPREP_COMMON_PERCENT_ESCAPE_H_
