// Text for proto3 `string` fields from bytes that need not be UTF-8.
//
// Protobuf parsers refuse a message whose `string` field holds invalid UTF-8
// (C++, Python, Go alike), so a file or folder name taken from the file
// system as raw bytes must never go into one as is: the whole message (a
// ListDatasets answer, a Batch) would be lost. DisplayString keeps valid
// UTF-8 as it is and writes each byte of an invalid sequence as the four
// characters \xNN (lower-case hex); a backslash is kept as it is, so the
// form is for display and logs, and a client that needs the exact name reads
// the matching `bytes` field (DatasetInfo.class_name_bytes,
// SampleError.path_bytes; docs/protocol.md).
//
// Thread-safety: pure functions.
#ifndef NEARPREP_SERVER_SERVICE_DISPLAY_STRING_H_
#define NEARPREP_SERVER_SERVICE_DISPLAY_STRING_H_

#include <string>

#include "absl/strings/string_view.h"

namespace nearprep {

// Whether `s` is well-formed UTF-8 (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF).
bool IsValidUtf8(absl::string_view s);

// `s` itself when it is valid UTF-8; otherwise `s` with every byte that is
// not part of a well-formed sequence written as \xNN.
std::string DisplayString(absl::string_view s);

// DisplayString(s) fit for one log record: control bytes (< 0x20, 0x7f)
// written as \n, \r, \t or \xNN, so that a caller's string (a dataset name
// in a refused request) can neither end the record and forge the next one
// nor send terminal escapes.
std::string LogSafe(absl::string_view s);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_SERVICE_DISPLAY_STRING_H_
