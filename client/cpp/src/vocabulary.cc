// See vocabulary.h.
#include "client/cpp/src/vocabulary.h"

#include <cctype>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace nearprep {
namespace {

using google::protobuf::EnumDescriptor;

// The prefix every value name of `e` shares, up to and including its last
// '_' ("CROP_MODE_" for CropMode).
std::string Prefix(const EnumDescriptor* e) {
  std::string prefix = e->value(0)->name();
  for (int i = 1; i < e->value_count(); ++i) {
    const std::string& n = e->value(i)->name();
    size_t k = 0;
    while (k < prefix.size() && k < n.size() && prefix[k] == n[k]) ++k;
    prefix.resize(k);
  }
  const size_t underscore = prefix.rfind('_');
  return underscore == std::string::npos ? "" : prefix.substr(0, underscore + 1);
}

std::string Normalize(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    c = c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

}  // namespace

std::vector<std::string> EnumValueNames(const EnumDescriptor* e) {
  const std::string prefix = Prefix(e);
  std::vector<std::string> names;
  for (int i = 0; i < e->value_count(); ++i) {
    names.push_back(Normalize(std::string_view(e->value(i)->name()).substr(prefix.size())));
  }
  return names;
}

std::string EnumValueName(const EnumDescriptor* e, int number) {
  const google::protobuf::EnumValueDescriptor* v = e->FindValueByNumber(number);
  if (v == nullptr) return absl::StrCat(number);
  return Normalize(std::string_view(v->name()).substr(Prefix(e).size()));
}

std::vector<std::pair<std::string, std::string>> DeprecatedNames(const EnumDescriptor* e) {
  // The CLI's spellings before one vocabulary (the Python client accepted
  // "fail" too). Keyed by the enum's short name.
  const std::string& n = e->name();
  if (n == "CropMode") return {{"rrc", "random_resized"}};
  if (n == "Fidelity") return {{"tf", "tf_compat"}};
  if (n == "Compression") return {{"delta", "delta_zstd"}, {"gradient", "gradient_zstd"}};
  if (n == "ErrorPolicy") return {{"fail", "fail_stream"}};
  return {};
}

absl::StatusOr<int> ParseEnumValue(const EnumDescriptor* e, std::string_view flag,
                                   std::string_view text) {
  std::string want = Normalize(text);
  for (const auto& [old_name, name] : DeprecatedNames(e)) {
    if (want == old_name) want = name;
  }
  const std::vector<std::string> names = EnumValueNames(e);
  for (int i = 0; i < e->value_count(); ++i) {
    if (names[i] == want) return e->value(i)->number();
  }
  return absl::InvalidArgumentError(absl::StrCat(std::string(flag), ": one of ", absl::StrJoin(names, ", "),
                                                 "; got '", std::string(text), "'"));
}

std::string EnumHelp(const EnumDescriptor* e) {
  std::string help = absl::StrJoin(EnumValueNames(e), " | ");
  std::vector<std::string> old;
  for (const auto& [old_name, name] : DeprecatedNames(e)) {
    old.push_back(absl::StrCat(old_name, " = ", name));
  }
  if (!old.empty()) {
    absl::StrAppend(&help, " (deprecated spellings, still accepted: ", absl::StrJoin(old, ", "),
                    ")");
  }
  return help;
}

}  // namespace nearprep
