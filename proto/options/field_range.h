// The (nearprep.v1.range) field option of nearprep.proto, read and checked
// in one place: the daemon's request validation (server/service/
// request_validation.cc) and the CLI's flag parsing (cli/
// request_flags.cc) both call CheckFieldRange and word its verdict their own
// way (a field path and "NaN is CheckFinite's to word" in the daemon, a flag
// name in the CLI).
//
// Why here: the check reads the option through the generated
// nearprep/v1/nearprep.pb.h, so it belongs with the proto, not in common/
// (which depends on neither protobuf nor the generated code, and is
// installed with the client), nor in server/ (which the CLI does not link)
// or client/cpp (which the daemon may not include). proto/options/ is the
// hand-written code over the generated messages: it may include only the
// generated headers (include table: scripts/check_includes.py), builds as
// its own small target nearprep_proto_options on nearprep_proto, and is
// linked by the daemon's service library and the CLI.
//
// Thread-safety: pure functions of their arguments; call them from any
// thread (protobuf descriptors and options are immutable).
#ifndef NEARPREP_PROTO_OPTIONS_FIELD_RANGE_H_
#define NEARPREP_PROTO_OPTIONS_FIELD_RANGE_H_

#include <optional>
#include <string>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace nearprep {

// The value of `f`, a singular numeric field of `m` (float, double, int32,
// int64, uint32, uint64), as a double (an int64 / uint64 beyond 2^53 is
// rounded to the nearest double). nullopt for any other field: repeated,
// enum, bool, string, message.
std::optional<double> NumericFieldValue(
    const google::protobuf::Message& m,
    const google::protobuf::FieldDescriptor& f);

struct FieldRangeCheck {
  // NumericFieldValue(m, f).
  double value = 0;
  // The value as written in messages: an integer exactly, a float or double
  // in the fewest digits that read back as the same value ("1.5", "0.1",
  // "nan").
  std::string value_text;
  // Whether min <= value <= max for the bounds that are set. NaN lies in no
  // range (false); a caller that words NaN elsewhere skips it itself.
  bool in_range = false;
  // The rule, to follow "must be ": "in [0, 1]" (both bounds), ">= 0" (min
  // only), "<= 5" (max only); bounds as FormatBound writes them.
  std::string rule;
};

// The check of `f`'s (nearprep.v1.range) option against its value in `m`.
// nullopt when `f` has no such option, or is not a singular numeric field
// (a range there means nothing).
std::optional<FieldRangeCheck> CheckFieldRange(
    const google::protobuf::Message& m,
    const google::protobuf::FieldDescriptor& f);

// A bound or double value in the fewest of 15, 16, 17 significant digits
// that read back as `v` ("0", "1", "1048576", "0.1", "0.30000000000000004").
std::string FormatBound(double v);

}  // namespace nearprep

#endif  // NEARPREP_PROTO_OPTIONS_FIELD_RANGE_H_
