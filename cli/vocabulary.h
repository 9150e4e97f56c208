// One spelling per request concept, shared by every `nearprep` subcommand
// (stream, fetch, sheet, load, fleet-read) and the Python client
// (nearprep/request.py): an enum value is named by its proto name in lower
// case without the enum's prefix, read from the descriptor, never from a
// hand table (FIDELITY_TF_COMPAT -> "tf_compat", CROP_MODE_RANDOM_RESIZED ->
// "random_resized", COMPRESSION_GRADIENT_ZSTD -> "gradient_zstd").
// Case and '-' vs '_' do not matter. The older CLI spellings stay accepted
// (deprecated): the proto lists them as (nearprep.v1.deprecated_spelling)
// options of their values (crop "rrc", fidelity "tf", compression "delta"
// and "gradient", error policy "fail").
//
// Thread-safety: pure functions over immutable descriptors.
#ifndef NEARPREP_CLIENT_CPP_SRC_VOCABULARY_H_
#define NEARPREP_CLIENT_CPP_SRC_VOCABULARY_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/descriptor.h"

namespace nearprep {

// The names of `e`'s values in number order ("none", "center", ...).
std::vector<std::string> EnumValueNames(const google::protobuf::EnumDescriptor* e);

// The name of `number` in `e`; the number in decimal for an unknown value.
std::string EnumValueName(const google::protobuf::EnumDescriptor* e, int number);

// The deprecated spellings of `e`'s values, from the values'
// (nearprep.v1.deprecated_spelling) options: (old, canonical) pairs.
std::vector<std::pair<std::string, std::string>> DeprecatedNames(
    const google::protobuf::EnumDescriptor* e);

// The value `text` names (canonical or deprecated). INVALID_ARGUMENT naming
// `flag` and listing the names otherwise.
absl::StatusOr<int> ParseEnumValue(const google::protobuf::EnumDescriptor* e,
                                   std::string_view flag, std::string_view text);

// "none | center | random_resized | resize_center" and, when there are any,
// " (older spellings still accepted: rrc)": a flag's help text.
std::string EnumHelp(const google::protobuf::EnumDescriptor* e);

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_SRC_VOCABULARY_H_
